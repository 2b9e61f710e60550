"""Paired per-sample comparison of two implementations' distances (Wilcoxon signed-rank).

Failures are ``inf``. The test only needs ranks of the differences, so ``inf`` is replaced by one
finite value larger than every finite distance of both sides: a failure where the other side
succeeded is the clearest possible loss (largest |difference| ranks), and two failures tie.
"""
from __future__ import annotations

import warnings

import numpy as np
from scipy import stats

from .curves import as_distances

PAIR_FIELDS = ["n_samples", "wins_a", "wins_b", "ties", "statistic", "p_value", "effect_size",
               "median_difference"]


def _tie_aware_diff(a: np.ndarray, b: np.ndarray, rtol: float) -> np.ndarray:
    finite = np.concatenate([a[np.isfinite(a)], b[np.isfinite(b)]])
    big = 2.0 * float(finite.max(initial=0.0)) + 1.0
    fa, fb = np.where(np.isfinite(a), a, big), np.where(np.isfinite(b), b, big)
    diff = fa - fb
    # distances that agree to float noise are ties, not wins
    diff[np.abs(diff) <= rtol * np.maximum(np.abs(fa), np.abs(fb))] = 0.0
    return diff


def paired_comparison(a: np.ndarray, b: np.ndarray, rtol: float = 1e-9) -> dict[str, float]:
    """Compare per-sample distances ``a`` and ``b`` (same length N, same sample order).

    Returns ``n_samples`` (N), ``wins_a`` (samples where ``a`` is smaller, i.e. better),
    ``wins_b``, ``ties`` (equal within ``rtol``, including both failing), ``statistic`` and
    ``p_value`` of the two-sided Wilcoxon signed-rank test on the non-tied differences (ties
    dropped, Wilcoxon's convention), ``effect_size`` the matched-pairs rank-biserial correlation
    in favour of ``a`` (+1: ``a`` smaller on every non-tied sample, −1: ``b`` on every one), and
    ``median_difference`` the median of ``a − b`` over samples both broke (0 when there are none).
    All ties or N = 0 give ``p_value = 1`` and ``effect_size = 0``; nothing is NaN.
    """
    a, b = as_distances(a), as_distances(b)
    if a.shape != b.shape:
        raise ValueError(f"paired samples differ in length: {a.size} vs {b.size}")
    out = {"n_samples": int(a.size), "wins_a": 0, "wins_b": 0, "ties": int(a.size), "statistic": 0.0,
           "p_value": 1.0, "effect_size": 0.0, "median_difference": 0.0}
    if a.size == 0:
        return out
    diff = _tie_aware_diff(a, b, rtol)
    nz = diff[diff != 0]
    both = np.isfinite(a) & np.isfinite(b)
    out.update(wins_a=int((diff < 0).sum()), wins_b=int((diff > 0).sum()), ties=int((diff == 0).sum()),
               median_difference=float(np.median(a[both] - b[both])) if both.any() else 0.0)
    if nz.size == 0:
        return out
    ranks = stats.rankdata(np.abs(nz))
    r_a, r_b = ranks[nz < 0].sum(), ranks[nz > 0].sum()
    out["effect_size"] = float((r_a - r_b) / (r_a + r_b))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # scipy warns when ties force the normal approximation
        res = stats.wilcoxon(nz, zero_method="wilcox", alternative="two-sided")
    out["statistic"] = float(res.statistic) if np.isfinite(res.statistic) else 0.0
    out["p_value"] = float(min(max(res.pvalue, 0.0), 1.0)) if np.isfinite(res.pvalue) else 1.0
    return out
