"""A sound L∞ PGD and a copy of it that lands farther from the exact minimum, for
tests/test_yardstick.py: nothing but the distance tells them apart (no crash, no NaN, every
output inside the box and the ball, no batch effect, the best returned).

- ``pgd``: L∞ PGD (steps of 2.5ε/steps, projected onto the ball and the box), family ``pgd``.
- ``pgd_own``: the same, under a family of its own (``yardplug``).
- ``masked``: the same PGD whose step moves only the pixels of a fixed checkerboard on images of
  labels 2-9 (a slice off by one that drops every other pixel of the gradient), so it needs a larger
  ε there; family ``pgd``.
- ``masked_own``: the same defect under the family ``yardplug``.
"""
from functools import partial

import torch
import torch.nn.functional as F

from attackaudit.adapters import AttackSpec

__version__ = "0.1.0"


def _grad(model, x, labels):
    x = x.detach().requires_grad_(True)
    (g,) = torch.autograd.grad(F.cross_entropy(model(x), labels), x)
    return g


def _pgd(model, inputs, labels, eps, steps, mask):
    eps = torch.as_tensor(eps, dtype=inputs.dtype).to(inputs.device).view(-1, 1, 1, 1)
    x = inputs.clone()
    for _ in range(steps):
        x = x + 2.5 * eps / steps * _grad(model, x, labels).sign() * mask
        x = torch.min(torch.max(x, inputs - eps), inputs + eps).clamp(0, 1)
    return x.detach()


def pgd(model, inputs, labels, *, eps, targeted=False, targets=None, steps=20):
    """Sound: every pixel steps."""
    return _pgd(model, inputs, labels, eps, steps, torch.ones_like(inputs))


def masked(model, inputs, labels, *, eps, targeted=False, targets=None, steps=20):
    """Farther: on images of labels 2-9 only the checkerboard's pixels step."""
    h, w = inputs.shape[-2:]
    board = ((torch.arange(h).view(-1, 1) + torch.arange(w).view(1, -1)) % 2 == 0).to(inputs.dtype)
    some = (labels >= 2).to(inputs.dtype).view(-1, 1, 1, 1).to(inputs.device)
    mask = some * board.to(inputs.device) + (1 - some)
    return _pgd(model, inputs, labels, eps, steps, mask.expand_as(inputs))


def specs():
    mk = partial(AttackSpec, "yardplug")
    return [mk("pgd", "pgd", "linf", "fixed", {"steps": 20}, partial(pgd, steps=20), per_sample_eps=True),
            mk("pgd_own", "yardplug", "linf", "fixed", {"steps": 20}, partial(pgd, steps=20), per_sample_eps=True),
            mk("masked", "pgd", "linf", "fixed", {"steps": 20}, partial(masked, steps=20), per_sample_eps=True),
            mk("masked_own", "yardplug", "linf", "fixed", {"steps": 20}, partial(masked, steps=20),
               per_sample_eps=True)]
