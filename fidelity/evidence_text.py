"""The words for a comparison of two implementations: what was shown, on both endpoints.

One phrasing everywhere (trust sets, alignment, audits): the headline on the robustness curve and
the share of images each implementation is worse on, then failure rates side by side, then on the
images both broke the typical per-image difference (the pseudo-median, the estimand of the tests),
the share of images beyond ±δ and the interquartile range of the per-image ratios. "Within ±5%"
always qualifies the pseudo-median, never every image.
"""
from __future__ import annotations

import numpy as np

from .equivalence import DELTA
from .headline import SHARE_DELTA, SHARE_MARGIN
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


def share_text(res: dict, a: str = "a", b: str = "b") -> str:
    """The share endpoint: "a worse beyond ±25% on 20% of the 60 images either broke, better on 2%"."""
    if not res.get("n_informative"):
        return "no image broken by either, so no curve to compare"
    unit = "by a unit or more" if res.get("integer") else f"beyond ±{np.expm1(SHARE_DELTA):.0%}"
    return (f"{a} worse {unit} (or failing) on {res['worse_a']:.0%} of the {res['n_informative']} images either "
            f"broke, {b} on {res['worse_b']:.0%}")


def crossing_text(res: dict) -> str:
    """Where the robustness curves cross, when they do materially."""
    if not np.isfinite(res.get("crossing", np.nan)):
        return ""
    return (f"the robustness curves cross at distance {res['crossing']:.4g} (each leads by up to "
            f"{res['lead_a']:.0%} / {res['lead_b']:.0%} of the images on its side)")


def shown_text(res: dict, word: str, p_adjusted: float | None = None, delta: float = DELTA,
               margin: float = FAILURE_MARGIN, a: str = "a", b: str = "b") -> str:
    """One clause saying what the test showed (``word``: "different", "equivalent",
    "inconclusive"), the headline first (the robustness curve, through the share endpoint), then
    the evidence of both endpoints beneath it."""
    p = "" if p_adjusted is None or not np.isfinite(p_adjusted) else (
        f", adjusted p = {p_adjusted:.2g}" if p_adjusted >= 1e-4 else ", adjusted p < 1e-4")
    margins = (f"±{SHARE_MARGIN * 100:.0f} points of images worse, ±{margin * 100:.0f} points of failure rate "
               f"and ±{np.expm1(delta):.0%} typical per-image distance")
    if word == "equivalent":
        head = f"equivalent on the robustness curve within {margins}{p}"
    elif word == "different" and res.get("mixed"):
        head = f"mixed{p}: {crossing_text(res) or 'the endpoints disagree in direction'}"
    elif word == "different":
        head = f"{a} {'better' if res.get('direction', 0) < 0 else 'worse'} on the robustness curve{p}"
    else:
        lean = f"; the {res['lean']} leans the other way" if res.get("lean") else ""
        head = f"neither shown different nor equivalent within {margins}{lean}"
    return f"{head}: {share_text(res, a, b)}; {failure_text(res, a, b)}; {distance_text(res, delta, a)}"
