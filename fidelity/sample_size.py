"""How many images would decide an inconclusive comparison, with a stated power.

``images_to_decide`` plans for a truth near the observed effect, leaning past it: a comparison is
sized only after a look left it inconclusive, and such looks are those whose estimate fell short of
the truth, so a conservative bound (the 80% bound nearer the margin, used until issue 48) asked 3–12×
the images that give 80% power and answered "more images would not decide it" on 17–50% of first
looks. The planned truth is the one-sided ``PLAN_CONFIDENCE`` (0.3) bound of each endpoint's effect,
i.e. 0.52 standard errors past the estimate, away from the margin:

- **leaning different** (an estimate beyond its margin): the size gives that endpoint's
  minimum-effect test ``POWER`` at its weighted Bonferroni share of α (``headline.WEIGHTS``); the
  smallest size of the endpoints leaning one way, the largest when they lean opposite ways (each
  must then be resolved: a direction, or a crossing).
- **leaning equivalent** (inside every margin): each endpoint's TOST at ``POWER`` (the endpoints of
  one comparison move together: two identical copies agree on all three), the largest size; with
  no discordant image, the size at which none shows equivalence (52 images at 5 points).

When the bound reaches the margin, no size has that power at the planned truth: ``inf`` ("more
images would not decide it"). The distance endpoint's standard error is the bootstrap standard
error of the Hodges–Lehmann estimate (heavy-tailed per-image noise is common: foolbox PGD's seed
noise has sd 0.09 with 56% of images beyond ±5%), scaled as 1/√n; the images both broke are the
observed share of all images. ``benchmarks/power.py --sizes`` checks the sizes against the size
that gives 80% power, by simulation on real seed noise.
"""
from __future__ import annotations

import numpy as np
from scipy import stats

from . import paired_binary
from .advice import Advice, advice_sentence
from .equivalence import DELTA, FAILURE_MARGIN, hodges_lehmann, observed
from .headline import SHARE_MARGIN, WEIGHTS

#: the power every planned size targets
POWER = 0.8
#: the confidence of the bound that stands in for the truth (one-sided). Below one half: a comparison
#: is sized only after a look left it inconclusive, which selects looks whose estimate fell short
#: of the truth, so the plan leans past the estimate by 0.52 standard errors. Measured on real seed
#: noise (benchmarks/power.py --sizes, first look at 32 images, fidelity/README.md "One headline"):
#: the median size asked is within 2x of the size that gives 80% power; at 0.8 it was 3-12x, and
#: "more images would not decide it" on 17-50% of the first looks
PLAN_CONFIDENCE = 0.3
#: bootstrap resamples for the standard error of θ̂ (fixed seed: the same table, the same size)
N_BOOT = 200
#: the standard error is never taken below this (log-ratio scale): identical results on a few
#: images do not prove zero spread
MIN_SE_PER_IMAGE = 0.01


def _hl_se(r: np.ndarray) -> float:
    """Bootstrap standard error of the Hodges–Lehmann estimate of (n,) values, times √n (per
    image), floored at ``MIN_SE_PER_IMAGE``."""
    rng = np.random.default_rng(0)
    sub = r if r.size <= 400 else rng.choice(r, 400, replace=False)
    boot = [hodges_lehmann(sub[rng.integers(0, sub.size, sub.size)]) for _ in range(N_BOOT)]
    return max(float(np.std(boot)) * np.sqrt(sub.size), MIN_SE_PER_IMAGE)


def distance_images(r: np.ndarray, share_both: float, alpha: float, delta: float = DELTA,
                    power: float = POWER) -> float:
    """Images (all, not only those both broke) for the distance endpoint to decide with
    ``power`` at the planned truth; ``inf`` when the bound reaches the margin or no image was
    broken by both."""
    if r.size == 0 or share_both <= 0:
        return float("inf")
    est, sd = hodges_lehmann(r), _hl_se(r)
    z_bound, z_power = stats.norm.ppf(PLAN_CONFIDENCE), stats.norm.ppf(power)
    se = sd / np.sqrt(r.size)
    if abs(est) > delta:
        plan, z_alpha = abs(est) - z_bound * se, stats.norm.isf(alpha / 2)
        gap = plan - delta
    else:
        plan, z_alpha = abs(est) + z_bound * se, stats.norm.isf(alpha)
        gap = delta - plan
    if gap <= 0:
        return float("inf")
    # the exact two-sided signed-rank test cannot reach the level on fewer than m images both
    # broke (2·2⁻ᵐ ≥ α): one image at a 25% ratio planned "24 images" that could never decide
    fewest = np.floor(np.log2(2 / alpha)) + 1
    normal = (z_alpha + z_power) ** 2 * sd ** 2 / gap ** 2
    return float(np.ceil(max(normal, fewest) / share_both))


def images_to_decide(values: np.ndarray, alpha: float, delta: float = DELTA, power: float = POWER,
                     margin: float = FAILURE_MARGIN) -> float:
    """Images a rerun needs for the headline of ``equivalence.pair_test`` of pair values to decide at
    level ``alpha`` with probability ``power`` at the planned truth (module docstring): at least
    one more than it has, ``inf`` when no size would. Leaning different, the smallest size of the
    endpoints beyond their margins (each at its weighted Bonferroni share of α,
    ``headline.WEIGHTS``); leaning equivalent, the
    largest of the share, failure and distance endpoints' TOST sizes (each at ``power``: the
    endpoints of one comparison move together, identical copies agree on all three)."""
    v = observed(values)
    fa, fb, r_all, wa, wb = v[:5]
    n = fa.size
    if n == 0:
        return float("inf")
    r = r_all[np.isfinite(r_all)]
    share = r.size / n
    inform = ~((fa == 1) & (fb == 1))
    n_inf = max(int(inform.sum()), 1)
    scale = n / n_inf                     # a share size counts informative images; a rerun draws all
    est = {"share": paired_binary.estimate(wa[inform], wb[inform]), "failure": paired_binary.estimate(fa, fb),
           "distance": hodges_lehmann(r) if r.size else 0.0}
    beyond = {k: abs(est[k]) > m for k, m in (("share", SHARE_MARGIN), ("failure", margin), ("distance", delta))}
    if any(beyond.values()):  # each endpoint at its weighted Bonferroni share of α (headline.WEIGHTS)
        sizes = {}
        if beyond["share"]:
            sizes["share"] = scale * paired_binary.images_needed(
                wa[inform], wb[inform], alpha * WEIGHTS["share"], power, SHARE_MARGIN, PLAN_CONFIDENCE)
        if beyond["failure"]:
            sizes["failure"] = paired_binary.images_needed(
                fa, fb, alpha * WEIGHTS["failure rate"], power, margin, PLAN_CONFIDENCE)
        if beyond["distance"]:
            sizes["distance"] = distance_images(r, share, alpha * WEIGHTS["distance"], delta, power)
        # endpoints leaning opposite ways must all be resolved (a direction, or a crossing): the
        # largest size; leaning one way, any one of them decides: the smallest
        agree = len({int(np.sign(est[e])) for e in sizes}) == 1
        need = min(sizes.values()) if agree else max(sizes.values())
    else:  # every endpoint must be shown
        need = max(scale * paired_binary.images_needed(wa[inform], wb[inform], alpha, power, SHARE_MARGIN,
                                                       PLAN_CONFIDENCE),
                   paired_binary.images_needed(fa, fb, alpha, power, margin, PLAN_CONFIDENCE),
                   distance_images(r, share, alpha, delta, power))
    return float(max(np.ceil(need), n + 1)) if np.isfinite(need) else float("inf")


def decision_text(need: float, have_images: int | None) -> str:
    """What to do about an inconclusive comparison: the advice to rerun with ``need`` images
    (``advice.Advised``: the command line's words, "--samples N", keeping the ``Advice`` value that
    each view words its own way, ``samples=N`` for ``attackaudit.compare``); "cannot be decided on
    this dataset" when the dataset has fewer than ``need`` images."""
    if not np.isfinite(need):
        return "more images would not decide it at the effect the data allow"
    if have_images is not None and need > have_images:
        return f"cannot be decided on this dataset (needs ≈{int(need)} images, it has {have_images})"
    return advice_sentence(Advice("samples", int(need), "planned for 80% power"))
