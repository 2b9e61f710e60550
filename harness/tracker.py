"""QueryTracker: the one model wrapper every adapter calls.

It counts forwards and backwards per original sample, caps them at one budget, and keeps the
best (smallest) adversarial seen within that budget. Rows are attributed to the nearest original
(under the job's norm), so attacks that subset, reorder or repeat the batch are counted right.

On a small model (the digits CNN) every tensor operation of the tracker costs a visible fraction
of a forward pass, so the common query — the whole batch, in order, near where the last one was —
takes a path of a handful of operations: one containment test for the attribution, a counter in
Python, and copies of the rows and logits whose best-adversarial bookkeeping is done for many
queries at once (``_flush``).
"""
from __future__ import annotations

from functools import partial
from typing import Callable

import torch
from torch import Tensor, nn

from .distance import lp_norm, pairwise_distance

#: an input coordinate outside [0, 1] by more than this makes a row ineligible as "best"
BOX_TOLERANCE = 1e-5
#: logit scale of the non-adversarial answer given to queries past the budget
REFUSAL_SCALE = 1e4
#: the deferred rows and logits may hold at most this many bytes before they are processed
DEFERRED_BYTES = 16 << 20
#: and at most this many queries
DEFERRED_QUERIES = 128
#: the containment box of an L∞ anchor is this much smaller than the half separation, so that
#: rounding ``anchor ± half`` in float32 cannot make it contain a row that is not nearest
BOX_MARGIN = 1e-6


class QueryTracker(nn.Module):
    """Wrap ``model`` for one job on ``inputs`` (N×C×H×W in [0, 1]) and ``labels`` (N).

    Attributes after the attack (all length N, on ``inputs.device``):
    ``forwards``, ``backwards`` (queries within the budget), ``refused`` (queries past it),
    ``best_adversarial`` (N×C×H×W), ``best_distance`` (inf where none was found, 0 where the
    clean input already is adversarial), ``clean_correct``.
    """

    def __init__(self, model: nn.Module, inputs: Tensor, labels: Tensor, *, norm: str,
                 budget: int = 2000, targeted: bool = False, targets: Tensor | None = None,
                 on_progress: Callable[[int], None] | None = None,
                 clean_logits: Tensor | None = None) -> None:
        """``on_progress(queries)``: told, every batch of deferred queries, the most queries any
        sample has used so far (what a progress bar inside a long job shows).
        ``clean_logits`` (N×classes): the model's logits on ``inputs``, when the caller has them
        (the harness computes them once per model, not once per job)."""
        super().__init__()
        self.on_progress = on_progress
        if targeted and targets is None:
            raise ValueError("a targeted QueryTracker needs targets")
        self.model = model.eval()
        self.norm = norm
        self.budget = int(budget)
        self.targeted = targeted
        self.inputs = inputs.detach()
        self.labels = labels.detach()
        self.targets = targets.detach() if targets is not None else None
        self._flat = self.inputs.reshape(len(inputs), -1)
        n = len(inputs)
        device = inputs.device
        self._arange = torch.arange(n, device=device)
        self._forwards = torch.zeros(n, dtype=torch.long, device=device)
        self._backwards = torch.zeros(n, dtype=torch.long, device=device)
        # whole-batch-in-order queries not yet added to the tensors above (an addition per query
        # would be a tensor operation per query)
        self._pending = {"forwards": 0, "backwards": 0}
        self._max_used = 0  # max over samples of forwards + backwards, pending included
        self.refused = torch.zeros(n, dtype=torch.long, device=device)
        # rows and logits of in-order queries whose best-adversarial update is still to be done:
        # slots of a buffer allocated on first use, written in place (no allocation per query)
        row_bytes = max(1, self._flat.numel() * self._flat.element_size())
        self._deferred_limit = max(1, min(DEFERRED_QUERIES, DEFERRED_BYTES // row_bytes))
        self._deferred_count = 0
        self._row_slots: list[Tensor] = []
        self._logit_slots: list[Tensor] = []
        self._best_adversarial = self.inputs.clone()
        self._best_distance = torch.full((n,), float("inf"), device=device)
        # The clean logits (clean accuracy; distance 0 where the clean input is adversarial). Most
        # minimum-norm attacks query the clean batch first: those logits are taken from that
        # query, and the extra clean forward (a few % of a short attack on a large model) is
        # only run when the results are read without such a query having happened.
        self._clean_correct: Tensor | None = None
        self._first_in_order = True
        self._num_classes: int | None = None
        self._refusal: Tensor | None = None
        #: attribution distance (L0 jobs attribute by L1: a count of changed pixels ties too easily)
        self._attribution_norm = "l1" if norm == "l0" else norm
        # The anchor: rows of known owners (the originals, then the last query that needed a full
        # attribution) and, per row, half its distance to everything owned by another sample. A
        # row closer to anchor row i than that is certainly nearest to i, so the common case —
        # the whole batch, in order, moving a little — costs one test, not a B×N matrix.
        self._set_anchor(self._flat, is_origin=True)
        self._previous: tuple[Tensor, Tensor] | None = None  # last query's rows (a copy) and owners
        # the samples the caller says the next queries are of (``expect``), with the anchor rows,
        # half separations and boxes gathered for them once
        self._hint: Tensor | None = None
        self._hint_view: tuple | None = None
        self._slot_owners: list[Tensor | None] = [None] * self._deferred_limit
        if clean_logits is not None:
            self._set_clean(clean_logits.detach())
        self.eval()  # a fresh Module is in training mode; libraries warn about that (foolbox)

    # -- what the harness reads --------------------------------------------------------------
    @property
    def forwards(self) -> Tensor:
        """Forward passes per sample within the budget (N)."""
        self._flush_counts()
        return self._forwards

    @property
    def backwards(self) -> Tensor:
        """Backward passes per sample within the budget (N)."""
        self._flush_counts()
        return self._backwards

    @property
    def queries(self) -> Tensor:
        """Forwards + backwards per sample (N)."""
        return self.forwards + self.backwards

    @property
    def best_distance(self) -> Tensor:
        """Distance of the best adversarial per sample (N); inf where none was found, 0 where
        the clean input is adversarial."""
        self._finish()
        return self._best_distance

    @property
    def best_adversarial(self) -> Tensor:
        """The best adversarial per sample (N×C×H×W); the original where none was found."""
        self._finish()
        return self._best_adversarial

    @property
    def clean_correct(self) -> Tensor:
        """Whether the model classifies each clean input right (N)."""
        self._ensure_clean()
        return self._clean_correct

    @property
    def num_classes(self) -> int:
        if self._num_classes is None:
            self._ensure_clean()
        return self._num_classes

    # -- the clean logits ----------------------------------------------------------------------
    def _ensure_clean(self) -> None:
        if self._clean_correct is None:
            with torch.no_grad():
                self._set_clean(self.model(self.inputs))

    def _set_clean(self, logits: Tensor) -> None:
        self._num_classes = logits.shape[1]
        self._clean_correct = logits.argmax(1) == self.labels
        adversarial = self._is_adversarial(logits, self._arange)
        self._best_distance[adversarial] = 0.0
        self._best_adversarial[adversarial] = self.inputs[adversarial]

    def _finish(self) -> None:
        self._flush()
        self._ensure_clean()

    def _refusal_logits(self, idx: Tensor, dtype: torch.dtype) -> Tensor:
        """The answer past the budget: the clean label's one-hot (minus the target's), scaled."""
        if self._refusal is None:
            refusal = torch.nn.functional.one_hot(self.labels, self.num_classes).float()
            if self.targeted:
                refusal = refusal - torch.nn.functional.one_hot(self.targets, self.num_classes).float()
            self._refusal = refusal * REFUSAL_SCALE
        return self._refusal[idx].to(dtype)

    # -- attribution -----------------------------------------------------------------------
    def _set_anchor(self, rows: Tensor, *, is_origin: bool = False) -> None:
        n = len(rows)
        if n > 1:
            to_others = pairwise_distance(rows, self._flat, self.norm)
            to_others.fill_diagonal_(float("inf"))
            half = to_others.amin(1)
            if not is_origin:
                among = pairwise_distance(rows, rows, self.norm)
                among.fill_diagonal_(float("inf"))
                half = torch.minimum(half, among.amin(1))
            half = half / 2
        else:
            half = torch.full((n,), float("inf"), device=rows.device)
        self._anchor, self._anchor_half = rows, half
        self._anchor_box = None
        if self._attribution_norm == "linf":  # |row - anchor| < half in every coordinate
            margin = (half - BOX_MARGIN).clamp(min=0).clamp(max=2.0).unsqueeze(1)  # inf → a box beyond [0, 1]
            self._anchor_box = (rows - margin, rows + margin)

    def expect(self, idx: Tensor | None) -> None:
        """Say which samples (distinct indices, in row order) the next queries are of, or None.

        A hint, not a trust: a batch of that size is checked against those samples' anchor
        rows exactly as a whole batch is checked against all of them, and resolved the long way
        when it does not pass. It spares subset queries (the minimal-ε search attacks the
        samples not yet settled) the B×N distances.
        """
        self._hint = None if idx is None else idx.to(self._arange.device)
        self._hint_view = None

    def _expected(self, b: int) -> tuple[Tensor, str, tuple] | None:
        """(owners, kind, (anchor rows, half separations, L∞ box)) a batch of ``b`` rows is
        checked against: the hinted samples, the whole batch in order, or the previous query's
        samples (libraries that go through the samples one or a few at a time)."""
        n = len(self._flat)
        if self._hint is not None and len(self._hint) == b:
            owners = self._hint
        elif b == n:
            return self._arange, "all", (self._anchor, self._anchor_half, self._anchor_box)
        elif self._previous is not None and len(self._previous[1]) == b:
            owners = self._previous[1]
        else:
            return None
        view = self._hint_view
        if view is None or view[0] is not owners or view[1] is not self._anchor:
            if len(torch.unique(owners)) != b:  # one row per sample, or the budget test is wrong
                kind = "any"
            else:
                kind = "all" if b == n and torch.equal(owners, self._arange) else "distinct"
            box = None if self._anchor_box is None else (self._anchor_box[0][owners], self._anchor_box[1][owners])
            view = self._hint_view = (owners, self._anchor, kind,
                                      (self._anchor[owners], self._anchor_half[owners], box))
        return None if view[2] == "any" else (owners, view[2], view[3])

    def attribute(self, rows: Tensor) -> tuple[Tensor, str, Tensor, bool]:
        """Owner (original index) of each flattened row (B×D).

        Returns (B indices, kind, a private copy of ``rows``, whether that copy is the next
        deferred slot, written by the test itself). Kind: "all" (the whole batch in order),
        "distinct" (the hinted samples, in order), "any" (anything else).

        A row within half the anchor separation of anchor row i belongs to i. Any other row is
        given to the nearest original, or to the owner of the nearest row of the previous query
        when that is closer: an iterate is closer to the previous iterate than to any other
        original, even after the attack has moved further than half the distance between two
        originals (large L2/L1 budgets on small inputs).
        """
        b, n = rows.shape[0], self._flat.shape[0]
        if rows.dtype != self._flat.dtype:
            rows = rows.to(self._flat.dtype)
        expected = self._expected(b)
        if expected is not None:
            owners, kind, (anchor, half, box) = expected
            slot = self._next_slot()
            if b != n:
                slot = slot[:b]
            if box is not None:
                # one clamp (into the slot: the copy for free) and one compare; NaN fails it
                torch.clamp(rows, *box, out=slot)
                if torch.equal(slot, rows):
                    return owners, kind, slot, True
                ok = (rows - anchor).abs().amax(1) < half
            else:
                ok = lp_norm(rows - anchor, self._attribution_norm) < half
                if bool(ok.all()):
                    return owners, kind, slot.copy_(rows), True
            idx = torch.where(ok, owners, -1)
        else:
            idx = torch.full((b,), -1, dtype=torch.long, device=rows.device)
        unresolved = idx < 0
        pending = rows[unresolved]
        best, owner = pairwise_distance(pending, self._flat, self.norm).min(1)
        if self._previous is not None:
            prev_rows, prev_idx = self._previous
            prev_dist, prev_pos = pairwise_distance(pending, prev_rows, self.norm).min(1)
            owner = torch.where(prev_dist < best, prev_idx[prev_pos], owner)
        idx[unresolved] = owner
        copy = rows.clone()  # the attack may change its tensor in place
        if expected is not None and torch.equal(idx, expected[0]):  # resolved as expected after all
            if kind == "all":
                self._set_anchor(copy, is_origin=False)
            else:  # these samples' anchor rows move to where they are now
                anchor = self._anchor.clone()
                anchor[idx] = copy
                self._set_anchor(anchor, is_origin=False)
            return idx, kind, copy, False
        return idx, "any", copy, False

    def _next_slot(self) -> Tensor:
        """The buffer slot (N×D) the next deferred query's rows go to."""
        if not self._row_slots:
            self._row_buffer = torch.empty((self._deferred_limit,) + tuple(self._flat.shape),
                                           dtype=self._flat.dtype, device=self._flat.device)
            self._row_slots = list(self._row_buffer.unbind(0))
        return self._row_slots[self._deferred_count]

    def _logit_slot(self, logits: Tensor) -> Tensor:
        """The buffer slot (N×classes) of the next deferred query's logits."""
        if not self._logit_slots:
            self._logit_buffer = torch.empty((self._deferred_limit, len(self._flat)) + tuple(logits.shape[1:]),
                                             dtype=logits.dtype, device=logits.device)
            self._logit_slots = list(self._logit_buffer.unbind(0))
        return self._logit_slots[self._deferred_count]

    @staticmethod
    def _rank_within_batch(idx: Tensor) -> Tensor:
        """For each row, how many earlier rows of the batch belong to the same sample."""
        order = torch.argsort(idx, stable=True)
        sorted_idx = idx[order]
        pos = torch.arange(len(idx), device=idx.device)
        first = torch.full((int(idx.max()) + 1,), len(idx), dtype=torch.long, device=idx.device)
        first.scatter_reduce_(0, sorted_idx, pos, reduce="amin")
        rank = torch.empty_like(idx)
        rank[order] = pos - first[sorted_idx]
        return rank

    # -- counting ------------------------------------------------------------------------------
    def _flush_counts(self) -> None:
        for name, tensor in (("forwards", self._forwards), ("backwards", self._backwards)):
            if self._pending[name]:
                tensor += self._pending[name]
                self._pending[name] = 0

    def _within_budget(self, idx: Tensor, in_order: bool) -> Tensor:
        used = self.queries if in_order else self.queries[idx] + self._rank_within_batch(idx)
        return used < self.budget

    def _count(self, counter: Tensor, idx: Tensor, allowed: Tensor, in_order: bool, everyone: bool) -> None:
        if in_order and everyone:
            counter += 1
            return
        counter.index_add_(0, idx[allowed], torch.ones_like(idx[allowed]))
        if not everyone:
            self.refused.index_add_(0, idx[~allowed], torch.ones_like(idx[~allowed]))

    def _charge(self, counter: str, idx: Tensor, kind: str) -> Tensor | bool:
        """Count one query per row within the budget; True when every row was, else the mask.

        ``_max_used`` (a Python int) lets the common case — one row per sample, nobody at the
        budget — skip the budget test: a whole batch in order costs no tensor operation at all
        (the query waits in ``_pending``), a hinted subset one addition.
        """
        if kind != "any" and self._max_used < self.budget:
            if kind == "all":
                self._pending[counter] += 1
            else:
                (self._forwards if counter == "forwards" else self._backwards).index_add_(
                    0, idx, torch.ones_like(idx))
            self._max_used += 1
            return True
        self._flush_counts()
        in_order = kind == "all"
        allowed = self._within_budget(idx, in_order)
        everyone = bool(allowed.all())
        self._count(self._forwards if counter == "forwards" else self._backwards, idx, allowed, in_order,
                    everyone)
        self._max_used = int(self.queries.max())
        return True if everyone else allowed

    def _is_adversarial(self, logits: Tensor, idx: Tensor) -> Tensor:
        pred = logits.argmax(1)
        if self.targeted:
            return pred == self.targets[idx]
        return pred != self.labels[idx]

    # -- the wrapped model -----------------------------------------------------------------
    def forward(self, x: Tensor) -> Tensor:
        if self.model.training:  # a library that calls train() must not change the model
            self.model.eval()
        rows = x.detach().reshape(x.shape[0], -1)
        idx, kind, copy, in_slot = self.attribute(rows)
        everyone = self._charge("forwards", idx, kind)
        out = self.model(x)
        if everyone is True and kind != "any":
            self._defer(idx, kind, copy, in_slot, out)
        else:
            if everyone is not True:
                out = torch.where(everyone.unsqueeze(1), out, self._refusal_logits(idx, out.dtype))
            if in_slot:  # the slot is not taken: the next query rewrites it
                copy = copy.clone()
            self._previous = (copy, idx)
            self._flush()  # earlier queries first: of two equal distances the earlier one is kept
            self._update_best(copy, out.detach(), idx, everyone)
        if out.requires_grad:
            if everyone is True and kind != "any" and out.grad_fn is not None:
                # a pre-hook on the output's node: cheaper to register than a tensor hook
                out.grad_fn.register_prehook(
                    self._on_backward_in_order if kind == "all" else partial(self._on_backward_known, idx))
            else:
                out.register_hook(partial(self._on_backward, idx=idx, kind=kind))
        return out

    def _defer(self, idx: Tensor, kind: str, copy: Tensor, in_slot: bool, out: Tensor) -> None:
        """Keep an answered query's rows and logits for the next ``_flush``."""
        k = self._deferred_count
        if kind == "all":
            if self._first_in_order:  # is it the clean batch itself? then no extra clean forward
                self._first_in_order = False
                if self._clean_correct is None and torch.equal(copy, self._flat):
                    self._set_clean(out.detach())
            slot, logit_slot = self._next_slot(), self._logit_slot(out)
            self._slot_owners[k] = None
        else:
            slot, logit_slot = self._next_slot()[:len(idx)], self._logit_slot(out)[:len(idx)]
            self._slot_owners[k] = idx
        if not in_slot:  # a slow-path query that resolved as expected
            slot.copy_(copy)
        logit_slot.copy_(out.detach())
        self._deferred_count += 1
        self._previous = (slot, idx)  # a slot is not written again before the next query
        if self._deferred_count == self._deferred_limit:
            self._flush()

    def _on_backward_in_order(self, grad_outputs: tuple[Tensor, ...]) -> tuple[Tensor, ...] | None:
        return self._on_backward_known(self._arange, grad_outputs)

    def _on_backward_known(self, idx: Tensor, grad_outputs: tuple[Tensor, ...]) -> tuple[Tensor, ...] | None:
        everyone = self._charge("backwards", idx, "all" if idx is self._arange else "distinct")
        if everyone is True:
            return None
        b = len(idx)
        return tuple(g * everyone.view((b,) + (1,) * (g.dim() - 1)).to(g.dtype)
                     if g is not None and g.dim() and g.shape[0] == b else g for g in grad_outputs)

    def _on_backward(self, grad: Tensor, idx: Tensor, kind: str) -> Tensor:
        everyone = self._charge("backwards", idx, kind)
        return grad if everyone is True else grad * everyone.unsqueeze(1).to(grad.dtype)

    # -- the best adversarial ------------------------------------------------------------------
    def _flush(self) -> None:
        """Do the best-adversarial update of the deferred in-order queries, all at once.

        Same result as one query at a time: per sample the smallest valid adversarial row wins,
        and of equal ones the earliest (``min`` returns the first minimum's index).
        """
        k = self._deferred_count
        if not k:
            return
        self._deferred_count = 0
        if self.on_progress is not None:
            self.on_progress(self._max_used)
        rows, logits = self._row_buffer[:k], self._logit_buffer[:k]                  # K×N×D, K×N×classes
        if any(owners is not None for owners in self._slot_owners[:k]):
            self._flush_mixed(rows, logits)
            return
        pred = logits.argmax(2)
        adversarial = pred == self.targets if self.targeted else pred != self.labels  # K×N
        columns = adversarial.any(0).nonzero().squeeze(1)  # only samples with an adversarial row
        if not len(columns):
            return
        if len(columns) < len(self._flat):
            rows, logits, adversarial = rows[:, columns], logits[:, columns], adversarial[:, columns]
        dist = lp_norm((rows - self._flat[columns]).flatten(0, 1), self.norm).view(adversarial.shape)
        dist = dist.masked_fill_(~adversarial, float("inf"))
        best = self._best_distance[columns]
        while True:  # once, unless the nearest row of some sample is not valid
            nearest, first = dist.min(0)
            at = (nearest < best).nonzero().squeeze(1)
            if not len(at):
                return
            which = first[at]
            chosen = rows[which, at]
            valid = self._valid(chosen, logits[which, at])
            if bool(valid.all()):
                break
            dist[which[~valid], at[~valid]] = float("inf")  # then that sample's next nearest
        where = columns[at]
        chosen = chosen.clamp(0, 1)
        chosen_dist = lp_norm(chosen - self._flat[where], self.norm).to(best.dtype)
        better = chosen_dist < best[at]  # the clamp moved the row by at most BOX_TOLERANCE
        self._best_distance[where[better]] = chosen_dist[better]
        self._best_adversarial.view(len(self._flat), -1)[where[better]] = chosen[better]

    def _flush_mixed(self, rows: Tensor, logits: Tensor) -> None:
        """``_flush`` when some deferred queries were of hinted subsets (their rows fill the
        first places of their slots): the general update over the rows that are there."""
        k, n = len(rows), len(self._flat)
        owner = self._arange.repeat(k, 1)
        for s, owners in enumerate(self._slot_owners[:k]):
            if owners is not None:
                owner[s, :len(owners)] = owners
                owner[s, len(owners):] = -1
            self._slot_owners[s] = None
        owner = owner.flatten()
        present = owner >= 0
        self._update_best(rows.flatten(0, 1)[present], logits.flatten(0, 1)[present], owner[present], True)

    def _update_best(self, rows: Tensor, logits: Tensor, idx: Tensor, allowed: Tensor | bool) -> None:
        """Offer rows (B×D) with their logits (B×K), owned by ``idx`` (B), as best candidates;
        ``allowed`` masks queries past the budget. Of several rows of one sample the smallest
        wins, and of equal ones the first."""
        candidate = self._is_adversarial(logits, idx)
        if allowed is not True:
            candidate &= allowed
        if not bool(candidate.any()):
            return
        rows_c, idx_c = rows[candidate].to(self._flat.dtype), idx[candidate]
        valid = self._valid(rows_c, logits[candidate])
        if not bool(valid.any()):  # e.g. SparseFool and ART's EAD query points outside the box
            return
        rows_c, idx_c = rows_c[valid].clamp(0, 1), idx_c[valid]
        dist = lp_norm(rows_c - self._flat[idx_c], self.norm)
        better = dist < self._best_distance[idx_c]
        if not bool(better.any()):
            return
        rows_c, idx_c, dist = rows_c[better], idx_c[better], dist[better]
        # several rows of one sample may improve it: keep the smallest (stable: the first of equals)
        order = torch.argsort(dist, stable=True)
        rows_c, idx_c, dist = rows_c[order], idx_c[order], dist[order]
        keep = self._rank_within_batch(idx_c) == 0
        self._best_distance[idx_c[keep]] = dist[keep]
        self._best_adversarial.view(len(self._flat), -1)[idx_c[keep]] = rows_c[keep]

    @staticmethod
    def _valid(rows: Tensor, logits: Tensor) -> Tensor:
        """Finite, in-box rows with finite logits (the clamp to [0, 1] must not change them)."""
        # amin/amax propagate NaN, which then fails the comparison
        return ((rows.amin(1) >= -BOX_TOLERANCE) & (rows.amax(1) <= 1 + BOX_TOLERANCE)
                & torch.isfinite(logits).all(1))

    def offer(self, adversarial: Tensor) -> Tensor:
        """Consider the attack's returned batch (N×…) as best candidates, without counting it.

        A one-step attack never queries its final point; that point is still an adversarial the
        attack found within its budget. Returns the harness's own success mask for it.
        """
        rows = adversarial.detach().reshape(len(self._flat), -1).to(self._flat.dtype)
        with torch.no_grad():
            logits = self.model(adversarial.detach().to(self.inputs.dtype))
        self._finish()
        self._update_best(rows, logits, self._arange, True)
        return self._is_adversarial(logits, self._arange)
