"""Three answers about two implementations, on two endpoints, with the image as the unit
(fidelity/README.md, "Statistics: one footing").

Per (model, image), two outcomes are compared (``pair_values``): whether each implementation broke
the image (its failure share over models, ``paired_binary``) and, where both broke it, how far:
the log ratio ``r = log(d_a / d_b)`` of the two best distances (negative when ``a`` found the
smaller perturbation; finite ratios clipped to ``±LOG_RATIO_CAP``, ratios within 1e-9 ties). An
image neither implementation broke carries no evidence on either endpoint and is counted apart.

Per image the values are averaged over the models both implementations ran on: one image on
several models is one block, so adding a copy of every model changes nothing.

``pair_test`` of the per-image values gives **one headline** on the robustness curve
(``headline.py``: the share of images each implementation is worse on beyond δ, failures
included; better / worse / equivalent / mixed / inconclusive) and, beneath it, the two endpoints
that explain it:

- **failure endpoint**: Δ = difference of failure rates, margin ``FAILURE_MARGIN`` (5 points): the
  exact McNemar p, the score test beyond the margin and the score TOST inside it;
- **distance endpoint**: θ = the Hodges–Lehmann location (pseudo-median) of ``r`` on the images both
  broke, margin δ = ln 1.05: the minimum-effect signed-rank test beyond ±δ and the TOST inside,
  on the *same* images.

``p_different`` and ``p_equivalent`` are the headline's; ``answer`` reads them after the caller's
multiplicity adjustment; *inconclusive* comes with ``images_to_decide`` (``sample_size``).

The signed-rank p-values are exact (the conditional null distribution over the 2ⁿ sign flips with
mid-ranks, by dynamic programming) up to ``EXACT_MAX_N`` non-zero values, and the normal
approximation with the tie correction beyond.
"""
from __future__ import annotations

import numpy as np
from scipy import stats

from . import headline, paired_binary
from .curves import as_distances
from .paired_binary import FAILURE_MARGIN
from .stats import ALPHA, adjust_sorted, tie_correction

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
#: rows of the per-image pair values (``pair_values``)
ROWS = 8
COMPARE_FIELDS = ["n_images", "n_both", "n_neither", "fail_a", "fail_b", "broke_only_a", "broke_only_b",
                  "p_mcnemar", "p_failure_different", "p_failure_equivalent", "wins_a", "wins_b", "ties",
                  "estimate", "share_beyond", "iqr_low", "iqr_high", "effect_size", "p_value",
                  "p_distance_different", "p_distance_equivalent", "lead_a", "lead_b", "crossing", "integer",
                  "failure_reachable", "distance_reachable", "n_informative", "share_discordant", "worse_a", "worse_b", "share_estimate", "p_share_different",
                  "p_share_equivalent", "headline", "lean", "p_different", "p_equivalent", "direction", "mixed"]


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


def nan_as_failure(d: np.ndarray) -> np.ndarray:
    """Distances of any shape as floats, NaN (an unknown result) as inf; inf stays inf (NumPy's
    ``nan_to_num`` would make it the largest finite float: a success)."""
    d = np.asarray(d, dtype=float)
    return np.where(np.isnan(d), np.inf, d)


def pair_values(a: np.ndarray, b: np.ndarray, live: np.ndarray | None = None, rtol: float = 1e-9,
                share_delta: float = headline.SHARE_DELTA) -> np.ndarray:
    """(``ROWS``, n) per-image values of two distance arrays of shape (n,) or (M, n) (models ×
    images, NaN counts as a failure): ``fail_a``/``fail_b``, the share of the models each failed on;
    ``r``, the mean log ratio over the models where both broke the image (NaN where none did);
    ``worse_a``/``worse_b``, the share of the models on which each is worse than the other beyond
    ``share_delta`` (``headline.worse_beyond``: a failure where the other broke it counts; integer distances on
    their own scale); ``dist_a``/``dist_b``, the image's mean distance over the models (inf when it
    failed on one), for the robustness curves; ``integer``, 1 in every column when the distances are
    whole numbers (L0), judged on their own scale. ``live`` (same shape; default all): the (model,
    image) cases that needed an attack and that both ran; an image without one has NaN in every row."""
    a, b = (np.atleast_2d(nan_as_failure(v)) for v in (a, b))
    live = np.ones(a.shape, dtype=bool) if live is None else np.atleast_2d(np.asarray(live, dtype=bool))
    broke_a, broke_b = np.isfinite(a), np.isfinite(b)
    both = live & broke_a & broke_b
    r = np.clip(log_ratios(np.where(both, a, 1.0), np.where(both, b, 1.0), rtol), -LOG_RATIO_CAP, LOG_RATIO_CAP)
    integer = headline.integer_scale(a[live], b[live])
    seen, seen_both = live.sum(axis=0), both.sum(axis=0)
    out = np.full((ROWS, a.shape[1]), np.nan)

    def share(mask: np.ndarray) -> np.ndarray:
        return np.where(seen > 0, (live & mask).sum(axis=0) / np.maximum(seen, 1), np.nan)

    with np.errstate(invalid="ignore", divide="ignore"):
        out[0], out[1] = share(~broke_a), share(~broke_b)
        out[2] = np.where(seen_both > 0, np.where(both, r, 0.0).sum(axis=0) / np.maximum(seen_both, 1), np.nan)
        out[3] = share(headline.worse_beyond(a, b, share_delta, integer))
        out[4] = share(headline.worse_beyond(b, a, share_delta, integer))
        for row, d in ((5, a), (6, b)):
            out[row] = np.where(seen > 0, np.where(live, d, 0.0).sum(axis=0) / np.maximum(seen, 1), np.nan)
        out[7] = np.where(seen > 0, float(integer), np.nan)
    return out


def observed(values: np.ndarray) -> np.ndarray:
    """The columns of pair values (``observed_rows``) that carry a comparison (the image needed an
    attack on some model both ran)."""
    v = observed_rows(values)
    return v[:, np.isfinite(v[0]) & np.isfinite(v[1])]


def observed_rows(values: np.ndarray) -> np.ndarray:
    """Pair values as (``ROWS``, n), every column kept. Three-row values ``[fail_a, fail_b, r]``
    (one model) get their share rows from the failures and ``r`` against
    ``headline.SHARE_DELTA``, and no curve rows."""
    v = np.asarray(values, dtype=float)
    v = v.reshape(v.shape[0] if v.ndim == 2 else ROWS, -1)
    if v.shape[0] == 3:
        fa, fb, r = v
        rr = np.nan_to_num(r)
        both = np.isfinite(r) * (1 - np.maximum(fa, fb))
        v = np.vstack([v, (rr > headline.SHARE_DELTA) * both + np.clip(fa - fb, 0, None),
                       (rr < -headline.SHARE_DELTA) * both + np.clip(fb - fa, 0, None),
                       np.full((2, v.shape[1]), np.nan), np.zeros((1, v.shape[1]))])
    return v


def swapped(values: np.ndarray) -> np.ndarray:
    """The same pair values seen from the other implementation (b against a)."""
    v = np.asarray(values, dtype=float)
    if v.shape[0] == 3:
        return np.stack([v[1], v[0], -v[2]])
    return np.stack([v[1], v[0], -v[2], v[4], v[3], v[6], v[5], v[7]])


def _distance_tests(r: np.ndarray, delta: float) -> tuple[float, float, float]:
    """(θ̂, p beyond ±δ, TOST p) of the log ratios ``r`` of the images both broke: one parameter,
    the same images for both tests."""
    if r.size == 0:
        return 0.0, 1.0, 1.0
    est = hodges_lehmann(r)
    if est > delta:
        p_diff = min(1.0, 2 * signed_rank_p(r - delta, "greater"))
    elif est < -delta:
        p_diff = min(1.0, 2 * signed_rank_p(r + delta, "less"))
    else:
        p_diff = 1.0  # the estimate itself is inside the margin: no difference beyond δ to test
    return est, p_diff, max(signed_rank_p(r + delta, "greater"), signed_rank_p(r - delta, "less"))


def reachable_endpoints(fail_a: np.ndarray, fail_b: np.ndarray, n_both: int, margin: float = FAILURE_MARGIN,
                       alpha: float = ALPHA) -> tuple[bool, bool]:
    """Whether the failure and the distance endpoint could each reach ``alpha`` at all, from their
    ancillary counts alone (the discordant images; the images both broke): Tarone's modified
    Bonferroni (Biometrics 46:515, 1990) counts only those. Without a discordant image the failure
    endpoint cannot show a difference, and charging the distance endpoint a factor 2 for it halves
    its level for nothing (a planted halved PGD step, 8% farther on 24 images: p 0.029 alone)."""
    min_dist = min(1.0, 2 * signed_rank_p(np.ones(n_both), "greater")) if n_both else 1.0
    return paired_binary.min_beyond_p(fail_a, fail_b, margin) < alpha, min_dist < alpha


def pair_test(values: np.ndarray, delta: float = DELTA, margin: float = FAILURE_MARGIN,
            share_margin: float = headline.SHARE_MARGIN, alpha: float = ALPHA) -> dict[str, float]:
    """The comparison of two implementations from per-image pair values (``pair_values``; columns
    without a comparison are ignored): ``COMPARE_FIELDS``.

    **Headline** (``headline.decide``, on the robustness curve): ``headline`` ("better", "worse",
    "equivalent", "mixed", "inconclusive", from ``a``'s side at the unadjusted 5% level),
    ``p_different`` / ``p_equivalent`` (what callers adjust and hand to ``answer``), ``direction``
    (−1: ``a`` better, +1: worse), ``mixed`` (the curves cross materially, at ``crossing``, the
    distance where the lead changes sides; ``lead_a``/``lead_b`` the largest share of images by
    which each curve leads) and ``lean`` (the endpoint that leans against the share's direction
    unresolved, which blocks a direction). **Share endpoint**, over the ``n_informative`` images
    either broke: ``worse_a``/``worse_b`` (shares worse beyond δ), ``share_estimate``,
    ``p_share_different``, ``p_share_equivalent``.

    Beneath it, the failure endpoint: ``fail_a``/``fail_b`` (failure rates over the images),
    ``broke_only_a`` / ``broke_only_b`` (discordant images), ``p_mcnemar``, ``p_failure_different``
    (beyond ``margin``), ``p_failure_equivalent`` (TOST); and the distance endpoint, on the
    ``n_both`` images both broke: ``estimate`` (θ̂, the pseudo-median log ratio),
    ``wins_a``/``wins_b``/``ties``, ``share_beyond`` (images with |r| > δ), ``iqr_low``/``iqr_high``
    (quartiles of r), ``effect_size`` (rank-biserial in favour of ``a``), ``p_value`` (signed-rank
    test of θ = 0), ``p_distance_different``, ``p_distance_equivalent``. ``n_neither``: images
    neither broke (no evidence). ``alpha``: the level the headline's claims are made at (the
    Tarone check of which endpoints count, a lean, a crossing, the headline word); a look of a run
    that extends until decided passes the α it spends (``fidelity/sequential.py``)."""
    v = observed(values)
    fa, fb, r_all, wa, wb, da, db, integer = v
    r = r_all[np.isfinite(r_all)]
    informative = ~((fa == 1) & (fb == 1))
    est, p_dd, p_de = _distance_tests(r, delta)
    p_fd, p_fe = paired_binary.beyond_p(fa, fb, margin), paired_binary.within_p(fa, fb, margin)
    ranks, w_plus, _ = _signed_rank(r)
    total = float(ranks.sum())
    q1, q3 = (np.percentile(r, [25, 75]) if r.size else (0.0, 0.0))
    lead_a, lead_b, cross = headline.crossing(da[informative], db[informative], share_margin)
    res = {"n_images": int(fa.size), "n_both": int(r.size), "n_neither": int((~informative).sum()),
           "fail_a": float(fa.mean()) if fa.size else 0.0, "fail_b": float(fb.mean()) if fb.size else 0.0,
           "broke_only_a": int((fa < fb).sum()), "broke_only_b": int((fb < fa).sum()),
           "p_mcnemar": paired_binary.mcnemar_p(fa, fb), "p_failure_different": p_fd,
           "p_failure_equivalent": p_fe, "wins_a": int((r < 0).sum()), "wins_b": int((r > 0).sum()),
           "ties": int((r == 0).sum()), "estimate": est,
           "share_beyond": float((np.abs(r) > delta).mean()) if r.size else 0.0,
           "iqr_low": float(q1), "iqr_high": float(q3),
           "effect_size": float((total - 2 * w_plus) / total) if total > 0 else 0.0,
           "p_value": signed_rank_p(r, "two-sided"), "p_distance_different": p_dd, "p_distance_equivalent": p_de,
           "lead_a": lead_a, "lead_b": lead_b, "crossing": cross, "integer": bool(integer.size and integer.max() > 0),
           **dict(zip(("failure_reachable", "distance_reachable"),
                      reachable_endpoints(fa, fb, int(r.size), margin, alpha))),
           **headline.share_tests(wa[informative], wb[informative], share_margin)}
    return res | headline.decide(res, delta, margin, alpha, share_margin=share_margin)


def answer(p_different: float, p_equivalent: float, alpha: float) -> str:
    """"different", "equivalent" or "inconclusive" from (multiplicity-adjusted) p-values."""
    if np.isfinite(p_different) and p_different < alpha:
        return "different"
    if np.isfinite(p_equivalent) and p_equivalent < alpha:
        return "equivalent"
    return "inconclusive"


def benjamini_hochberg(p_values: np.ndarray | list[float]) -> np.ndarray:
    """Benjamini–Hochberg adjusted p-values (q-values) of (k,) p-values, same order; NaN stays NaN
    and does not count. Reject at false-discovery rate q iff the adjusted value is below q."""
    def step(p: np.ndarray, k: int) -> np.ndarray:
        return np.minimum(1.0, np.minimum.accumulate((p * k / np.arange(1, k + 1))[::-1])[::-1])
    return adjust_sorted(p_values, step)


def distance_pair_test(a: np.ndarray, b: np.ndarray, delta: float = DELTA) -> dict[str, float]:
    """``pair_test`` of two (n,) distance arrays on one model (images in the same order; an image
    at distance 0 for both, misclassified clean, needed no attack and is left out)."""
    a, b = as_distances(a), as_distances(b)
    return pair_test(pair_values(a, b, live=~((a == 0) & (b == 0))), delta)


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
        """(3, n) per-image values ``[fail_a, fail_b, r]`` of implementation i against j
        (``pair_values``; r negative: i smaller) over the models both ran on (or on ``model``
        only) where the image needed an attack; NaN columns where none did."""
        ran = self.ran(i) & self.ran(j)
        if model is not None:
            ran = ran & (np.arange(len(self.models)) == model)
        live = (self.d_star > 0) & ran[:, None]
        return pair_values(self.dist[:, i], self.dist[:, j], live)
