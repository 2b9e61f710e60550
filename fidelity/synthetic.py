"""Hand-built result rows with every ``ROW_COLUMNS`` column, for tests and examples.

``job_rows(...)`` gives one job's rows from per-sample best distances; concatenate several to
get a table. Defaults describe a healthy minimal attack that returns its best.
"""
from __future__ import annotations

import json
from typing import Sequence

import numpy as np
import pandas as pd

from ..schema import ROW_COLUMNS  # torch-free: fidelity must not import the torch-side harness


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
    library, _, name = implementation.partition("/")
    attack = name.split(":")[0]
    ret = best if returned is None else _per_sample(returned, n, float)
    idx = np.arange(n) if samples is None else np.asarray(samples)
    other = {"best_l0": best, "best_l1": best, "best_l2": best, "best_linf": best}
    return pd.DataFrame({
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
    })[ROW_COLUMNS]


def table(*jobs: pd.DataFrame) -> pd.DataFrame:
    """Concatenate job rows into one result table."""
    return pd.concat(jobs, ignore_index=True)
