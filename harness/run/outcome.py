"""What one attack call came to, as a value: its row status, the one-line cause and, for an output
that breaks the contract, the reason (``harness/results/schema.py`` ``INVALID_REASONS``).

A job's rows take ``status``, ``error`` and ``invalid_reason`` from it; nothing writes a status
into the error text to read it back later.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from attackaudit.errors import AttackauditError
from attackaudit.measure.tracker import BOX_TOLERANCE
from attackaudit.results.schema import OUT_OF_BOX_ERROR


@dataclass(frozen=True)
class Outcome:
    """``status``: ok, crash, invalid or unsupported (schema ``STATUSES``); ``detail``: the one-line
    cause ("" when ok); ``invalid_reason``: why the output is invalid ("" unless invalid)."""

    status: str = "ok"
    detail: str = ""
    invalid_reason: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def line(self) -> str:
        """The outcome as one line for a person ("" when ok): a crash's cause, else the status
        before it (``invalid: returned shape …``, ``unsupported: …``)."""
        if self.ok:
            return ""
        return self.detail if self.status == "crash" else f"{self.status}: {self.detail}"


OK = Outcome()


def _invalid(reason: str, detail: str) -> Outcome:
    return Outcome("invalid", detail, reason)


def output_check(adv: object, inputs: Tensor) -> Outcome:
    """``OK`` when ``adv`` is a proper adversarial batch for ``inputs``, else the invalid outcome
    that says why."""
    if not isinstance(adv, Tensor):
        return _invalid("not_tensor", f"returned {type(adv).__name__}, expected a torch.Tensor")
    if adv.shape != inputs.shape:
        return _invalid("shape", f"returned shape {tuple(adv.shape)}, expected {tuple(inputs.shape)}")
    if not adv.dtype.is_floating_point:
        return _invalid("dtype", f"returned dtype {adv.dtype}, expected a floating-point tensor")
    if not torch.isfinite(adv).all():
        return _invalid("not_finite",
                        f"returned {int((~torch.isfinite(adv)).flatten(1).any(1).sum())} samples with NaN or inf")
    lo, hi = float(adv.min()), float(adv.max())
    if lo < -BOX_TOLERANCE or hi > 1 + BOX_TOLERANCE:
        return _invalid("out_of_box", f"returned values in [{lo:.4g}, {hi:.4g}], {OUT_OF_BOX_ERROR}")
    return OK


def output_problem(adv: object, inputs: Tensor) -> str:
    """Why an attack's return value is invalid, or '' when it is a proper adversarial batch."""
    return output_check(adv, inputs).detail


class InvalidOutput(AttackauditError):
    """An attack returned something that is not a valid adversarial batch (``outcome`` says why)."""

    def __init__(self, outcome: Outcome) -> None:
        super().__init__(outcome.detail)
        self.outcome = outcome
