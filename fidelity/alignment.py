"""Cross-library alignment: per family and norm, every implementation side by side, and an
image-by-image comparison of every two of them (``equivalence.pair_test``: different, equivalent or
inconclusive) so a reader knows whether a gap is real."""
from __future__ import annotations

from itertools import combinations
from typing import Mapping

import numpy as np
import pandas as pd

from ._table import IMPL_KEY, impl_meta, long_distances, prepare, without_twins
from .sample_size import images_to_decide
from .equivalence import ImageBlocks, answer, pair_test
from .optimality import optimality
from .stats import ALPHA, holm
from .summary import across_models, model_stats

#: ``model`` value of a pair row pooled over all models both implementations ran on (per image)
POOLED = "*"

SIDE_COLUMNS = ["family", "norm", "implementation", "library", "library_version", "attack", "n_models",
                "optimality", "optimality_min", "optimality_attackbench", "asr_at_ref", "ref_eps",
                "median_distance", "forwards", "backwards", "refused", "wall_s"]
#: ``n_samples`` is the number of images compared (an image on several models is one)
PAIR_COLUMNS = ["family", "norm", "model", "implementation_a", "library_version_a", "implementation_b",
                "library_version_b", "optimality_a", "optimality_b", "family_optimality_a", "family_optimality_b",
                "n_samples", "fail_a", "fail_b",
                "broke_only_a", "broke_only_b", "n_both", "n_neither", "p_mcnemar", "wins_a", "wins_b", "ties",
                "estimate", "share_beyond", "iqr_low", "iqr_high", "effect_size", "p_value",
                "p_failure_different", "p_distance_different", "n_informative", "worse_a", "worse_b",
                "p_share_different", "headline", "lean", "crossing", "p_different", "p_equivalent", "direction", "mixed",
                "median_difference", "p_adjusted", "p_equivalent_adjusted", "answer", "better",
                "images_to_decide"]


def _pair_row(blocks: ImageBlocks, i: int, j: int, models: list[int], eps_max: float | None) -> dict:
    """One pair on the given model indices: ``pair_test`` fields, mean local ξ, median a − b."""
    if len(models) == 1:
        x = blocks.image_values(i, j, model=models[0])
    else:
        x = blocks.image_values(i, j)
    res = pair_test(x)
    xi = [[optimality(blocks.dist[m, k], blocks.d_star[m], eps_max) for m in models] for k in (i, j)]
    # against the family's own envelope: what no implementation of another family can move
    own = np.where(blocks.d_star[models] > 0, np.nanmin(blocks.dist[models], axis=1), 0.0)
    xi_own = [[optimality(blocks.dist[m, k], own[q], eps_max) for q, m in enumerate(models)] for k in (i, j)]
    a, b = blocks.dist[models][:, i], blocks.dist[models][:, j]
    both = np.isfinite(a) & np.isfinite(b) & (blocks.d_star[models] > 0)
    a, b = np.where(both, a, 0.0), np.where(both, b, 0.0)  # inf − inf would warn, and is never used
    return res | {"n_samples": res.pop("n_images"), "optimality_a": float(np.mean(xi[0])),
                  "optimality_b": float(np.mean(xi[1])), "family_optimality_a": float(np.mean(xi_own[0])),
                  "family_optimality_b": float(np.mean(xi_own[1])),
                  "median_difference": float(np.median((a - b)[both])) if both.any() else 0.0, "_x": x}


def pairwise(t: pd.DataFrame, alpha: float = ALPHA, pooled: bool = True, long: pd.DataFrame | None = None,
             eps_max: Mapping[str, float] | None = None) -> pd.DataFrame:
    """The second frame of ``align`` for a ``prepare``d table without twins (``long``: its
    ``long_distances``, when already computed). ``p_adjusted`` (difference) and
    ``p_equivalent_adjusted`` are Holm's over the pairs of one family, norm and model (or pooled
    row); ``answer`` follows from them (``equivalence.answer``); ``better`` is the closer
    implementation when the answer is "different" (``pair_test``'s ``direction``: the headline's on
    the robustness curve; none for a ``mixed`` pair); ``images_to_decide`` when inconclusive.
    ``headline`` (with ``worse_a``/``worse_b``, the share endpoint, and ``crossing``) is ``pair_test``'s
    at the unadjusted 5% level; ``answer`` is the adjusted one."""
    long = long_distances(t) if long is None else long
    if long.empty:
        return pd.DataFrame(columns=PAIR_COLUMNS)
    long = long.merge(impl_meta(t)[[*IMPL_KEY, "family"]], on=IMPL_KEY)
    rows = []
    for (family, norm), part in long.groupby(["family", "norm"], sort=True):
        keys = sorted(set(zip(part["implementation"], part["library_version"])))
        blocks = ImageBlocks(part, keys)
        for i, j in combinations(range(len(keys)), 2):
            shared = [m for m in range(len(blocks.models)) if blocks.ran(i)[m] and blocks.ran(j)[m]]
            groups = [(blocks.models[m], [m]) for m in shared]
            groups += [(POOLED, shared)] if pooled and len(shared) > 1 else []
            for label, ms in groups:
                rows.append({"family": family, "norm": norm, "model": label, "implementation_a": keys[i][0],
                             "library_version_a": keys[i][1], "implementation_b": keys[j][0],
                             "library_version_b": keys[j][1],
                             **_pair_row(blocks, i, j, ms, (eps_max or {}).get(norm))})
    if not rows:
        return pd.DataFrame(columns=PAIR_COLUMNS)
    out = pd.DataFrame(rows)
    group = out.groupby(["family", "norm", "model"], sort=False)
    out["p_adjusted"] = group["p_different"].transform(lambda p: pd.Series(holm(p.to_numpy()), index=p.index))
    out["p_equivalent_adjusted"] = group["p_equivalent"].transform(
        lambda p: pd.Series(holm(p.to_numpy()), index=p.index))
    out["answer"] = [answer(d, e, alpha) for d, e in zip(out["p_adjusted"], out["p_equivalent_adjusted"])]
    # a mixed pair (one breaks more, the other is closer where both broke) has no better member
    out["better"] = np.where((out["answer"] == "different") & ~out["mixed"].astype(bool),
                             np.where(out["direction"] < 0, out["implementation_a"], out["implementation_b"]), "")
    sizes = group["p_different"].transform("size").to_numpy()
    out["images_to_decide"] = [images_to_decide(x, alpha / k) if a == "inconclusive" else np.nan
                               for x, a, k in zip(out["_x"], out["answer"], sizes)]
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
    ``PAIR_COLUMNS``: the fields of ``equivalence.pair_test`` on the images not broken at ε = 0
    (``wins_a``: images where ``a`` found the smaller perturbation; pooled rows average each
    image's log ratios over the models), ``p_adjusted`` (Holm over the pairs of the family, norm
    and model), ``answer`` and ``better`` (see ``pairwise``).
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
