"""The attack criterion of a job: untargeted, or targeted with one target class per sample.

One object instead of a ``(targeted, targets)`` pair checked again at every step: the worker draws
it once per job (``attackaudit.run.worker.job_criterion``), the job slices it per batch and per
sub-batch of the minimal-ε search (``take``), the tracker judges success with its ``targets``
(``attackaudit.measure.success.is_success``), and the attack receives ``attack_kwargs()``: nothing
untargeted, ``targeted=True, targets=...`` targeted, as ``adapters/spec.py``'s ``MinimalAttack``
and ``FixedEpsAttack`` say.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Union

import numpy as np
import torch
from torch import Tensor


@dataclass(frozen=True)
class Untargeted:
    """Success: another class's logit strictly above the label's. Attacks get no extra keyword."""

    targeted: ClassVar[bool] = False
    targets: ClassVar[None] = None

    def attack_kwargs(self) -> dict[str, Any]:
        """The keywords every attack call of this criterion gets: none (the protocols' defaults)."""
        return {}

    def take(self, rows: slice | Tensor) -> "Untargeted":
        """The criterion of the samples ``rows`` (a slice or an index tensor) of the batch."""
        return self

    def to(self, device: torch.device | str) -> "Untargeted":
        """The criterion with its tensors on ``device``."""
        return self

    def extend(self, other: "Untargeted") -> "Untargeted":
        """The criterion of this batch's samples followed by ``other``'s."""
        return self

    def target_column(self, n: int) -> np.ndarray:
        """The result rows' ``target`` column for ``n`` samples: −1, no target."""
        return np.full(n, -1)


@dataclass(frozen=True, eq=False)  # eq=False: comparing tensors elementwise is not equality
class Targeted:
    """Success: the target's logit strictly above every other class's. ``targets``: N int64 target
    classes, one per sample, never its label (``attackaudit.sources.subset.random_targets``)."""

    targets: Tensor
    targeted: ClassVar[bool] = True

    def __post_init__(self) -> None:
        if not isinstance(self.targets, Tensor) or self.targets.dim() != 1:
            raise ValueError(f"Targeted needs a 1-D tensor of target classes, got "
                             f"{getattr(self.targets, 'shape', type(self.targets).__name__)}")

    def attack_kwargs(self) -> dict[str, Any]:
        """``targeted=True, targets=<N targets>``: what a targeted attack call gets."""
        return {"targeted": True, "targets": self.targets}

    def take(self, rows: slice | Tensor) -> "Targeted":
        """The criterion of the samples ``rows`` (a slice or an index tensor) of the batch."""
        return Targeted(self.targets[rows])

    def to(self, device: torch.device | str) -> "Targeted":
        """The criterion with its targets on ``device``."""
        return Targeted(self.targets.to(device))

    def extend(self, other: "Targeted") -> "Targeted":
        """The criterion of this batch's samples followed by ``other``'s (their targets appended)."""
        return Targeted(torch.cat([self.targets, other.targets.to(self.targets.device)]))

    def target_column(self, n: int) -> np.ndarray:
        """The result rows' ``target`` column: the targets (``n`` of them)."""
        return self.targets.cpu().numpy()


#: what a job attacks for
Criterion = Union[Untargeted, Targeted]


def as_criterion(targets: Criterion | Tensor | None) -> Criterion:
    """A criterion from a criterion, or from the older form: ``None`` (untargeted) or the N target
    classes of a targeted run."""
    if isinstance(targets, (Untargeted, Targeted)):
        return targets
    return Untargeted() if targets is None else Targeted(targets)
