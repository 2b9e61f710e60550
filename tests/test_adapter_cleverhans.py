"""cleverhans-specific behaviour behind the adapter (the common checks: tests/test_adapter_conformance.py)."""
from __future__ import annotations

import pytest

from attackaudit.measure.tracker import QueryTracker

from conftest import library_specs

SPECS = library_specs("cleverhans", "cleverhans")
SCALE = 0.1


@pytest.mark.parametrize("norm", ["l2", "linf"])
def test_outputs_are_detached_and_in_the_box(norm, model, data):
    # cleverhans returns tensors with grad_fn, and clips only when both bounds are given
    x, y = data
    tracker = QueryTracker(model, x, y, norm=norm)
    for key in (f"cleverhans/fast_gradient_method/{norm}", f"cleverhans/projected_gradient_descent/{norm}"):
        adv = SPECS[key].scaled(SCALE).run(tracker, x, y, eps=5.0 if norm == "l2" else 0.9)
        assert adv.grad_fn is None and not adv.requires_grad
        assert float(adv.min()) >= 0 and float(adv.max()) <= 1


@pytest.mark.parametrize("nb_iter", [1, 2, 50])
def test_pgd_step_never_exceeds_eps(nb_iter, model, data):
    # cleverhans asserts eps_iter <= eps; the step is tied to ε, so any step count passes
    x, y = data
    tracker = QueryTracker(model, x, y, norm="linf")
    adv = SPECS["cleverhans/projected_gradient_descent/linf"].with_params(nb_iter=nb_iter).run(
        tracker, x, y, eps=0.05)
    assert float((adv - x).abs().max()) <= 0.05 + 1e-6

