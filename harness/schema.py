"""The per-sample result schema (docs/architecture.md "The result schema"), torch-free so fidelity can share it."""

ROW_COLUMNS = [
    "run", "job_id", "model", "dataset", "subset_hash", "sample", "label", "clean_correct",
    "library", "library_version", "attack", "implementation", "family", "norm", "kind",
    "params_hash", "params", "targeted", "target", "budget", "forwards", "backwards", "refused",
    "best_dropped",  # stored bests the end-of-job re-check found not adversarial (absent in old runs)
    "best_distance", "best_l0", "best_l1", "best_l2", "best_linf", "returned_distance",
    "returned_adversarial", "status", "error", "wall_s",
]
