"""cleverhans adapter: every spec through the harness on the real digits CNN, steps scaled down.

Full-step budget checks are opt-in (``ATTACKAUDIT_FULL_STEPS=1``).
"""
from __future__ import annotations

import os

import pytest
import torch

pytest.importorskip("cleverhans")

from attackaudit.adapters import load_library  # noqa: E402
from attackaudit.data import load_subset, random_targets  # noqa: E402
from attackaudit.job import attack_with_tracker, output_problem, seed_everything  # noqa: E402
from attackaudit.tracker import QueryTracker  # noqa: E402

ENTRY = load_library("cleverhans")
SPECS = {s.key: s for s in ENTRY.specs}
BUDGET = 2000
SCALE = 0.1
EXPECTED = {
    "cleverhans/fast_gradient_method/l2", "cleverhans/fast_gradient_method/linf",
    "cleverhans/projected_gradient_descent/l2", "cleverhans/projected_gradient_descent/linf",
    "cleverhans/carlini_wagner_l2/l2",
}


def test_catalogue():
    assert ENTRY.available, ENTRY.reason
    assert set(SPECS) == EXPECTED
    assert {s.family for s in SPECS.values()} == {"fgm", "pgd", "cw"}
    assert all(s.targeted_support for s in SPECS.values())
    for spec in SPECS.values():
        assert spec.per_sample_eps is False  # cleverhans takes one scalar ε per call
        if spec.name != "fast_gradient_method":
            assert spec.steps_param in spec.params, spec.key


@pytest.mark.parametrize("key", sorted(EXPECTED))
def test_spec_runs_within_budget(key, model, data):
    x, y = data
    seed_everything(0)
    tracker, returned, error = attack_with_tracker(SPECS[key].scaled(SCALE), model, x, y, budget=BUDGET)
    assert error == ""
    assert output_problem(returned, x) == ""
    assert returned.shape == x.shape and returned.dtype == torch.float32
    assert not returned.requires_grad
    assert float(returned.min()) >= 0 and float(returned.max()) <= 1
    assert int(tracker.queries.max()) <= BUDGET
    assert int(tracker.refused.sum()) == 0


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


def test_pgd_linf_makes_most_samples_adversarial(model, data):
    x, y = data
    seed_everything(0)
    spec = SPECS["cleverhans/projected_gradient_descent/linf"].scaled(SCALE)
    tracker, returned, error = attack_with_tracker(spec, model, x, y, budget=BUDGET)
    assert error == ""
    assert torch.isfinite(tracker.best_distance).float().mean() >= 0.8
    with torch.no_grad():
        assert (model(returned).argmax(1) != y).float().mean() >= 0.8


@pytest.mark.parametrize("key", ["cleverhans/projected_gradient_descent/linf", "cleverhans/carlini_wagner_l2/l2"])
def test_targeted_reaches_the_target(key, model, data):
    x, y = data
    targets = random_targets(y, 10, 0)
    seed_everything(0)
    scale = SCALE if "projected" in key else 0.5  # CW needs its iterations to reach a target
    _, returned, error = attack_with_tracker(SPECS[key].scaled(scale), model, x, y, budget=BUDGET,
                                             targets=targets)
    assert error == ""
    with torch.no_grad():
        hit = model(returned).argmax(1) == targets
    assert hit.float().mean() >= 0.8


@pytest.mark.skipif(os.environ.get("ATTACKAUDIT_FULL_STEPS") != "1", reason="set ATTACKAUDIT_FULL_STEPS=1")
@pytest.mark.parametrize("key", sorted(EXPECTED))
def test_full_steps_fit_the_budget(key, model):
    sub = load_subset("digits", 2, 0)
    seed_everything(0)
    tracker, returned, error = attack_with_tracker(SPECS[key], model, sub.inputs, sub.labels, budget=BUDGET)
    assert error == ""
    assert int(tracker.queries.max()) <= BUDGET
    assert int(tracker.refused.sum()) == 0
