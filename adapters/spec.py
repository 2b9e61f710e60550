"""The one attack signature every adapter normalises to."""
from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping

import torch
from torch import Tensor, nn

#: ``run(model, inputs, labels, *, targeted=False, targets=None[, eps]) -> adversarial inputs``.
#: inputs: N×C×H×W float in [0, 1]; labels: N int64; returns N×C×H×W in [0, 1].
#: ``kind="fixed"`` attacks also take ``eps`` (a float, or a length-N tensor when
#: ``per_sample_eps`` is true).
AttackFn = Callable[..., Tensor]

NORMS = ("l0", "l1", "l2", "linf")
KINDS = ("minimal", "fixed")


@dataclass(frozen=True)
class AttackSpec:
    """One implementation of one attack, for one norm, in one library.

    ``targeted_support`` says whether the library can run the attack targeted; a spec that
    cannot is never run with ``--targeted`` (it is listed, and skipped with a reason).
    ``gradient`` is false for attacks that legitimately need no backward pass.
    """

    library: str
    name: str
    family: str
    norm: str
    kind: str
    params: Mapping[str, Any]
    run: AttackFn = field(repr=False, compare=False)
    targeted_support: bool = True
    per_sample_eps: bool = False
    gradient: bool = True
    variant: str = ""  # distinguishes two specs of one attack and norm (e.g. loss "ce" vs "dlr")
    steps_param: str = ""  # the params key that sets the number of iterations, if any
    note: str = ""

    def __post_init__(self) -> None:
        if self.norm not in NORMS:
            raise ValueError(f"AttackSpec {self.library}/{self.name}: norm {self.norm!r} is not one of {NORMS}")
        if self.kind not in KINDS:
            raise ValueError(f"AttackSpec {self.library}/{self.name}: kind {self.kind!r} is not one of {KINDS}")

    @property
    def implementation(self) -> str:
        """``library/name[:variant]``: one implementation across norms."""
        base = f"{self.library}/{self.name}"
        return f"{base}:{self.variant}" if self.variant else base

    @property
    def key(self) -> str:
        """Unique, stable identifier of the spec: ``library/name[:variant]/norm``."""
        return f"{self.implementation}/{self.norm}"

    @property
    def params_hash(self) -> str:
        blob = json.dumps({**self.params, "variant": self.variant}, sort_keys=True, default=str).encode()
        return hashlib.sha256(blob).hexdigest()[:12]


    def with_params(self, **overrides: Any) -> "AttackSpec":
        """The same spec with some hyperparameters changed (``run`` must be a ``functools.partial``)."""
        if not isinstance(self.run, functools.partial):
            raise TypeError(f"{self.key}: run is not a functools.partial, its params cannot be changed")
        run = functools.partial(self.run.func, *self.run.args, **{**self.run.keywords, **overrides})
        return replace(self, params={**self.params, **overrides}, run=run)

    def scaled(self, factor: float) -> "AttackSpec":
        """The same spec with its iteration count scaled by ``factor`` (for quick runs and tests)."""
        if not self.steps_param or factor == 1 or not isinstance(self.run, functools.partial):
            return self
        steps = self.params[self.steps_param]
        return self.with_params(**{self.steps_param: max(1, int(round(steps * factor)))})


def num_classes(model: nn.Module, inputs: Tensor) -> int:
    """The tracker knows its class count; any other model costs one forward of one sample."""
    n = getattr(model, "num_classes", None)
    if n is not None:
        return int(n)
    with torch.no_grad():
        return int(model(inputs[:1]).shape[1])
