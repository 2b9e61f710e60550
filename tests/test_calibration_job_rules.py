"""Calibration, reduced, second part: the job rules (last_not_best, silent_failure, budget_overrun,
nondeterminism, below_exact), shift_sensitivity and below_expected_strength at 16 images, and the
shift twin's defects at 64 and 256 (benchmarks/calibration.py; the checks and their tolerance are
tests/test_calibration.py's, whose docstring says how the cells are sized). A file of its own
because it is the longest part of the calibration: `make test` runs each file on one process
(``--dist loadfile``), and in one file with the rest the calibration kept one process busy while
the other had finished.
"""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from calibration import calibrate  # noqa: E402
from test_calibration import _check  # noqa: E402


JOB_RULES = {"last_not_best | fixed", "last_not_best | minimal", "last_not_best | last58",
             "last_not_best | minimal26", "silent_failure | weak", "silent_failure | feeble",
             "silent_failure | feeble random", "silent_failure | inert", "silent_failure | no gradient",
             "budget_overrun | within", "budget_overrun | over5", "nondeterminism | float",
             "nondeterminism | unseeded", "nondeterminism | rare5", "shift_sensitivity | aa",
             "shift_sensitivity | sign", "shift_sensitivity | seeds", "below_expected_strength | seeds",
             "below_expected_strength | weak", "below_expected_strength | starved",
             "below_expected_strength | family starved",
             "below_expected_strength | far3", "below_exact | float", "below_exact | under5"}


@pytest.mark.parametrize("models", [1, 3])
def test_job_rules_shift_and_strength_fpr_and_power(models):
    """last_not_best, silent_failure, budget_overrun, nondeterminism, shift_sensitivity's nulls and
    below_expected_strength at 16 images. The rare defects (5% of the cases) are floors near the
    measured power (0.40–0.56 at 16 × 1), as is the minimal attack's 26% (0.75)."""
    res = calibrate(20, [16], [models], only=JOB_RULES)
    assert set(res["rule"] + " | " + res["scenario"]) == JOB_RULES
    _check(res, {("last_not_best", "last58"): 0.8, ("last_not_best", "minimal26"): 0.4,
                 ("silent_failure", "inert"): 0.9, ("silent_failure", "no gradient"): 0.9,
                 ("budget_overrun", "over5"): 0.15, ("nondeterminism", "unseeded"): 0.9,
                 ("nondeterminism", "rare5"): 0.2, ("below_expected_strength", "starved"): 0.8,
                 ("below_expected_strength", "far3"): 0.8, ("below_exact", "under5"): 0.2})


def test_shift_sensitivity_finds_its_defects_at_64_images():
    """A deterministic attack 30% farther on 35% of the images of its shift twin, and a randomised
    one beside its seed twin, where the README table shows them found. The deterministic one is
    judged against the 26% null that sound one-step FGMs need at 512 images (fidelity/README.md,
    "Null rates that hold at every n"; 15% before): at 64 images it is found in about a third of
    the repetitions (0.94 before), at 256 in most; the real shift defects differ on 62–100%."""
    res = calibrate(20, [64], [1], only={"shift_sensitivity | shift35", "shift_sensitivity | rand40",
                                        "shift_sensitivity | sign", "shift_sensitivity | seeds"})
    _check(res, {("shift_sensitivity", "shift35"): 0.15, ("shift_sensitivity", "rand40"): 0.6})
    _check(calibrate(20, [256], [1], only={"shift_sensitivity | shift35"}), {("shift_sensitivity", "shift35"): 0.6})
