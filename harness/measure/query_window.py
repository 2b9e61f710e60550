"""The query window: answered queries whose best-candidate bookkeeping is still to be done.

Step 7 of the attribution rule (the module docstring of ``harness/measure/tracker.py``) offers every
answered row as a best candidate. Doing that per query would cost several tensor operations per
query, a visible share of a small model's forward pass; instead the rows and logits of queries
that need no refusal are copied into the slots of a buffer allocated once, and offered all at once
when the window is full or the results are read (``take``). Candidates are still taken in query
order, then row order, so the result is the same as one query at a time.

The window also lends its slots to the attribution: the previous query's rows (step 4's known
points) live in the slot they were written to, and move to the spare slot at the end when the
window is emptied, so that the next query's rows never overwrite them before step 4 reads them.
"""
from __future__ import annotations

import torch
from torch import Tensor

#: the window's rows and logits may hold at most this many bytes before they are processed
DEFERRED_BYTES = 16 << 20
#: and at most this many queries
DEFERRED_QUERIES = 128


class QueryWindow:
    """Up to ``limit`` queries of at most N rows each of ``originals`` (N×D): their rows (N×D per
    slot), logits (N×classes per slot) and owners (None: the whole batch in order; else the
    owners, B ≤ N, of the first B places of the slot)."""

    def __init__(self, originals: Tensor, shape: torch.Size, *, max_queries: int = DEFERRED_QUERIES,
                 max_bytes: int = DEFERRED_BYTES) -> None:
        if max_queries < 1:
            raise ValueError(f"QueryWindow: max_queries must be at least 1, got {max_queries}")
        self._originals, self._shape = originals, shape
        row_bytes = max(1, originals.numel() * originals.element_size())
        #: queries the window holds before it must be emptied
        self.limit = max(1, min(max_queries, max_bytes // row_bytes))
        #: queries now in the window
        self.count = 0
        self.row_slots: list[Tensor] = []
        #: the same slots shaped as the inputs (N×C×H×W): a containment test clamps into them
        self.shaped_slots: list[Tensor] = []
        self._logit_slots: list[Tensor] = []
        self._owners: list[Tensor | None] = [None] * self.limit

    @property
    def ready(self) -> bool:
        """Whether the row and logit buffers exist (the first query of each kind allocates them)."""
        return bool(self.row_slots) and bool(self._logit_slots)

    def row_slot(self) -> Tensor:
        """The slot (N×D) the next query's rows go to."""
        if not self.row_slots:
            # one spare slot at the end: where the previous query's rows wait (see ``spare``)
            originals = self._originals
            buffer = torch.empty((self.limit + 1,) + tuple(originals.shape), dtype=originals.dtype,
                                 device=originals.device)
            self.row_slots = list(buffer.unbind(0))
            self.shaped_slots = [slot.view(self._shape) for slot in self.row_slots]
            self._row_buffer = buffer
        return self.row_slots[self.count]

    def _logit_slot(self, logits: Tensor) -> Tensor:
        """The slot (N×classes) of the next query's logits (B×classes, B ≤ N)."""
        if not self._logit_slots:
            buffer = torch.empty((self.limit, len(self._originals)) + tuple(logits.shape[1:]),
                                 dtype=logits.dtype, device=logits.device)
            self._logit_slots = list(buffer.unbind(0))
            self._logit_buffer = buffer
        return self._logit_slots[self.count]

    def push(self, rows: Tensor | None, logits: Tensor, owners: Tensor | None) -> Tensor:
        """Add a query: its rows (B×D; None when the caller already wrote them into ``row_slot()``),
        its logits (B×classes, detached) and its owners (None: the whole batch in order). Returns
        the slot's rows (B×D) as they now are; the caller empties the window when ``full``."""
        slot, logit_slot = self.row_slot(), self._logit_slot(logits)
        if owners is not None:
            slot, logit_slot = slot[:len(owners)], logit_slot[:len(owners)]
        if rows is not None:
            slot.copy_(rows)
        logit_slot.copy_(logits)
        self._owners[self.count] = owners
        self.count += 1
        return slot

    @property
    def full(self) -> bool:
        return self.count == self.limit

    def spare(self, b: int) -> Tensor:
        """The spare slot's first ``b`` rows (b×D): outside the window, never written by ``push``."""
        return self.row_slots[-1][:b]

    def take(self) -> tuple[Tensor, Tensor, list[Tensor | None]]:
        """Empty the window: (K×N×D rows, K×N×classes logits, K owners), views into the buffers
        that the next ``push`` overwrites; the places of a slot beyond its owners hold stale rows."""
        k, self.count = self.count, 0
        owners, self._owners = self._owners[:k], [None] * self.limit
        return self._row_buffer[:k], self._logit_buffer[:k], owners
