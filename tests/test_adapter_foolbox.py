"""foolbox-specific behaviour behind the adapter (the common checks: tests/test_adapter_conformance.py)."""
from __future__ import annotations

import pytest
import torch

from attackaudit.measure.tracker import QueryTracker

from conftest import library_specs

SPECS = library_specs("foolbox", "foolbox")
SCALE = 0.1


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

