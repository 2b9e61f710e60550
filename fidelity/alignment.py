"""Cross-library alignment: per family and norm, every implementation side by side, and a paired
per-sample test between every two of them so a reader knows whether a gap is real."""
from __future__ import annotations

import itertools
from itertools import combinations
from typing import Mapping

import numpy as np
import pandas as pd

from ._table import IMPL_KEY, group_rows, impl_meta, long_distances, prepare, without_twins
from .optimality import optimality
from .stats import ALPHA, PAIR_FIELDS, holm, paired_comparison
from .summary import across_models, model_stats

#: ``model`` value of a pair row pooled over all models both implementations ran on
POOLED = "*"

SIDE_COLUMNS = ["family", "norm", "implementation", "library", "library_version", "attack", "n_models",
                "optimality", "optimality_min", "optimality_attackbench", "asr_at_ref", "ref_eps",
                "median_distance", "forwards", "backwards", "refused", "wall_s"]
PAIR_COLUMNS = ["family", "norm", "model", "implementation_a", "library_version_a", "implementation_b",
                "library_version_b", "optimality_a", "optimality_b", *PAIR_FIELDS, "p_adjusted", "better"]


def pairwise(t: pd.DataFrame, alpha: float = ALPHA, pooled: bool = True, long: pd.DataFrame | None = None,
             eps_max: Mapping[str, float] | None = None) -> pd.DataFrame:
    """The second frame of ``align`` for a ``prepare``d table without twins (``long``: its
    ``long_distances``, when already computed). ``p_adjusted`` is Holm's over the pairs of one
    family, norm and model (or pooled row): the same rule as the trust sets and the flags."""
    long = long_distances(t) if long is None else long
    if long.empty:
        return pd.DataFrame(columns=PAIR_COLUMNS)
    long = long.merge(impl_meta(t)[[*IMPL_KEY, "family"]], on=IMPL_KEY)
    rows = []
    distance, d_star, alive = (long[c].to_numpy() for c in ("distance", "d_star", "live"))
    by_job = group_rows(long, ["family", "norm", "model", *IMPL_KEY])
    for (family, norm), jobs in itertools.groupby(by_job, key=lambda job: job[0][:2]):
        # (model, impl key) -> (distances on samples not broken at ε = 0, local ξ)
        arrays: dict[tuple, tuple[np.ndarray, float]] = {}
        for (_, _, m, impl, version), at in jobs:
            d, ref, live = distance[at], d_star[at], alive[at].astype(bool)
            arrays[(m, (impl, version))] = (d[live], optimality(d, ref, (eps_max or {}).get(norm)))
        impls = sorted({k for _, k in arrays})
        models = sorted({m for m, _ in arrays})
        for ka, kb in combinations(impls, 2):
            shared = [m for m in models if (m, ka) in arrays and (m, kb) in arrays]
            groups = [(m, [m]) for m in shared] + ([(POOLED, shared)] if pooled and len(shared) > 1 else [])
            for label, ms in groups:
                res = paired_comparison(np.concatenate([arrays[(m, ka)][0] for m in ms]),
                                        np.concatenate([arrays[(m, kb)][0] for m in ms]))
                rows.append({"family": family, "norm": norm, "model": label,
                             "implementation_a": ka[0], "library_version_a": ka[1],
                             "implementation_b": kb[0], "library_version_b": kb[1],
                             "optimality_a": float(np.mean([arrays[(m, ka)][1] for m in ms])),
                             "optimality_b": float(np.mean([arrays[(m, kb)][1] for m in ms])),
                             **res})
    if not rows:
        return pd.DataFrame(columns=PAIR_COLUMNS)
    out = pd.DataFrame(rows)
    out["p_adjusted"] = out.groupby(["family", "norm", "model"], sort=False)["p_value"].transform(
        lambda p: pd.Series(holm(p.to_numpy()), index=p.index))
    signif = (out["p_adjusted"] < alpha) & (out["wins_a"] != out["wins_b"])
    out["better"] = np.where(signif, np.where(out["effect_size"] > 0, out["implementation_a"], out["implementation_b"]), "")
    return out[PAIR_COLUMNS]


def align(table: pd.DataFrame, ref_eps: Mapping[str, float] | None = None, *,
          eps_max: Mapping[str, float] | None = None, alpha: float = ALPHA,
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
    (``wins_a``: samples where ``a`` found the smaller perturbation), ``p_adjusted`` (Holm over
    the pairs of the family, norm and model) and ``better``, the implementation that wins with
    ``p_adjusted < alpha`` (``stats.ALPHA``; "" otherwise).
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
    return side, pairwise(t, alpha, pooled, long=long, eps_max=eps_max)
