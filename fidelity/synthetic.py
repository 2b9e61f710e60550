"""Hand-built result rows with every ``ROW_COLUMNS`` column, for tests and examples.

``job_rows(...)`` gives one job's rows from per-sample best distances; concatenate several to
get a table. Defaults describe a healthy minimal attack that returns its best.
"""
from __future__ import annotations

import json
from typing import Sequence

import numpy as np
import pandas as pd

# torch-free: fidelity must not import the torch-side harness
from attackaudit.results.schema import ROW_COLUMNS, AttackId, with_invalid_reason, with_models, with_twin_columns


def _per_sample(value: object, n: int, dtype: type) -> np.ndarray:
    arr = np.asarray(value, dtype=dtype)
    return np.full(n, arr, dtype=dtype) if arr.ndim == 0 else arr.reshape(n)


def job_rows(model: str, implementation: str, norm: str, best: Sequence[float], *,
             family: str | None = None, library_version: str = "1.0", kind: str = "minimal",
             returned: Sequence[float] | float | None = None, status: Sequence[str] | str = "ok",
             error: Sequence[str] | str = "", forwards: Sequence[float] | float = 500,
             backwards: Sequence[float] | float = 500, refused: Sequence[float] | float = 0,
             budget: int = 2000, wall_s: float = 1.0, samples: Sequence[int] | None = None,
             labels: Sequence[int] | None = None, run: str = "test", targeted: bool = False) -> pd.DataFrame:
    """Rows of one job (N samples). ``implementation`` is ``library/name[:variant]``; ``family``
    defaults to the name; ``returned`` defaults to ``best`` (inf = returned no adversarial);
    ``clean_correct`` is ``best > 0``. Every per-sample argument takes a scalar or N values."""
    best = np.asarray(best, dtype=float)
    n = best.size
    attack_id = AttackId.from_implementation(implementation, norm)
    library, attack = attack_id.library, attack_id.name
    ret = best if returned is None else _per_sample(returned, n, float)
    idx = np.arange(n) if samples is None else np.asarray(samples)
    other = {"best_l0": best, "best_l1": best, "best_l2": best, "best_linf": best}
    # derived as on loading: the twin columns from the model's name, an invalid row's reason from its error
    return with_invalid_reason(with_twin_columns(pd.DataFrame({
        "run": run, "job_id": f"{model}__{implementation}__{norm}", "model": model, "dataset": "digits",
        "subset_hash": "h", "sample": idx, "label": labels if labels is not None else idx % 10,
        "clean_correct": best > 0, "library": library, "library_version": library_version, "attack": attack,
        "implementation": implementation, "family": family or attack, "norm": norm, "kind": kind,
        "params_hash": "p", "params": json.dumps({}), "targeted": targeted, "target": -1, "budget": budget,
        "forwards": _per_sample(forwards, n, float).astype(int),
        "backwards": _per_sample(backwards, n, float).astype(int),
        "refused": _per_sample(refused, n, float).astype(int), "best_dropped": 0, "best_distance": best, **other,
        "returned_distance": ret, "returned_adversarial": np.isfinite(ret),
        "status": _per_sample(status, n, object), "error": _per_sample(error, n, object), "wall_s": wall_s,
    }))).reindex(columns=ROW_COLUMNS)  # the defect columns (schema.DEFECT_COLUMNS) stay NaN: not recorded


def table(*jobs: pd.DataFrame) -> pd.DataFrame:
    """Concatenate job rows into one result table."""
    return pd.concat(jobs, ignore_index=True)


# ------------------------------------------------------------------ realistic per-image tables
#: per-image difficulty spread (lognormal σ of the minimal distance across images) and the
#: relative seed noise of a randomised sound attack per image (lognormal σ): sizes seen on the
#: digits zoo (fidelity/README.md, "Calibration")
DIFFICULTY_SIGMA = 0.5
SEED_NOISE = 0.02


def true_distances(rng: np.random.Generator, n_images: int, n_models: int) -> np.ndarray:
    """(M, n) minimal distances: one difficulty per image shared by every model (the same images
    are hard everywhere) times a per-model scale and a little model-specific variation; 10% of
    (model, image) cases misclassified clean (0)."""
    hard = rng.lognormal(0.0, DIFFICULTY_SIGMA, n_images)
    scale = rng.uniform(0.5, 2.0, (n_models, 1))
    d = scale * hard * rng.lognormal(0.0, 0.15, (n_models, n_images))
    d[rng.random((n_models, n_images)) < 0.1] = 0.0
    return d


def attack_distances(rng: np.random.Generator, truth: np.ndarray, *, farther: float = 1.0, seed_noise: float = 0.0,
                     fail_rate: float = 0.0, fail_by_difficulty: bool = True,
                     fail_images: np.ndarray | None = None) -> np.ndarray:
    """(M, n) distances an attack finds on ``truth``: ``farther`` times the truth (a defect of
    known size when > 1), per-image lognormal ``seed_noise`` (a randomised attack's seed), failures
    on a ``fail_rate`` share of the cases — on the hardest ones (``fail_by_difficulty``: a weak
    but correct attack) or at random — and on every case of the images ``fail_images`` (a defect)."""
    d = truth * farther * (np.exp(np.abs(rng.normal(0.0, seed_noise, truth.shape))) if seed_noise else 1.0)
    if fail_rate > 0:
        if fail_by_difficulty:
            score = np.log(np.where(truth > 0, truth, 1e-9)) + rng.normal(0.0, 0.3, truth.shape)
            cut = np.quantile(score, 1.0 - fail_rate, axis=1, keepdims=True)
            d = np.where(score >= cut, np.inf, d)
        else:
            d = np.where(rng.random(truth.shape) < fail_rate, np.inf, d)
    if fail_images is not None:
        d[:, fail_images] = np.inf
    return np.where(truth > 0, d, 0.0)


def table_from_arrays(dists: dict[str, np.ndarray], models: Sequence[str], *, family: str = "f",
                      norm: str = "l2", labels: np.ndarray | None = None, version: str = "1.0") -> pd.DataFrame:
    """Result rows from ``{implementation: (M, n) distances}`` on ``models`` (names may carry a
    twin suffix); every implementation ``lib/name`` of one family."""
    jobs = []
    for impl, d in dists.items():
        d = np.atleast_2d(d)
        n = d.shape[1]
        rows = job_rows("", impl, norm, d.reshape(-1), family=family, library_version=version,
                        samples=np.tile(np.arange(n), len(d)),
                        labels=None if labels is None else np.tile(labels, len(d)))
        model = np.repeat(np.asarray(models, dtype=object), n)
        jobs.append(with_models(rows, model).assign(job_id=[f"{m}__{impl}__{norm}" for m in model]))
    return table(*jobs)
