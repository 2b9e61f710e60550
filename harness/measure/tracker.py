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
4. A row p that step 3 leaves belongs to E[p] when B > 1 or a hint names E, the previous query
   had B rows, its row p was E[p]'s, and the row is within reach (step 3's test) of no
   original, each with its reach among the originals (half its distance to the nearest other one): an iterate far from
   every clean image stays with its position, however near another sample's original or iterate
   it is relative to its own (Brendel-Bethge's L0 steps move a digit 42 pixels in one step, nearer
   another digit than its own, and bring two digits' iterates within 0.26 of each other in L1).
   Every other row belongs to the owner of its nearest *known point*: the N originals and the
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
   a best that is not adversarial there is dropped for the next kept one that is, or for nothing;
   before the returned batch, ``drop_shared_bests`` drops a best that is one output shared by
   several samples whose originals differ (a default the attack queried itself).

Where each step lives: steps 2–5 and the state in ``attribution.py`` (``Attribution``), step 6
in ``query_ledger.py`` (``QueryLedger``: counts, budget, refusals), step 7 in ``best_keeper.py``
(``BestKeeper``), and the rows and logits that wait for step 7 in ``query_window.py``
(``QueryWindow``). The tracker below composes them and is the only one that sees a query whole.

The common query (the whole batch, in order, near the last one) takes ``_forward_in_order``: one
containment test (step 3), a counter, and bookkeeping deferred for many queries (``_flush``).
"""
from __future__ import annotations

from functools import partial
from typing import Callable

import torch
from torch import Tensor, nn

from attackaudit.measure.attribution import BOX_MARGIN, Attribution, anchor_reach, linf_box
from attackaudit.measure.best_keeper import BOX_TOLERANCE, KEEP_BESTS, BestKeeper
from attackaudit.measure.criterion import Criterion, Targeted, Untargeted
from attackaudit.measure.distance import lp_norm
from attackaudit.measure.fallback import default_outputs, is_shared
from attackaudit.measure.success import is_success
from attackaudit.measure.query_ledger import REFUSAL_SCALE, QueryLedger
from attackaudit.measure.query_window import DEFERRED_BYTES, DEFERRED_QUERIES, QueryWindow
from attackaudit.results.schema import DEFAULT_BUDGET

# the rule's constants and helpers, read from here by the job, the benchmarks and the tests
__all__ = ["QueryTracker", "BOX_MARGIN", "BOX_TOLERANCE", "DEFERRED_BYTES", "DEFERRED_QUERIES", "KEEP_BESTS",
           "REFUSAL_SCALE", "anchor_reach", "linf_box"]

#: tracker attributes reassigned during a job. ``nn.Module.__setattr__`` checks each assignment
#: for parameters, buffers and submodules, which these never are (the per-query state lives in
#: the parts, plain objects)
_PLAIN_ATTRIBUTES = frozenset({"_first_in_order", "_fast_ready"})


class QueryTracker(nn.Module):
    """Wrap ``model`` for one job on ``inputs`` (N×C×H×W in [0, 1]) and ``labels`` (N).

    Attributes after the attack (all length N, on ``inputs.device``):
    ``forwards``, ``backwards`` (queries within the budget), ``refused`` (queries past it),
    ``best_adversarial`` (N×C×H×W), ``best_distance`` (inf where none was found, 0 where the
    clean input already is adversarial), ``clean_correct``. The attribution rule is in the module
    docstring.
    """

    def __init__(self, model: nn.Module, inputs: Tensor, labels: Tensor, *, norm: str,
                 budget: int = DEFAULT_BUDGET, criterion: Criterion | None = None, targeted: bool = False,
                 targets: Tensor | None = None, on_progress: Callable[[int], None] | None = None,
                 clean_logits: Tensor | None = None) -> None:
        """``criterion``: ``Untargeted()`` (the default) or ``Targeted(targets)`` (N targets;
        ``targeted=True, targets=...`` is the older spelling). ``on_progress(queries)``: told, every
        batch of deferred queries, the most queries any sample has used (a progress bar's count).
        ``clean_logits`` (N×classes): the model's logits on ``inputs``, when the caller has them."""
        super().__init__()
        self.on_progress = on_progress
        if criterion is None:
            if targeted and targets is None:
                raise ValueError("a targeted QueryTracker needs targets")
            criterion = Targeted(targets) if targeted else Untargeted()
        elif targeted or targets is not None:
            raise ValueError("give QueryTracker either criterion= or targeted=/targets=, not both")
        self.criterion = criterion
        self.model = model.eval()
        # outside ``_modules``: ``nn.Module.__getattr__`` on every query costs more than the model
        object.__setattr__(self, "_inner", self.model)
        self.norm = norm
        self.targeted = criterion.targeted
        self.inputs = inputs.detach()
        self.labels = labels.detach()
        self.targets = criterion.targets.detach() if criterion.targeted else None
        self._flat = self.inputs.reshape(len(inputs), -1)
        self._shape = self.inputs.shape
        self._arange = torch.arange(len(inputs), device=inputs.device)  # the parts share it (identity)
        success_targets = self.targets  # None untargeted: the one success rule reads the label
        self._ledger = QueryLedger(self.labels, success_targets, budget, self._arange)
        self._attribution = Attribution(self._flat, self._shape, norm, self._arange)
        self._keeper = BestKeeper(self._flat, norm, self.labels, success_targets)
        # DEFERRED_QUERIES is read from this module at construction: a test shrinks the window here
        self._window = QueryWindow(self._flat, self._shape, max_queries=DEFERRED_QUERIES,
                                   max_bytes=DEFERRED_BYTES)
        # whether the whole-batch-in-order query can take ``_forward_in_order`` (see there)
        self._fast_ready = False
        # The clean logits come from the attack's first clean-batch query where there is one; an
        # extra clean forward (a few % of a short attack) only when results are read without it.
        self._clean_correct: Tensor | None = None
        self._clean_adversarial: Tensor | None = None
        self._first_in_order = True
        self._num_classes: int | None = None
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
    def budget(self) -> int:
        """Forwards + backwards allowed per sample."""
        return self._ledger.budget

    @property
    def forwards(self) -> Tensor:
        """Forward passes per sample within the budget (N)."""
        return self._ledger.forwards

    @property
    def backwards(self) -> Tensor:
        """Backward passes per sample within the budget (N)."""
        return self._ledger.backwards

    @property
    def refused(self) -> Tensor:
        """Queries per sample past the budget (N)."""
        return self._ledger.refused

    @property
    def queries(self) -> Tensor:
        """Forwards + backwards per sample (N)."""
        return self._ledger.queries

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
        return self._keeper.points, self._keeper.distances

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
        self._clean_adversarial = self._keeper.is_adversarial(logits, self._arange)
        # the clean input is each such sample's first candidate (rule, step 7)
        self._keeper.add_clean(self._clean_adversarial.nonzero().squeeze(1))

    def _finish(self) -> None:
        self._flush()
        self._ensure_clean()

    # -- attribution (the parts: attribution.py) ------------------------------------------------
    def expect(self, idx: Tensor | None) -> None:
        """Say which samples (distinct indices, in row order) the next queries are of, or None.

        A hint, not a trust: a batch of that size is checked against those samples' anchor
        rows exactly as a whole batch is checked against all of them, and resolved the long way
        when it does not pass. It spares subset queries (the minimal-ε search attacks the
        samples not yet settled) the B×N distances.
        """
        self._attribution.expect(idx)
        self._update_fast_ready()

    def attribute(self, rows: Tensor) -> tuple[Tensor, str, Tensor, bool]:
        """Owner (original index) of each flattened row (B×D, B > 0), by the rule (steps 2–5).

        Returns (B indices, kind, a private copy of ``rows``, whether that copy is the next
        deferred slot, written by the test itself). Kind: "all" (the whole batch in order),
        "distinct" (the expected samples, in order), "any" (anything else).
        """
        return self._attribution.attribute(rows, self._window.row_slot, self._ledger.used)

    def judge(self, logits: Tensor, idx: Tensor) -> Tensor:
        """Whether logits (B×classes) of rows owned by ``idx`` (B) are adversarial (B)."""
        return self._keeper.is_adversarial(logits, idx)

    # -- the wrapped model -----------------------------------------------------------------
    def forward(self, x: Tensor) -> Tensor:
        model = self._inner
        if model.training:  # a library that calls train() must not change the model
            model.eval()
        ledger = self._ledger
        if (self._fast_ready and ledger.max_used < ledger.budget and x.shape == self._shape
                and x.dtype == self._flat.dtype):
            out = self._forward_in_order(model, x)
            if out is not None:
                return out
        if x.shape[0] == 0:  # step 1: nobody to charge
            return model(x)
        rows = x.detach().reshape(x.shape[0], -1)
        idx, kind, copy, in_slot = self.attribute(rows)
        everyone = ledger.charge("forwards", idx, kind)
        out = model(x)
        if everyone is True and kind != "any":
            self._defer(idx, kind, copy, in_slot, out)
        else:
            if everyone is not True:
                out = torch.where(everyone.unsqueeze(1), out,
                                  ledger.refusal_logits(idx, out.dtype, self.num_classes))
            if in_slot:  # the slot is not taken: the next query rewrites it
                copy = copy.clone()
            self._attribution.remember(copy, idx, in_slot=False)
            self._flush()  # earlier queries first: of two equal distances the earlier one is kept
            self._keeper.offer(copy, out.detach(), idx, everyone)
        if out.requires_grad:
            if everyone is True and kind != "any" and out.grad_fn is not None:
                # a pre-hook on the output's node: cheaper to register than a tensor hook
                out.grad_fn.register_prehook(
                    ledger.on_backward_in_order if kind == "all" else partial(ledger.on_backward_known, idx))
            else:
                out.register_hook(partial(ledger.on_backward, idx=idx, kind=kind))
        return out

    def _forward_in_order(self, model: nn.Module, x: Tensor) -> Tensor | None:
        """``forward`` of the common query — the whole batch, in order, within reach of the anchor,
        nobody at the budget (the caller checks that) — in the fewest operations; None (nothing
        done) when the rows are not all within reach, for the general path to resolve.

        The general path's steps 3, 6 and 7's deferral without its per-query Python, which costs
        a visible fraction of a digits-CNN forward (milliseconds).
        """
        window = self._window
        k = window.count
        slot = window.row_slots[k]
        if not self._attribution.contains_whole_batch(x.detach(), slot, window.shaped_slots[k]):
            return None
        ledger = self._ledger
        ledger.charge_whole_batch("forwards")  # step 6: one forward each, nobody refused
        out = model(x)
        window.push(None, out.detach(), None)
        self._attribution.remember(slot, self._arange, in_slot=True)
        if window.full:
            self._flush()
        if out.requires_grad:
            if out.grad_fn is not None:
                out.grad_fn.register_prehook(ledger.on_backward_in_order)
            else:
                out.register_hook(partial(ledger.on_backward, idx=self._arange, kind="all"))
        return out

    @property
    def _deferred_limit(self) -> int:
        """Queries the window holds before it is processed (tests/test_tracker.py reads it)."""
        return self._window.limit

    def _update_fast_ready(self) -> None:
        """Whether a whole batch in order may take ``_forward_in_order``: the clean-batch check of
        the first such query is done, the window's buffers exist, and no hint names N samples
        (a hint of N samples other than 0…N−1 makes them the expected owners, step 2)."""
        hint = self._attribution.hint
        self._fast_ready = (not self._first_in_order and self._window.ready
                            and (hint is None or len(hint) != len(self._flat)))

    def _defer(self, idx: Tensor, kind: str, copy: Tensor, in_slot: bool, out: Tensor) -> None:
        """Keep an answered query's rows and logits in the window for the next ``_flush``."""
        logits = out.detach()
        if kind == "all" and self._first_in_order:  # the clean batch itself? then no extra clean forward
            self._first_in_order = False
            if self._clean_correct is None and torch.equal(copy, self._flat):
                self._set_clean(logits)
        window = self._window
        # ``in_slot``: the containment test already wrote the rows there
        slot = window.push(None if in_slot else copy, logits, None if kind == "all" else idx)
        self._attribution.remember(slot, idx, in_slot=True)
        if kind == "all" and not self._fast_ready:
            self._update_fast_ready()
        if window.full:
            self._flush()

    # -- the best adversarial (the parts: best_keeper.py, query_window.py) ----------------------
    def _flush(self) -> None:
        """Offer the window's queries as best candidates, all at once (same result as one query at
        a time: candidates are taken in query order, then row order)."""
        window, attribution = self._window, self._attribution
        if attribution.previous_in_slot:  # the next query writes the window's first slot again
            attribution.move_previous(window.spare(len(attribution.previous[1])))
        if not window.count:
            return
        rows, logits, owners = window.take()
        if self.on_progress is not None:
            self.on_progress(self._ledger.max_used)
        self._keeper.offer_window(rows, logits, owners)

    def offer(self, adversarial: Tensor, exclude: Tensor | None = None) -> Tensor:
        """Consider the attack's returned batch (N×…) as best candidates, without counting it.

        A one-step attack never queries its final point; that point is still an adversarial the
        attack found within its budget. ``exclude`` (N bools, ``fallbacks``): rows that are not
        offered and never count. Returns the harness's own success mask for it (False where excluded).
        """
        rows = adversarial.detach().reshape(len(self._flat), -1).to(self._flat.dtype)
        with torch.no_grad():
            logits = self.model(adversarial.detach().to(self.inputs.dtype))
        self._finish()
        allowed = True if exclude is None else ~exclude.to(self._flat.device)
        self._keeper.offer(rows, logits, self._arange, allowed)
        success = self._keeper.is_adversarial(logits, self._arange)
        return success if allowed is True else success & allowed

    def fallbacks(self, returned: Tensor, idx: Tensor | None = None,
                  closer_only: bool = True) -> tuple[Tensor, list[str]]:
        """Which returned rows of samples ``idx`` (B; None: all N) are fallbacks (fallback.py): a
        default output adversarial on the unwrapped model (uncounted) and, with ``closer_only``,
        closer than every adversarial the queries found (a fixed-ε call's default counts wherever
        it lies); targeted, also one shared by images in a third class (a target ignored, to
        read). (B bools, B descriptions)."""
        idx = self._arange if idx is None else idx.to(self._flat.device)
        rows = returned.detach().reshape(len(idx), -1).to(self._flat.dtype).clamp(0, 1)
        default, words = default_outputs(rows, self._flat[idx])
        if not bool(default.any()):
            return default, words
        with torch.no_grad():
            logits = self.model(rows.view((len(idx),) + tuple(self._shape[1:])))
        hit = self._keeper.is_adversarial(logits, idx)
        mask = default & hit
        if closer_only:
            mask &= lp_norm(rows - self._flat[idx], self.norm) < self.best_distance[idx]
        if self.targets is not None:  # a default in a third class is no ignored target: name it
            # only one shared by several images: a lone constant image there can be a search's end
            # (ART's JSMA saturates every pixel of a digit it cannot bring to its target: all-one)
            shared = torch.tensor([is_shared(w) for w in words], dtype=torch.bool, device=default.device)
            mask |= default & shared & ~hit & is_success(logits, self.labels[idx], None)
        return mask, [w if m else "" for w, m in zip(words, mask.tolist())]

    def best_margin(self) -> Tensor:
        """Per sample (N), the success margin of the best on the unwrapped model (uncounted), over
        its largest |logit|: the winning logit minus the one it must beat (target minus the largest
        other when targeted, the largest other minus the label's when not); NaN without a best.
        About 0 (float rounding) is an exact decision-boundary point."""
        best = self.best_adversarial
        with torch.no_grad():
            z = self.model(best.to(self.inputs.dtype)).double()
        if self.targets is not None:
            goal = z.gather(1, self.targets.view(-1, 1)).squeeze(1)
            margin = goal - z.scatter(1, self.targets.view(-1, 1), float("-inf")).amax(1)
        else:
            own = z.gather(1, self.labels.view(-1, 1)).squeeze(1)
            margin = z.scatter(1, self.labels.view(-1, 1), float("-inf")).amax(1) - own
        scale = z.abs().amax(1).clamp_min(1e-12)
        return torch.where(torch.isfinite(self.best_distance), margin / scale, torch.full_like(margin, float("nan")))

    def drop_shared_bests(self) -> Tensor:
        """Rule, step 7: a best that is one output shared by samples whose originals differ (foolbox's
        C&W L2 queries its all-zero default) gives way to the next kept one. Dropped per sample (N)."""
        self._finish()
        return self._keeper.drop_unconfirmed(lambda points, owners: torch.tensor(
            [not is_shared(w) for w in default_outputs(points, self._flat[owners])[1]],
            dtype=torch.bool, device=points.device))

    def recheck(self) -> Tensor:
        """End of job: evaluate each sample's best on the unwrapped model, uncounted; one that is
        not adversarial there gives way to the next kept candidate that is, or to none (rule,
        step 7). Returns, per sample (N), how many kept candidates were dropped."""
        self._finish()
        sample_shape = tuple(self.inputs.shape[1:])

        def still_adversarial(points: Tensor, owners: Tensor) -> Tensor:
            logits = self.model(points.view((len(points),) + sample_shape).to(self.inputs.dtype))
            return self._keeper.is_adversarial(logits, owners)

        with torch.no_grad():
            return self._keeper.drop_unconfirmed(still_adversarial)
