"""Minimal-ε search: turns a fixed-budget attack (``AttackKind.FIXED``) into a minimal one.

Per sample: start at a norm-specific ε, double until the attack succeeds, then bisect between
the largest failing and the smallest successful ε, all inside the one query budget the
QueryTracker enforces. The adversarial found at the smallest successful ε is returned.

A spec that takes one ε per call (``per_sample_eps=False``) is called once per distinct ε of a
round, so its bisection runs on a shared grid: the ε ``start·2^(k/GRID_STEPS)`` (integer k), which
holds the doubling's ε too. Each sample's next ε is the grid point nearest the middle (in k) of
its bracket, strictly inside it, so samples whose brackets are alike share a call and the bracket
still shrinks every round. ``GRID_STEPS`` is the fewest grid points per octave whose neighbours
meet ``RELATIVE_PRECISION``: the search stops by the same rule, and a bracket of two neighbours
is the last one; the linear midpoints, which finish at widths of 1/128 to 1/64 after their own
paths, needed a distinct ε for nearly every image by then. A spec with one ε per sample gets
one call per round whatever the ε, and keeps the linear midpoints.

What one ε per call costs cannot fall below ``calls_floor``: a sample's final bracket is a failed
and a successful call at neighbouring grid points, and a call holds one ε, so the calls are at
least the distinct ends of the samples' final cells, a number that grows with the images until
their cells fill the ε range (benchmarks/batch_cost.py prints it per spec). Choosing fewer ε per
round (a few shared points per round, the others waiting) leaves those ends to call and only adds
rounds.

One budget for everyone: the search's own success check of each returned batch is a forward
through the QueryTracker, charged to its samples like any attack query (so a fixed-ε attack pays
for the steering a minimum-norm attack pays for too); the check of the clean inputs is the
tracker's clean logits, which no attack pays for.

The search also keeps, per sample, what the fixed-ε attack did with the ball it was given
(``BallRecord``: the defect rules ``out_of_ball`` and ``eps_unused`` of fidelity/defects.py read
it from the result rows), from the returned rows it sees anyway: no extra queries.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import math

import torch
from torch import Tensor

from attackaudit.measure.distance import lp_norm

#: starting ε per norm, for inputs in [0, 1]
EPS_START = {"l0": 4.0, "l1": 2.0, "l2": 0.5, "linf": 0.03}
#: bisection stops when (hi - lo) / hi falls below this
RELATIVE_PRECISION = 1 / 64
#: a returned point may exceed ε by this much (relative) and still count as inside the ball
EPS_SLACK = 1e-3
#: points per octave of the shared ε grid: the fewest whose neighbours lo < hi meet
#: (hi - lo) / hi < RELATIVE_PRECISION (45: 1 - 2^(-1/45) ≈ 0.0153 < 1/64)
GRID_STEPS = math.ceil(-1 / math.log2(1 - RELATIVE_PRECISION))

SuccessCheck = Callable[[Tensor, Tensor], Tensor]  # (adversarial rows, sample indices) -> bool mask
#: ``attack(sample indices (K), their inputs (K×…), ε: one float, or K floats on the CPU) -> K×…``;
#: the caller binds the rest of the call (the criterion's targets of those indices, the labels)
BallAttack = Callable[[Tensor, Tensor, "float | Tensor"], Tensor]


def inside_ball(dist: Tensor, eps: Tensor) -> Tensor:
    """Whether distances (N) lie within their ε (N), up to the search's slack (float tolerance)."""
    return dist <= eps * (1 + EPS_SLACK) + 1e-6


@dataclass
class BallRecord:
    """Per sample (N), what the fixed-ε attack returned for the balls the search gave it.

    ``calls``: calls that included the sample; ``out``: of those, calls whose returned row lay
    outside the ε-ball (``inside_ball``); ``worst_ratio``/``worst_eps``: the largest distance / ε
    over its calls and that call's ε (0 and NaN before any call). ``fail_eps``/``fail_ratio``: the
    largest ε at which the returned row was moved (distance > 0) but not adversarial, and its
    distance / ε there (NaN when none: a row returned unchanged says nothing about how far the
    attack went). ``widest``: the row returned at the largest ε tried (the input before any call),
    N×…, so the job can say which class the attack's output reached. ``success_eps``: the smallest
    ε whose returned row was adversarial inside the ball (inf: none); ``ratio_sum``: the sum of
    distance / ε over its calls (fidelity/eps_use.py reads the mean). ``fallback``: per sample, ""
    or the first default output the job put back to the input (harness/measure/fallback.py).
    """

    calls: Tensor
    out: Tensor
    worst_ratio: Tensor
    worst_eps: Tensor
    fail_eps: Tensor
    fail_ratio: Tensor
    widest: Tensor
    widest_eps: Tensor
    success_eps: Tensor
    ratio_sum: Tensor
    fallback: list[str]

    @classmethod
    def empty(cls, inputs: Tensor) -> "BallRecord":
        """A record of N = ``len(inputs)`` samples with no call yet."""
        n = len(inputs)
        nan = torch.full((n,), float("nan"))
        return cls(torch.zeros(n, dtype=torch.long), torch.zeros(n, dtype=torch.long), torch.zeros(n),
                   nan.clone(), nan.clone(), nan.clone(), inputs.detach().cpu().clone(), torch.zeros(n),
                   torch.full((n,), float("inf")), torch.zeros(n, dtype=torch.float64), [""] * n)

    def note_fallback(self, idx: Tensor, words: list[str]) -> None:
        """Samples ``idx`` (K) got the default outputs ``words`` (K, "" for none) in one call."""
        for i, w in zip(idx.tolist(), words):
            if w and not self.fallback[i]:
                self.fallback[i] = w

    def add(self, idx: Tensor, eps: Tensor, dist: Tensor, adversarial: Tensor, rows: Tensor) -> None:
        """One call on samples ``idx`` (K) at ``eps`` (K): returned ``rows`` (K×…) at ``dist`` (K),
        ``adversarial`` (K bools) by the search's success check."""
        ratio = dist / eps
        self.calls[idx] += 1
        inside = inside_ball(dist, eps)
        self.out[idx] += (~inside).long()
        self.ratio_sum[idx] += ratio.double()
        ok = adversarial & inside
        self.success_eps[idx[ok]] = torch.minimum(self.success_eps[idx[ok]], eps[ok].to(self.success_eps.dtype))
        worse = ratio > self.worst_ratio[idx]
        self.worst_ratio[idx[worse]], self.worst_eps[idx[worse]] = ratio[worse], eps[worse]
        failed = ~adversarial & (dist > 0) & ~(eps <= self.fail_eps[idx])  # NaN compares false: first one
        self.fail_eps[idx[failed]], self.fail_ratio[idx[failed]] = eps[failed], ratio[failed]
        wider = eps >= self.widest_eps[idx]
        self.widest[idx[wider]] = rows[wider].to(self.widest.dtype)
        self.widest_eps[idx[wider]] = eps[wider]


def eps_ceiling(norm: str, dim: int) -> float:
    """The largest ε worth trying: the diameter of the [0, 1] box under ``norm``."""
    return {"l0": float(dim), "l1": float(dim), "l2": float(dim) ** 0.5, "linf": 1.0}[norm]


def minimal_search(attack: BallAttack, inputs: Tensor, norm: str,
                   is_success: SuccessCheck, queries: Callable[[], Tensor], budget: int,
                   per_sample_eps: bool = False, max_rounds: int = 14,
                   eps_start: float | None = None, clean_adversarial: Tensor | None = None,
                   record: BallRecord | None = None) -> Tensor:
    """Smallest-ε adversarials found by ``attack(idx, x, eps)`` (``eps`` a float or an |idx| tensor).

    ``is_success`` should be a counted query (the harness checks through the tracker); what it
    costs is part of a call's cost. ``clean_adversarial`` (N bools): which clean inputs already are
    adversarial (the tracker's clean logits); None asks ``is_success``.
    ``queries()`` returns the per-sample queries spent so far (the tracker's counts); a sample is
    no longer attacked once its remaining budget is no more than the most one call has cost it (a
    call may cost more than any before it, so an exact fit is not risked). Returns the
    adversarial at the smallest successful ε per sample (the input itself where none succeeded).
    ``record`` (``BallRecord.empty(inputs)``), when given, is filled with every call's rows.
    Exceptions from ``attack`` propagate: the caller records them.
    """
    n, dim = len(inputs), inputs[0].numel()
    ceiling = eps_ceiling(norm, dim)
    start = float(eps_start or EPS_START[norm])
    eps = torch.full((n,), start)
    lo = torch.zeros(n)
    hi = torch.full((n,), float("inf"))
    best = inputs.clone()
    cost = torch.zeros(n)  # most queries one call has cost each sample
    if clean_adversarial is None:
        clean_adversarial = is_success(inputs, torch.arange(n))
    active = ~clean_adversarial.cpu()
    for _ in range(max_rounds):
        remaining = budget - queries().cpu().float()
        active &= remaining > cost
        if not active.any():
            break
        groups = [torch.nonzero(active).squeeze(1)] if per_sample_eps else [
            torch.nonzero(active & (eps == e)).squeeze(1) for e in torch.unique(eps[active])]
        for idx in groups:
            before = queries().cpu().clone()
            e = eps[idx] if per_sample_eps else float(eps[idx[0]])
            adv = attack(idx, inputs[idx], e).detach()
            succeeded = is_success(adv, idx).cpu()
            cost[idx] = torch.maximum(cost[idx], (queries().cpu() - before)[idx].float())
            dist = lp_norm((adv - inputs[idx]).float(), norm).cpu()
            ok = succeeded & inside_ball(dist, eps[idx])
            if record is not None:
                record.add(idx.cpu(), eps[idx], dist, succeeded, adv.cpu())
            hi[idx[ok]] = torch.minimum(hi[idx[ok]], eps[idx[ok]])
            lo[idx[~ok]] = torch.maximum(lo[idx[~ok]], eps[idx[~ok]])
            best[idx[ok]] = adv[ok].to(best.dtype)
        unbounded = torch.isinf(hi)
        eps = torch.where(unbounded, eps * 2, (lo + hi) / 2 if per_sample_eps else grid_midpoint(lo, hi, start))
        done = (~unbounded & ((hi - lo) / hi < RELATIVE_PRECISION)) | (unbounded & (lo >= ceiling))
        eps = eps.clamp(max=ceiling)
        active &= ~done
    return best


def grid_index(eps: Tensor, start: float) -> Tensor:
    """Where ``eps`` (N, > 0) lies on the shared grid ``start·2^(k/GRID_STEPS)``: k, fractional
    between grid points, float64; a grid point's own float32 value reads back as its integer k."""
    k = torch.log2(eps.double() / start) * GRID_STEPS
    return torch.where((k - k.round()).abs() < 1e-4, k.round(), k)


def grid_eps(k: Tensor, start: float) -> Tensor:
    """The grid's ε at integer indices ``k`` (N): one float32 value per k, the same in every call."""
    return (start * torch.pow(2.0, k.double() / GRID_STEPS)).float()


def calls_floor(success_eps: Tensor, start: float) -> int:
    """The fewest calls of one ε each that certify these samples' smallest successful ε (N; inf or 0
    where none: left out) at RELATIVE_PRECISION on the grid from ``start``, if each sample's success
    is monotone in ε: its ε rounded up to the grid point k must succeed and k - 1 fail, so every
    distinct k and k - 1 is a call of its own (the doubling and the bisection's other calls come on
    top)."""
    found = success_eps[torch.isfinite(success_eps) & (success_eps > 0)]
    k = torch.ceil(grid_index(found, start)).long()
    return len(set(k.tolist()) | set((k - 1).tolist()))


def grid_midpoint(lo: Tensor, hi: Tensor, start: float) -> Tensor:
    """Per sample (N), the next ε of a bracket (``lo`` failed, ``hi`` succeeded; ``lo`` 0 when
    nothing failed yet): the grid point nearest the bracket's middle in grid index, strictly
    inside it; one octave down the grid when ``lo`` is 0 (``hi / 2`` for a grid point, as the
    linear midpoint); the geometric middle when no grid point lies strictly inside (a bracket the
    grid did not make: the ceiling, a caller's ``eps_start``). Brackets that are not finite get
    ``hi`` back (the caller doubles those)."""
    finite = torch.isfinite(hi) & (hi > 0)
    safe_hi = torch.where(finite, hi, torch.ones_like(hi))
    b = grid_index(safe_hi, start)
    a = grid_index(torch.where(lo > 0, lo, safe_hi), start)
    first, last = torch.floor(a) + 1, torch.ceil(b) - 1  # the grid points strictly inside (a, b)
    k = torch.minimum(torch.maximum(torch.round((a + b) / 2), first), last)
    k = torch.where(lo > 0, k, torch.ceil(b) - GRID_STEPS)
    geometric = torch.sqrt(lo * safe_hi).float()
    middle = torch.where((lo > 0) & (first > last), geometric, grid_eps(k, start))
    return torch.where(finite, middle, hi)
