"""Minimal-ε search on a fixed-ε attack whose minimal ε is known in closed form."""
from functools import partial

import torch
from torch import nn

from attackaudit.adapters import AttackSpec
from attackaudit.run.job import attack_with_tracker
from attackaudit.measure.minimal import RELATIVE_PRECISION


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
    if calls is not None:  # the clean rows of each call, for a hand count of the ledger
        calls.append(x.detach().clone())
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
    assert torch.equal(tracker.queries, _hand_count(calls, x))
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
    assert torch.equal(tracker.queries, _hand_count(calls, x))
    assert int(tracker.queries.max()) == 6
    assert (tracker.refused == 0).all()  # the search stops before calls it cannot afford


def _hand_count(calls, inputs):
    """Queries per sample by hand: each FGSM call is one forward and one backward of its samples
    (found by their clean rows, which the search passes unchanged), and the search's success check
    one more forward."""
    count = torch.zeros(len(inputs), dtype=torch.long)
    flat = inputs.flatten(1)
    for rows in calls:
        idx = (rows.flatten(1)[:, None, :] == flat[None]).all(2).float().argmax(1)
        count[idx] += 3
    return count


def _capped_fgsm(model, x, y, *, eps, targeted=False, targets=None, scale=1.0, cap=None):
    """FGSM at ``scale``·ε, its step never above ``cap`` (an ε-ignoring step rule when set)."""
    x = x.clone().requires_grad_(True)
    (g,) = torch.autograd.grad(nn.functional.cross_entropy(model(x), y), x)
    step = scale * eps if cap is None else min(scale * eps, cap)
    return (x + step * g.sign()).clamp(0, 1).detach()


def test_ball_record_counts_rows_outside_the_ball_and_unused_eps():
    from attackaudit.measure.minimal import BallRecord

    torch.manual_seed(2)
    w = torch.randn(16)
    x = 0.4 + 0.2 * torch.rand(8, 1, 4, 4)
    model = TwoClassLinear(w, -float((x.flatten(1) @ w).median()))
    with torch.no_grad():
        y = model(x).argmax(1)
    runs = {}
    for name, kw in {"sound": {}, "outside": {"scale": 2.0}, "capped": {"cap": 0.004}}.items():
        spec = AttackSpec("test", "fgsm", "fgm", "linf", "fixed", kw, partial(_capped_fgsm, **kw))
        record = BallRecord.empty(x)
        tracker, adv, err = attack_with_tracker(spec, model, x, y, budget=2000, record=record)
        assert err == ""
        runs[name] = record
    sound, outside, capped = runs["sound"], runs["outside"], runs["capped"]
    live = sound.calls > 0
    # within the search's slack (0.1% + 1e-6, float32 rounding of x ± ε at small ε)
    assert live.any() and (sound.out == 0).all() and (sound.worst_ratio[live] <= 1.002).all()
    # inputs in [0.4, 0.6]: at the starting ε = 0.03 the box does not bind, so every row is at 2ε
    assert (outside.out[outside.calls > 0] >= 1).all()
    assert torch.allclose(outside.worst_ratio[outside.calls > 0], torch.tensor(2.0), rtol=1e-4)
    # the capped step: an image it cannot break within the cap is given ever larger ε up to the
    # ceiling (L∞: 1), where its row is at distance cap, 0.004 of ε; an image it breaks failed only
    # below the cap, where the row used the whole ball
    failed = torch.isfinite(capped.fail_eps)
    never = capped.fail_eps == 1.0
    assert never.any() and (never != failed).any()
    assert torch.allclose(capped.fail_ratio[never], torch.tensor(0.004), rtol=1e-3)
    assert torch.allclose(capped.fail_ratio[failed & ~never], torch.tensor(1.0), rtol=2e-3)
    assert (capped.widest_eps[failed] >= capped.fail_eps[failed]).all()
