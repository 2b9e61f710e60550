"""The "is the image broken" endpoint of a comparison: paired binary outcomes, image by image.

Per image, ``fail_a`` and ``fail_b`` are the shares of the models (both implementations ran on)
where each failed to break it: 0 or 1 on one model, a fraction on several (the image is one
block). The estimand is the difference of failure rates ``Δ = fail_a − fail_b`` over the images
(negative: ``a`` breaks more), with the margin ``FAILURE_MARGIN`` (percentage points).

- ``mcnemar_p``: the exact McNemar test of Δ = 0 (a sign test on the discordant images: those
  where one implementation failed more often than the other).
- ``score_z``: Tango's score statistic for H0: Δ = Δ₀ on paired proportions (Tango 1998, Stat Med
  17:891; the restricted maximum-likelihood estimate in closed form). With fractional per-image
  failures (several models) the counts are fractional: a mean of correlated binaries has at most
  a binary's variance, so the test stays conservative.
- ``beyond_p`` / ``within_p``: the minimum-effect test that |Δ| exceeds the margin (in the
  direction of the estimate, doubled to a two-sided level) and the two one-sided tests (TOST) that
  it lies inside. With no discordant image at all, equivalence within 5 points needs
  n ≥ z²·(1 − m)/m ≈ 52 images at α = 0.05: fewer images cannot show it, whatever they say.
"""
from __future__ import annotations

import numpy as np
from scipy import stats

#: the failure-rate margin: 5 percentage points. A robust-accuracy difference of 5 points changes
#: how a defence ranks on the public leaderboards (RobustBench entries a few points apart are
#: ordered by it), so two attacks whose success rates differ by more are not interchangeable; and a
#: smaller margin would need hundreds of images to show even for two identical attacks
#: (n ≥ z²(1 − m)/m: 52 images at 5 points, 268 at 1 point).
FAILURE_MARGIN = 0.05


def discordant(fail_a: np.ndarray, fail_b: np.ndarray) -> tuple[float, float, int]:
    """(x10, x01, n): the (fractional) count of images ``a`` broke where ``b`` failed, the
    reverse, and the number of images, from (n,) per-image failure shares."""
    d = np.asarray(fail_b, dtype=float) - np.asarray(fail_a, dtype=float)
    return float(np.clip(d, 0, None).sum()), float(np.clip(-d, 0, None).sum()), int(d.size)


def mcnemar_p(fail_a: np.ndarray, fail_b: np.ndarray) -> float:
    """Exact two-sided McNemar p (sign test over the images where the failure shares differ); 1
    without a discordant image."""
    d = np.asarray(fail_b, dtype=float) - np.asarray(fail_a, dtype=float)
    k, m = int((d > 0).sum()), int((d != 0).sum())
    return float(stats.binomtest(k, m, 0.5).pvalue) if m else 1.0


def score_z(x10: np.ndarray | float, x01: np.ndarray | float, n: np.ndarray | float, delta0: float) -> np.ndarray:
    """Tango's score z for H0: p10 − p01 = ``delta0`` (vectorised over the counts); positive when
    the data say the difference is above ``delta0``. 0 where the restricted variance vanishes
    (no discordance tested at Δ₀ = 0)."""
    x10, x01, n = (np.asarray(v, dtype=float) for v in (x10, x01, n))
    rest = n - x10 - x01
    b = x10 * (1 - delta0) + x01 * (1 - 3 * delta0) - 2 * rest * delta0
    c = x01 * delta0 * (1 - delta0)
    with np.errstate(invalid="ignore", divide="ignore"):
        p01 = (b + np.sqrt(np.maximum(b * b + 8 * n * c, 0.0))) / (4 * np.where(n > 0, n, 1.0))
        var = n * (2 * p01 + delta0 - delta0 ** 2)
        z = (x10 - x01 - n * delta0) / np.sqrt(np.where(var > 0, var, 1.0))
    return np.where((var > 1e-15) & (n > 0), z, 0.0)


def estimate(fail_a: np.ndarray, fail_b: np.ndarray) -> float:
    """Δ̂ = mean failure share of ``a`` − that of ``b`` (0 without images)."""
    fa, fb = np.asarray(fail_a, dtype=float), np.asarray(fail_b, dtype=float)
    return float(fa.mean() - fb.mean()) if fa.size else 0.0


def beyond_p(fail_a: np.ndarray, fail_b: np.ndarray, margin: float = FAILURE_MARGIN) -> float:
    """p of "|Δ| > margin" in the direction of Δ̂ (two-sided level); 1 when Δ̂ is inside."""
    x10, x01, n = discordant(fail_a, fail_b)
    if n == 0:
        return 1.0
    diff = (x10 - x01) / n                   # breaking rate of a − that of b = −Δ̂
    if diff > margin:
        return float(min(1.0, 2 * stats.norm.sf(score_z(x10, x01, n, margin))))
    if diff < -margin:
        return float(min(1.0, 2 * stats.norm.cdf(score_z(x10, x01, n, -margin))))
    return 1.0


def smallest_beyond_p(k: np.ndarray | float, n: np.ndarray | float, margin: float = FAILURE_MARGIN) -> np.ndarray:
    """The smallest ``beyond_p`` that ``k`` discordant images of ``n`` could give: all of them in one
    direction (the discordant count is the failure endpoint's ancillary statistic); 1 where no
    arrangement can pass the margin, e.g. without a discordant image (Tarone's "testable" check).
    Vectorised over the counts (the bootstrap's resamples)."""
    k, n = np.asarray(k, dtype=float), np.asarray(n, dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        can = (n > 0) & (k > margin * n)
        p = np.minimum(1.0, 2 * stats.norm.sf(score_z(k, 0.0, n, margin)))
    return np.where(can, p, 1.0)


def min_beyond_p(fail_a: np.ndarray, fail_b: np.ndarray, margin: float = FAILURE_MARGIN) -> float:
    """``smallest_beyond_p`` of these images' discordant count."""
    x10, x01, n = discordant(fail_a, fail_b)
    return float(smallest_beyond_p(x10 + x01, n, margin))


def within_p(fail_a: np.ndarray, fail_b: np.ndarray, margin: float = FAILURE_MARGIN) -> float:
    """TOST p of "|Δ| < margin" (the larger of the two one-sided score tests); 1 without images."""
    x10, x01, n = discordant(fail_a, fail_b)
    if n == 0:
        return 1.0
    return float(max(stats.norm.sf(score_z(x10, x01, n, -margin)), stats.norm.cdf(score_z(x10, x01, n, margin))))


def images_needed(fail_a: np.ndarray, fail_b: np.ndarray, alpha: float, power: float = 0.8,
                  margin: float = FAILURE_MARGIN, confidence: float = 0.8) -> float:
    """Images for the failure endpoint to decide with probability ``power`` at a conservative
    truth: beyond the margin, the one-sided ``confidence`` bound of |Δ| nearer the margin;
    inside, the bound farther from 0 and the ``confidence`` upper bound of the discordance rate;
    with no discordant image at all, the size at which none shows equivalence (z²(1 − m)/m, 52 at
    α = 0.05 and 5 points). ``inf`` when the bound sits at the margin."""
    x10, x01, n = discordant(fail_a, fail_b)
    if n == 0:
        return float("inf")
    diff, disc = (x10 - x01) / n, (x10 + x01) / n
    se = np.sqrt(max(disc - diff ** 2, 0.0) / n)
    z_bound, z_power = stats.norm.ppf(confidence), stats.norm.isf(1 - power)
    disc_hi = max(disc + max(z_bound, 0.0) * np.sqrt(disc * (1 - disc) / n), 1 - (1 - confidence) ** (1 / n))
    if abs(diff) > margin:
        plan = abs(diff) - z_bound * se
        if plan <= margin:
            return float("inf")
        # the score test's variance at the margin (its null) for the critical value, at the planned
        # truth for the power: n = (z_α σ₀ + z_β σ₁)² / (Δ − m)²
        sd0 = np.sqrt(max(disc_hi, margin) - margin ** 2)
        sd1 = np.sqrt(max(disc_hi - plan ** 2, 1e-12))
        return float(np.ceil((stats.norm.isf(alpha / 2) * sd0 + z_power * sd1) ** 2 / (plan - margin) ** 2))
    if disc == 0:  # not one discordant image: the size at which none shows equivalence (power 1 there)
        return float(np.ceil(stats.norm.isf(alpha) ** 2 * (1 - margin) / margin))
    plan = abs(diff) + z_bound * se
    if plan >= margin:
        return float("inf")
    var = max(disc_hi, margin) - margin ** 2  # the score test's variance at the boundary
    return float(np.ceil((stats.norm.isf(alpha) + z_power) ** 2 * var / (margin - plan) ** 2))


def score_pair(first: np.ndarray, second: np.ndarray, seen: np.ndarray,
               margin: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(z the first member is better beyond ``margin``, z the second is, discordant count, n) of
    (B, n) per-image shares on which each member is the worse (failures; worse beyond δ)."""
    d = np.where(seen, second - first, 0.0)                  # > 0: the second member is the worse there
    x10, x01, n = np.clip(d, 0, None).sum(1), np.clip(-d, 0, None).sum(1), seen.sum(1)
    return (score_z(x10, x01, n, margin), -score_z(x10, x01, n, -margin),
            x10 + x01, n)
