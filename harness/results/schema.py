"""The per-sample result schema (docs/architecture.md "The result schema"), torch-free so fidelity can share it."""

#: evidence for fallback outputs, batch composition and ε use (absent in older runs, where those
#: rules do not apply): ``returned_fallback``, "" or what the attack returned instead of a search
#: result that would have counted as broken (a default output: "all-zero image", "constant 0.5
#: image", "one output shared by 5 images"; harness/measure/fallback.py), never counted;
#: ``best_margin``, the best's success margin on the unwrapped model relative to its largest logit
#: (NaN without a best; ~0: an exact decision-boundary point); ``rng_used``, whether the attack
#: call moved the global random state of torch, NumPy or ``random`` (measured, not declared);
#: ``eps_success``, the smallest ε a fixed-ε attack was called with whose returned row was
#: adversarial inside the ball (inf: none; NaN: a minimal attack), and ``ball_mean_ratio``, the
#: mean returned-row distance / ε over its calls (fidelity/eps_use.py)
FALLBACK_COLUMNS = ["returned_fallback", "best_margin", "rng_used", "eps_success", "ball_mean_ratio"]

#: per-sample evidence for the defect rules of fidelity/defects.py (absent in older runs, where
#: those rules do not apply): the class the attack's output reached (``returned_class``; −1 for
#: none or a tie), and what a fixed-ε attack returned for the balls the minimal-ε search gave it
#: (harness/measure/minimal.py ``BallRecord``: calls, calls outside the ball, the largest distance/ε and
#: its ε, the largest ε at which a moved row failed and its distance/ε; 0 and NaN for minimal attacks)
DEFECT_COLUMNS = ["returned_class", "ball_calls", "ball_out", "ball_worst_ratio", "ball_worst_eps",
                  "eps_fail_max", "eps_fail_ratio", *FALLBACK_COLUMNS]

ROW_COLUMNS = [
    "run", "job_id", "model", "dataset", "subset_hash", "sample", "label", "clean_correct",
    "library", "library_version", "attack", "implementation", "family", "norm", "kind",
    "params_hash", "params", "targeted", "target", "budget", "forwards", "backwards", "refused",
    "best_dropped",  # stored bests the end-of-job re-check found not adversarial (absent in old runs)
    "best_distance", "best_l0", "best_l1", "best_l2", "best_linf", "returned_distance",
    "returned_adversarial", "status", "error", "wall_s",
    *DEFECT_COLUMNS,
]

#: a row's ``status``: ``unsupported`` means attackaudit's adapter cannot call this release of the
#: library the way the job needs (``adapters/release.py`` ``Unsupported``): our limitation, shown
#: apart from the library's crashes and never counted as one, nor as the attack's disappearance.
#: ``harness_error``: the job's worker failed before the attack started (it could not start, import
#: the spec, unpickle or load the model, read the data): our fault or the caller's set-up, never the
#: library's; such rows carry no result, are left out of every analysis, and the job runs again on
#: the next call of the same run
STATUSES = ("ok", "crash", "timeout", "invalid", "unsupported", "harness_error")
UNSUPPORTED = "unsupported"
HARNESS_ERROR = "harness_error"

#: the phrase of an ``invalid`` row's error that means the attack returned values outside [0, 1];
#: ``job.py`` writes it and fidelity's ``out_of_box`` flag reads it
OUT_OF_BOX_ERROR = "outside the [0, 1] box"
