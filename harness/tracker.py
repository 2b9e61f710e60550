"""QueryTracker: the one model wrapper every adapter calls.

It counts forwards and backwards per original sample, caps them at one budget, and keeps the
best (smallest) adversarials seen within that budget.

The attribution rule
--------------------
This is the one definition; ``tests/reference_ledger.py`` follows it one query at a time and the
fast paths below must agree with it exactly (``tests/test_reference_ledger.py``).

Distances are ``distance.pairwise_distance`` / ``distance.lp_norm`` under the *attribution norm*
(the job's norm; L1 for L0 jobs, where a count of changed pixels ties too easily). A coordinate of
a row that is NaN or ±inf is left out of that row's distances (``distance.finite_pairwise_distance``)
and a distance that still comes out NaN counts as infinite.

State: the *anchor*, one row per sample (at first the originals), with each anchor row's *reach*:
half its distance to the nearest original or anchor row of any other sample (∞ when N = 1); and
the *previous query*: the rows and owners of the last non-empty query.

Each forward call of B rows, in call order:

1. B = 0: nobody is charged and nothing changes.
2. Expected owners E (B samples): those named by ``expect(idx)`` when B = len(idx); else 0…N−1
   when B = N; else the previous query's owners when it had B rows; else there is no E. An E that
   names a sample twice is no E.
3. A row p within reach of anchor row E[p] belongs to E[p]. Within reach: L1/L2 distance below the
   reach; L∞: ``a − m ≤ row ≤ a + m`` in every coordinate, with m = clamp(reach − BOX_MARGIN, 0, 2)
   (float32), so that rounding ``a ± m`` cannot contain a row that is not nearest.
4. Every other row belongs to the owner of its nearest *known point*: the N originals and the
   previous query's rows. Ties (equal smallest distance, different owners): E[p] when it is one of
   them; else the tied owner with the fewest queries so far (forwards + backwards + refused, earlier
   rows of this call included); else the lowest index. So a whole batch in order keeps its
   positions even when two originals are identical, an all-NaN row (distance 0 to everything)
   stays with its position, and a library that goes one sample at a time charges a duplicate's
   queries to the twin that has had none.
5. When some row needed step 4, every row is finite and the owners are exactly E, the anchor rows
   of E's samples become this call's rows and every reach is recomputed.
6. Charging, row by row in order: a row whose owner has used fewer than ``budget`` forwards +
   backwards is one forward of it; otherwise it is refused: its logits are replaced by the refusal
   answer and it adds one to ``refused``. A backward through the call is charged row by row the
   same way (one backward, or refused with a zero gradient).
7. Best candidates: a forward row within the budget whose logits are finite and adversarial
   (``success.is_success``: strictly, an exact tie with the label never counts) and
   whose coordinates all lie in [−BOX_TOLERANCE, 1 + BOX_TOLERANCE]. Its point is the row clamped
   to [0, 1], its distance (job norm) that point's. Per sample the tracker keeps the KEEP_BESTS
   candidates of smallest distance, the earliest of equal ones; order: the clean input (distance 0,
   when it is adversarial) first, then rows in call order and row order, then the returned batch
   (``offer``). ``recheck`` (end of job) evaluates the kept points on the unwrapped model, uncounted:
   a best that is not adversarial there is dropped for the next kept one that is, or for nothing.

On a small model (the digits CNN) every tensor operation of the tracker costs a visible fraction
of a forward pass, so the common query — the whole batch, in order, near where the last one was —
takes a path of a handful of operations (``_forward_in_order``): one containment test (step 3), a
counter in Python, and copies of the rows and logits whose best-candidate bookkeeping is done for
many queries at once (``_flush``); its backward, a counter in Python.
"""
from __future__ import annotations

from functools import partial
from typing import Callable

import torch
from torch import Tensor, nn

from .distance import attribution_norm, finite_pairwise_distance, lp_norm, pairwise_distance
from .success import is_success

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
#: best candidates kept per sample: the best, and the ones ``recheck`` falls back on
KEEP_BESTS = 3
#: attributes reassigned on (nearly) every query. ``nn.Module.__setattr__`` checks each assignment
#: for parameters, buffers and submodules, which these never are; on a small model that check,
#: several times a query, was a visible part of the overhead
_PLAIN_ATTRIBUTES = frozenset({
    "_deferred_count", "_previous", "_previous_in_slot", "_max_used", "_hint", "_hint_view",
    "_first_in_order", "_fast_ready", "_anchor", "_anchor_half", "_anchor_box", "_anchor_test",
})


class QueryTracker(nn.Module):
    """Wrap ``model`` for one job on ``inputs`` (N×C×H×W in [0, 1]) and ``labels`` (N).

    Attributes after the attack (all length N, on ``inputs.device``):
    ``forwards``, ``backwards`` (queries within the budget), ``refused`` (queries past it),
    ``best_adversarial`` (N×C×H×W), ``best_distance`` (inf where none was found, 0 where the
    clean input already is adversarial), ``clean_correct``. The attribution rule is in the module
    docstring.
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
        # the same module outside ``_modules``: read on every query, where ``nn.Module.__getattr__``
        # (the lookup of a submodule) costs more than the attribute itself
        object.__setattr__(self, "_inner", self.model)
        self.norm = norm
        self.budget = int(budget)
        self.targeted = targeted
        self.inputs = inputs.detach()
        self.labels = labels.detach()
        self.targets = targets.detach() if targets is not None else None
        self._flat = self.inputs.reshape(len(inputs), -1)
        self._shape = self.inputs.shape
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
        # rows and logits of in-order queries whose best-candidate update is still to be done:
        # slots of a buffer allocated on first use, written in place (no allocation per query).
        # One slot more than a window holds: the previous query's rows move there when the window
        # is processed, so the next query's rows never overwrite them before step 4 reads them.
        row_bytes = max(1, self._flat.numel() * self._flat.element_size())
        self._deferred_limit = max(1, min(DEFERRED_QUERIES, DEFERRED_BYTES // row_bytes))
        self._deferred_count = 0
        self._row_slots: list[Tensor] = []
        self._logit_slots: list[Tensor] = []
        self._previous_in_slot = False
        # whether the whole-batch-in-order query can take ``_forward_in_order`` (see there)
        self._fast_ready = False
        # the kept best candidates, N×KEEP_BESTS (smallest first); empty places hold the original
        self._kept = self._flat.unsqueeze(1).repeat(1, KEEP_BESTS, 1)
        self._kept_distance = torch.full((n, KEEP_BESTS), float("inf"), dtype=self._flat.dtype, device=device)
        # The clean logits (clean accuracy; distance 0 where the clean input is adversarial). Most
        # minimum-norm attacks query the clean batch first: those logits are taken from that
        # query, and the extra clean forward (a few % of a short attack on a large model) is
        # only run when the results are read without such a query having happened.
        self._clean_correct: Tensor | None = None
        self._clean_adversarial: Tensor | None = None
        self._first_in_order = True
        self._num_classes: int | None = None
        self._refusal: Tensor | None = None
        self._attribution_norm = attribution_norm(norm)
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

    def __setattr__(self, name: str, value: object) -> None:
        if name in _PLAIN_ATTRIBUTES:
            object.__setattr__(self, name, value)
        else:
            super().__setattr__(name, value)

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
        return self.kept[1][:, 0]

    @property
    def best_adversarial(self) -> Tensor:
        """The best adversarial per sample (N×C×H×W); the original where none was found."""
        return self.kept[0][:, 0].view_as(self.inputs)

    @property
    def kept(self) -> tuple[Tensor, Tensor]:
        """The kept best candidates: points (N×KEEP_BESTS×D, flattened) and distances
        (N×KEEP_BESTS), smallest first; empty places hold the original at distance inf."""
        self._finish()
        return self._kept, self._kept_distance

    @property
    def clean_correct(self) -> Tensor:
        """Whether the model classifies each clean input right (N)."""
        return self._clean_flags()[0]

    @property
    def clean_adversarial(self) -> Tensor:
        """Whether each clean input already is adversarial (N): misclassified, or the target."""
        return self._clean_flags()[1]

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

    def _clean_flags(self) -> tuple[Tensor, Tensor]:
        """(clean_correct, clean_adversarial), from one clean forward when the attack gave none."""
        self._ensure_clean()
        return self._clean_correct, self._clean_adversarial

    def _set_clean(self, logits: Tensor) -> None:
        self._num_classes = logits.shape[1]
        self._clean_correct = logits.argmax(1) == self.labels
        self._clean_adversarial = self._is_adversarial(logits, self._arange)
        where = self._clean_adversarial.nonzero().squeeze(1)
        if len(where):  # the clean input is each such sample's first candidate (rule, step 7)
            self._merge(self._flat[where], torch.zeros(len(where), dtype=self._flat.dtype,
                                                       device=where.device), where, first=True)

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
        """Make ``rows`` (N×D) the anchor and compute each row's reach (rule, state)."""
        self._anchor, self._anchor_half = rows, anchor_reach(rows, self._flat, self.norm, is_origin=is_origin)
        self._anchor_box = None
        if self._attribution_norm == "linf":
            self._anchor_box = linf_box(rows, self._anchor_half)
            # the box shaped as the inputs: the in-order test needs no reshape of the query
            shape = self.inputs.shape
            self._anchor_test = (self._anchor_box[0].view(shape), self._anchor_box[1].view(shape))
        else:
            # ``distance < reach`` as ``min(distance, the float below reach) == distance``: one
            # comparison of all rows in one operation (NaN fails it, as it fails ``<``)
            self._anchor_test = torch.nextafter(self._anchor_half, self._anchor_half.new_tensor(float("-inf")))

    def expect(self, idx: Tensor | None) -> None:
        """Say which samples (distinct indices, in row order) the next queries are of, or None.

        A hint, not a trust: a batch of that size is checked against those samples' anchor
        rows exactly as a whole batch is checked against all of them, and resolved the long way
        when it does not pass. It spares subset queries (the minimal-ε search attacks the
        samples not yet settled) the B×N distances.
        """
        self._hint = None if idx is None else idx.to(self._arange.device)
        self._hint_view = None
        self._update_fast_ready()

    def _expected(self, b: int) -> tuple[Tensor, str, tuple] | None:
        """(owners E, kind, (anchor rows, reaches, L∞ box)) of a batch of ``b`` rows (rule,
        step 2), or None when there is no E."""
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
        """Owner (original index) of each flattened row (B×D, B > 0), by the rule (steps 2–5).

        Returns (B indices, kind, a private copy of ``rows``, whether that copy is the next
        deferred slot, written by the test itself). Kind: "all" (the whole batch in order),
        "distinct" (the expected samples, in order), "any" (anything else).
        """
        b = rows.shape[0]
        if rows.dtype != self._flat.dtype:
            rows = rows.to(self._flat.dtype)
        expected = self._expected(b)
        owners = None
        if expected is not None:
            owners, kind, (anchor, half, box) = expected
            slot = self._next_slot()
            if b != len(slot):
                slot = slot[:b]
            if box is not None:
                # one clamp (into the slot: the copy for free) and one compare; NaN fails it
                torch.clamp(rows, *box, out=slot)
                if torch.equal(slot, rows):
                    return owners, kind, slot, True
                ok = ((rows >= box[0]) & (rows <= box[1])).all(1)
            else:
                ok = lp_norm(rows - anchor, self._attribution_norm) < half
                if bool(ok.all()):
                    return owners, kind, slot.copy_(rows), True
            idx = torch.where(ok, owners, -1)
        else:
            idx = torch.full((b,), -1, dtype=torch.long, device=rows.device)
        unresolved = (idx < 0).nonzero().squeeze(1)
        known, known_owner = self._flat, self._arange
        if self._previous is not None:
            known = torch.cat([self._flat, self._previous[0]])
            known_owner = torch.cat([self._arange, self._previous[1]])
        dist = finite_pairwise_distance(rows[unresolved], known, self.norm)
        nearest, first = dist.min(1)
        idx[unresolved] = known_owner[first]
        tied = ((dist == nearest.unsqueeze(1)) & (known_owner != idx[unresolved].unsqueeze(1))).any(1)
        if bool(tied.any()):  # rare (identical originals, all-NaN rows): step 4's tie rule
            idx = self._break_ties(idx, unresolved, dist, nearest, known_owner, owners)
        copy = rows.clone()  # the attack may change its tensor in place
        if expected is not None and torch.equal(idx, owners):  # resolved as expected after all
            if bool(torch.isfinite(copy).all()):
                if kind == "all":
                    self._set_anchor(copy, is_origin=False)
                else:  # these samples' anchor rows move to where they are now
                    anchor = self._anchor.clone()
                    anchor[idx] = copy
                    self._set_anchor(anchor, is_origin=False)
            return idx, kind, copy, False
        return idx, "any", copy, False

    def _break_ties(self, idx: Tensor, unresolved: Tensor, dist: Tensor, nearest: Tensor,
                    known_owner: Tensor, expected: Tensor | None) -> Tensor:
        """Step 4's ties, row by row in order (earlier rows of the call count as queries)."""
        self._flush_counts()
        used = (self._forwards + self._backwards + self.refused).tolist()
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

    def _next_slot(self) -> Tensor:
        """The buffer slot (N×D) the next deferred query's rows go to."""
        if not self._row_slots:
            # one spare slot at the end: where the previous query's rows wait (see __init__)
            self._row_buffer = torch.empty((self._deferred_limit + 1,) + tuple(self._flat.shape),
                                           dtype=self._flat.dtype, device=self._flat.device)
            self._row_slots = list(self._row_buffer.unbind(0))
            self._row_slots_shaped = [slot.view(self._shape) for slot in self._row_slots]
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
        """Count one query per row within the budget (step 6); True when every row was, else
        the mask.

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
        return is_success(logits, self.labels[idx], self.targets[idx] if self.targeted else None)

    def judge(self, logits: Tensor, idx: Tensor) -> Tensor:
        """Whether logits (B×classes) of rows owned by ``idx`` (B) are adversarial (B)."""
        return self._is_adversarial(logits, idx)

    # -- the wrapped model -----------------------------------------------------------------
    def forward(self, x: Tensor) -> Tensor:
        model = self._inner
        if model.training:  # a library that calls train() must not change the model
            model.eval()
        if (self._fast_ready and self._max_used < self.budget and x.shape == self._shape
                and x.dtype == self._flat.dtype):
            out = self._forward_in_order(model, x)
            if out is not None:
                return out
        if x.shape[0] == 0:  # step 1: nobody to charge
            return model(x)
        rows = x.detach().reshape(x.shape[0], -1)
        idx, kind, copy, in_slot = self.attribute(rows)
        everyone = self._charge("forwards", idx, kind)
        out = model(x)
        if everyone is True and kind != "any":
            self._defer(idx, kind, copy, in_slot, out)
        else:
            if everyone is not True:
                out = torch.where(everyone.unsqueeze(1), out, self._refusal_logits(idx, out.dtype))
            if in_slot:  # the slot is not taken: the next query rewrites it
                copy = copy.clone()
            self._previous, self._previous_in_slot = (copy, idx), False
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

    def _forward_in_order(self, model: nn.Module, x: Tensor) -> Tensor | None:
        """``forward`` of the common query — the whole batch, in order, within reach of the anchor,
        nobody at the budget (the caller checks that) — in the fewest operations; None (nothing
        done) when the rows are not all within reach, for the general path to resolve.

        The same steps as the general path takes for such a query (3, 6, the deferral of 7), without
        its per-query Python: on the digits CNN a forward and backward take a few milliseconds, and
        every tensor operation or method call of the tracker costs microseconds more than a
        microbenchmark shows, run between the model's own operations (cold caches).
        """
        k = self._deferred_count
        slot = self._row_slots[k]
        test = self._anchor_test
        xd = x.detach()
        if self._anchor_box is not None:  # step 3, L∞: one clamp into the slot, one comparison
            shaped = self._row_slots_shaped[k]
            torch.clamp(xd, test[0], test[1], out=shaped)
            if not torch.equal(shaped, xd):  # NaN fails it
                return None
        else:  # step 3, L1/L2: distance ≤ the float below the reach, i.e. < the reach
            rows = xd.reshape(len(xd), -1)
            dist = lp_norm(rows - self._anchor, self._attribution_norm)
            if not torch.equal(torch.minimum(dist, test), dist):
                return None
            slot.copy_(rows)
        self._pending["forwards"] += 1  # step 6: one forward each, nobody refused
        self._max_used += 1
        out = model(x)
        self._logit_slots[k].copy_(out.detach())
        self._slot_owners[k] = None
        self._deferred_count = k + 1
        self._previous, self._previous_in_slot = (slot, self._arange), True
        if k + 1 == self._deferred_limit:
            self._flush()
        if out.requires_grad:
            if out.grad_fn is not None:
                out.grad_fn.register_prehook(self._on_backward_in_order)
            else:
                out.register_hook(partial(self._on_backward, idx=self._arange, kind="all"))
        return out

    def _update_fast_ready(self) -> None:
        """Whether a whole batch in order may take ``_forward_in_order``: the clean-batch check of
        the first such query is done, the deferred buffers exist, and no hint names N samples
        (a hint of N samples other than 0…N−1 makes them the expected owners, step 2)."""
        self._fast_ready = (not self._first_in_order and bool(self._row_slots) and bool(self._logit_slots)
                            and (self._hint is None or len(self._hint) != len(self._flat)))

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
        self._previous, self._previous_in_slot = (slot, idx), True
        if kind == "all" and not self._fast_ready:
            self._update_fast_ready()
        if self._deferred_count == self._deferred_limit:
            self._flush()

    def _on_backward_in_order(self, grad_outputs: tuple[Tensor, ...]) -> tuple[Tensor, ...] | None:
        if self._max_used < self.budget:  # ``_charge``'s common case, without the call
            self._pending["backwards"] += 1
            self._max_used += 1
            return None
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
        """Offer the deferred queries' rows as best candidates, all at once (same result as one
        query at a time: candidates are taken in query order, then row order)."""
        k = self._deferred_count
        if self._previous_in_slot:  # the next query writes the window's first slot again
            spare = self._row_slots[-1][:len(self._previous[1])]
            spare.copy_(self._previous[0])
            self._previous, self._previous_in_slot = (spare, self._previous[1]), False
        if not k:
            return
        self._deferred_count = 0
        if self.on_progress is not None:
            self.on_progress(self._max_used)
        rows, logits = self._row_buffer[:k], self._logit_buffer[:k]                  # K×N×D, K×N×classes
        if all(owners is None for owners in self._slot_owners[:k]):
            self._flush_in_order(rows, logits)
            return
        owner = self._arange.repeat(k, 1)
        for s, owners in enumerate(self._slot_owners[:k]):
            if owners is not None:  # a hinted subset: its rows fill the first places of the slot
                owner[s, :len(owners)] = owners
                owner[s, len(owners):] = -1
            self._slot_owners[s] = None
        owner = owner.flatten()
        present = owner >= 0
        rows, logits = rows.flatten(0, 1), logits.flatten(0, 1)
        if not bool(present.all()):
            rows, logits, owner = rows[present], logits[present], owner[present]
        self._update_best(rows, logits, owner, True)

    def _flush_in_order(self, rows: Tensor, logits: Tensor) -> None:
        """``_flush`` of whole batches in order (K×N×D rows, K×N×classes logits): per sample only
        its KEEP_BESTS smallest candidates of the window (a stable sort over the K queries keeps
        the earliest of equals first) are merged, not every adversarial row."""
        adversarial = is_success(logits, self.labels, self.targets if self.targeted else None)  # K×N
        columns = adversarial.any(0).nonzero().squeeze(1)  # only samples with an adversarial row
        if not len(columns):
            return
        if len(columns) < len(self._flat):
            rows, logits, adversarial = rows[:, columns], logits[:, columns], adversarial[:, columns]
        ok = (adversarial & (rows.amin(2) >= -BOX_TOLERANCE) & (rows.amax(2) <= 1 + BOX_TOLERANCE)
              & torch.isfinite(logits).all(2))  # step 7; NaN fails the comparisons
        points = rows.clamp(0, 1)
        dist = lp_norm((points - self._flat[columns]).flatten(0, 1), self.norm).view(ok.shape)
        dist, order = dist.masked_fill_(~ok, float("inf")).sort(dim=0, stable=True)
        t = min(KEEP_BESTS, len(dist))
        dist, order = dist[:t], order[:t]                                              # t×N'
        col, rank = (dist < self._kept_distance[columns, -1]).T.nonzero().unbind(1)  # by sample, then rank
        if len(col):
            self._merge(points[order[rank, col], col], dist[rank, col], columns[col])

    def _update_best(self, rows: Tensor, logits: Tensor, idx: Tensor, allowed: Tensor | bool) -> None:
        """Offer rows (B×D) with their logits (B×K), owned by ``idx`` (B), in order, as best
        candidates (step 7); ``allowed`` masks queries past the budget."""
        candidate = self._is_adversarial(logits, idx)
        if allowed is not True:
            candidate &= allowed
        if not bool(candidate.any()):
            return
        rows_c, idx_c = rows[candidate].to(self._flat.dtype), idx[candidate]
        valid = self._valid(rows_c, logits[candidate])
        if not bool(valid.any()):  # e.g. SparseFool and ART's EAD query points outside the box
            return
        points, idx_c = rows_c[valid].clamp(0, 1), idx_c[valid]
        self._merge(points, lp_norm(points - self._flat[idx_c], self.norm), idx_c)

    def _merge(self, points: Tensor, dist: Tensor, owner: Tensor, first: bool = False) -> None:
        """Merge candidates (M×D points, M distances, M owners, in order) into the kept ones:
        per sample the KEEP_BESTS smallest, the earliest of equals (``first``: these candidates
        come before the kept ones)."""
        worst = self._kept_distance[owner, -1]
        worth = dist <= worst if first else dist < worst
        if not bool(worth.all()):
            points, dist, owner = points[worth], dist[worth], owner[worth]
        if not len(owner):
            return
        t = KEEP_BESTS
        groups, group = torch.unique(owner, return_inverse=True)
        m = len(groups)
        kept_points, kept_dist = self._kept[groups].flatten(0, 1), self._kept_distance[groups].flatten()
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
        self._kept[groups] = pool_points[chosen]
        self._kept_distance[groups] = pool_dist[chosen]

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

    def recheck(self) -> Tensor:
        """End of job: evaluate each sample's best on the unwrapped model, uncounted; one that is
        not adversarial there gives way to the next kept candidate that is, or to none (rule,
        step 7). Returns, per sample (N), how many kept candidates were dropped."""
        self._finish()
        n, t = self._kept_distance.shape
        dropped = torch.zeros(n, dtype=torch.long, device=self._arange.device)
        todo = torch.isfinite(self._kept_distance[:, 0]).nonzero().squeeze(1)
        with torch.no_grad():
            while len(todo):
                points = self._kept[todo, 0].view((len(todo),) + tuple(self.inputs.shape[1:]))
                bad = todo[~self._is_adversarial(self.model(points.to(self.inputs.dtype)), todo)]
                if not len(bad):
                    break
                self._kept[bad] = torch.cat([self._kept[bad, 1:], self._flat[bad].unsqueeze(1)], 1)
                self._kept_distance[bad] = torch.cat(
                    [self._kept_distance[bad, 1:], self._kept_distance.new_full((len(bad), 1), float("inf"))], 1)
                dropped[bad] += 1
                todo = bad[torch.isfinite(self._kept_distance[bad, 0])]
        return dropped


def anchor_reach(rows: Tensor, originals: Tensor, norm: str, *, is_origin: bool = False) -> Tensor:
    """Each anchor row's reach (N): half its distance to the nearest original or anchor row of
    another sample; inf when there is no other sample (rule, state)."""
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
