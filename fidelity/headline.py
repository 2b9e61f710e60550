"""The one headline of a comparison of two implementations, on the robustness curve.

The quantity a user reads is the robustness curve: per image the minimal distance an attack found,
a failure at infinity (ξ summarises it). The headline compares two curves image by image through
the **share endpoint**: the share of images on which ``a`` is *worse beyond δ* (farther by more than
δ, or failing where ``b`` broke it) against the share on which it is *better beyond δ*. Integer
distances (L0: pixels) are judged on their own scale: one unit is beyond δ whatever the size.
Images neither implementation broke carry no evidence and are left out of the shares.

The share difference ``Δs = worse_a − worse_b`` is a paired difference of proportions, tested as
the failure endpoint is (``paired_binary``: Tango's score test beyond the margin ``SHARE_MARGIN``,
the TOST inside it). So a change confined to a minority of the images (20% of them 2× farther, a
class or two) moves the headline although the typical per-image difference (the distance endpoint)
is nil.

Headline answers, from ``a``'s side (``decide``):

- **mixed**: the curves cross materially: the failure endpoint and the distance endpoint are each
  beyond their margins in opposite directions (one breaks more images, the other is closer on the
  images both broke) *and* each curve leads the other by at least ``SHARE_MARGIN`` of the images at
  some distance (``crossing``: where the lead changes sides).
- **better** / **worse**: the share endpoint beyond its margin, and no endpoint leaning the other way
  unresolved (its estimate beyond its margin the other way, its test not significant): such a lean
  makes the comparison **inconclusive** instead (direction is consistent).
- **equivalent**: the share endpoint and the failure endpoint both inside their margins (an
  intersection–union test: the larger TOST p).
- **inconclusive** otherwise.

The two endpoints (failure rate; the pseudo-median log ratio on the images both broke) stay as the
explanation beneath the headline and never make a headline of their own.
"""
from __future__ import annotations

import numpy as np

from . import paired_binary

#: the share margin: 5 points of the images either implementation broke. The same size as the
#: failure margin (a robust-accuracy difference of 5 points reorders public leaderboards), and the
#: smallest at which two identical copies are shown equivalent on about 60 images
SHARE_MARGIN = 0.05
#: distances that are all whole numbers (L0 counts pixels) are compared on their own scale: one
#: unit apart is a difference, whatever δ says (a relative δ of 5% is under one pixel below 20)
INTEGER_TOL = 1e-6
#: an image counts in the share endpoint when one implementation is farther by more than 25%
#: there. Not the distance endpoint's 5%: two seeds of one sound randomised attack differ beyond
#: ±5% on a median 11% of the images (foolbox's PGDs on 71–89%), which a count of images cannot
#: tell from a defect on 64 of them. Measured on the real seed noise of 88 randomised cells
#: (benchmarks/power.py ``--minority``), 64 images, a copy 2× farther on 20% of them: "worse" in
#: 0.59 / 0.75 / 0.82 of resamples at 5% / 20% / 25%, A/A "different" 0.05 / 0.03 / 0.01. A change
#: under 25% on every image is the distance endpoint's to see (it is one of the headline's tests)
SHARE_DELTA = float(np.log(1.25))
#: the weights of the weighted Bonferroni test over the headline's endpoints (renormalised over
#: those that can reach α): the share endpoint carries the headline and sees failures too (a
#: failed image is a worse one), the distance endpoint sees a shift under 25% on every image (a
#: large effect over all images, which needs little of α), the failure endpoint adds least.
#: Measured (benchmarks/power.py --minority 64, real seed noise): a copy 2× farther on 20% of 64
#: images is "worse" in 0.79 of resamples with equal weights (plain Bonferroni), 0.83 with these
#: (A/A "different" 0.023)
WEIGHTS = {"share": 0.6, "failure rate": 0.1, "distance": 0.3}
WORDS = ("better", "worse", "equivalent", "mixed", "inconclusive")


def integer_scale(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether every finite positive distance of both arrays is a whole number (L0 counts)."""
    x = np.concatenate([np.ravel(a), np.ravel(b)]).astype(float)
    x = x[np.isfinite(x) & (x > 0)]
    return bool(x.size) and bool(np.all(np.abs(x - np.round(x)) <= INTEGER_TOL))


def worse_beyond(a: np.ndarray, b: np.ndarray, delta: float, integer: bool) -> np.ndarray:
    """Elementwise: ``a`` is worse than ``b`` beyond δ: ``a`` failed (inf) where ``b`` broke, or both
    broke and ``a`` is farther by more than δ (log ratio), or by at least one unit on an integer
    scale. An image ``a`` found at 0 (misclassified clean) is never worse."""
    fa, fb = np.isfinite(a), np.isfinite(b)
    both = fa & fb & (a > 0) & (b > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        if integer:
            far = both & (np.where(both, a, 0.0) - np.where(both, b, 0.0) >= 1.0 - INTEGER_TOL)
        else:
            far = both & (np.log(np.where(both, a, 1.0)) - np.log(np.where(both, b, 1.0)) > delta)
    zero_b = fa & fb & (b == 0) & (a > 0)
    return (~fa & fb) | far | zero_b


def crossing(dist_a: np.ndarray, dist_b: np.ndarray, margin: float = SHARE_MARGIN) -> tuple[float, float, float]:
    """(lead_a, lead_b, ε where the lead changes sides) of two robustness curves over the same (n,)
    images (inf: failed; NaN ignored): ``lead_a`` the largest share of images by which ``a``'s curve
    lies below ``b``'s (``a`` stronger) at some distance, ``lead_b`` the reverse; the crossing
    distance is the first distance after which the leader of the larger ``margin``-sized lead
    changes (NaN when one curve never leads by ``margin``). All NaN without distances."""
    a, b = np.asarray(dist_a, dtype=float), np.asarray(dist_b, dtype=float)
    keep = ~np.isnan(a) & ~np.isnan(b)
    a, b = a[keep], b[keep]
    if not a.size:  # no curves to read (pair values without them): the leads are unknown
        return float("nan"), float("nan"), float("nan")
    grid = np.unique(np.concatenate([a[np.isfinite(a)], b[np.isfinite(b)]]))
    if not grid.size:
        return 0.0, 0.0, float("nan")
    # robust accuracy at ε: the share of images not broken at ε (d > ε)
    ra_a = (a[None, :] > grid[:, None]).mean(axis=1)
    ra_b = (b[None, :] > grid[:, None]).mean(axis=1)
    gap = ra_b - ra_a                                     # > 0: a's curve below b's (a stronger)
    lead_a, lead_b = float(max(gap.max(), 0.0)), float(max(-gap.min(), 0.0))
    if lead_a < margin or lead_b < margin:
        return lead_a, lead_b, float("nan")
    first_a, first_b = int(np.argmax(gap >= margin)), int(np.argmax(-gap >= margin))
    lo, hi = sorted((first_a, first_b))
    sign = np.sign(gap[lo])
    switch = lo + int(np.argmax(np.sign(gap[lo:hi + 1]) != sign))
    return lead_a, lead_b, float(grid[max(switch - 1, lo)])


def share_tests(worse_a: np.ndarray, worse_b: np.ndarray, margin: float = SHARE_MARGIN) -> dict[str, float]:
    """The share endpoint of (n,) per-image shares (over models) on which ``a`` / ``b`` is worse
    beyond δ, over the images either broke: ``n_informative``, ``worse_a``, ``worse_b`` (mean
    shares), ``share_estimate`` (Δs, + when ``a`` is worse), ``p_share_different`` (beyond the margin,
    two-sided level, never below the exact McNemar p), ``p_share_equivalent`` (TOST)."""
    wa, wb = np.asarray(worse_a, dtype=float), np.asarray(worse_b, dtype=float)
    return {"n_informative": int(wa.size), "share_discordant": int((wa != wb).sum()),
            "worse_a": float(wa.mean()) if wa.size else 0.0,
            "worse_b": float(wb.mean()) if wb.size else 0.0,
            "share_estimate": paired_binary.estimate(wa, wb),
            # the score test is asymptotic: never below the exact sign test of Δs = 0 on the same
            # images (5 of 5 worse is p 0.0625, not the score test's 0.004)
            "p_share_different": max(paired_binary.beyond_p(wa, wb, margin), paired_binary.mcnemar_p(wa, wb)),
            "p_share_equivalent": paired_binary.within_p(wa, wb, margin)}


def _lean(estimate: float, margin: float, p_different: float, alpha: float) -> int:
    """+1 / −1 when an endpoint's estimate lies beyond its margin (+: ``a`` worse) without its test
    showing it (unresolved), else 0."""
    if abs(estimate) > margin and not p_different < alpha:
        return int(np.sign(estimate))
    return 0


def share_reachable(k: int, n: int, margin: float = SHARE_MARGIN, alpha: float = 0.05) -> bool:
    """Whether the share endpoint could reach ``alpha`` from its ``k`` discordant images of ``n``
    (all of them one way; its p is never below the exact sign test's): Tarone's check."""
    return bool(k) and max(float(paired_binary.smallest_beyond_p(k, n, margin)), min(1.0, 2 * 0.5 ** k)) < alpha


def curve_lead(lead_a: float, lead_b: float, margin: float = SHARE_MARGIN) -> int:
    """+1 when only ``b``'s curve lies materially below ``a``'s somewhere (``a`` weaker), −1 the
    reverse, 0 when neither or both do."""
    return int(lead_b >= margin) - int(lead_a >= margin) if (lead_a >= margin) != (lead_b >= margin) else 0


def decide(res: dict, delta: float, margin: float, alpha: float = 0.05,
           share_margin: float = SHARE_MARGIN) -> dict:
    """The headline fields of ``equivalence.pair_test`` from its endpoint fields (``res``):
    ``headline`` (one of ``WORDS``, ``a``'s side), ``lean`` (what blocked a direction, "" when
    nothing did), ``p_different``, ``p_equivalent``, ``direction`` (−1: ``a`` better, +1: worse, 0:
    none estimated) and ``mixed``.

    ``p_different``: weighted Bonferroni (``WEIGHTS``) over the share, failure and distance endpoints
    (each counted only when its ancillary counts could reach α at all: Tarone; the share endpoint
    needs discordant images, ``share_reachable``), in the direction of
    the smallest weighted p
    (among those that agree with the curves where only one curve leads by ``share_margin``); 1 when that direction is contradicted by an endpoint leaning the other way
    unresolved or by the curves (only the other curve leads by ``share_margin``). A mixed pair
    (the curves cross materially and the failure and distance endpoints are each shown beyond their
    margins in opposite directions) has the larger of those two p, doubled. ``p_equivalent``: the
    share and failure TOSTs, intersection–union (the larger)."""
    ests = {"share": res["share_estimate"], "failure rate": res["fail_a"] - res["fail_b"], "distance": res["estimate"]}
    ps = {"share": res["p_share_different"], "failure rate": res["p_failure_different"],
          "distance": res["p_distance_different"]}
    margins = {"share": share_margin, "failure rate": margin, "distance": delta}
    sig = {k: int(np.sign(ests[k])) if ps[k] < alpha else 0 for k in ests}
    # without the curves (pair values of the failure and distance endpoints only) opposed endpoints
    # are taken to cross
    leads = (res["lead_a"], res["lead_b"])
    material = bool(sig["failure rate"] and sig["distance"] and sig["failure rate"] != sig["distance"]
                    and all(not np.isfinite(x) or x >= share_margin for x in leads))
    p_equivalent = float(max(res["p_share_equivalent"], res["p_failure_equivalent"], res["p_distance_equivalent"]))
    reach = {"share": share_reachable(res["share_discordant"], res["n_informative"], share_margin, alpha),
             "failure rate": res["failure_reachable"], "distance": res["distance_reachable"]}
    tests = [k for k in ests if reach[k]]
    if not tests:  # no endpoint could show a difference at all
        tests = ["share"]
    # the direction: the smallest p, among the tests that agree with the curve where only one leads
    lead = curve_lead(*(x if np.isfinite(x) else 0.0 for x in leads), share_margin)
    agreeing = [k for k in tests if int(np.sign(ests[k])) == lead] if lead else []
    weight = {k: WEIGHTS[k] / sum(WEIGHTS[t] for t in tests) for k in tests}
    first = min(agreeing or tests, key=lambda k: ps[k] / weight[k])
    direction = int(np.sign(ests[first])) if ps[first] < 1.0 else 0
    if not direction:  # nothing beyond a margin: the endpoint with the larger effect relative to its margin
        direction = int(np.sign(ests[max(ests, key=lambda k: abs(ests[k]) / margins[k])]))
    lean = ""
    if material:
        return {"headline": "mixed", "lean": "", "p_different": float(min(1.0, 2 * max(ps["failure rate"],
                                                                                        ps["distance"]))),
                "p_equivalent": p_equivalent, "direction": direction, "mixed": True}
    p_diff = float(min(1.0, ps[first] / weight[first]))
    if p_diff < alpha:
        against = [k for k in ests if _lean(ests[k], margins[k], ps[k], alpha) == -direction]
        if lead == -direction:
            lean, p_diff = "robustness curve", 1.0
        elif against:
            lean, p_diff = against[0], 1.0
    if p_diff < alpha:
        headline = "worse" if direction > 0 else "better"
    elif p_equivalent < alpha:
        headline = "equivalent"
    else:
        headline = "inconclusive"
    return {"headline": headline, "lean": lean, "p_different": p_diff, "p_equivalent": p_equivalent,
            "direction": direction, "mixed": False}
