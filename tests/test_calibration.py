"""Calibration, reduced (benchmarks/calibration.py): each verdict's and each flag rule's
false-positive rate under realistic nulls is at most α plus a Monte-Carlo tolerance, and its power
on planted defects reaches a floor. Synthetic per-image tables (fidelity.synthetic); the full table
(100–200 repetitions per cell, 16–256 images) is in fidelity/README.md.

Sized for ``make test`` (about 80 s of CPU in all): 200 repetitions for the cheap trust verdicts,
20 per model count for the flag rules and the audit. With so few repetitions the tolerance is the
exact binomial one: a rule whose true false-positive rate is α exceeds it in at most 1% of
seeds, while a rule that fires on a third of sound attacks cannot pass. The power floors sit
below the measured power at 16 images (README table) by a few binomial standard errors of 20
repetitions; at 16 images the perm twin's power on its planted 40%/30% defect is 0.14–0.22 and a
randomised attack's batch dependence beside its seed twin is barely seen, so those two are
checked where they are measured to work (64 images) or with a low floor.
"""
import sys
from pathlib import Path

import pytest
from scipy import stats as sps

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from calibration import POWER, calibrate  # noqa: E402

ALPHA = 0.05
#: a null cell at exactly α exceeds its tolerance with at most this chance
TOLERANCE_LEVEL = 0.01


def tolerance(reps: int) -> float:
    """The largest false-positive rate over ``reps`` repetitions that a rule whose true rate is α
    reaches with chance above ``TOLERANCE_LEVEL`` (exact binomial quantile), minus α."""
    return sps.binom.ppf(1 - TOLERANCE_LEVEL, reps, ALPHA) / reps - ALPHA


def _check(res, floors: dict[tuple[str, str], float]):
    assert len(res), "no cell was run"
    for r in res.itertuples(index=False):
        if (r.rule, r.scenario) in POWER:
            assert r.rate >= floors[(r.rule, r.scenario)], r
        else:
            assert r.rate <= ALPHA + tolerance(r.reps), r


def test_tolerance_is_tight_enough_to_fail():
    """The check itself: a rule firing on 30% of nulls fails it at 20 repetitions."""
    assert ALPHA + tolerance(20) < 0.3 and ALPHA + tolerance(200) < 0.1


FAST = {"trust exclusion | aa", "trust exclusion | seeds", "trust exclusion | far20",
        "tied (equivalence) | seeds", "tied (equivalence) | far20"}


def test_trust_verdicts_fpr_and_power():
    res = calibrate(200, [16], [1, 3], only=FAST)
    _check(res, {("trust exclusion", "far20"): 0.8, ("tied (equivalence)", "seeds"): 0.8})


SLOW = {"optimality_gap | seeds", "optimality_gap | far20", "audit regressed/improved | seeds",
        "audit regressed | far20", "label_bug (perm twin) | aa", "label_bug (perm twin) | seeds",
        "label_bug (class) | weak", "label_bug (class) | class"}
DEFECT_RULES = {"out_of_ball | inside", "out_of_ball | out10", "eps_unused | weak", "eps_unused | unused",
                "batch_dependence | aa", "batch_dependence | seeds", "batch_dependence | ead",
                "label_bug (targets ignored) | weak", "label_bug (targets ignored) | ignore"}


@pytest.mark.parametrize("models", [1, 3])
def test_flag_rules_and_audit_fpr_and_power(models):
    res = calibrate(20, [16], [models], only=SLOW)
    _check(res, {("optimality_gap", "far20"): 0.8, ("audit regressed", "far20"): 0.8,
                 ("label_bug (class)", "class"): 0.2})


@pytest.mark.parametrize("models", [1, 3])
def test_defect_rules_fpr_and_power(models):
    res = calibrate(20, [16], [models], only=DEFECT_RULES)
    assert set(res["rule"] + " | " + res["scenario"]) == DEFECT_RULES
    _check(res, {("out_of_ball", "out10"): 0.8, ("eps_unused", "unused"): 0.8, ("batch_dependence", "ead"): 0.5,
                 ("label_bug (targets ignored)", "ignore"): 0.8})


def test_twin_rules_against_the_seed_twin_find_their_defects_at_64_images():
    """The perm twin's label bug and a randomised attack's batch dependence, both judged against
    a seed twin, where the README table shows them found (64 images, 3 models)."""
    res = calibrate(20, [64], [3], only={"label_bug (perm twin) | seeds", "label_bug (perm twin) | perm40",
                                        "batch_dependence | seeds", "batch_dependence | rand40"})
    _check(res, {("label_bug (perm twin)", "perm40"): 0.5, ("batch_dependence", "rand40"): 0.6})


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
    one beside its seed twin, where the README table shows them found."""
    res = calibrate(20, [64], [1], only={"shift_sensitivity | shift35", "shift_sensitivity | rand40",
                                        "shift_sensitivity | sign", "shift_sensitivity | seeds"})
    _check(res, {("shift_sensitivity", "shift35"): 0.6, ("shift_sensitivity", "rand40"): 0.6})
