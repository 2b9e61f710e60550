"""What mutation testing found untested in harness/measure/minimal.py (docs/testing.md): the ceiling
and slack of the minimal-ε search, its ball record, its doubling, bisection and stopping rule, the
budget it leaves, per-sample ε. Each test checks what a fixed-ε attack's rows say (``out_of_ball``,
``eps_unused`` evidence, the smallest successful ε) or what it costs."""
from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from attackaudit.measure.minimal import (EPS_SLACK, GRID_STEPS, RELATIVE_PRECISION, BallRecord, eps_ceiling, inside_ball,
                                         minimal_search)
from attackaudit.measure.tracker import QueryTracker
from test_mutants_measure import MeanModel, images

def test_the_ceiling_is_the_diameter_of_the_box():
    assert eps_ceiling("l0", 64) == 64.0 and eps_ceiling("l1", 64) == 64.0
    assert eps_ceiling("l2", 64) == 8.0 and eps_ceiling("linf", 64) == 1.0


def test_a_distance_on_the_ball_s_edge_is_inside_and_one_beyond_the_slack_is_not():
    eps = torch.tensor([1.0, 1.0, 1.0])
    assert inside_ball(torch.tensor([1.0, 1.0005, 1.01]), eps).tolist() == [True, True, False]


def test_an_empty_record_has_no_call_no_success_and_the_input_as_its_widest_row():
    x = torch.rand(3, 1, 2, 2)
    r = BallRecord.empty(x)
    assert r.calls.dtype == r.out.dtype == torch.long and r.calls.tolist() == r.out.tolist() == [0, 0, 0]
    assert r.worst_ratio.tolist() == [0, 0, 0] and r.widest_eps.tolist() == [0, 0, 0]
    assert all(math.isnan(v) for t in (r.worst_eps, r.fail_eps, r.fail_ratio) for v in t.tolist())
    assert r.success_eps.tolist() == [math.inf] * 3 and r.ratio_sum.dtype == torch.float64
    assert torch.equal(r.widest, x) and r.widest is not x and r.fallback == ["", "", ""]


def test_a_record_keeps_each_sample_s_calls_balls_failures_and_first_fallback():
    x = torch.zeros(3, 4)
    r = BallRecord.empty(x)
    idx = torch.tensor([0, 2])
    rows = torch.ones(2, 4)
    # call 1 at ε 0.5: sample 0 failed after moving 0.25 (ratio 0.5), sample 2 succeeded outside (0.6)
    r.add(idx, torch.tensor([0.5, 0.5]), torch.tensor([0.25, 0.6]), torch.tensor([False, True]), rows)
    # call 2 at ε 1: sample 0 succeeded inside (0.9), sample 2 succeeded inside (0.8)
    r.add(idx, torch.tensor([1.0, 1.0]), torch.tensor([0.9, 0.8]), torch.tensor([True, True]), 2 * rows)
    # call 3 at ε 0.25: sample 0 failed without moving
    r.add(torch.tensor([0]), torch.tensor([0.25]), torch.tensor([0.0]), torch.tensor([False]), rows[:1])
    assert r.calls.tolist() == [3, 0, 2] and r.out.tolist() == [0, 0, 1]
    assert r.success_eps.tolist() == [1.0, math.inf, 1.0]
    assert r.worst_ratio.tolist() == pytest.approx([0.9, 0.0, 1.2]) and r.worst_eps[[0, 2]].tolist() == [1.0, 0.5]
    assert r.fail_eps[0].item() == 0.5 and r.fail_ratio[0].item() == 0.5  # the unmoved call says nothing
    assert math.isnan(r.fail_eps[2].item())
    assert r.ratio_sum.tolist() == pytest.approx([0.5 + 0.9 + 0.0, 0.0, 1.2 + 0.8])
    assert r.widest_eps.tolist() == [1.0, 0.0, 1.0] and r.widest[0].tolist() == [2.0] * 4
    assert r.widest[1].tolist() == [0.0] * 4
    r.note_fallback(torch.tensor([1, 2]), ["", "all-zero image"])
    r.note_fallback(torch.tensor([2]), ["one output shared by 2 images"])  # the first one stays
    assert r.fallback == ["", "", "all-zero image"]


class LinfStep:
    """A fixed-ε attack on MeanModel: every pixel up by ε (clamped): succeeds iff m + ε > 0.5."""

    def __init__(self, tracker):
        self.tracker, self.eps = tracker, []

    def __call__(self, idx, x, eps):
        self.eps.append(eps)
        adv = (x + (eps if isinstance(eps, float) else eps.view(-1, 1, 1, 1))).clamp(0, 1)
        with torch.no_grad():
            self.tracker.expect(idx)
            self.tracker(adv)
        return adv


@pytest.mark.parametrize("per_sample_eps", [False, True])
def test_the_search_doubles_then_bisects_to_the_minimal_eps(per_sample_eps):
    x = images([0.2] * 4, [0.35] * 4)  # minimal L∞ ε: 0.3 and 0.15
    y = torch.zeros(2, dtype=torch.long)
    t = QueryTracker(MeanModel(), x, y, norm="linf", budget=200)
    attack = LinfStep(t)
    record = BallRecord.empty(x)

    def success(adv, idx):
        with torch.no_grad():
            t.expect(idx)
            return t.judge(t(adv), idx)

    best = minimal_search(attack, x, "linf", success, lambda: t.queries, 200, per_sample_eps=per_sample_eps,
                          clean_adversarial=torch.tensor([False, False]), record=record)
    found = (best - x).flatten(1).amax(1)
    assert found.tolist() == pytest.approx([0.3, 0.15], rel=1 / 64 + 1e-3)
    assert (found >= torch.tensor([0.3, 0.15]) - 1e-6).all()
    first = attack.eps[0] if not per_sample_eps else attack.eps[0].tolist()
    assert first == (pytest.approx(0.03) if not per_sample_eps else pytest.approx([0.03, 0.03]))
    assert record.success_eps.tolist() == pytest.approx(found.tolist()) and (record.calls > 4).all()


def _budgeted_search(budget: int):
    """The L∞ search of image 0 (class 0, ε up to 0.12 fails) beside image 1 (already class 1)
    through a tracker with ``budget``: (returned bests, the attack, the tracker, the images)."""
    x = images([0.2] * 4, [0.7] * 4)
    y = torch.zeros(2, dtype=torch.long)
    t = QueryTracker(MeanModel(), x, y, norm="linf", budget=budget)
    attack = LinfStep(t)

    def success(adv, idx):
        with torch.no_grad():
            t.expect(idx)
            return t.judge(t(adv), idx)

    return minimal_search(attack, x, "linf", success, lambda: t.queries, budget), attack, t, x


def test_the_search_leaves_clean_adversarial_samples_and_stops_at_the_budget():
    best, attack, t, x = _budgeted_search(8)
    assert torch.equal(best[1], x[1])  # never attacked: its clean input is adversarial
    # the clean check costs each sample 1 query (no clean_adversarial given), a call 2 (the
    # attack's, the search's check): 3 calls, then 1 query is left, less than a call costs
    assert len(attack.eps) == 3 and t.queries.tolist() == [7, 1]
    assert torch.equal(best[0], x[0])  # ε 0.03, 0.06, 0.12 all fail: the input stands


def test_a_sample_whose_remaining_budget_equals_one_call_s_cost_is_not_attacked_again():
    """A call may cost more than the most one has cost so far: the search stops a sample once its
    remaining budget is no more than that (the docstring's rule), so the budget is never the
    last call's to overrun."""
    _, attack, t, _ = _budgeted_search(9)
    # 1 (clean check) + 3 calls of 2 = 7: 2 left, exactly one call's cost: no fourth call
    assert len(attack.eps) == 3 and t.queries.tolist() == [7, 1]


def test_the_search_stops_doubling_at_the_ceiling():
    x = images([0.0, 0.0, 0.0, 0.0])
    t = QueryTracker(nn.Sequential(nn.Flatten(), nn.Linear(4, 2)), x, torch.zeros(1, dtype=torch.long), norm="linf")
    seen = []

    def never(idx, xs, eps):
        seen.append(eps)
        return xs

    minimal_search(never, x, "linf", lambda adv, idx: torch.zeros(len(idx), dtype=torch.bool),
                   lambda: torch.zeros(1), 10**6, clean_adversarial=torch.tensor([False]))
    assert seen == pytest.approx([0.03, 0.06, 0.12, 0.24, 0.48, 0.96, 1.0])  # the L∞ diameter is 1


def test_the_slack_edge_of_the_ball_is_inside():
    eps = torch.tensor([0.5, 2.0])
    edge = eps * (1 + EPS_SLACK) + 1e-6
    assert inside_ball(edge, eps).tolist() == [True, True]


def test_a_record_keeps_the_first_of_equal_ratios_and_failures_and_the_last_row_at_the_widest_eps():
    r = BallRecord.empty(torch.zeros(1, 4))
    one = torch.tensor([0])
    r.add(one, torch.tensor([0.5]), torch.tensor([0.25]), torch.tensor([False]), torch.full((1, 4), 0.1))
    r.add(one, torch.tensor([1.0]), torch.tensor([0.5]), torch.tensor([False]), torch.full((1, 4), 0.2))
    r.add(one, torch.tensor([1.0]), torch.tensor([0.75]), torch.tensor([False]), torch.full((1, 4), 0.3))
    r.add(one, torch.tensor([2.0]), torch.tensor([0.0]), torch.tensor([False]), torch.full((1, 4), 0.4))
    assert r.worst_ratio.tolist() == [0.75] and r.worst_eps.tolist() == [1.0]
    # the first failure at ε 1 stands (ratio 0.5, not 0.75); the unmoved row at ε 2 says nothing
    assert r.fail_eps.tolist() == [1.0] and r.fail_ratio.tolist() == [0.5]
    r.add(one, torch.tensor([2.0]), torch.tensor([0.5]), torch.tensor([True]), torch.full((1, 4), 0.5))
    assert r.worst_ratio.tolist() == [0.75] and r.worst_eps.tolist() == [1.0]  # 0.25 at ε 2 is no worse
    r.add(one, torch.tensor([0.5]), torch.tensor([0.375]), torch.tensor([True]), torch.full((1, 4), 0.6))
    assert r.worst_ratio.tolist() == [0.75] and r.worst_eps.tolist() == [1.0]  # an equal ratio keeps the first
    assert r.widest_eps.tolist() == [2.0] and r.widest.tolist() == [[0.5] * 4]  # the last row at ε 2


@pytest.mark.parametrize("per_sample_eps", [True, False])
def test_the_search_stops_when_the_bracket_is_within_its_precision(per_sample_eps):
    """Minimal ε 2 exactly, from ε 1: the bracket [1, 2] shrinks until (hi − lo) / hi < 1/64.
    Per-sample ε halves it linearly, which first holds at width 1/64 (not at 1/32, where the ratio
    is exactly 1/64). One ε per call bisects on the shared grid 2^(k/45) (the k of [0, 45] halved,
    rounded to even), which first holds at the neighbours 2^(44/45) and 2: one call fewer."""
    tried = []

    def attack(idx, x, eps):
        tried.append(float(eps[0]) if isinstance(eps, torch.Tensor) else eps)
        return x

    def success(adv, idx):
        return torch.tensor([bool(tried) and tried[-1] >= 2.0])

    best = minimal_search(attack, torch.zeros(1, 4), "l1", success, lambda: torch.zeros(1), 10**6,
                          per_sample_eps=per_sample_eps, eps_start=1.0, clean_adversarial=torch.tensor([False]))
    if per_sample_eps:
        assert tried == [1.0, 2.0, 1.5, 1.75, 1.875, 1.9375, 1.96875, 1.984375]
    else:
        assert GRID_STEPS == 45
        assert tried == pytest.approx([1.0, 2.0] + [2 ** (k / 45) for k in (22, 34, 40, 42, 44)], rel=1e-6)
        assert (2 - tried[-1]) / 2 < RELATIVE_PRECISION <= (2 - tried[-2]) / 2
    assert best.tolist() == [[0.0] * 4]


def test_per_sample_eps_gives_each_sample_its_own_eps_in_one_call():
    x = images([0.2] * 4, [0.35] * 4)
    t = QueryTracker(MeanModel(), x, torch.zeros(2, dtype=torch.long), norm="linf", budget=200)
    attack = LinfStep(t)

    def success(adv, idx):
        with torch.no_grad():
            t.expect(idx)
            return t.judge(t(adv), idx)

    minimal_search(attack, x, "linf", success, lambda: t.queries, 200, per_sample_eps=True,
                   clean_adversarial=torch.tensor([False, False]))
    assert any(len(set(e.tolist())) == 2 for e in attack.eps)  # two samples, two ε, one call
    attack.eps.clear()
    minimal_search(attack, x, "linf", success, lambda: t.queries, 200, clean_adversarial=torch.tensor([False, False]))
    assert all(isinstance(e, float) for e in attack.eps)  # the default: one ε per call
