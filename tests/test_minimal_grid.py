"""The shared ε grid of the minimal-ε search (one ε per call, ``per_sample_eps=False``), against a
simple reference: each sample's own bisection in grid indices, one sample at a time.

A monotone oracle stands in for the attack (success iff ε ≥ the sample's own ε*), so what the
search does is known exactly: each sample's sequence of ε is the reference's, every call holds the
samples of one ε and a round makes one call per distinct ε (never more than the distinct brackets
its samples are in), each final bracket meets RELATIVE_PRECISION, and the row kept is the one
returned at the smallest successful ε.
"""
from __future__ import annotations

import math

import torch
from conftest import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from attackaudit.measure.minimal import (EPS_START, GRID_STEPS, RELATIVE_PRECISION, calls_floor, eps_ceiling,
                                         grid_eps, minimal_search)

DIM = 64  # L2 ceiling 8
NORM = "l2"


def reference(estar: float, start: float, max_rounds: int = 14) -> list[float]:
    """One sample's ε sequence: double on the grid until success, an octave down until failure,
    then the middle grid index of (lo, hi), rounded half to even, until they are neighbours."""
    lo, hi, k, tried = None, None, 0, []
    ceiling = eps_ceiling(NORM, DIM)
    for _ in range(max_rounds):
        eps = min(float(grid_eps(torch.tensor([k]), start)[0]), ceiling)
        tried.append(eps)
        if eps >= estar:
            hi = k
        else:
            lo = k
        if hi is None:
            if eps >= ceiling:
                break
            k += GRID_STEPS
        elif lo is None:
            k = hi - GRID_STEPS
        elif hi - lo <= 1:
            break
        else:
            k = min(max(round((lo + hi) / 2), lo + 1), hi - 1)
    return tried


class Oracle:
    """A fixed-ε attack that succeeds iff ε ≥ ε* of the row; its rows carry the ε they were made at."""

    def __init__(self, estar: torch.Tensor) -> None:
        self.estar, self.calls, self.last = estar, [], {}

    def __call__(self, idx: torch.Tensor, x: torch.Tensor, eps: float) -> torch.Tensor:
        assert isinstance(eps, float)  # one ε per call
        self.calls.append((eps, idx.tolist()))
        ok = torch.full((len(idx),), eps) >= self.estar[idx]
        adv = x.clone()
        adv[:, 0] = torch.where(ok, torch.full((len(idx),), eps * 0.999), torch.full((len(idx),), eps * 0.5))
        self.last = dict(zip(idx.tolist(), ok.tolist()))
        return adv

    def success(self, adv: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        return torch.tensor([self.last[i] for i in idx.tolist()], dtype=torch.bool)


@settings(max_examples=examples(40), deadline=None)
@given(st.lists(st.floats(min_value=0.02, max_value=7.0), min_size=1, max_size=40))
def test_each_sample_bisects_on_the_shared_grid_as_the_reference_does(estars):
    estar = torch.tensor(estars, dtype=torch.float32)
    n, start = len(estar), EPS_START[NORM]
    oracle = Oracle(estar)
    best = minimal_search(oracle, torch.zeros(n, DIM), NORM, oracle.success, lambda: torch.zeros(n), 10**9,
                          clean_adversarial=torch.zeros(n, dtype=torch.bool))
    per_sample = [[eps for eps, idx in oracle.calls if i in idx] for i in range(n)]
    for i in range(n):
        expected = reference(float(estar[i]), start)
        assert per_sample[i] == expected, (i, float(estar[i]))
        hi = min(e for e in expected if e >= float(estar[i]))
        lo = max((e for e in expected if e < float(estar[i])), default=0.0)
        assert (hi - lo) / hi < RELATIVE_PRECISION  # the precision rule, as before the grid
        assert math.isclose(float(best[i, 0]), hi * 0.999, rel_tol=1e-6)  # kept: the smallest successful ε
    # round r makes one call per distinct ε among the samples' r-th tries, never more
    rounds = max(len(seq) for seq in per_sample)
    distinct = [len({seq[r] for seq in per_sample if len(seq) > r}) for r in range(rounds)]
    assert len(oracle.calls) == sum(distinct)
    assert all(len(set(idx)) == len(idx) for _, idx in oracle.calls)


@settings(max_examples=examples(20), deadline=None)
@given(st.lists(st.floats(min_value=0.02, max_value=7.0), min_size=2, max_size=40))
def test_a_round_makes_no_more_calls_than_its_samples_have_distinct_brackets(estars):
    """Samples that share a bracket share the call; a bracket the grid made has its middle on the
    grid, so the calls of a round are at most the distinct (largest failure, smallest success)."""
    estar = torch.tensor(estars, dtype=torch.float32)
    n = len(estar)
    oracle = Oracle(estar)
    minimal_search(oracle, torch.zeros(n, DIM), NORM, oracle.success, lambda: torch.zeros(n), 10**9,
                   clean_adversarial=torch.zeros(n, dtype=torch.bool))
    history: dict[int, list[float]] = {i: [] for i in range(n)}
    seen = 0
    while seen < len(oracle.calls):
        members = set()
        first = seen
        # one round: calls until a sample comes back (each sample is called at most once a round)
        while seen < len(oracle.calls) and not members & set(oracle.calls[seen][1]):
            members |= set(oracle.calls[seen][1])
            seen += 1
        brackets = set()
        for i in members:
            fails = [e for e in history[i] if e < float(estar[i])]
            wins = [e for e in history[i] if e >= float(estar[i])]
            brackets.add((max(fails, default=0.0), min(wins, default=math.inf)))
        assert seen - first <= len(brackets)
        for eps, idx in oracle.calls[first:seen]:
            for i in idx:
                history[i].append(eps)


def test_the_grid_s_neighbours_meet_the_precision_and_the_next_coarser_grid_would_not():
    assert 1 - 2 ** (-1 / GRID_STEPS) < RELATIVE_PRECISION <= 1 - 2 ** (-1 / (GRID_STEPS - 1))
    k = torch.arange(-90, 91)
    values = grid_eps(k, 0.5)
    assert torch.equal(grid_eps(k, 0.5), values) and (values[1:] > values[:-1]).all()
    assert values[k == 0].item() == 0.5 and values[k == 45].item() == 1.0 and values[k == -45].item() == 0.25


def test_the_floor_counts_the_distinct_ends_of_the_samples_final_cells():
    start = EPS_START[NORM]
    at = grid_eps(torch.tensor([3, 4, 4, 10]), start)
    assert calls_floor(at[:1], start) == 2  # k 3: a success at 3, a failure at 2
    assert calls_floor(at[:3], start) == 3  # k 3 and 4 share the end 3: {2, 3, 4}
    assert calls_floor(at, start) == 5  # k 10 shares nothing: {2, 3, 4, 9, 10}
    off_grid = torch.tensor([float(at[0]) * 0.999, float("inf"), 0.0])  # rounds up to k 3; no success: left out
    assert calls_floor(off_grid, start) == 2


@settings(max_examples=examples(20), deadline=None)
@given(st.lists(st.floats(min_value=0.3, max_value=0.9), min_size=1, max_size=60))
def test_the_search_calls_every_end_the_floor_counts(estars):
    """The floor is a bound on any search on the grid: each sample's final cell's ends are called
    (one ε per call), so the calls made hold the floor's ε, and are never fewer. Crowded samples
    (under two octaves) share ends, so a floor of two per sample would exceed the calls."""
    estar = torch.tensor(estars, dtype=torch.float32)
    n, start = len(estar), EPS_START[NORM]
    oracle = Oracle(estar)
    minimal_search(oracle, torch.zeros(n, DIM), NORM, oracle.success, lambda: torch.zeros(n), 10**9,
                   clean_adversarial=torch.zeros(n, dtype=torch.bool))
    called = {eps for eps, _ in oracle.calls}
    found = torch.tensor([min(eps for eps, idx in oracle.calls if i in idx and eps >= float(estar[i]))
                          for i in range(n)])
    floor = calls_floor(found, start)
    assert floor <= len(called) <= len(oracle.calls)
    k = torch.ceil(torch.log2(found.double() / start) * GRID_STEPS - 1e-4).long()
    ends = grid_eps(torch.cat([k, k - 1]), start).tolist()
    assert set(ends) <= called and len(set(ends)) == floor
