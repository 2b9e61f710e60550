"""Calibration, reduced (benchmarks/calibration.py): each verdict's false-positive rate under
realistic nulls is at most α plus a Monte-Carlo tolerance, and its power on planted defects
reaches a floor (at 16 images the perm twin's power on the planted 40%/30% defect is measured at
0.14–0.22, so its floor here is low; it is 0.65–1.00 at 64–256 images). Synthetic per-image tables (fidelity.synthetic); the full table is in
fidelity/README.md."""
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from calibration import POWER, calibrate  # noqa: E402

ALPHA = 0.05


def tolerance(reps: int) -> float:
    """Three Monte-Carlo standard errors of a rate α over ``reps`` repetitions."""
    return 3 * np.sqrt(ALPHA * (1 - ALPHA) / reps)


def _check(res, floors: dict[tuple[str, str], float]):
    for r in res.itertuples(index=False):
        if (r.rule, r.scenario) in POWER:
            assert r.rate >= floors[(r.rule, r.scenario)], r
        else:
            assert r.rate <= ALPHA + tolerance(r.reps), r


FAST = {"trust exclusion | aa", "trust exclusion | seeds", "trust exclusion | far20",
        "tied (equivalence) | seeds", "tied (equivalence) | far20"}


def test_trust_verdicts_fpr_and_power():
    res = calibrate(300, [16], [1, 3], only=FAST)
    _check(res, {("trust exclusion", "far20"): 0.8, ("tied (equivalence)", "seeds"): 0.8})


SLOW = {"optimality_gap | seeds", "optimality_gap | far20", "audit regressed/improved | seeds",
        "audit regressed | far20", "label_bug (perm twin) | aa", "label_bug (perm twin) | seeds",
        "label_bug (perm twin) | perm40", "label_bug (class) | weak", "label_bug (class) | class"}


@pytest.mark.parametrize("models", [1, 3])
def test_flag_rules_and_audit_fpr_and_power(models):
    res = calibrate(40, [16], [models], only=SLOW)
    _check(res, {("optimality_gap", "far20"): 0.8, ("audit regressed", "far20"): 0.8,
                 ("label_bug (perm twin)", "perm40"): 0.05, ("label_bug (class)", "class"): 0.2})
