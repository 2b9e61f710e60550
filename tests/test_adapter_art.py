"""ART adapter: every spec through the harness on the real digits CNN, steps scaled down.

Full-step budget checks are opt-in (``ATTACKAUDIT_FULL_STEPS=1``): they take minutes on a CPU.
"""
from __future__ import annotations

import os

import pytest
import torch

pytest.importorskip("art")

from attackaudit.adapters import load_library  # noqa: E402
from attackaudit.data import load_subset, random_targets  # noqa: E402
from attackaudit.distance import lp_norm  # noqa: E402
from attackaudit.job import attack_with_tracker, output_problem, seed_everything  # noqa: E402
from attackaudit.tracker import QueryTracker  # noqa: E402

ENTRY = load_library("art")
SPECS = {s.key: s for s in ENTRY.specs}
BUDGET = 2000
SCALE = 0.1

EXPECTED = {
    *(f"art/AutoProjectedGradientDescent:{v}/{n}" for v in ("ce", "dlr") for n in ("l1", "l2", "linf")),
    *(f"art/ProjectedGradientDescent/{n}" for n in ("l1", "l2", "linf")),
    *(f"art/FastGradientMethod/{n}" for n in ("l1", "l2", "linf")),
    "art/BasicIterativeMethod/linf", "art/CarliniL2Method/l2", "art/CarliniLInfMethod/linf",
    "art/DeepFool/l2", "art/ElasticNet/l1", "art/SaliencyMapMethod/l0",
}


def test_catalogue():
    assert ENTRY.available, ENTRY.reason
    assert set(SPECS) == EXPECTED
    for spec in SPECS.values():
        assert spec.library == "art"
        if spec.name not in ("FastGradientMethod", "SaliencyMapMethod"):
            assert spec.steps_param in spec.params, spec.key
    assert not SPECS["art/DeepFool/l2"].targeted_support and SPECS["art/DeepFool/l2"].note
    assert SPECS["art/SaliencyMapMethod/l0"].note
    assert {k for k, s in SPECS.items() if s.per_sample_eps} == {
        *(f"art/ProjectedGradientDescent/{n}" for n in ("l1", "l2", "linf")),
        *(f"art/FastGradientMethod/{n}" for n in ("l1", "l2", "linf")), "art/BasicIterativeMethod/linf"}


@pytest.mark.parametrize("key", sorted(EXPECTED))
def test_spec_runs_within_budget(key, model, data):
    x, y = data
    seed_everything(0)
    tracker, returned, error = attack_with_tracker(SPECS[key].scaled(SCALE), model, x, y, budget=BUDGET)
    assert error == ""
    assert output_problem(returned, x) == ""
    assert returned.shape == x.shape and returned.dtype == torch.float32
    assert float(returned.min()) >= 0 and float(returned.max()) <= 1
    assert int(tracker.queries.max()) <= BUDGET
    assert int(tracker.refused.sum()) == 0


@pytest.mark.parametrize("key", ["art/ProjectedGradientDescent/linf", "art/BasicIterativeMethod/linf"])
def test_pgd_linf_makes_most_samples_adversarial(key, model, data):
    x, y = data
    seed_everything(0)
    _, returned, error = attack_with_tracker(SPECS[key].scaled(SCALE), model, x, y, budget=BUDGET)
    assert error == ""
    with torch.no_grad():
        fooled = model(returned).argmax(1) != y
    assert fooled.float().mean() >= 0.8


@pytest.mark.parametrize("key", ["art/ProjectedGradientDescent/linf", "art/ProjectedGradientDescent/l2"])
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


def test_untargeted_only_spec_refuses_targets(model, data):
    x, y = data
    tracker = QueryTracker(model, x, y, norm="l2")
    with pytest.raises(ValueError, match="cannot run targeted"):
        SPECS["art/DeepFool/l2"].run(tracker, x, y, targeted=True, targets=(y + 1) % 10)


@pytest.mark.parametrize("key", sorted(k for k in EXPECTED if SPECS[k].per_sample_eps))
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


@pytest.mark.skipif(os.environ.get("ATTACKAUDIT_FULL_STEPS") != "1", reason="set ATTACKAUDIT_FULL_STEPS=1")
@pytest.mark.parametrize("key", sorted(EXPECTED))
def test_full_steps_fit_the_budget(key, model):
    # twenty samples cover all ten classes: ART's class gradients cost one backward per
    # distinct label in the batch, charged to every row
    sub = load_subset("digits", 20, 0)
    seed_everything(0)
    tracker, _, error = attack_with_tracker(SPECS[key], model, sub.inputs, sub.labels, budget=BUDGET)
    assert error == ""
    assert int(tracker.queries.max()) <= BUDGET
    assert int(tracker.refused.sum()) == 0
