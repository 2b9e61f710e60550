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


def tie_aware_diff(a: np.ndarray, b: np.ndarray, rtol: float = 1e-9) -> np.ndarray:
    """``a − b`` elementwise (any shape) with inf replaced by one value above every finite one of
    both sides and differences within ``rtol`` (relative) set to 0: the paired tests' input."""
    finite = np.concatenate([a[np.isfinite(a)], b[np.isfinite(b)]])
    big = 2.0 * float(finite.max(initial=0.0)) + 1.0
    fa, fb = np.where(np.isfinite(a), a, big), np.where(np.isfinite(b), b, big)
    diff = fa - fb
    # distances that agree to float noise are ties, not wins
    diff[np.abs(diff) <= rtol * np.maximum(np.abs(fa), np.abs(fb))] = 0.0
    return diff


#: results of ``paired_comparison`` by input: a report asks for the same per-model comparisons in
#: the alignment, the optimality_gap flag and the trust sets, and each costs a scipy test
_PAIRED_CACHE: dict[tuple[bytes, bytes, float], dict[str, float]] = {}
_PAIRED_CACHE_SIZE = 20_000


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
    key = (a.tobytes(), b.tobytes(), float(rtol))
    if key not in _PAIRED_CACHE:
        if len(_PAIRED_CACHE) >= _PAIRED_CACHE_SIZE:
            _PAIRED_CACHE.clear()
        _PAIRED_CACHE[key] = _paired(a, b, rtol)
    return dict(_PAIRED_CACHE[key])


def _paired(a: np.ndarray, b: np.ndarray, rtol: float) -> dict[str, float]:
    out = {"n_samples": int(a.size), "wins_a": 0, "wins_b": 0, "ties": int(a.size), "statistic": 0.0,
           "p_value": 1.0, "effect_size": 0.0, "median_difference": 0.0}
    if a.size == 0:
        return out
    diff = tie_aware_diff(a, b, rtol)
    nz = diff[diff != 0]
    both = np.isfinite(a) & np.isfinite(b)
    out.update(wins_a=int((diff < 0).sum()), wins_b=int((diff > 0).sum()), ties=int((diff == 0).sum()),
               median_difference=float(np.median(a[both] - b[both])) if both.any() else 0.0)
    if nz.size == 0:
        return out
    ranks = stats.rankdata(np.abs(nz))
    r_a, r_b = ranks[nz < 0].sum(), ranks[nz > 0].sum()
    out["effect_size"] = float((r_a - r_b) / (r_a + r_b))
    if nz.size <= EXACT_TIES_MAX_N and np.unique(np.abs(nz)).size < nz.size:
        out["statistic"] = float(min(r_a, r_b))
        out["p_value"] = signed_rank_exact_p(ranks, r_b)
        return out
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # scipy warns when ties force the normal approximation
        res = stats.wilcoxon(nz, zero_method="wilcox", alternative="two-sided")
    out["statistic"] = float(res.statistic) if np.isfinite(res.statistic) else 0.0
    out["p_value"] = float(min(max(res.pvalue, 0.0), 1.0)) if np.isfinite(res.pvalue) else 1.0
    return out


#: up to this many non-tied pairs with tied |differences|, scipy's ``wilcoxon`` (method "auto")
#: runs an exact permutation test over all 2**n sign flips, one Python call of its statistic per
#: flip: 0.8 s a test at n = 13, most of a report's time. ``signed_rank_exact_p`` is that test.
EXACT_TIES_MAX_N = 13


def signed_rank_exact_p(ranks: np.ndarray, r_plus: float) -> float:
    """Two-sided p-value of the signed-rank statistic ``r_plus`` (sum of the (n,) mid-``ranks`` of
    the positive differences) over all 2**n sign flips: scipy's exact permutation test (the same
    null distribution, the same relative tolerance 100·eps and the same two-sided rule), as one
    (2**n, n) @ (n,) product. For n ≤ ``EXACT_TIES_MAX_N``; memory is 2**n · n bytes."""
    n = ranks.size
    flips = ((np.arange(2 ** n)[:, None] >> np.arange(n)) & 1).astype(float)
    null = flips @ ranks
    gamma = abs(np.finfo(float).eps * 100 * r_plus)
    less, greater = np.mean(null <= r_plus + gamma), np.mean(null >= r_plus - gamma)
    return float(np.clip(2 * min(less, greater), 0.0, 1.0))


# ------------------------------------------------------------------ the one significance rule
#: family-wise significance level of every "significantly better/worse" in attackaudit: trust
#: sets, the optimality_gap flag, the alignment verdicts and the audit verdicts (fidelity/README.md)
ALPHA = 0.05


def holm(p_values: np.ndarray | list[float]) -> np.ndarray:
    """Holm–Bonferroni adjusted p-values of (k,) raw p-values, same order, each in [0, 1].

    Reject hypothesis i at family-wise level α iff ``holm(p)[i] < α``. NaN stays NaN and does
    not count towards k."""
    return adjust_sorted(p_values, lambda p, k: np.maximum.accumulate(np.minimum(1.0, (k - np.arange(k)) * p)))


def adjust_sorted(p_values: np.ndarray | list[float], step) -> np.ndarray:
    """A multiplicity adjustment of (k,) p-values, same order: ``step(p_sorted, k)`` maps the k
    finite p-values sorted ascending (stable) to their adjusted values; NaN stays NaN and does
    not count towards k. Shared by ``holm`` and ``equivalence.benjamini_hochberg``."""
    p = np.asarray(p_values, dtype=float)
    out = np.full(p.shape, np.nan)
    ok = np.flatnonzero(np.isfinite(p))
    if ok.size == 0:
        return out
    order = ok[np.argsort(p[ok], kind="stable")]
    out[order] = step(p[order], order.size)
    return out


def significant(p_adjusted: float, wins_for: int, wins_against: int, alpha: float = ALPHA) -> bool:
    """The rule: a multiplicity-adjusted p below ``alpha`` (``ALPHA`` unless a user chose another
    level) and more samples in favour than against."""
    return bool(np.isfinite(p_adjusted) and p_adjusted < alpha and wins_for > wins_against)


def wilcoxon_batch(diff: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Two-sided Wilcoxon signed-rank tests of B paired samples at once: ``diff`` (B, N) of
    tie-aware differences (0 = tie, dropped as in ``paired_comparison``). Returns (p-values (B,),
    rank-biserial effects (B,), + when the differences are mostly negative, i.e. the first side
    smaller). Normal approximation with the tie correction: this is for bootstrap replicates,
    where scipy's exact small-sample test one replicate at a time would be too slow; the reported
    tests use ``paired_comparison``."""
    diff = np.asarray(diff, dtype=float)
    nz = diff != 0
    n = nz.sum(axis=1).astype(float)
    # zeros rank below every |difference| and their ranks are subtracted: ranks among non-zeros
    mag = np.where(nz, np.abs(diff), -1.0)
    ranks = stats.rankdata(mag, axis=1) - (diff.shape[1] - n)[:, None]
    r_neg = np.where(nz & (diff < 0), ranks, 0.0).sum(axis=1)
    r_pos = np.where(nz & (diff > 0), ranks, 0.0).sum(axis=1)
    total = n * (n + 1) / 2
    with np.errstate(invalid="ignore", divide="ignore"):
        effect = np.where(total > 0, (r_neg - r_pos) / total, 0.0)
        tie_sizes = tie_correction(np.where(nz, np.abs(diff), np.nan))
        var = n * (n + 1) * (2 * n + 1) / 24 - tie_sizes / 48
        z = np.where(var > 0, (np.abs(r_pos - total / 2) - 0.5).clip(min=0) / np.sqrt(np.where(var > 0, var, 1)), 0.0)
    p = np.where(n > 0, 2 * stats.norm.sf(z), 1.0)
    return np.clip(p, 0.0, 1.0), effect


def tie_correction(values: np.ndarray) -> np.ndarray:
    """Σ (t³ − t) over the groups of t equal non-NaN values, per row of (B, N), vectorised: runs
    of equal neighbours in each sorted row, never crossing rows (NaN sorts last and never joins)."""
    b, n = values.shape
    out = np.zeros(b)
    if n < 2:
        return out
    s = np.sort(values, axis=1)
    starts = np.ones((b, n), dtype=bool)
    starts[:, 1:] = ~(s[:, 1:] == s[:, :-1])
    at = np.flatnonzero(starts)
    lengths = np.diff(np.append(at, b * n)).astype(float)
    keep = np.isfinite(s.reshape(-1)[at]) & (lengths > 1)
    return np.bincount(at[keep] // n, weights=lengths[keep] ** 3 - lengths[keep], minlength=b)


def samples_to_separate(effect: float, n_nontied: int, n_total: int, k: int = 1) -> float:
    """How many paired samples (ties included, at the observed tie rate) a two-sided Wilcoxon test
    would need to call a difference of rank-biserial ``effect`` significant at ``ALPHA / k`` (the
    strictest Holm step among k comparisons): normal approximation z ≈ |r|·√(3n/4) for n non-tied
    pairs. ``inf`` when there is no systematic difference (effect 0) or nothing but ties."""
    r = abs(float(effect))
    if r <= 0 or n_nontied <= 0 or n_total <= 0:
        return float("inf")
    z = stats.norm.isf(ALPHA / max(k, 1) / 2)
    need_nontied = (z / r) ** 2 * 4.0 / 3.0
    return float(np.ceil(need_nontied * n_total / n_nontied))
