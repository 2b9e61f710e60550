"""Three answers about two implementations, with the image as the unit (fidelity/README.md,
"Statistics: one footing").

Per (model, image) the comparison is the log ratio ``r = log(d_a / d_b)`` of the two best
distances (``log_ratios``): negative when ``a`` found the smaller perturbation. Conventions: two
failures (or two zeros) tie at 0, a failure against a success is ``±FAILURE`` (larger than any
finite ratio, which is clipped to ``±LOG_RATIO_CAP``), and ratios within 1e-9 are ties.

Per image, ``r`` is averaged over the models both implementations ran on (``per_image``): one
image on several models is one block, so adding a copy of every model changes nothing.

On the n per-image values ``x`` (``compare``):

- the effect estimate is the Hodges–Lehmann estimate of the location θ of ``x`` (the median of
  the Walsh averages: the estimator of the Wilcoxon signed-rank test), and its sign is the one
  direction rule (θ < 0: ``a`` better);
- *different*: on the images where the two differ (an identical result is never evidence of a
  difference), the minimum-effect Wilcoxon test that θ lies beyond the margin ``δ`` in the
  direction of the estimate (one-sided on ``x ∓ δ``, doubled: two-sided level);
- *equivalent*, when not different: two one-sided Wilcoxon tests (TOST) over every image, ties
  included, put θ inside (−δ, δ);
- *inconclusive* otherwise; ``images_to_decide`` says how many images would decide if the
  observed per-image values were the truth.

The signed-rank p-values
are exact (the conditional null distribution over the 2ⁿ sign flips with mid-ranks, by dynamic
programming) up to ``EXACT_MAX_N`` non-zero values, and the normal approximation with the tie
correction beyond.
"""
from __future__ import annotations

import numpy as np
from scipy import stats

from .curves import as_distances
from .stats import adjust_sorted, tie_correction

#: the equivalence margin on the log-ratio scale: 5% relative. The minimal-ε search stops at
#: 1/64 ≈ 1.6% relative precision (harness/measure/minimal.py ``RELATIVE_PRECISION``), so two sound
#: fixed-ε implementations can sit up to that far apart on every image; δ is three times it.
#: Measured seed noise of sound randomised attacks shifts θ by far less (fidelity/README.md).
DELTA = float(np.log(1.05))
#: finite log ratios are clipped here (100×); a failure against a success counts twice as much
LOG_RATIO_CAP = float(np.log(100.0))
FAILURE = 2.0 * LOG_RATIO_CAP
#: Walsh averages computed in full up to this many (n = 1000 images), sampled beyond
WALSH_EXACT_MAX = 500_500
#: exact signed-rank distribution up to this many non-zero values (dynamic programming, cheap)
EXACT_MAX_N = 40
ANSWERS = ("different", "equivalent", "inconclusive")
COMPARE_FIELDS = ["n_images", "wins_a", "wins_b", "ties", "estimate", "effect_size", "p_value",
                  "p_different", "p_equivalent"]


def log_ratios(a: np.ndarray, b: np.ndarray, rtol: float = 1e-9) -> np.ndarray:
    """Elementwise ``log(a / b)`` of two distance arrays of one shape (NaN counts as inf): 0 for
    two failures, two zeros or a relative difference within ``rtol``; ``−FAILURE`` where only
    ``a`` succeeded (or only ``a`` is 0), ``+FAILURE`` the other way; finite ratios clipped to
    ``±LOG_RATIO_CAP``."""
    a = np.where(np.isnan(np.asarray(a, dtype=float)), np.inf, np.asarray(a, dtype=float))
    b = np.where(np.isnan(np.asarray(b, dtype=float)), np.inf, np.asarray(b, dtype=float))
    out = np.zeros(np.broadcast(a, b).shape)
    pos_a, pos_b = np.isfinite(a) & (a > 0), np.isfinite(b) & (b > 0)
    both = pos_a & pos_b
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.log(np.where(both, a, 1.0)) - np.log(np.where(both, b, 1.0))
    fa, fb = np.where(both, a, 0.0), np.where(both, b, 0.0)
    close = np.abs(fa - fb) <= rtol * np.maximum(fa, fb)
    out[both] = np.clip(ratio[both], -LOG_RATIO_CAP, LOG_RATIO_CAP)
    out[both & close] = 0.0
    # a ranks below b: a = 0 < b, or a finite < b = inf
    a_first = ((a == 0) & (b > 0)) | (np.isfinite(a) & (a > 0) & np.isinf(b))
    b_first = ((b == 0) & (a > 0)) | (np.isfinite(b) & (b > 0) & np.isinf(a))
    out[a_first] = -FAILURE
    out[b_first] = FAILURE
    return out


def per_image(values: np.ndarray) -> np.ndarray:
    """(M, n) per-model log ratios (NaN where that model has no comparison for the image) →
    (n',) per-image means over models, images without any comparison left out."""
    v = np.asarray(values, dtype=float)
    if v.ndim == 1:
        return v[np.isfinite(v)]
    seen = np.isfinite(v).any(axis=0)
    with np.errstate(invalid="ignore"):
        return np.nanmean(v[:, seen], axis=0) if seen.any() else np.zeros(0)


def _signed_rank(x: np.ndarray) -> tuple[np.ndarray, float, int]:
    """(mid-ranks of |x| over the non-zero x, W+ = their sum over x > 0, n non-zero)."""
    nz = x[x != 0]
    if nz.size == 0:
        return np.zeros(0), 0.0, 0
    ranks = stats.rankdata(np.abs(nz))
    return ranks, float(ranks[nz > 0].sum()), int(nz.size)


def signed_rank_p(x: np.ndarray, alternative: str) -> float:
    """p-value of the Wilcoxon signed-rank test of location 0 on (n,) values ``x`` (zeros dropped,
    Wilcoxon's convention), ``alternative`` "greater" (x tends to be positive), "less" or
    "two-sided". Exact conditional distribution (mid-ranks) up to ``EXACT_MAX_N`` non-zero
    values, else the normal approximation with tie and continuity corrections. 1 for no data."""
    ranks, w, n = _signed_rank(np.asarray(x, dtype=float))
    if n == 0:
        return 1.0
    if n <= EXACT_MAX_N:
        doubled = np.rint(2 * ranks).astype(int)          # mid-ranks are multiples of 1/2
        dist = np.zeros(int(doubled.sum()) + 1)
        dist[0] = 1.0
        for r in doubled:                                  # the sum over the 2ⁿ sign flips
            dist[r:] = dist[r:] + dist[:-r].copy() if r else 2 * dist
        dist /= dist.sum()
        at = int(round(2 * w))
        greater, less = float(dist[at:].sum()), float(dist[: at + 1].sum())
    else:
        mean = n * (n + 1) / 4
        _, counts = np.unique(ranks, return_counts=True)
        var = n * (n + 1) * (2 * n + 1) / 24 - float((counts ** 3 - counts).sum()) / 48
        sd = np.sqrt(var) if var > 0 else 1.0
        greater = float(stats.norm.sf((w - mean - 0.5) / sd))
        less = float(stats.norm.cdf((w - mean + 0.5) / sd))
    if alternative == "greater":
        return min(1.0, greater)
    if alternative == "less":
        return min(1.0, less)
    return min(1.0, 2 * min(greater, less))


def signed_rank_z(x: np.ndarray) -> np.ndarray:
    """Normal-approximation z of the signed-rank statistic (tie-corrected, no continuity
    correction) per row of (B, n) values; + when the values tend to be positive, 0 without data.
    For bootstrap replicates and sample-size projections."""
    x = np.atleast_2d(np.asarray(x, dtype=float))
    nz = x != 0
    n = nz.sum(axis=1).astype(float)
    mag = np.where(nz, np.abs(x), -1.0)
    ranks = stats.rankdata(mag, axis=1) - (x.shape[1] - n)[:, None]
    w = np.where(nz & (x > 0), ranks, 0.0).sum(axis=1)
    ties = tie_correction(np.where(nz, np.abs(x), np.nan))
    var = n * (n + 1) * (2 * n + 1) / 24 - ties / 48
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(var > 0, (w - n * (n + 1) / 4) / np.sqrt(np.where(var > 0, var, 1.0)), 0.0)


def hodges_lehmann(x: np.ndarray) -> float:
    """Median of the Walsh averages (x_i + x_j)/2, i ≤ j: the location estimate that goes with the
    signed-rank test. 0 for no data."""
    x = np.asarray(x, dtype=float)
    if x.size == 0:
        return 0.0
    if x.size * (x.size + 1) // 2 <= WALSH_EXACT_MAX:
        i, j = np.triu_indices(x.size)
    else:  # thousands of images: a fixed random sample of the Walsh pairs (the median to ~0.1%)
        rng = np.random.default_rng(0)
        i, j = np.sort(rng.integers(0, x.size, (2, WALSH_EXACT_MAX)), axis=0)
    return float(np.median((x[i] + x[j]) / 2))


def compare(x: np.ndarray, delta: float = DELTA) -> dict[str, float]:
    """The comparison of two implementations from (n,) per-image log ratios ``x`` (negative: ``a``
    smaller): ``COMPARE_FIELDS``. ``wins_a`` counts images where ``a`` is smaller; ``estimate``
    is the Hodges–Lehmann θ (log ratio) over the images where the two differ; ``effect_size`` the
    rank-biserial correlation in favour of ``a``; ``p_value`` the two-sided signed-rank test of
    θ = 0; ``p_different`` the minimum-effect test of |θ| > δ in the direction of the estimate,
    on the images where they differ (1 when the estimate is 0); ``p_equivalent`` TOST's p (the
    larger of its two one-sided p-values) over every image: an image where both found the same
    distance is evidence of equivalence, never of a difference."""
    x = np.asarray(x, dtype=float)
    untied = x[x != 0]
    ranks, w_plus, _ = _signed_rank(x)
    total = float(ranks.sum())
    est = hodges_lehmann(untied)
    if est > delta:
        p_diff = min(1.0, 2 * signed_rank_p(untied - delta, "greater"))
    elif est < -delta:
        p_diff = min(1.0, 2 * signed_rank_p(untied + delta, "less"))
    else:
        p_diff = 1.0  # the estimate itself is inside the margin: no difference beyond δ to test
    p_equiv = max(signed_rank_p(x + delta, "greater"), signed_rank_p(x - delta, "less")) if x.size else 1.0
    return {"n_images": int(x.size), "wins_a": int((x < 0).sum()), "wins_b": int((x > 0).sum()),
            "ties": int((x == 0).sum()), "estimate": est,
            "effect_size": float((total - 2 * w_plus) / total) if total > 0 else 0.0,
            "p_value": signed_rank_p(x, "two-sided"), "p_different": p_diff, "p_equivalent": p_equiv}


def answer(p_different: float, p_equivalent: float, alpha: float) -> str:
    """"different", "equivalent" or "inconclusive" from (multiplicity-adjusted) p-values."""
    if np.isfinite(p_different) and p_different < alpha:
        return "different"
    if np.isfinite(p_equivalent) and p_equivalent < alpha:
        return "equivalent"
    return "inconclusive"


#: the projection is of the median outcome; this margin makes the projected size decide
PROJECTION_MARGIN = 1.15


def images_to_decide(x: np.ndarray, alpha: float, delta: float = DELTA) -> float:
    """Images a rerun would need for ``compare`` to decide at level ``alpha`` (different when the
    estimate is beyond δ, equivalent when inside) if the observed per-image values were the
    truth: the signed-rank z grows as √n, so n·(z_needed/z_observed)², with a 15% margin, then
    grown by 15% steps until ``compare`` on the values repeated to that size decides. ``inf``
    when the observed values point nowhere (z ≤ 0, e.g. an estimate exactly at ±δ) or no size
    up to 270× the projection decides."""
    x = np.asarray(x, dtype=float)
    if x.size == 0:
        return float("inf")
    untied = x[x != 0]
    est = hodges_lehmann(untied)
    if abs(est) > delta:
        # judged on the images where they differ; ties dilute: scale back to all images
        z = float(signed_rank_z(np.sign(est) * untied - delta)[0])
        need = stats.norm.isf(alpha / 2)
        scale = x.size / untied.size
    else:
        z = float(min(signed_rank_z(x + delta)[0], signed_rank_z(delta - x)[0]))
        need = stats.norm.isf(alpha)
        scale = 1.0
    if not z > 0:
        return float("inf")
    n = untied.size if abs(est) > delta else x.size
    size = max(int(np.ceil(n * (need / z) ** 2 * PROJECTION_MARGIN * scale)), x.size + 1)
    # the normal projection is rough at a few images: grow it until the real test, on the
    # observed values repeated to that size, decides
    for _ in range(40):
        res = compare(np.resize(x, size), delta)
        if answer(res["p_different"], res["p_equivalent"], alpha) != "inconclusive":
            return float(size)
        size = int(np.ceil(size * 1.15))
    return float("inf")


def benjamini_hochberg(p_values: np.ndarray | list[float]) -> np.ndarray:
    """Benjamini–Hochberg adjusted p-values (q-values) of (k,) p-values, same order; NaN stays NaN
    and does not count. Reject at false-discovery rate q iff the adjusted value is below q."""
    def step(p: np.ndarray, k: int) -> np.ndarray:
        return np.minimum(1.0, np.minimum.accumulate((p * k / np.arange(1, k + 1))[::-1])[::-1])
    return adjust_sorted(p_values, step)


def distances_compare(a: np.ndarray, b: np.ndarray, delta: float = DELTA) -> dict[str, float]:
    """``compare`` of two (n,) distance arrays on one model (images in the same order)."""
    return compare(log_ratios(as_distances(a), as_distances(b)), delta)


class ImageBlocks:
    """Best distances of k implementations on the images of M models, aligned on images.

    ``dist`` (M, k, n): NaN where an implementation did not run on a model; 0 where it ran but
    the model lacks the image. ``d_star`` (M, n): the envelope, 0 where the model lacks the image
    (nobody had to attack it). ``images`` (n,) the image ids (``sample``), ``models`` (M,).
    Built from ``_table.long_distances`` rows and the (implementation, library_version) ``keys``.
    """

    def __init__(self, long: "pd.DataFrame", keys: list[tuple[str, str]]):
        import pandas as pd

        self.keys = keys
        self.models = sorted(long["model"].astype(str).unique()) if len(long) else []
        self.images = np.sort(long["sample"].unique()) if len(long) else np.zeros(0)
        m, k, n = len(self.models), len(keys), len(self.images)
        self.dist = np.full((m, k, n), np.nan)
        self.d_star = np.zeros((m, n))
        if not len(long):
            return
        impl = pd.MultiIndex.from_tuples(keys).get_indexer(
            pd.MultiIndex.from_frame(long[["implementation", "library_version"]]))
        at = impl >= 0
        mi = np.searchsorted(self.models, long["model"].astype(str).to_numpy()[at])
        col = np.searchsorted(self.images, long["sample"].to_numpy()[at])
        ran = np.zeros((m, k), dtype=bool)
        ran[mi, impl[at]] = True
        self.dist[ran] = 0.0
        self.dist[mi, impl[at], col] = long["distance"].to_numpy(float)[at]
        self.d_star[mi, col] = long["d_star"].to_numpy(float)[at]

    @classmethod
    def from_arrays(cls, dist: np.ndarray, d_star: np.ndarray | None = None) -> "ImageBlocks":
        """Blocks from (M, k, n) distances (images in the same order on every model); ``d_star``
        defaults to the minimum over the k implementations."""
        self = cls.__new__(cls)
        self.dist = np.asarray(dist, dtype=float)
        m, k, n = self.dist.shape
        self.keys = [(str(i), "") for i in range(k)]
        self.models, self.images = [str(i) for i in range(m)], np.arange(n)
        self.d_star = np.nanmin(self.dist, axis=1) if d_star is None else np.asarray(d_star, dtype=float)
        return self

    def ran(self, i: int) -> np.ndarray:
        """(M,) whether implementation i ran on each model."""
        return ~np.isnan(self.dist[:, i]).all(axis=1)

    def image_values(self, i: int, j: int, model: int | None = None) -> np.ndarray:
        """(n,) per-image log ratios of implementation i against j (negative: i smaller), the mean
        over the models both ran on (or on ``model`` only) where the image needed an attack; NaN
        where none did."""
        ran = self.ran(i) & self.ran(j)
        if model is not None:
            ran = ran & (np.arange(len(self.models)) == model)
        live = (self.d_star > 0) & ran[:, None]
        r = np.where(live, log_ratios(np.nan_to_num(self.dist[:, i], nan=np.inf),
                                      np.nan_to_num(self.dist[:, j], nan=np.inf)), np.nan)
        out = np.full(len(self.images), np.nan)
        seen = live.any(axis=0)
        with np.errstate(invalid="ignore"):
            out[seen] = np.nanmean(r[:, seen], axis=0)
        return out
