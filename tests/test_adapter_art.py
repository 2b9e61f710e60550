"""ART-specific behaviour behind the adapter (the common checks: tests/test_adapter_conformance.py)."""
from __future__ import annotations

import pytest
import torch

from attackaudit.measure.distance import lp_norm
from attackaudit.run.job import attack_with_tracker, seed_everything
from attackaudit.measure.tracker import QueryTracker

from conftest import library_specs

SPECS = library_specs("art", "art")
BUDGET = 2000
SCALE = 0.1


def test_untargeted_only_spec_refuses_targets(model, data):
    x, y = data
    tracker = QueryTracker(model, x, y, norm="l2")
    with pytest.raises(ValueError, match="cannot run targeted"):
        SPECS["art/DeepFool/l2"].run(tracker, x, y, targeted=True, targets=(y + 1) % 10)


@pytest.mark.parametrize("key", sorted(k for k in SPECS if SPECS[k].per_sample_eps))
def test_per_sample_eps_is_respected(key, model, data):
    x, y = data
    spec = SPECS[key].scaled(SCALE)
    base = {"l1": 2.0, "l2": 0.5, "linf": 0.05}[spec.norm]
    eps = base * torch.tensor([0.5, 1.0, 2.0, 4.0, 0.25, 1.5])
    tracker = QueryTracker(model, x, y, norm=spec.norm)
    adv = spec.run(tracker, x, y, eps=eps)
    dist = lp_norm(adv - x, spec.norm)
    assert (dist <= eps * (1 + 1e-4) + 1e-6).all(), (dist / eps).tolist()
    if spec.norm == "linf":  # sign steps reach the boundary of each sample's own ball
        assert torch.allclose(dist, eps, rtol=1e-4)


def test_model_stays_usable(model, data):
    x, y = data
    with torch.no_grad():
        before = model(x).clone()
    seed_everything(0)
    attack_with_tracker(SPECS["art/AutoProjectedGradientDescent:ce/linf"].scaled(SCALE), model, x, y,
                        budget=BUDGET)
    assert not model.training  # ART calls eval() and leaves it; our models are eval anyway
    with torch.no_grad():
        assert torch.equal(model(x), before)

