"""The query ledger: forwards, backwards and refusals per sample under one budget.

Step 6 of the attribution rule (the module docstring of ``harness/measure/tracker.py``, the one
definition): once each row of a query has an owner, the row is one forward (or, through its
gradient, one backward) of that owner while the owner has used fewer than ``budget`` forwards +
backwards; past that it is refused: a forward row gets the refusal answer, a backward row a zero
gradient, and the owner's ``refused`` grows by one.

The common query (the whole batch, in order, nobody near the budget) is counted in a Python int
(``pending``), not in the tensors: on a small model a tensor operation per query is a visible
share of a forward pass.
"""
from __future__ import annotations

import torch
from torch import Tensor

#: logit scale of the non-adversarial answer given to queries past the budget
REFUSAL_SCALE = 1e4


class QueryLedger:
    """Per-sample counts of ``n`` samples under ``budget`` forwards + backwards each.

    ``labels`` (n) and ``targets`` (n, or None when untargeted) define the refusal answer.
    ``arange`` (0…n−1) is the owners tensor of a whole batch in order, shared with the tracker: a
    backward through a query owned by this very tensor is counted as a whole batch in order.
    """

    def __init__(self, labels: Tensor, targets: Tensor | None, budget: int, arange: Tensor) -> None:
        n, device = len(labels), arange.device
        if len(arange) != n:
            raise ValueError(f"QueryLedger: arange has {len(arange)} entries for {n} samples")
        self.labels, self.targets, self.budget, self.arange = labels, targets, int(budget), arange
        self._forwards = torch.zeros(n, dtype=torch.long, device=device)
        self._backwards = torch.zeros(n, dtype=torch.long, device=device)
        #: queries past the budget, per sample (n)
        self.refused = torch.zeros(n, dtype=torch.long, device=device)
        # whole-batch-in-order queries not yet added to the tensors above
        self._pending = {"forwards": 0, "backwards": 0}
        #: max over samples of forwards + backwards, pending included (a Python int: the common
        #: case's budget test costs no tensor operation)
        self.max_used = 0
        self._refusal: Tensor | None = None

    # -- reading ------------------------------------------------------------------------------
    @property
    def forwards(self) -> Tensor:
        """Forward passes per sample within the budget (n)."""
        self.flush()
        return self._forwards

    @property
    def backwards(self) -> Tensor:
        """Backward passes per sample within the budget (n)."""
        self.flush()
        return self._backwards

    @property
    def queries(self) -> Tensor:
        """Forwards + backwards per sample (n)."""
        return self.forwards + self.backwards

    def used(self) -> list[int]:
        """Forwards + backwards + refused per sample, as Python ints (step 4's tie rule)."""
        self.flush()
        return (self._forwards + self._backwards + self.refused).tolist()

    def flush(self) -> None:
        """Add the pending whole-batch queries to the per-sample tensors."""
        for name, tensor in (("forwards", self._forwards), ("backwards", self._backwards)):
            if self._pending[name]:
                tensor += self._pending[name]
                self._pending[name] = 0

    # -- charging (step 6) ----------------------------------------------------------------------
    def charge_whole_batch(self, counter: str) -> None:
        """One query of every sample, the whole batch in order, when the caller knows that
        ``max_used < budget`` (nobody is refused): a Python addition, no tensor operation."""
        self._pending[counter] += 1
        self.max_used += 1

    def charge(self, counter: str, idx: Tensor, kind: str) -> Tensor | bool:
        """Count one query (``counter``: "forwards" or "backwards") per row owned by ``idx`` (B),
        row by row in order; True when every row was within the budget, else the B mask of those
        that were. ``kind`` says how ``idx`` owns the rows: "all" (the whole batch in order, row i
        is sample i), "distinct" (one row per sample) or "any" (repeats allowed).

        ``max_used`` lets the common case — one row per sample, nobody at the budget — skip the
        budget test: a whole batch in order costs no tensor operation, a named subset one addition.
        """
        if kind != "any" and self.max_used < self.budget:
            if kind == "all":
                self._pending[counter] += 1
            else:
                self._counter(counter).index_add_(0, idx, torch.ones_like(idx))
            self.max_used += 1
            return True
        self.flush()
        in_order = kind == "all"
        allowed = self._within_budget(idx, in_order)
        everyone = bool(allowed.all())
        self._count(self._counter(counter), idx, allowed, in_order, everyone)
        self.max_used = int(self.queries.max())
        return True if everyone else allowed

    def _counter(self, counter: str) -> Tensor:
        return self._forwards if counter == "forwards" else self._backwards

    def _within_budget(self, idx: Tensor, in_order: bool) -> Tensor:
        used = self.queries if in_order else self.queries[idx] + rank_within_batch(idx)
        return used < self.budget

    def _count(self, counter: Tensor, idx: Tensor, allowed: Tensor, in_order: bool, everyone: bool) -> None:
        if in_order and everyone:
            counter += 1
            return
        counter.index_add_(0, idx[allowed], torch.ones_like(idx[allowed]))
        if not everyone:
            self.refused.index_add_(0, idx[~allowed], torch.ones_like(idx[~allowed]))

    def refusal_logits(self, idx: Tensor, dtype: torch.dtype, num_classes: int) -> Tensor:
        """The answer past the budget for rows owned by ``idx`` (B×num_classes): the clean
        label's one-hot (minus the target's when targeted), scaled by REFUSAL_SCALE."""
        if self._refusal is None:
            refusal = torch.nn.functional.one_hot(self.labels, num_classes).float()
            if self.targets is not None:
                refusal = refusal - torch.nn.functional.one_hot(self.targets, num_classes).float()
            self._refusal = refusal * REFUSAL_SCALE
        return self._refusal[idx].to(dtype)

    # -- backward hooks: a backward through an answered query is charged like its forward ---------
    def on_backward_in_order(self, grad_outputs: tuple[Tensor, ...]) -> tuple[Tensor, ...] | None:
        """Pre-hook on the output node of a whole batch in order."""
        if self.max_used < self.budget:  # ``charge``'s common case, without the call
            self._pending["backwards"] += 1
            self.max_used += 1
            return None
        return self.on_backward_known(self.arange, grad_outputs)

    def on_backward_known(self, idx: Tensor, grad_outputs: tuple[Tensor, ...]) -> tuple[Tensor, ...] | None:
        """Pre-hook on the output node of a query of one row per sample ``idx`` (B): the
        gradients of refused rows become zero."""
        everyone = self.charge("backwards", idx, "all" if idx is self.arange else "distinct")
        if everyone is True:
            return None
        b = len(idx)
        return tuple(g * everyone.view((b,) + (1,) * (g.dim() - 1)).to(g.dtype)
                     if g is not None and g.dim() and g.shape[0] == b else g for g in grad_outputs)

    def on_backward(self, grad: Tensor, idx: Tensor, kind: str) -> Tensor:
        """Tensor hook on the answer (B×classes) of any query owned by ``idx`` (B)."""
        everyone = self.charge("backwards", idx, kind)
        return grad if everyone is True else grad * everyone.unsqueeze(1).to(grad.dtype)


def rank_within_batch(idx: Tensor) -> Tensor:
    """For each row owned by ``idx`` (B, non-negative), how many earlier rows of the batch belong
    to the same sample (B)."""
    order = torch.argsort(idx, stable=True)
    sorted_idx = idx[order]
    pos = torch.arange(len(idx), device=idx.device)
    first = torch.full((int(idx.max()) + 1,), len(idx), dtype=torch.long, device=idx.device)
    first.scatter_reduce_(0, sorted_idx, pos, reduce="amin")
    rank = torch.empty_like(idx)
    rank[order] = pos - first[sorted_idx]
    return rank
