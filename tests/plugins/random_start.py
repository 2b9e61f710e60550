"""Two plain-torch attacks that differ only in their start, for the seed-twin story (issue 51, item 9).

* ``start``: a gradient walk from a random start drawn from torch's **global** generator (so its
  call moves the global random state, ``rng_used``) — and its spec does **not** declare
  ``randomised``: undeclared randomness, which the report must name.
* ``steady``: the same walk from the input itself: deterministic. As a plugin it gets a seed twin
  anyway (whether a plugin draws random numbers is measured, never taken from its spec); the
  report must call it deterministic, not count it among the randomised.
"""
from __future__ import annotations

from functools import partial

import torch
import torch.nn.functional as F

from attackaudit.adapters import AttackSpec

__version__ = "1.0"


def walk(model, inputs, labels, *, steps: int, step: float, start: float, targeted: bool = False,
         targets=None) -> torch.Tensor:
    """``steps`` normalised L2 gradient steps up the loss from ``inputs`` + ``start`` × N(0, 1)
    noise (torch's global generator); the last iterate in [0, 1]. Untargeted only (its spec says so)."""
    x = inputs.detach().clone()
    if start:
        x = (x + start * torch.randn(x.shape)).clamp(0, 1)
    for _ in range(steps):
        x.requires_grad_(True)
        loss = F.cross_entropy(model(x), labels)
        (g,) = torch.autograd.grad(loss, x)
        norm = g.flatten(1).norm(dim=1).clamp_min(1e-12).view(-1, *[1] * (g.dim() - 1))
        x = (x.detach() + step * g / norm).clamp(0, 1)
    return x.detach()


def specs() -> list[AttackSpec]:
    mk = partial(AttackSpec, "random_start")
    out = []
    for name, start in (("start", 0.3), ("steady", 0.0)):
        params = {"steps": 12, "step": 0.12, "start": start}
        out.append(mk(name, "walk", "l2", "minimal", params, partial(walk, **params), steps_param="steps",
                      targeted_support=False))
    return out
