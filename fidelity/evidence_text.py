"""The words for a comparison of two implementations: what was shown, on both endpoints.

One phrasing everywhere (trust sets, alignment, audits): failure rates side by side, then on the
images both broke the typical per-image difference (the pseudo-median, the estimand of the tests),
the share of images beyond ±δ and the interquartile range of the per-image ratios. "Within ±5%"
always qualifies the pseudo-median, never every image.
"""
from __future__ import annotations

import numpy as np

from .equivalence import DELTA
from .paired_binary import FAILURE_MARGIN


def relative(ratio: float) -> str:
    """A log ratio as a relative size: +0.105 → "11% farther", 0 → "the same distance"."""
    if ratio == 0:
        return "the same distance"
    return f"{abs(np.expm1(ratio)):.0%} {'farther' if ratio > 0 else 'closer'}"


def failure_text(res: dict, a: str = "a", b: str = "b") -> str:
    """"failure rates 12% (a) vs 9% (b); 4 images broken by b only, 1 by a only"."""
    return (f"failure rates {res['fail_a']:.0%} ({a}) vs {res['fail_b']:.0%} ({b}) over {res['n_images']} images; "
            f"broken by {a} only: {res['broke_only_a']}, by {b} only: {res['broke_only_b']}"
            + (f"; {res['n_neither']} broken by neither (no evidence)" if res.get("n_neither") else ""))


def distance_text(res: dict, delta: float = DELTA, a: str = "a") -> str:
    """The distance endpoint on the images both broke, from ``a``'s side."""
    if not res["n_both"]:
        return "no image broken by both, so no distance comparison"
    lo, hi = np.exp(res["iqr_low"]), np.exp(res["iqr_high"])
    return (f"on the {res['n_both']} images both broke, {a} is typically {relative(res['estimate'])} per image "
            f"(pseudo-median), {res['share_beyond']:.0%} of images beyond ±{np.expm1(delta):.0%}, "
            f"per-image ratios' IQR {lo:.2f}–{hi:.2f}")


def shown_text(res: dict, word: str, p_adjusted: float | None = None, delta: float = DELTA,
               margin: float = FAILURE_MARGIN, a: str = "a", b: str = "b") -> str:
    """One clause saying what the test showed (``word``: "different", "equivalent",
    "inconclusive"), with the evidence of both endpoints."""
    p = "" if p_adjusted is None or not np.isfinite(p_adjusted) else (
        f", adjusted p = {p_adjusted:.2g}" if p_adjusted >= 1e-4 else ", adjusted p < 1e-4")
    margins = f"±{margin * 100:.0f} points of failure rate and ±{np.expm1(delta):.0%} typical per-image distance"
    if word == "equivalent":
        head = f"equivalent within {margins}{p}"
    elif word == "different":
        which = "failure rate" if res["p_failure_different"] <= res["p_distance_different"] else "distance"
        head = f"different beyond its margin in {which}{p}" + (" (mixed: the endpoints disagree in direction)"
                                                               if res.get("mixed") else "")
    else:
        head = f"neither shown different nor equivalent within {margins}"
    return f"{head}: {failure_text(res, a, b)}; {distance_text(res, delta, a)}"
