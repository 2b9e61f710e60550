"""An attackaudit plugin: projected gradient descent (L∞ and L2), written in plain torch.

Copy it as the start of your own plugin (README.md, "Plugins: your own attacks"):

    attackaudit attacks --plugin examples/plugin_example.py
    attackaudit run --plugin examples/plugin_example.py --samples 16 --out runs/plugin

It is a ``kind="fixed"`` attack: the harness makes it minimal by searching ε per sample, and
passes ε as one value per sample (``per_sample_eps=True``).
"""
from __future__ import annotations

from functools import partial

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attackaudit.adapters import AttackSpec

__version__ = "1.0.0"  # recorded as library_version; part of the plugin's fingerprint

LIBRARY = "example"


def _ball(delta: Tensor, eps: Tensor, norm: str) -> Tensor:
    """``delta`` (N×C×H×W) projected onto the ``norm`` ball of per-sample radius ``eps`` (N×1×1×1)."""
    if norm == "linf":
        return torch.max(torch.min(delta, eps), -eps)
    length = delta.flatten(1).norm(dim=1).view(-1, 1, 1, 1)
    return delta * torch.clamp(eps / length.clamp_min(1e-12), max=1.0)


def _ascent(grad: Tensor, norm: str) -> Tensor:
    """The unit step of steepest ascent under ``norm``."""
    if norm == "linf":
        return grad.sign()
    return grad / grad.flatten(1).norm(dim=1).clamp_min(1e-12).view(-1, 1, 1, 1)


def pgd(model: nn.Module, inputs: Tensor, labels: Tensor, *, eps: Tensor, norm: str, steps: int,
        step_ratio: float, targeted: bool = False, targets: Tensor | None = None) -> Tensor:
    """``steps`` of PGD on the cross-entropy within ``eps`` (N, on the CPU) of ``inputs`` (N×C×H×W).

    The step is ``step_ratio × ε / steps``, so a short (scaled-down) run still reaches the border
    of the ball. Returns N×C×H×W in [0, 1]: the last iterate, whose distance is at most ε.
    """
    radius = eps.to(inputs.device, inputs.dtype).view(-1, 1, 1, 1)
    goal = targets if targeted else labels
    step = step_ratio * radius / steps
    x = inputs.clone()
    for _ in range(steps):
        x.requires_grad_(True)
        loss = F.cross_entropy(model(x), goal)
        (grad,) = torch.autograd.grad(-loss if targeted else loss, x)
        delta = _ball(x.detach() + step * _ascent(grad, norm) - inputs, radius, norm)
        x = (inputs + delta).clamp(0, 1)  # clamping to the box keeps it inside the ball
    return x.detach()


def specs() -> list[AttackSpec]:
    out = []
    for norm in ("linf", "l2"):
        params = {"norm": norm, "steps": 20, "step_ratio": 2.5}
        out.append(AttackSpec(LIBRARY, "pgd", "pgd", norm, "fixed", params, partial(pgd, **params),
                              per_sample_eps=True, steps_param="steps"))
    return out
