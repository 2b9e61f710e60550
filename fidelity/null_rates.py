"""Null shares that hold at every n (fidelity/README.md, "Null rates that hold at every n").

A rule whose statistic is a share of images (the twins' differing images of a deterministic
attack, ``last_not_best``'s returned-worse images, the targets a success test kept, a minimal
attack's failures, the split twin's lean) tests it against a fixed null share with an exact
binomial test. Its false-positive rate on a sound implementation whose true share is ``s`` tends
to 0 as the images grow when the null lies above ``s``, and to 1 when it lies below: a null set
just above what 16 or 64 images showed flags sound attacks once a run is large enough (the L∞ FGMs
of foolbox, ART, torchattacks and cleverhans differ on ``digits-cnn~shift`` on 99 of 500 images,
flagged at 512 against the old 15%, p 0.002).

So each such null is at least ``required_null(k, n)`` for every sound built-in job at the rule's
edge measured at 512 digits (``benchmarks/null_edge.py``, ``benchmarks/noise/null_edge.csv``; jobs
with at least 100 informative images): the one-sided ``UCB_LEVEL`` Clopper–Pearson upper bound of
its share, plus ``NULL_MARGIN``, which covers what the bound does not (other models, settings and
releases than the ones measured); and at least the share the same job showed at 256 digits (the
512's first images: the share must not move with n) plus the margin. ``tests/test_null_edge.py``
checks every null against the stored table and runs each rule on a sound implementation at its
measured 512-image share, at 512 images and at ten times as many.
"""
from __future__ import annotations

from scipy import stats as sps

#: one-sided level of the upper confidence bound of a measured sound share
UCB_LEVEL = 0.95
#: what a null share must keep above that bound, in share points
NULL_MARGIN = 0.02


def upper_bound(k: int, n: int, level: float = UCB_LEVEL) -> float:
    """One-sided Clopper–Pearson upper confidence bound of a share seen ``k`` times in ``n``."""
    if n <= 0:
        return 1.0
    return 1.0 if k >= n else float(sps.beta.ppf(level, k + 1, n - k))


def required_null(k: int, n: int, margin: float = NULL_MARGIN) -> float:
    """The smallest null share a rule may test against after a sound implementation showed ``k``
    of ``n``: its upper bound plus the margin (at most 1)."""
    return min(1.0, upper_bound(k, n) + margin)
