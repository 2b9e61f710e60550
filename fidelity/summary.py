"""Per-implementation numbers shared by the alignment table, the leaderboard and the diff.

ASR at a reference ε counts every sample broken at that ε, those misclassified clean included
(so ``1 − ASR`` is the robust accuracy a reader knows from RobustBench). The median distance is
taken over the samples not already adversarial at ε = 0; it is ``inf`` when the implementation
broke at most half of them.
"""
from __future__ import annotations

from typing import Mapping

import numpy as np
import pandas as pd

from ._table import IMPL_KEY, JOB_KEY, impl_meta, job_costs, long_distances
from .optimality import eps0_of, optimality, optimality_attackbench

#: reference ε per norm for ASR, sized for 8×8 digits in [0, 1] (64 pixels); pass ``ref_eps`` for
#: other data (e.g. CIFAR-10: linf 8/255, l2 0.5, l1 12, l0 24)
REF_EPS: dict[str, float] = {"linf": 0.1, "l2": 0.75, "l1": 2.0, "l0": 4.0}

MODEL_STATS_COLUMNS = JOB_KEY + ["library", "attack", "family", "kind", "optimality",
                                 "optimality_attackbench", "eps0", "asr_at_ref", "ref_eps",
                                 "median_distance", "forwards", "backwards", "refused", "wall_s",
                                 "n_samples"]


def _median(d: np.ndarray) -> float:
    """Median of (N,) distances; inf (not a half-infinite average) when the upper middle element
    is inf, i.e. when at most half are finite."""
    if d.size == 0:
        return float("inf")
    s = np.sort(d)
    lo, hi = s[(s.size - 1) // 2], s[s.size // 2]
    return float((lo + hi) / 2) if np.isfinite(hi) else float(hi)


def model_stats(t: pd.DataFrame, ref_eps: Mapping[str, float] | None = None,
                eps_max: Mapping[str, float] | None = None, long: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per (model, norm, implementation, library_version) of a ``prepare``d table:
    ``MODEL_STATS_COLUMNS``. ``ref_eps`` overrides ``REF_EPS`` per norm (a norm in neither gets
    ε₀ as its reference)."""
    refs = {**REF_EPS, **(ref_eps or {})}
    long = long_distances(t) if long is None else long
    rows = []
    for (model, norm, impl, version), part in long.groupby(JOB_KEY, sort=True):
        d, ref, live = part["distance"].to_numpy(), part["d_star"].to_numpy(), part["live"].to_numpy()
        given = (eps_max or {}).get(norm)
        eps0 = eps0_of(ref, given)
        r = float(refs.get(norm, eps0))
        rows.append({"model": model, "norm": norm, "implementation": impl, "library_version": version,
                     "optimality": optimality(d, ref, given), "optimality_attackbench": optimality_attackbench(d, ref),
                     "eps0": eps0, "asr_at_ref": float(np.mean(d <= r)), "ref_eps": r,
                     "median_distance": _median(d[live])})
    if not rows:
        return pd.DataFrame(columns=MODEL_STATS_COLUMNS)
    out = pd.DataFrame(rows).merge(job_costs(t), on=JOB_KEY, how="left").merge(impl_meta(t), on=IMPL_KEY, how="left")
    return out[MODEL_STATS_COLUMNS]


def across_models(stats: pd.DataFrame, long: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Aggregate ``model_stats`` rows over models per ``keys`` (which include norm and the
    implementation key): means of optimality, ASR and costs, the worst local optimality, the
    number of models, and the median distance pooled over all models' live samples."""
    agg = (stats.groupby(keys, sort=True)
           .agg(optimality=("optimality", "mean"), optimality_min=("optimality", "min"),
                optimality_attackbench=("optimality_attackbench", "mean"), asr_at_ref=("asr_at_ref", "mean"),
                ref_eps=("ref_eps", "first"), forwards=("forwards", "mean"), backwards=("backwards", "mean"),
                refused=("refused", "mean"), wall_s=("wall_s", "mean"), n_models=("model", "nunique"))
           .reset_index())
    impl_keys = [k for k in keys if k in ("norm", *IMPL_KEY)]
    live = long[long["live"] & long["model"].isin(stats["model"].unique())]
    med = (live.groupby(impl_keys, sort=True)["distance"].agg(lambda s: _median(s.to_numpy()))
           .rename("median_distance").reset_index())
    out = agg.merge(med, on=impl_keys, how="left")
    out["median_distance"] = out["median_distance"].fillna(np.inf)
    return out
