"""The best-keeper: per sample, the smallest adversarials seen within the budget.

Step 7 of the attribution rule (the module docstring of ``harness/measure/tracker.py``, the one
definition): a row answered within the budget is a candidate when its logits are finite and
adversarial (``success.is_success``: strictly) and its coordinates all lie in
[−BOX_TOLERANCE, 1 + BOX_TOLERANCE]; its point is the row clamped to [0, 1], its distance (the
job's norm) that point's. Per sample the KEEP_BESTS candidates of smallest distance are kept, the
earliest of equal ones; ``drop_unconfirmed`` (the end-of-job re-check) lets a best that is not
adversarial on the unwrapped model give way to the next kept one.
"""
from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor

from attackaudit.measure.distance import lp_norm
from attackaudit.measure.success import is_success

#: an input coordinate outside [0, 1] by more than this makes a row ineligible as "best"
BOX_TOLERANCE = 1e-5
#: best candidates kept per sample: the best, and the ones a re-check falls back on
KEEP_BESTS = 3


class BestKeeper:
    """The kept candidates of ``originals`` (N×D, flattened) under ``norm``, for ``labels`` (N)
    and, when targeted, ``targets`` (N; None when untargeted)."""

    def __init__(self, originals: Tensor, norm: str, labels: Tensor, targets: Tensor | None) -> None:
        if len(labels) != len(originals) or (targets is not None and len(targets) != len(originals)):
            raise ValueError(f"BestKeeper: {len(originals)} originals, {len(labels)} labels, "
                             f"{None if targets is None else len(targets)} targets")
        self._originals, self.norm, self.labels, self.targets = originals, norm, labels, targets
        n = len(originals)
        #: kept points, N×KEEP_BESTS×D, smallest distance first; empty places hold the original
        self.points = originals.unsqueeze(1).repeat(1, KEEP_BESTS, 1)
        #: their distances, N×KEEP_BESTS; inf at empty places
        self.distances = torch.full((n, KEEP_BESTS), float("inf"), dtype=originals.dtype,
                                    device=originals.device)

    def is_adversarial(self, logits: Tensor, idx: Tensor) -> Tensor:
        """Whether logits (B×classes) of rows owned by ``idx`` (B) are adversarial (B), strictly."""
        return is_success(logits, self.labels[idx], None if self.targets is None else self.targets[idx])

    # -- candidates ---------------------------------------------------------------------------
    def add_clean(self, where: Tensor) -> None:
        """The clean inputs of samples ``where`` (M) are adversarial: each is its sample's first
        candidate, at distance 0, before every query row."""
        if len(where):
            self.merge(self._originals[where], torch.zeros(len(where), dtype=self._originals.dtype,
                                                            device=where.device), where, first=True)

    def offer(self, rows: Tensor, logits: Tensor, idx: Tensor, allowed: Tensor | bool = True) -> None:
        """Offer rows (B×D) with their logits (B×classes), owned by ``idx`` (B), in order, as
        candidates; ``allowed`` (B, or True) masks rows past the budget."""
        candidate = self.is_adversarial(logits, idx)
        if allowed is not True:
            candidate &= allowed
        if not bool(candidate.any()):
            return
        rows_c, idx_c = rows[candidate].to(self._originals.dtype), idx[candidate]
        valid = in_box_and_finite(rows_c, logits[candidate])
        if not bool(valid.any()):  # e.g. SparseFool and ART's EAD query points outside the box
            return
        points, idx_c = rows_c[valid].clamp(0, 1), idx_c[valid]
        self.merge(points, lp_norm(points - self._originals[idx_c], self.norm), idx_c)

    def offer_window(self, rows: Tensor, logits: Tensor, owners: list[Tensor | None]) -> None:
        """Offer K queries at once: rows (K×N×D), logits (K×N×classes), each query's owners (None:
        the whole batch in order; else B owners of the slot's first B places). Same result as
        ``offer`` one query at a time."""
        k, n = len(owners), len(self._originals)
        if all(o is None for o in owners):
            self._offer_in_order(rows, logits)
            return
        owner = torch.arange(n, device=self.distances.device).repeat(k, 1)
        for s, o in enumerate(owners):
            if o is not None:  # a subset: its rows fill the first places of the slot
                owner[s, :len(o)] = o
                owner[s, len(o):] = -1
        owner = owner.flatten()
        present = owner >= 0
        rows, logits = rows.flatten(0, 1), logits.flatten(0, 1)
        if not bool(present.all()):
            rows, logits, owner = rows[present], logits[present], owner[present]
        self.offer(rows, logits, owner)

    def _offer_in_order(self, rows: Tensor, logits: Tensor) -> None:
        """``offer_window`` of whole batches in order (K×N×D rows, K×N×classes logits): per sample
        only its KEEP_BESTS smallest candidates of the window (a stable sort over the K queries
        keeps the earliest of equals first) are merged, not every adversarial row."""
        adversarial = is_success(logits, self.labels, self.targets)  # K×N
        columns = adversarial.any(0).nonzero().squeeze(1)  # only samples with an adversarial row
        if not len(columns):
            return
        if len(columns) < len(self._originals):
            rows, logits, adversarial = rows[:, columns], logits[:, columns], adversarial[:, columns]
        ok = (adversarial & (rows.amin(2) >= -BOX_TOLERANCE) & (rows.amax(2) <= 1 + BOX_TOLERANCE)
              & torch.isfinite(logits).all(2))  # NaN fails the comparisons
        points = rows.clamp(0, 1)
        dist = lp_norm((points - self._originals[columns]).flatten(0, 1), self.norm).view(ok.shape)
        dist, order = dist.masked_fill_(~ok, float("inf")).sort(dim=0, stable=True)
        t = min(KEEP_BESTS, len(dist))
        dist, order = dist[:t], order[:t]                                              # t×N'
        col, rank = (dist < self.distances[columns, -1]).T.nonzero().unbind(1)  # by sample, then rank
        if len(col):
            self.merge(points[order[rank, col], col], dist[rank, col], columns[col])

    def merge(self, points: Tensor, dist: Tensor, owner: Tensor, first: bool = False) -> None:
        """Merge candidates (M×D points, M distances, M owners, in order) into the kept ones:
        per sample the KEEP_BESTS smallest, the earliest of equals (``first``: these candidates
        come before the kept ones)."""
        worst = self.distances[owner, -1]
        worth = dist <= worst if first else dist < worst
        if not bool(worth.all()):
            points, dist, owner = points[worth], dist[worth], owner[worth]
        if not len(owner):
            return
        t = KEEP_BESTS
        groups, group = torch.unique(owner, return_inverse=True)
        m = len(groups)
        kept_points, kept_dist = self.points[groups].flatten(0, 1), self.distances[groups].flatten()
        kept_group = torch.arange(m, device=owner.device).repeat_interleave(t)
        parts = [(points, dist.to(kept_dist.dtype), group), (kept_points, kept_dist, kept_group)]
        if not first:
            parts.reverse()
        pool_points, pool_dist, pool_group = (torch.cat(p) for p in zip(*parts))
        order = torch.argsort(pool_dist, stable=True)
        order = order[torch.argsort(pool_group[order], stable=True)]  # by sample, then distance
        counts = torch.bincount(pool_group, minlength=m)
        start = torch.cumsum(counts, 0) - counts  # every sample has ≥ t entries (its kept ones)
        chosen = order[start.unsqueeze(1) + torch.arange(t, device=owner.device)]  # m×t
        self.points[groups] = pool_points[chosen]
        self.distances[groups] = pool_dist[chosen]

    # -- the end-of-job re-check ----------------------------------------------------------------
    def drop_unconfirmed(self, still_adversarial: Callable[[Tensor, Tensor], Tensor]) -> Tensor:
        """Re-check each sample's best: ``still_adversarial(points M×D, owners M)`` (M bools)
        evaluates points on the unwrapped model; a best that is not adversarial there gives way
        to the next kept candidate that is, or to none. Returns, per sample (N), how many kept
        candidates were dropped."""
        n = len(self._originals)
        dropped = torch.zeros(n, dtype=torch.long, device=self.distances.device)
        todo = torch.isfinite(self.distances[:, 0]).nonzero().squeeze(1)
        while len(todo):
            bad = todo[~still_adversarial(self.points[todo, 0], todo)]
            if not len(bad):
                break
            self.points[bad] = torch.cat([self.points[bad, 1:], self._originals[bad].unsqueeze(1)], 1)
            self.distances[bad] = torch.cat(
                [self.distances[bad, 1:], self.distances.new_full((len(bad), 1), float("inf"))], 1)
            dropped[bad] += 1
            todo = bad[torch.isfinite(self.distances[bad, 0])]
        return dropped


def in_box_and_finite(rows: Tensor, logits: Tensor) -> Tensor:
    """Rows (B×D) inside [−BOX_TOLERANCE, 1 + BOX_TOLERANCE] with finite logits (B×classes): the
    ones whose clamp to [0, 1] is the point the attack meant (B)."""
    # amin/amax propagate NaN, which then fails the comparison
    return ((rows.amin(1) >= -BOX_TOLERANCE) & (rows.amax(1) <= 1 + BOX_TOLERANCE)
            & torch.isfinite(logits).all(1))
