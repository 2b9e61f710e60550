"""Attacks with real defects of the kinds a user must tell apart (label bugs, weakness, broken
strong families), and sound counterparts, for tests/test_verdicts.py.

Run with ``--plugin tests/plugins/defective.py``; every spec is tiny (few steps) so the tests
stay cheap.
"""
from functools import partial

import torch
import torch.nn.functional as F

from attackaudit.adapters import AttackSpec

__version__ = "0.1.0"

#: the class whose label a broken lookup table maps to another class (``class_table``)
DEAD_CLASS = 3


def _walk(model, inputs, aim, sign, steps, alpha, labels):
    """Signed-gradient L∞ walk on the CE of ``aim`` (``sign`` +1 away from it, −1 towards it);
    each sample stops at its first point the model no longer gives ``labels`` (the minimal
    attack's answer)."""
    x, found = inputs.clone(), inputs.clone()
    done = torch.zeros(len(inputs), dtype=torch.bool, device=inputs.device)
    for _ in range(steps):
        x.requires_grad_(True)
        logits = model(x)
        newly = (logits.argmax(1) != labels) & ~done
        found[newly], done = x.detach()[newly], done | newly
        (g,) = torch.autograd.grad(F.cross_entropy(logits, aim), x)
        x = (x.detach() + sign * alpha * g.sign()).clamp(0, 1)
    return torch.where(done.view(-1, 1, 1, 1), found, x)


def walk_away(model, inputs, labels, *, targeted=False, targets=None, steps=25, alpha=0.01):
    """Sound: away from the true label (towards the target when targeted). The tracker keeps the
    first adversarial point of the walk, so this is a (weak) minimal attack."""
    if targeted:
        return _walk(model, inputs, targets, -1, steps, alpha, labels)
    return _walk(model, inputs, labels, +1, steps, alpha, labels)


def walk_coarse(model, inputs, labels, *, targeted=False, targets=None, steps=12, alpha=0.08):
    """Sound but weak: the same walk with steps eight times too large, so it overshoots."""
    return walk_away(model, inputs, labels, targeted=targeted, targets=targets, steps=steps, alpha=alpha)


def wrong_class(model, inputs, labels, *, targeted=False, targets=None, steps=25, alpha=0.01):
    """Label bug: an untargeted run walks towards class ``label + 1`` (index arithmetic on
    labels). It does succeed (reaching another class is a misclassification), so nothing but the
    class-permutation twin shows the bug, whose ``label + 1`` is another class."""
    n_classes = model(inputs[:1]).shape[1]
    aim = targets if targeted else (labels + 1) % n_classes
    return _walk(model, inputs, aim, -1, steps, alpha, labels)


def class_table(model, inputs, labels, *, targeted=False, targets=None, steps=40):
    """Label bug: labels go through a class table with one wrong entry (DEAD_CLASS → 5), so DDN
    believes those samples are adversarial already and returns them unchanged."""
    from adv_lib.attacks import ddn

    table = torch.arange(int(labels.max()) + 10, device=labels.device)
    table[DEAD_CLASS] = 5
    return ddn(model, inputs, table[targets if targeted else labels], targeted=targeted, steps=steps)


def ddn_short(model, inputs, labels, *, targeted=False, targets=None):
    """Sound but clearly worse: DDN with 3 steps and a tiny initial norm."""
    from adv_lib.attacks import ddn

    return ddn(model, inputs, targets if targeted else labels, targeted=targeted, steps=3, init_norm=0.05)


def fmn_tiny_step(model, inputs, labels, *, targeted=False, targets=None):
    """A broken FMN: an ε step (γ) 500 times too small and a handful of steps, so it stops far
    from the boundary on almost every sample."""
    from adv_lib.attacks import fmn

    return fmn(model, inputs, targets if targeted else labels, norm=2, targeted=targeted, steps=6,
               γ_init=1e-4, γ_final=1e-5)


def specs():
    mk = partial(AttackSpec, "defective")
    return [
        mk("walk_away", "walk", "linf", "minimal", {"steps": 25}, partial(walk_away, steps=25)),
        mk("walk_coarse", "walk", "linf", "minimal", {"steps": 12}, partial(walk_coarse, steps=12)),
        mk("wrong_class", "wrongclass", "linf", "minimal", {"steps": 25}, partial(wrong_class, steps=25)),
        mk("class_table", "ddn", "l2", "minimal", {"steps": 40}, partial(class_table, steps=40)),
        mk("ddn_short", "ddn", "l2", "minimal", {}, partial(ddn_short)),
        mk("fmn_tiny_step", "fmn", "l2", "minimal", {}, partial(fmn_tiny_step)),
    ]
