"""Attribution: which original sample each query row belongs to.

Steps 2–5 of the attribution rule, whose one definition is the module docstring of
``harness/measure/tracker.py``; the state it names (the anchor with its reaches, the previous query, the
expected owners of a hint) lives here. ``tests/reference_ledger.py`` follows the same rule one row
at a time, and the tracker's fast paths must agree with it exactly.
"""
from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor

from attackaudit.measure.distance import attribution_norm, finite_pairwise_distance, lp_norm, pairwise_distance

#: the containment box of an L∞ anchor is this much smaller than the half separation, so that
#: rounding ``anchor ± half`` in float32 cannot make it contain a row that is not nearest
BOX_MARGIN = 1e-6


class Attribution:
    """Owners of query rows of ``originals`` (N×D, flattened from inputs of ``shape``) under the
    attribution norm of ``norm``. ``arange`` (0…N−1) is the owners tensor of a whole batch in
    order, shared with the other parts of the tracker (they recognise it by identity)."""

    def __init__(self, originals: Tensor, shape: torch.Size, norm: str, arange: Tensor) -> None:
        if len(arange) != len(originals):
            raise ValueError(f"Attribution: arange has {len(arange)} entries for {len(originals)} originals")
        self._originals, self._shape, self.norm, self.arange = originals, shape, norm, arange
        self._norm = attribution_norm(norm)
        self.set_anchor(originals, is_origin=True)
        #: the originals with their reaches among themselves (the anchor at the start), for
        #: step 4's test of whether a row is near some sample's clean image
        self._origin = (originals, self.reach, self.box)
        #: the previous non-empty query: its rows (a private copy, B×D) and owners (B)
        self.previous: tuple[Tensor, Tensor] | None = None
        #: whether ``previous``'s rows live in a slot of the query window (which must move them
        #: to its spare slot before it is reused)
        self.previous_in_slot = False
        # the samples a hint says the next queries are of (``expect``), with the anchor rows,
        # reaches and boxes gathered for them once
        self.hint: Tensor | None = None
        self._hint_view: tuple | None = None

    # -- the anchor (state) ----------------------------------------------------------------------
    def set_anchor(self, rows: Tensor, *, is_origin: bool = False) -> None:
        """Make ``rows`` (N×D) the anchor and compute each row's reach."""
        self.anchor, self.reach = rows, anchor_reach(rows, self._originals, self.norm, is_origin=is_origin)
        self.box: tuple[Tensor, Tensor] | None = None
        if self._norm == "linf":
            self.box = linf_box(rows, self.reach)
            # the box shaped as the inputs: the in-order test needs no reshape of the query
            self._test = (self.box[0].view(self._shape), self.box[1].view(self._shape))
        else:
            # ``distance < reach`` as ``min(distance, the float below reach) == distance``: one
            # comparison of all rows in one operation (NaN fails it, as it fails ``<``)
            self._test = torch.nextafter(self.reach, self.reach.new_tensor(float("-inf")))

    def contains_whole_batch(self, x: Tensor, slot: Tensor, shaped_slot: Tensor) -> bool:
        """Step 3 for a whole batch in order (``x``: N×C×H×W, detached, the inputs' dtype): whether
        every row is within reach of its own anchor row; when it is, ``slot`` (N×D; ``shaped_slot``
        is the same memory, N×C×H×W) holds a copy of the rows. The fewest operations: one clamp
        into the slot and one comparison (L∞), or one distance and one comparison (L1/L2)."""
        test = self._test
        if self.box is not None:
            torch.clamp(x, test[0], test[1], out=shaped_slot)
            return torch.equal(shaped_slot, x)  # NaN fails it
        rows = x.reshape(len(x), -1)
        dist = lp_norm(rows - self.anchor, self._norm)
        if not torch.equal(torch.minimum(dist, test), dist):
            return False
        slot.copy_(rows)
        return True

    # -- expected owners (step 2) ----------------------------------------------------------------
    def expect(self, idx: Tensor | None) -> None:
        """Say which samples (distinct indices, in row order) the next queries are of, or None."""
        self.hint = None if idx is None else idx.to(self.arange.device)
        self._hint_view = None

    def expected(self, b: int) -> tuple[Tensor, str, tuple] | None:
        """(owners E, kind, (anchor rows, reaches, L∞ box)) of a batch of ``b`` rows, or None
        when there is no E. Kind: "all" (0…N−1) or "distinct"."""
        n = len(self._originals)
        if self.hint is not None and len(self.hint) == b:
            owners = self.hint
        elif b == n:
            return self.arange, "all", (self.anchor, self.reach, self.box)
        elif self.previous is not None and len(self.previous[1]) == b:
            owners = self.previous[1]
        else:
            return None
        view = self._hint_view
        if view is None or view[0] is not owners or view[1] is not self.anchor:
            if len(torch.unique(owners)) != b:  # one row per sample, or the budget test is wrong
                kind = "any"
            else:
                kind = "all" if b == n and torch.equal(owners, self.arange) else "distinct"
            box = None if self.box is None else (self.box[0][owners], self.box[1][owners])
            view = self._hint_view = (owners, self.anchor, kind, (self.anchor[owners], self.reach[owners], box))
        return None if view[2] == "any" else (owners, view[2], view[3])

    # -- owners of a query (steps 2–5) -------------------------------------------------------------
    def attribute(self, rows: Tensor, slot: Callable[[], Tensor],
                  used: Callable[[], list[int]]) -> tuple[Tensor, str, Tensor, bool]:
        """Owner of each flattened row (B×D, B > 0), by the rule (steps 2–5).

        ``slot()``: the query window's next slot (N×D), where a row set that passes the
        containment test is copied; ``used()``: forwards + backwards + refused per sample so far
        (step 4's tie rule). Returns (B owners, kind, a private copy of ``rows``, whether that copy
        is the slot). Kind: "all" (the whole batch in order), "distinct" (the expected samples, in
        order), "any" (anything else).
        """
        b = rows.shape[0]
        if rows.dtype != self._originals.dtype:
            rows = rows.to(self._originals.dtype)
        expected = self.expected(b)
        owners = None
        if expected is not None:
            owners, kind, (anchor, half, box) = expected
            into = slot()
            if b != len(into):
                into = into[:b]
            if box is not None:
                # one clamp (into the slot: the copy for free) and one compare; NaN fails it
                torch.clamp(rows, *box, out=into)
                if torch.equal(into, rows):
                    return owners, kind, into, True
                ok = ((rows >= box[0]) & (rows <= box[1])).all(1)
            else:
                ok = lp_norm(rows - anchor, self._norm) < half
                if bool(ok.all()):
                    return owners, kind, into.copy_(rows), True
            named = b > 1 or (self.hint is not None and len(self.hint) == b)
            if named and self.previous is not None and len(self.previous[1]) == b and not bool(ok.all()):
                # step 4, first part: a row within reach of no original is near no sample's clean
                # image; where the previous query's row at its position was its expected owner's,
                # it stays there. Iterates far from their originals can come as near each other
                # as they like (Brendel-Bethge's L0 steps put two digits' iterates 0.26 apart in
                # L1, 28 from their originals), so being near another's iterate does not count.
                # Not for one row that no hint names: a one-row E read off the previous query
                # confirms itself (torchattacks' DeepFool walks one image at a time, in turn: every
                # far row went to the image before it); a batch keeps its positions, a subset too
                kept = ~ok & (self.previous[1] == owners)
                ok |= kept & ~self._within_any_reach(rows, kept)
            idx = torch.where(ok, owners, -1)
        else:
            idx = torch.full((b,), -1, dtype=torch.long, device=rows.device)
        if bool((idx < 0).any()):
            idx = self._nearest_known(rows, idx, owners, used)
        copy = rows.clone()  # the attack may change its tensor in place
        if expected is not None and torch.equal(idx, owners):  # resolved as expected after all
            if bool(torch.isfinite(copy).all()):  # step 5
                if kind == "all":
                    self.set_anchor(copy, is_origin=False)
                else:  # these samples' anchor rows move to where they are now
                    anchor = self.anchor.clone()
                    anchor[idx] = copy
                    self.set_anchor(anchor, is_origin=False)
            return idx, kind, copy, False
        return idx, "any", copy, False

    def _within_any_reach(self, rows: Tensor, among: Tensor) -> Tensor:
        """Which of ``rows`` (B×D) selected by ``among`` (B bools) lie within reach (step 3's test)
        of some original, each with its reach among the originals (B bools, False outside
        ``among``). NaN fails, as in step 3."""
        out = torch.zeros_like(among)
        sel = among.nonzero().squeeze(1)
        if not len(sel):
            return out
        originals, reach, box = self._origin
        if box is None:
            out[sel] = (pairwise_distance(rows[sel], originals, self.norm) < reach.unsqueeze(0)).any(1)  # NaN fails
            return out
        chosen = rows[sel].unsqueeze(1)  # the boxes, in chunks of rows: B×N×D at once can be large
        step = max(1, (1 << 22) // max(1, box[0].numel()))
        found = torch.cat([((chosen[k:k + step] >= box[0]) & (chosen[k:k + step] <= box[1])).all(2).any(1)
                           for k in range(0, len(sel), step)])
        out[sel] = found
        return out

    def _nearest_known(self, rows: Tensor, idx: Tensor, expected: Tensor | None,
                       used: Callable[[], list[int]]) -> Tensor:
        """Step 4: rows whose ``idx`` is −1 go to the owner of their nearest known point."""
        unresolved = (idx < 0).nonzero().squeeze(1)
        known, known_owner = self._originals, self.arange
        if self.previous is not None:
            known = torch.cat([self._originals, self.previous[0]])
            known_owner = torch.cat([self.arange, self.previous[1]])
        dist = finite_pairwise_distance(rows[unresolved], known, self.norm)
        nearest, first = dist.min(1)
        idx[unresolved] = known_owner[first]
        tied = ((dist == nearest.unsqueeze(1)) & (known_owner != idx[unresolved].unsqueeze(1))).any(1)
        if bool(tied.any()):  # rare (identical originals, all-NaN rows): step 4's tie rule
            idx = self._break_ties(idx, unresolved, dist, nearest, known_owner, expected, used())
        return idx

    @staticmethod
    def _break_ties(idx: Tensor, unresolved: Tensor, dist: Tensor, nearest: Tensor, known_owner: Tensor,
                    expected: Tensor | None, used: list[int]) -> Tensor:
        """Step 4's ties, row by row in order (earlier rows of the call count as queries)."""
        row_of = {int(p): k for k, p in enumerate(unresolved.tolist())}
        out = idx.tolist()
        for p in range(len(out)):
            k = row_of.get(p)
            if k is not None:
                tied = sorted(set(known_owner[dist[k] == nearest[k]].tolist()))
                if len(tied) > 1:
                    e = None if expected is None else int(expected[p])
                    out[p] = e if e in tied else min(tied, key=lambda s: (used[s], s))
            used[out[p]] += 1
        return torch.tensor(out, dtype=idx.dtype, device=idx.device)

    def remember(self, rows: Tensor, owners: Tensor, *, in_slot: bool) -> None:
        """The query just answered (rows B×D, a private copy, and owners B) is now the previous
        query (step 4's known points, step 2's expected owners)."""
        self.previous, self.previous_in_slot = (rows, owners), in_slot

    def move_previous(self, spare: Tensor) -> None:
        """The query window is about to reuse its slots: the previous query's rows move to
        ``spare`` (B×D, outside the window)."""
        spare.copy_(self.previous[0])
        self.previous, self.previous_in_slot = (spare, self.previous[1]), False


def anchor_reach(rows: Tensor, originals: Tensor, norm: str, *, is_origin: bool = False) -> Tensor:
    """Each anchor row's reach (N): half its distance to the nearest original or anchor row of
    another sample; inf when there is no other sample (the rule's state)."""
    n = len(rows)
    if n < 2:
        return torch.full((n,), float("inf"), dtype=rows.dtype, device=rows.device)
    to_others = pairwise_distance(rows, originals, norm)
    to_others.fill_diagonal_(float("inf"))
    half = to_others.amin(1)
    if not is_origin:
        among = pairwise_distance(rows, rows, norm)
        among.fill_diagonal_(float("inf"))
        half = torch.minimum(half, among.amin(1))
    return half / 2


def linf_box(rows: Tensor, reach: Tensor) -> tuple[Tensor, Tensor]:
    """The L∞ containment box of anchor rows (N×D) with their reaches (N) (rule, step 3)."""
    margin = (reach - BOX_MARGIN).clamp(min=0).clamp(max=2.0).unsqueeze(1)  # inf → a box beyond [0, 1]
    return rows - margin, rows + margin
