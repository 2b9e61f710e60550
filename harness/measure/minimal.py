"""Minimal-ε search: turns a fixed-budget attack (``AttackKind.FIXED``) into a minimal one.

Per sample: start at a norm-specific ε, double until the attack succeeds, then bisect between
the largest failing and the smallest successful ε, all inside the one query budget the
QueryTracker enforces. The adversarial found at the smallest successful ε is returned.

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

import torch
from torch import Tensor

from attackaudit.measure.distance import lp_norm

#: starting ε per norm, for inputs in [0, 1]
EPS_START = {"l0": 4.0, "l1": 2.0, "l2": 0.5, "linf": 0.03}
#: bisection stops when (hi - lo) / hi falls below this
RELATIVE_PRECISION = 1 / 64
#: a returned point may exceed ε by this much (relative) and still count as inside the ball
EPS_SLACK = 1e-3

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
    eps = torch.full((n,), float(eps_start or EPS_START[norm]))
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
        eps = torch.where(unbounded, eps * 2, (lo + hi) / 2)
        done = (~unbounded & ((hi - lo) / hi < RELATIVE_PRECISION)) | (unbounded & (lo >= ceiling))
        eps = eps.clamp(max=ceiling)
        active &= ~done
    return best
