"""Minimal-ε search on a fixed-ε attack whose minimal ε is known in closed form."""
from functools import partial

import torch
from torch import nn

from attackaudit.adapters import AttackSpec
from attackaudit.job import attack_with_tracker
from attackaudit.minimal import RELATIVE_PRECISION


class TwoClassLinear(nn.Module):
    """logits = [0, w·x + b]: the exact minimal L∞ distance is |w·x + b| / ||w||₁ (box not binding)."""

    def __init__(self, w: torch.Tensor, b: float):
        super().__init__()
        self.w, self.b = w, b

    def forward(self, x):
        z = x.flatten(1) @ self.w + self.b
        return torch.stack([torch.zeros_like(z), z], 1)


def fgsm(model, x, y, *, eps, targeted=False, targets=None, calls=None):
    # on a linear model FGSM at ε is the optimal L∞ attack, so it succeeds iff ε ≥ d*
    if calls is not None:  # the samples of each call, for a hand count of the ledger
        calls.append(model._hint.clone())
    x = x.clone().requires_grad_(True)
    loss = nn.functional.cross_entropy(model(x), y)
    (g,) = torch.autograd.grad(loss, x)
    return (x + eps * g.sign()).clamp(0, 1).detach()


def test_search_finds_known_minimal_eps():
    torch.manual_seed(0)
    w = torch.randn(16)
    x = 0.4 + 0.2 * torch.rand(12, 1, 4, 4)  # away from the box edges
    z = x.flatten(1) @ w
    b = -float(z.median())
    model = TwoClassLinear(w, b)
    with torch.no_grad():
        y = model(x).argmax(1)
    exact = (x.flatten(1) @ w + b).abs() / w.abs().sum()
    assert (exact < 0.2).all()  # the box does not bind
    calls = []
    spec = AttackSpec("test", "fgsm", "fgm", "linf", "fixed", {}, partial(fgsm, calls=calls))
    tracker, adv, err = attack_with_tracker(spec, model, x, y, budget=2000)
    assert err == ""
    found = (adv - x).flatten(1).abs().amax(1)
    with torch.no_grad():
        assert (model(adv).argmax(1) != y).all()
    assert (found >= exact - 1e-5).all()
    assert (found <= exact * (1 + 2 * RELATIVE_PRECISION) + 1e-4).all()
    assert torch.equal(tracker.queries, _hand_count(calls, len(x)))
    # FGSM never queries its output; offered to the tracker it becomes the best
    tracker.offer(adv)
    assert torch.allclose(tracker.best_distance, found, atol=1e-6)


def test_search_respects_budget():
    torch.manual_seed(1)
    w = torch.randn(16)
    x = torch.rand(6, 1, 4, 4)
    model = TwoClassLinear(w, -float((x.flatten(1) @ w).median()))
    with torch.no_grad():
        y = model(x).argmax(1)
    calls = []
    spec = AttackSpec("test", "fgsm", "fgm", "linf", "fixed", {}, partial(fgsm, calls=calls))
    tracker, adv, err = attack_with_tracker(spec, model, x, y, budget=7)
    assert err == ""
    # a call costs 3 (forward, backward, the search's counted success check): two calls fit in 7
    assert torch.equal(tracker.queries, _hand_count(calls, len(x)))
    assert int(tracker.queries.max()) == 6
    assert (tracker.refused == 0).all()  # the search stops before calls it cannot afford


def _hand_count(calls, n):
    """Queries per sample by hand: each FGSM call is one forward and one backward of its samples,
    and the search's success check one more forward."""
    count = torch.zeros(n, dtype=torch.long)
    for idx in calls:
        count[idx] += 3
    return count
