"""Fidelity: pure functions over result tables (pandas / numpy): no torch, no I/O.

Input everywhere is the per-sample result table (harness/run/job.py ``ROW_COLUMNS``). Decisions
(status handling, twins, degenerate cases, flag thresholds, the diff verdict) are in
fidelity/README.md.
"""
from ._table import prepare, twins_of
from .alignment import POOLED, align
from .curves import attack_success_rate, curve_area, robust_accuracy, robustness_curve
from .diff import VERDICT_FLAGS, VERDICT_RULE, diff
from .flags import FLAG_COLUMNS, FLAGS, flagged, flags
from .leaderboard import leaderboard
from .recommend import recommend
from .optimality import (envelope, eps0_of, global_optimality, local_optimality, optimality,
                         optimality_attackbench)
from .stats import paired_comparison
from .summary import REF_EPS

__all__ = [
    "POOLED", "REF_EPS", "FLAGS", "FLAG_COLUMNS", "VERDICT_FLAGS", "VERDICT_RULE",
    "robustness_curve", "curve_area", "robust_accuracy", "attack_success_rate",
    "envelope", "optimality", "optimality_attackbench", "eps0_of", "local_optimality", "global_optimality",
    "align", "paired_comparison", "flags", "flagged", "diff", "leaderboard", "recommend",
    "prepare", "twins_of",
]
