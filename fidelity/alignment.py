"""Cross-library alignment: per family and norm, every implementation side by side, and a paired
per-sample test between every two of them so a reader knows whether a gap is real."""
from __future__ import annotations

from itertools import combinations
from typing import Mapping

import numpy as np
import pandas as pd

from ._table import IMPL_KEY, long_distances, prepare, without_twins
from .stats import PAIR_FIELDS, paired_comparison
from .summary import across_models, model_stats

#: ``model`` value of a pair row pooled over all models both implementations ran on
POOLED = "*"

SIDE_COLUMNS = ["family", "norm", "implementation", "library", "library_version", "attack", "n_models",
                "optimality", "optimality_min", "optimality_attackbench", "asr_at_ref", "ref_eps",
                "median_distance", "forwards", "backwards", "refused", "wall_s"]
PAIR_COLUMNS = ["family", "norm", "model", "implementation_a", "library_version_a", "implementation_b",
                "library_version_b", "optimality_a", "optimality_b", *PAIR_FIELDS, "better"]


def _pairs(long: pd.DataFrame, stats: pd.DataFrame, alpha: float, pooled: bool) -> pd.DataFrame:
    fam = stats[["model", "norm", *IMPL_KEY, "family", "optimality"]]
    long = long.merge(fam, on=["model", "norm", *IMPL_KEY])
    long = long[long["live"]]  # samples broken at ε = 0 tie for everyone and carry no information
    rows = []
    for (family, norm), part in long.groupby(["family", "norm"], sort=True):
        impls = sorted(part[IMPL_KEY].drop_duplicates().itertuples(index=False, name=None))
        arrays: dict[tuple, tuple[np.ndarray, float]] = {}  # (model, impl key) -> (distances, ξ)
        for (m, impl, version), g in part.groupby(["model", *IMPL_KEY], sort=True):
            arrays[(m, (impl, version))] = (g["distance"].to_numpy(), float(g["optimality"].iloc[0]))
        models = sorted(part["model"].unique())
        for ka, kb in combinations(impls, 2):
            shared = [m for m in models if (m, ka) in arrays and (m, kb) in arrays]
            groups = [(m, [m]) for m in shared] + ([(POOLED, shared)] if pooled and len(shared) > 1 else [])
            for label, ms in groups:
                a = np.concatenate([arrays[(m, ka)][0] for m in ms])
                b = np.concatenate([arrays[(m, kb)][0] for m in ms])
                res = paired_comparison(a, b)
                better = ""
                if res["p_value"] < alpha and res["wins_a"] != res["wins_b"]:
                    better = ka[0] if res["effect_size"] > 0 else kb[0]
                rows.append({"family": family, "norm": norm, "model": label,
                             "implementation_a": ka[0], "library_version_a": ka[1],
                             "implementation_b": kb[0], "library_version_b": kb[1],
                             "optimality_a": float(np.mean([arrays[(m, ka)][1] for m in ms])),
                             "optimality_b": float(np.mean([arrays[(m, kb)][1] for m in ms])),
                             **res, "better": better})
    return pd.DataFrame(rows, columns=PAIR_COLUMNS)


def align(table: pd.DataFrame, ref_eps: Mapping[str, float] | None = None, *,
          eps_max: Mapping[str, float] | None = None, alpha: float = 0.01,
          pooled: bool = True) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Side-by-side table and pairwise tests, over real models (twins excluded).

    First frame, one row per (family, norm, implementation, library_version): ``SIDE_COLUMNS``
    plus ``opt_<model>`` (local optimality per model; NaN where it did not run). ``optimality``
    is the global one (mean over models), ``optimality_min`` the worst model's; ``asr_at_ref`` at
    ``ref_eps[norm]`` (defaults ``summary.REF_EPS``); ``median_distance`` pooled over models;
    ``forwards``/``backwards``/``refused`` are means per sample, ``wall_s`` per job.

    Second frame, one row per pair of implementations of a family and norm and per model they
    share (plus ``model == "*"``, pooled over the shared models, when ``pooled``):
    ``PAIR_COLUMNS``, the fields of ``stats.paired_comparison`` on the samples not broken at ε = 0
    (``wins_a``: samples where ``a`` found the smaller perturbation) and ``better``, the
    implementation that wins with ``p_value < alpha`` ("" otherwise).
    """
    t = without_twins(prepare(table))
    long = long_distances(t)
    stats = model_stats(t, ref_eps, eps_max, long=long)
    if stats.empty:
        return pd.DataFrame(columns=SIDE_COLUMNS), pd.DataFrame(columns=PAIR_COLUMNS)
    keys = ["family", "norm", *IMPL_KEY, "library", "attack"]
    side = across_models(stats, long, keys)
    per_model = stats.pivot_table(index=["norm", *IMPL_KEY], columns="model", values="optimality",
                                  aggfunc="first")
    per_model.columns = [f"opt_{m}" for m in per_model.columns]
    side = side.merge(per_model.reset_index(), on=["norm", *IMPL_KEY], how="left")
    side = side[SIDE_COLUMNS + list(per_model.columns)]
    side = side.sort_values(["family", "norm", "optimality", "implementation"],
                            ascending=[True, True, False, True], kind="stable").reset_index(drop=True)
    return side, _pairs(long, stats, alpha, pooled)
