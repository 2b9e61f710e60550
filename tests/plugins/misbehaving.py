"""A plugin whose attacks misbehave in every way a third-party attack can."""
import os
import time
from functools import partial

import torch
import torch.nn.functional as F

from attackaudit.adapters import AttackSpec

__version__ = "0.0.1"


def fgsm(model, inputs, labels, *, eps, targeted=False, targets=None):
    x = inputs.clone().requires_grad_(True)
    loss = F.cross_entropy(model(x), targets if targeted else labels)
    (g,) = torch.autograd.grad(loss, x)
    return (inputs + (-eps if targeted else eps) * g.sign()).clamp(0, 1).detach()


def raise_(model, inputs, labels, **kw):
    model(inputs)
    raise RuntimeError("upstream bug: index out of range in step 3")


def abort(model, inputs, labels, **kw):
    os.abort()


def hang(model, inputs, labels, **kw):
    time.sleep(3600)


def nan(model, inputs, labels, **kw):
    out = inputs.clone()
    out[0] = float("nan")
    return out


def out_of_box(model, inputs, labels, **kw):
    return inputs + 0.5


def specs():
    mk = partial(AttackSpec, "misbehaving")
    return [
        mk("fgsm", "fgm", "linf", "fixed", {}, partial(fgsm)),
        mk("raise", "pgd", "linf", "minimal", {}, partial(raise_)),
        mk("abort", "pgd", "linf", "minimal", {}, partial(abort)),
        mk("hang", "pgd", "linf", "minimal", {}, partial(hang)),
        mk("nan", "pgd", "linf", "minimal", {}, partial(nan)),
        mk("out_of_box", "pgd", "linf", "minimal", {}, partial(out_of_box)),
    ]
