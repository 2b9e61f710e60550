"""QueryTracker: the one model wrapper every adapter calls.

It counts forwards and backwards per original sample, caps them at one budget, and keeps the
best (smallest) adversarial seen within that budget. Rows are attributed to the nearest original
(under the job's norm), so attacks that subset, reorder or repeat the batch are counted right.
"""
from __future__ import annotations

import torch
from torch import Tensor, nn

from .distance import lp_norm, pairwise_distance

#: an input coordinate outside [0, 1] by more than this makes a row ineligible as "best"
BOX_TOLERANCE = 1e-5
#: logit scale of the non-adversarial answer given to queries past the budget
REFUSAL_SCALE = 1e4


class QueryTracker(nn.Module):
    """Wrap ``model`` for one job on ``inputs`` (N×C×H×W in [0, 1]) and ``labels`` (N).

    Attributes after the attack (all length N, on ``inputs.device``):
    ``forwards``, ``backwards`` (queries within the budget), ``refused`` (queries past it),
    ``best_adversarial`` (N×C×H×W), ``best_distance`` (inf where none was found, 0 where the
    clean input already is adversarial), ``clean_correct``.
    """

    def __init__(self, model: nn.Module, inputs: Tensor, labels: Tensor, *, norm: str,
                 budget: int = 2000, targeted: bool = False, targets: Tensor | None = None) -> None:
        super().__init__()
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
        self.forwards = torch.zeros(n, dtype=torch.long, device=device)
        self.backwards = torch.zeros(n, dtype=torch.long, device=device)
        self.refused = torch.zeros(n, dtype=torch.long, device=device)
        self.best_adversarial = self.inputs.clone()
        self.best_distance = torch.full((n,), float("inf"), device=device)
        with torch.no_grad():
            logits = self.model(self.inputs)
        self.num_classes = logits.shape[1]
        self.clean_correct = logits.argmax(1) == self.labels
        self.best_distance[self._is_adversarial(logits, torch.arange(n, device=device))] = 0.0
        # A row closer to original i than half the distance from i to any other original is
        # certainly nearest to i: this lets the common case (the whole batch, in order) skip
        # the B×N distance matrix.
        if n > 1:
            sep = pairwise_distance(self._flat, self._flat, norm)
            sep.fill_diagonal_(float("inf"))
            self._half_separation = sep.amin(1) / 2
        else:
            self._half_separation = torch.full((n,), float("inf"), device=device)
        self._previous: tuple[Tensor, Tensor] | None = None  # last query's rows and owners
        self._arange = torch.arange(n, device=device)
        self._max_used = 0  # max over samples of forwards + backwards
        refusal = torch.nn.functional.one_hot(self.labels, self.num_classes).float()
        if targeted:
            refusal = refusal - torch.nn.functional.one_hot(self.targets, self.num_classes).float()
        self._refusal = refusal * REFUSAL_SCALE
        self.eval()  # a fresh Module is in training mode; libraries warn about that (foolbox)

    # -- attribution -----------------------------------------------------------------------
    def attribute(self, rows: Tensor) -> tuple[Tensor, bool, Tensor | None]:
        """Owner (original index) of each flattened row (B×D).

        Returns (B indices, whole batch in order, each row's distance to its own original under
        the job's norm when that was computed on the way — on the fast path — else None).

        A row is given to the nearest original, or to the owner of the nearest row of the
        previous query when that is closer: an iterate is closer to the previous iterate than to
        any other original, even after the attack has moved further than half the distance
        between two originals (large L2/L1 budgets on small inputs).
        """
        b, n = rows.shape[0], self._flat.shape[0]
        rows = rows.to(self._flat.dtype)
        if b == n:
            own = lp_norm(rows - self._flat, "l1" if self.norm == "l0" else self.norm)
            ok = own < self._half_separation
            if bool(ok.all()):  # the common case: the whole batch, in order
                self._previous = (rows.clone(), self._arange)  # the attack may change its tensor in place
                return self._arange, True, (own if self.norm != "l0" else None)
            idx = torch.where(ok, self._arange, -1)
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
        if b == n and torch.equal(idx, self._arange):  # resolved to the batch in order after all
            self._previous = (rows.clone(), self._arange)
            return self._arange, True, (own if self.norm != "l0" else None)
        self._previous = (rows.clone(), idx)
        return idx, False, None

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

    def _within_budget(self, idx: Tensor, in_order: bool) -> Tensor:
        used = self.forwards + self.backwards if in_order else self.forwards[idx] + self.backwards[idx]
        if not in_order:
            used = used + self._rank_within_batch(idx)
        return used < self.budget

    def _count(self, counter: Tensor, idx: Tensor, allowed: Tensor, in_order: bool, everyone: bool) -> None:
        if in_order and everyone:
            counter += 1
            return
        counter.index_add_(0, idx[allowed], torch.ones_like(idx[allowed]))
        if not everyone:
            self.refused.index_add_(0, idx[~allowed], torch.ones_like(idx[~allowed]))

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
        idx, in_order, own = self.attribute(rows)
        everyone = self._charge(self.forwards, idx, in_order)
        out = self.model(x)
        if everyone is not True:
            out = torch.where(everyone.unsqueeze(1), out, self._refusal[idx].to(out.dtype))
        self._update_best(rows, out.detach(), idx, everyone, in_order, own)
        if out.requires_grad:
            out.register_hook(lambda grad, idx=idx, in_order=in_order: self._on_backward(grad, idx, in_order))
        return out

    def _charge(self, counter: Tensor, idx: Tensor, in_order: bool) -> Tensor | bool:
        """Count one query per row within the budget; True when every row was, else the mask.

        ``_max_used`` (a Python int) lets the common case — the whole batch in order, nobody at
        the budget — skip every tensor operation but the increment.
        """
        if in_order and self._max_used < self.budget:
            counter += 1
            self._max_used += 1
            return True
        allowed = self._within_budget(idx, in_order)
        everyone = bool(allowed.all())
        self._count(counter, idx, allowed, in_order, everyone)
        self._max_used = int((self.forwards + self.backwards).max())
        return True if everyone else allowed

    def _on_backward(self, grad: Tensor, idx: Tensor, in_order: bool) -> Tensor:
        everyone = self._charge(self.backwards, idx, in_order)
        return grad if everyone is True else grad * everyone.unsqueeze(1).to(grad.dtype)

    def _update_best(self, rows: Tensor, logits: Tensor, idx: Tensor, allowed: Tensor | bool,
                     in_order: bool = False, own: Tensor | None = None) -> None:
        if in_order:  # no gathers; and the distances are already known on the fast path
            pred = logits.argmax(1)
            candidate = pred == self.targets if self.targeted else pred != self.labels
            if own is not None:
                candidate &= own.to(self.best_distance.dtype) < self.best_distance
        else:
            candidate = self._is_adversarial(logits, idx)
        if allowed is not True:
            candidate &= allowed
        if not bool(candidate.any()):
            return
        if in_order:  # one row per sample: no ranking of several candidates needed
            self._update_best_in_order(rows.to(self._flat.dtype), logits, candidate)
            return
        rows_c, idx_c = rows[candidate].to(self._flat.dtype), idx[candidate]
        valid = self._valid(rows_c, logits[candidate])
        if not bool(valid.any()):  # e.g. SparseFool and ART's EAD query points outside the box
            return
        rows_c, idx_c = rows_c[valid].clamp(0, 1), idx_c[valid]
        dist = lp_norm(rows_c - self._flat[idx_c], self.norm)
        better = dist < self.best_distance[idx_c]
        if not bool(better.any()):
            return
        rows_c, idx_c, dist = rows_c[better], idx_c[better], dist[better]
        # several rows of one sample may improve it: keep the smallest
        order = torch.argsort(dist, stable=True)
        rows_c, idx_c, dist = rows_c[order], idx_c[order], dist[order]
        keep = self._rank_within_batch(idx_c) == 0
        self.best_distance[idx_c[keep]] = dist[keep]
        self.best_adversarial.view(len(self._flat), -1)[idx_c[keep]] = rows_c[keep]

    def _update_best_in_order(self, rows: Tensor, logits: Tensor, candidate: Tensor) -> None:
        candidate = candidate & self._valid(rows, logits)
        if not bool(candidate.any()):
            return
        rows_c = rows[candidate].clamp(0, 1)
        dist = lp_norm(rows_c - self._flat[candidate], self.norm)
        better = dist < self.best_distance[candidate]
        where = self._arange[candidate][better]
        self.best_distance[where] = dist[better]
        self.best_adversarial.view(len(self._flat), -1)[where] = rows_c[better]

    @staticmethod
    def _valid(rows: Tensor, logits: Tensor) -> Tensor:
        """Finite, in-box rows with finite logits (the clamp to [0, 1] must not change them)."""
        return (torch.isfinite(rows).all(1) & torch.isfinite(logits).all(1)
                & (rows.amin(1) >= -BOX_TOLERANCE) & (rows.amax(1) <= 1 + BOX_TOLERANCE))

    def offer(self, adversarial: Tensor) -> Tensor:
        """Consider the attack's returned batch (N×…) as best candidates, without counting it.

        A one-step attack never queries its final point; that point is still an adversarial the
        attack found within its budget. Returns the harness's own success mask for it.
        """
        rows = adversarial.detach().reshape(len(self._flat), -1).to(self._flat.dtype)
        with torch.no_grad():
            logits = self.model(adversarial.detach().to(self.inputs.dtype))
        self._update_best(rows, logits, self._arange, True, True)
        return self._is_adversarial(logits, self._arange)

    @property
    def queries(self) -> Tensor:
        return self.forwards + self.backwards
