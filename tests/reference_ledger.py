"""A deliberately simple ledger that follows the QueryTracker's attribution rule one row at a time.

The rule is written once, in the module docstring of ``attackaudit.measure.tracker`` (steps 1–7 below
refer to it). This class has no fast path, no deferred buffer, no pending counters and no hint
cache: every query is attributed, charged and offered as best candidate row by row, in order,
with plain Python loops. Its distances are its own plain code, not ``attackaudit.measure.distance``, so
that a bug there cannot pass unseen:

* attribution (steps 3–5): ``plain_distance``, exact sums of the coordinates (Python floats,
  ``math.fsum``). The tracker's float32 distances round; its decisions compare distances to
  different points, which real attacks and the property streams never bring within a rounding
  error of each other, so every owner agrees exactly.
* best candidates (step 7): ``size_in_dtype``, the norm's formula in the inputs' dtype, because
  there the rounding decides: a fixed-ε attack projects many candidates onto its ε-sphere, whose
  float32 sizes tie or differ in the last bit, and the rule keeps the earliest of equal ones.
  The formulas use the reductions whose float32 result does not depend on the batch
  (``sum`` over a row, ``linalg.vector_norm``), so kept points and distances agree exactly.

It shares with the tracker only the tracker's documented constants and the one definition of
success (``attackaudit.measure.success``: a strict logit inequality, ties never succeed).
"""
from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor, nn

from attackaudit.measure.success import is_success
from attackaudit.measure.tracker import BOX_MARGIN, BOX_TOLERANCE, KEEP_BESTS, REFUSAL_SCALE

#: a coordinate changed by less than this does not count towards L0 (float round-trips through
#: numpy/float32 leave ~1e-8 noise; the smallest real change on 8-bit data is 1/255)
L0_TOLERANCE = 1e-6


def plain_distance(delta: list[float], norm: str) -> float:
    """Size of one flattened difference (Python floats) under ``norm``: L0 the coordinates that
    changed by more than ``L0_TOLERANCE``, L1/L2 exact sums (``math.fsum``), L∞ the largest.
    NaN when a coordinate is NaN; the caller decides what that means."""
    if any(math.isnan(d) for d in delta):
        return math.nan
    size = [abs(d) for d in delta]
    if norm == "l0":
        return float(sum(1 for d in size if d > L0_TOLERANCE))
    if norm == "l1":
        return math.fsum(size)
    if norm == "l2":
        return math.sqrt(math.fsum(d * d for d in size)) if all(math.isfinite(d) for d in size) else math.inf
    if norm == "linf":
        return max(size, default=0.0)
    raise ValueError(norm)


def size_in_dtype(delta: Tensor, norm: str) -> Tensor:
    """Size of one flattened difference (D) under ``norm``, computed in its own dtype (a 0-d tensor)."""
    size = delta.abs()
    if norm == "l0":
        return (size > L0_TOLERANCE).sum().to(delta.dtype)
    if norm == "l1":
        return size.sum()
    if norm == "l2":
        return torch.linalg.vector_norm(delta, 2)
    if norm == "linf":
        return size.max() if len(size) else delta.new_zeros(())
    raise ValueError(norm)


def difference(row: list[float], point: list[float], *, finite_only: bool = False,
               single: bool = False) -> list[float]:
    """``row − point`` coordinate by coordinate, in Python floats; inf − inf is NaN, as in torch.
    ``single``: each difference rounded to float32, as the rule's float32 distances have it (a row
    far outside the box, e.g. at 1e4, is as far from every original in float32: a tie the rule
    resolves, which exact differences would break). ``finite_only``: the row's NaN and ±inf
    coordinates are left out (the rule's attribution distance; a point's are not)."""
    pairs = [(a, b) for a, b in zip(row, point) if math.isfinite(a) or not finite_only]
    if single:
        with np.errstate(invalid="ignore", over="ignore"):
            return (np.asarray([a for a, _ in pairs], np.float32)
                    - np.asarray([b for _, b in pairs], np.float32)).astype(float).tolist()
    return [a - b for a, b in pairs]


class ReferenceLedger(nn.Module):
    """The rule, one row at a time, for ``inputs`` (N×C×H×W) and ``labels`` (N)."""

    def __init__(self, model: nn.Module, inputs: Tensor, labels: Tensor, *, norm: str, budget: int = 2000,
                 targeted: bool = False, targets: Tensor | None = None) -> None:
        super().__init__()
        self.model, self.norm, self.budget = model.eval(), norm, budget
        self.targeted, self.targets = targeted, targets
        self.inputs, self.labels = inputs.detach(), labels.detach()
        self.flat = self.inputs.reshape(len(inputs), -1)
        self.originals = [row.tolist() for row in self.flat]
        self.n = len(inputs)
        self.attribution_norm = "l1" if norm == "l0" else norm  # a count of changed pixels ties too easily
        self.forwards = [0] * self.n
        self.backwards = [0] * self.n
        self.refused = [0] * self.n
        self.anchor = [self.flat[i].clone() for i in range(self.n)]
        self.reach = self._reach()
        self.origin_reach = list(self.reach)  # the originals' own reaches (step 4)
        self.previous: tuple[list[list[float]], list[int]] | None = None
        self.hint: list[int] | None = None
        self.kept: list[list[tuple[Tensor, Tensor]]] = [[] for _ in range(self.n)]  # sorted, earliest first
        with torch.no_grad():
            clean = self.model(self.inputs)
        self.num_classes = int(clean.shape[1])  # as the tracker: adapters read it instead of querying
        for i in range(self.n):
            if self._adversarial(clean[i], i):
                self._offer(self.flat[i], i)
        self.eval()  # a fresh Module is in training mode; foolbox warns about that

    # -- the rule's state ----------------------------------------------------------------------
    def _attribution_distance(self, row: list[float], point: list[float], *, finite_only: bool) -> float:
        return plain_distance(difference(row, point, finite_only=finite_only, single=self.flat.dtype == torch.float32),
                              self.attribution_norm)

    def _reach(self) -> list[float]:
        """Half of each anchor row's distance to the nearest original or anchor row of another sample."""
        anchor = [a.tolist() for a in self.anchor]
        reach = []
        for i in range(self.n):
            others = [min(self._attribution_distance(anchor[i], self.originals[j], finite_only=False),
                          self._attribution_distance(anchor[i], anchor[j], finite_only=False))
                      for j in range(self.n) if j != i]
            reach.append(min(others) / 2 if others else math.inf)
        return reach

    def expect(self, idx: Tensor | None) -> None:
        self.hint = None if idx is None else [int(i) for i in idx]

    def _expected(self, b: int) -> list[int] | None:  # step 2
        if self.hint is not None and len(self.hint) == b:
            owners = self.hint
        elif b == self.n:
            owners = list(range(self.n))
        elif self.previous is not None and len(self.previous[1]) == b:
            owners = self.previous[1]
        else:
            return None
        return owners if len(set(owners)) == b else None

    def _within_reach(self, row: Tensor, i: int, *, original: bool = False) -> bool:  # step 3
        a, h = (self.flat[i], self.origin_reach[i]) if original else (self.anchor[i], self.reach[i])
        if self.attribution_norm == "linf":  # the box in the inputs' dtype, as the rule says
            m = torch.tensor(h, dtype=a.dtype).sub(BOX_MARGIN).clamp(min=0).clamp(max=2.0)
            return bool(((a - m <= row) & (row <= a + m)).all())
        return self._attribution_distance(row.tolist(), a.tolist(), finite_only=False) < h  # NaN fails

    # -- a forward call ------------------------------------------------------------------------
    def forward(self, x: Tensor) -> Tensor:
        b = x.shape[0]
        if b == 0:  # step 1
            return self.model(x)
        rows = x.detach().reshape(b, -1).to(self.flat.dtype)
        expected = self._expected(b)
        owners: list[int | None] = [None] * b
        if expected is not None:
            for p in range(b):
                if self._within_reach(rows[p], expected[p]):
                    owners[p] = expected[p]
        needed_step4 = None in owners
        named = b > 1 or (self.hint is not None and len(self.hint) == b)  # no one-row E read off `previous`
        if named and expected is not None and self.previous is not None and len(self.previous[1]) == b:
            for p in range(b):  # step 4: E[p]'s at this position before, within reach of no original
                if owners[p] is None and self.previous[1][p] == expected[p] and not any(
                        self._within_reach(rows[p], i, original=True) for i in range(self.n)):
                    owners[p] = expected[p]
        known = list(self.originals)
        known_owner = list(range(self.n))
        if self.previous is not None:
            known += self.previous[0]
            known_owner += self.previous[1]
        earlier = [0] * self.n
        for p in range(b):
            if owners[p] is None:  # step 4
                row = rows[p].tolist()
                dist = [self._attribution_distance(row, point, finite_only=True) for point in known]
                dist = [math.inf if math.isnan(d) else d for d in dist]
                nearest = min(dist)
                tied = sorted({known_owner[k] for k in range(len(known)) if dist[k] == nearest})
                if len(tied) == 1:
                    owners[p] = tied[0]
                elif expected is not None and expected[p] in tied:
                    owners[p] = expected[p]
                else:
                    used = [self.forwards[s] + self.backwards[s] + self.refused[s] + earlier[s] for s in range(self.n)]
                    owners[p] = min(tied, key=lambda s: (used[s], s))
            earlier[owners[p]] += 1
        if needed_step4 and expected == owners and bool(torch.isfinite(rows).all()):  # step 5
            for p, i in enumerate(owners):
                self.anchor[i] = rows[p].clone()
            self.reach = self._reach()
        allowed = [self._charge(i, "forward") for i in owners]  # step 6
        out = self.model(x)
        refusal = self._refusal(owners).to(out.dtype)
        mask = torch.tensor(allowed).unsqueeze(1)
        out = torch.where(mask, out, refusal)
        self.previous = ([rows[p].tolist() for p in range(b)], list(owners))
        for p in range(b):  # step 7
            if allowed[p] and self._candidate(rows[p], out[p].detach(), owners[p]):
                self._offer(rows[p], owners[p])
        if out.requires_grad:
            out.register_hook(lambda g, owners=list(owners): self._backward(g, owners))
        return out

    def _charge(self, i: int, what: str) -> bool:
        if self.forwards[i] + self.backwards[i] < self.budget:
            if what == "forward":
                self.forwards[i] += 1
            else:
                self.backwards[i] += 1
            return True
        self.refused[i] += 1
        return False

    def _backward(self, grad: Tensor, owners: list[int]) -> Tensor:
        allowed = torch.tensor([self._charge(i, "backward") for i in owners], dtype=grad.dtype)
        return grad * allowed.unsqueeze(1)

    def _refusal(self, owners: list[int]) -> Tensor:
        k = self.model(self.inputs[:1]).shape[1]
        answer = torch.nn.functional.one_hot(self.labels[owners], k).float()
        if self.targeted:
            answer = answer - torch.nn.functional.one_hot(self.targets[owners], k).float()
        return answer * REFUSAL_SCALE

    # -- best candidates -----------------------------------------------------------------------
    def _adversarial(self, logits: Tensor, i: int) -> bool:
        return bool(is_success(logits, self.labels[i], self.targets[i] if self.targeted else None))

    def _candidate(self, row: Tensor, logits: Tensor, i: int) -> bool:
        in_box = bool(row.min() >= -BOX_TOLERANCE) and bool(row.max() <= 1 + BOX_TOLERANCE)  # NaN fails
        return self._adversarial(logits, i) and in_box and bool(torch.isfinite(logits).all())

    def _offer(self, row: Tensor, i: int) -> None:
        point = row.clamp(0, 1)
        dist = size_in_dtype(point - self.flat[i], self.norm)
        self.kept[i].append((dist, point))
        self.kept[i].sort(key=lambda entry: float(entry[0]))  # stable: the earliest of equals first
        del self.kept[i][KEEP_BESTS:]

    def offer(self, adversarial: Tensor) -> None:
        rows = adversarial.detach().reshape(self.n, -1).to(self.flat.dtype)
        with torch.no_grad():
            logits = self.model(adversarial)
        for i in range(self.n):
            if self._candidate(rows[i], logits[i], i):
                self._offer(rows[i], i)

    def recheck(self) -> list[int]:
        """Per sample, how many kept candidates failed on the model before one held."""
        dropped = [0] * self.n
        todo = [i for i in range(self.n) if self.kept[i]]
        while todo:  # one forward per round over every sample still to confirm, as the tracker
            with torch.no_grad():
                logits = self.model(torch.stack([self.kept[i][0][1] for i in todo]).view(
                    (len(todo),) + tuple(self.inputs.shape[1:])))
            bad = [i for k, i in enumerate(todo) if not self._adversarial(logits[k], i)]
            for i in bad:
                self.kept[i].pop(0)
                dropped[i] += 1
            todo = [i for i in bad if self.kept[i]]
        return dropped

    # -- read like the tracker -----------------------------------------------------------------
    def kept_tensors(self) -> tuple[Tensor, Tensor]:
        """(N×KEEP_BESTS×D points, N×KEEP_BESTS distances), as ``QueryTracker.kept``."""
        points = self.flat.unsqueeze(1).repeat(1, KEEP_BESTS, 1).clone()
        dist = torch.full((self.n, KEEP_BESTS), math.inf, dtype=self.flat.dtype)
        for i, entries in enumerate(self.kept):
            for k, (d, point) in enumerate(entries):
                points[i, k], dist[i, k] = point, d
        return points, dist


def same(a: Tensor, b: Tensor) -> bool:
    """Bit-for-bit equal, NaN equal to NaN (an answer to a NaN row is NaN in both)."""
    return a.shape == b.shape and bool(((a == b) | (torch.isnan(a) & torch.isnan(b))).all())


def assert_agree(t, ref: ReferenceLedger, where: str = "") -> None:
    """The tracker ``t`` and the ledger agree exactly: counts, refusals, kept candidates."""
    assert t.forwards.tolist() == ref.forwards, where
    assert t.backwards.tolist() == ref.backwards, where
    assert t.refused.tolist() == ref.refused, where
    points, dist = t.kept
    ref_points, ref_dist = ref.kept_tensors()
    assert torch.equal(dist, ref_dist), (where, dist, ref_dist)
    assert torch.equal(points, ref_points), where
