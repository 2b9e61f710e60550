"""foolbox adapter: every spec through the harness on the real digits CNN, steps scaled down.

Brendel-Bethge's numba optimiser compiles on its first step, once per norm and process: 30 s to
several minutes on a shared 2-core machine. By default BB runs with ``steps=0`` (its FMN start,
the batch split, the boundary search and the return path, but no numba); the real BB steps run
with the opt-in full-step checks (``ATTACKAUDIT_FULL_STEPS=1``).
"""
from __future__ import annotations

import os

import pytest
import torch

pytest.importorskip("foolbox")

from attackaudit.adapters import load_library  # noqa: E402
from attackaudit.data import load_subset, random_targets  # noqa: E402
from attackaudit.job import attack_with_tracker, output_problem, seed_everything  # noqa: E402
from attackaudit.tracker import QueryTracker  # noqa: E402

ENTRY = load_library("foolbox")
SPECS = {s.key: s for s in ENTRY.specs}
BUDGET = 2000
SCALE = 0.1
FULL = os.environ.get("ATTACKAUDIT_FULL_STEPS") == "1"

BB = {f"foolbox/{c}/{n}" for c, n in (("L0BrendelBethgeAttack", "l0"), ("L1BrendelBethgeAttack", "l1"),
                                      ("L2BrendelBethgeAttack", "l2"),
                                      ("LinfinityBrendelBethgeAttack", "linf"))}
FGM = {"foolbox/L1FastGradientAttack/l1", "foolbox/L2FastGradientAttack/l2",
       "foolbox/LinfFastGradientAttack/linf"}
DEEPFOOL = {"foolbox/L2DeepFoolAttack/l2", "foolbox/LinfDeepFoolAttack/linf"}
EXPECTED = {
    "foolbox/L0FMNAttack/l0", "foolbox/L1FMNAttack/l1", "foolbox/L2FMNAttack/l2",
    "foolbox/LInfFMNAttack/linf", "foolbox/DDNAttack/l2", "foolbox/L2CarliniWagnerAttack/l2",
    "foolbox/EADAttack/l1", *DEEPFOOL, *FGM, *BB,
    *(f"foolbox/{p}{a}/{n}" for p, n in (("L1", "l1"), ("L2", "l2"), ("Linf", "linf"))
      for a in ("ProjectedGradientDescentAttack", "BasicIterativeAttack")),
}


def _quick(key: str):
    """The spec as the default tests run it: steps scaled down; BB without its numba steps."""
    spec = SPECS[key]
    return spec.with_params(steps=0) if key in BB else spec.scaled(SCALE)


def _check(tracker, returned, error, x) -> None:
    assert error == ""
    assert output_problem(returned, x) == ""
    assert returned.shape == x.shape and returned.dtype == torch.float32
    assert not returned.requires_grad
    assert float(returned.min()) >= 0 and float(returned.max()) <= 1
    assert int(tracker.queries.max()) <= BUDGET
    assert int(tracker.refused.sum()) == 0


def test_catalogue():
    assert ENTRY.available, ENTRY.reason
    assert set(SPECS) == EXPECTED
    assert {s.family for s in SPECS.values()} == {"fmn", "ddn", "cw", "ead", "deepfool", "pgd", "bim",
                                                  "fgm", "bb"}
    untargeted = {k for k, s in SPECS.items() if not s.targeted_support}
    assert untargeted == FGM | DEEPFOOL
    assert all(SPECS[k].note for k in untargeted | BB)
    for key, spec in SPECS.items():
        if key not in FGM:
            assert spec.steps_param in spec.params, key
        # the norm is the spec's, never a hyperparameter that could collide with foolbox's
        assert "norm" not in spec.params


@pytest.mark.parametrize("key", sorted(EXPECTED))
def test_spec_runs_within_budget(key, model, data):
    x, y = data
    seed_everything(0)
    tracker, returned, error = attack_with_tracker(_quick(key), model, x, y, budget=BUDGET)
    _check(tracker, returned, error, x)


def test_pgd_linf_makes_most_samples_adversarial(model, data):
    x, y = data
    seed_everything(0)
    spec = SPECS["foolbox/LinfProjectedGradientDescentAttack/linf"].scaled(SCALE)
    tracker, returned, error = attack_with_tracker(spec, model, x, y, budget=BUDGET)
    assert error == ""
    assert torch.isfinite(tracker.best_distance).float().mean() >= 0.8
    with torch.no_grad():
        assert (model(returned).argmax(1) != y).float().mean() >= 0.8


@pytest.mark.parametrize("key", ["foolbox/L2FMNAttack/l2", "foolbox/LinfProjectedGradientDescentAttack/linf"])
def test_targeted_reaches_the_target(key, model, data):
    x, y = data
    targets = random_targets(y, 10, 0)
    seed_everything(0)
    _, returned, error = attack_with_tracker(SPECS[key].scaled(SCALE), model, x, y, budget=BUDGET,
                                             targets=targets)
    assert error == ""
    with torch.no_grad():
        hit = model(returned).argmax(1) == targets
    assert hit.float().mean() >= 0.8


def test_fast_gradient_refuses_targets(model, data):
    # pinned foolbox 3.3.4 behaviour behind targeted_support=False
    x, y = data
    tracker = QueryTracker(model, x, y, norm="linf", targeted=True, targets=(y + 1) % 10)
    with pytest.raises(ValueError, match="unsupported criterion"):
        SPECS["foolbox/LinfFastGradientAttack/linf"].run(tracker, x, y, eps=0.1, targeted=True,
                                                          targets=(y + 1) % 10)


def test_bb_asserts_an_adversarial_start(model, data):
    # pinned foolbox 3.3.4 behaviour behind the adapter's batch split
    import foolbox as fb

    x, y = data
    attack = fb.attacks.L2BrendelBethgeAttack(steps=0)
    with pytest.raises(AssertionError):
        attack(fb.PyTorchModel(model.eval(), bounds=(0, 1)), x, y, epsilons=None, starting_points=x)


def test_bb_runs_only_where_its_start_is_adversarial(model, data):
    # a 2-step FMN start breaks some digits but not all: BB must take those and leave the rest
    x, y = data
    tracker = QueryTracker(model, x, y, norm="l2")
    spec = SPECS["foolbox/L2BrendelBethgeAttack/l2"].with_params(steps=0, init_steps=2)
    adv = spec.run(tracker, x, y)
    assert adv.shape == x.shape and not adv.requires_grad
    with torch.no_grad():
        fooled = model(adv).argmax(1) != y
    assert fooled.any() and not fooled.all()


@pytest.mark.skipif(not FULL, reason="set ATTACKAUDIT_FULL_STEPS=1")
@pytest.mark.parametrize("key", sorted(EXPECTED))
def test_full_steps_fit_the_budget(key, model):
    sub = load_subset("digits", 2, 0)
    seed_everything(0)
    tracker, returned, error = attack_with_tracker(SPECS[key], model, sub.inputs, sub.labels, budget=BUDGET)
    _check(tracker, returned, error, sub.inputs)
