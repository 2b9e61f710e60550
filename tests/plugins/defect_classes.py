"""Attacks with the four defects of fidelity/defects.py, and a sound fixed-ε counterpart, for
tests/test_defects.py. Each is a few signed-gradient steps, so the tests stay cheap.

- ``pgd``: sound L∞ PGD (steps of 2.5ε/steps, projected onto the ball and the box).
- ``no_projection``: ``out_of_ball``: the same steps at twice the size, never projected onto the ball.
- ``fixed_step``: ``eps_unused``: steps of a fixed 0.01 whatever ε, so it never moves more than
  ``steps × 0.01`` and no ε makes it stronger.
- ``batch_step``: ``batch_dependence``: an L2 PGD whose step is the gradient divided by the norm of
  the *whole batch's* gradient (a per-batch normalisation): alone, an image gets a full step; in a
  batch of N, about 1/√N of it.
- ``untargeted_walk`` (minimal) and ``untargeted_pgd`` (fixed-ε): targets ignored: a targeted call
  walks away from the true class as an untargeted one does.
- ``zero_fallback`` (minimal) and ``zero_fallback_pgd`` (fixed-ε): ``fallback_output``: a sound
  walk / PGD that returns an all-zero image for every image it failed on (foolbox's C&W default).
- ``label_keeper``: ``label_bug`` (success test ignores the target): a targeted walk that reaches the
  target but keeps, as its result, the last point still classified as the label (its success test
  compares the prediction with the label, ``==`` where ``!=`` of the target was meant).
- ``batch_stop``: ``batch_dependence`` on the batch-composition twin: a walk whose early stop is
  batch-wide (it stops every image as soon as one image of the batch is misclassified).
- ``half_ball``: ε use: sound PGD steps projected onto half of the ε-ball (a release that stops at a
  fraction of ε; minimal distances found by the ε search stay about the same).
"""
from functools import partial

import torch
import torch.nn.functional as F

from attackaudit.adapters import AttackSpec

__version__ = "0.1.0"


def _grad(model, x, aim, towards):
    x = x.detach().requires_grad_(True)
    loss = F.cross_entropy(model(x), aim)
    (g,) = torch.autograd.grad(-loss if towards else loss, x)
    return g


def _aim(labels, targeted, targets):
    return (targets, True) if targeted else (labels, False)


def _ball(eps, inputs):
    """ε per row (``per_sample_eps=True``: an (N,) tensor on the CPU) shaped to broadcast on images."""
    return torch.as_tensor(eps, dtype=inputs.dtype).to(inputs.device).view(-1, 1, 1, 1)


def _project_linf(x, inputs, eps):
    return torch.min(torch.max(x, inputs - eps), inputs + eps).clamp(0, 1)


def _iterate(model, inputs, labels, eps, targeted, targets, steps, step):
    """``steps`` iterations of ``x = step(x, gradient, ε)`` from the inputs, on the CE loss of the
    target (descended) or of the label (ascended)."""
    eps = _ball(eps, inputs)
    aim, towards = _aim(labels, targeted, targets)
    x = inputs.clone()
    for _ in range(steps):
        x = step(x, _grad(model, x, aim, towards), eps)
    return x.detach()


def pgd(model, inputs, labels, *, eps, targeted=False, targets=None, steps=10):
    """Sound: L∞ PGD, every iterate projected onto the ε-ball and the box."""
    return _iterate(model, inputs, labels, eps, targeted, targets, steps,
                    lambda x, g, e: _project_linf(x + 2.5 * e / steps * g.sign(), inputs, e))


def no_projection(model, inputs, labels, *, eps, targeted=False, targets=None, steps=10):
    """out_of_ball: twice PGD's step, clipped to the box only, so rows end up to 5ε away."""
    return _iterate(model, inputs, labels, eps, targeted, targets, steps,
                    lambda x, g, e: (x + 5.0 * e / steps * g.sign()).clamp(0, 1))


def fixed_step(model, inputs, labels, *, eps, targeted=False, targets=None, steps=5, alpha=0.01):
    """eps_unused: a step of ``alpha`` whatever ε (a step rule that ignores the budget)."""
    return _iterate(model, inputs, labels, eps, targeted, targets, steps,
                    lambda x, g, e: _project_linf(x + alpha * g.sign(), inputs, e))


def batch_step(model, inputs, labels, *, eps, targeted=False, targets=None, steps=10):
    """batch_dependence: L2 PGD whose gradient is normalised by the whole batch's gradient norm."""
    def step(x, g, e):
        x = x + 2.5 * e / steps * g / g.norm().clamp_min(1e-12)  # the batch's norm, not each image's
        delta = x - inputs
        norms = delta.flatten(1).norm(dim=1).clamp_min(1e-12).view(-1, 1, 1, 1)
        return (inputs + delta * torch.clamp(e / norms, max=1.0)).clamp(0, 1)
    return _iterate(model, inputs, labels, eps, targeted, targets, steps, step)


def untargeted_walk(model, inputs, labels, *, targeted=False, targets=None, steps=25, alpha=0.01):
    """Targets ignored (minimal): signed steps away from the true class even when given targets;
    returns each image's first misclassified point (whatever class that is), else the input."""
    x, found = inputs.clone(), inputs.clone()
    fresh = torch.ones(len(inputs), dtype=torch.bool, device=inputs.device)
    for _ in range(steps):
        x = (x + alpha * _grad(model, x, labels, False).sign()).clamp(0, 1)
        with torch.no_grad():
            first = fresh & (model(x).argmax(1) != labels)
        found[first], fresh = x[first], fresh & ~first
    return found


def untargeted_pgd(model, inputs, labels, *, eps, targeted=False, targets=None, steps=10):
    """Targets ignored (fixed-ε): PGD away from the true class even when given targets."""
    return pgd(model, inputs, labels, eps=eps, steps=steps)


def _walk(model, inputs, labels, targeted, targets, steps, alpha):
    """Signed steps towards the target (or away from the label); per image the first point that is
    adversarial, and whether there was one."""
    aim, towards = _aim(labels, targeted, targets)
    x, found = inputs.clone(), inputs.clone()
    hit = torch.zeros(len(inputs), dtype=torch.bool, device=inputs.device)
    for _ in range(steps):
        x = (x + alpha * _grad(model, x, aim, towards).sign()).clamp(0, 1)
        with torch.no_grad():
            pred = model(x).argmax(1)
        first = ~hit & ((pred == targets) if targeted else (pred != labels))
        found[first], hit = x[first], hit | first
    return found, hit


def zero_fallback(model, inputs, labels, *, targeted=False, targets=None, steps=3, alpha=0.01):
    """fallback_output (minimal): a short walk; images it failed on get an all-zero image."""
    found, hit = _walk(model, inputs, labels, targeted, targets, steps, alpha)
    return torch.where(hit.view(-1, 1, 1, 1), found, torch.zeros_like(found))


def zero_fallback_pgd(model, inputs, labels, *, eps, targeted=False, targets=None, steps=3):
    """fallback_output (fixed-ε): PGD that returns an all-zero image where its last iterate failed."""
    x = pgd(model, inputs, labels, eps=eps, targeted=targeted, targets=targets, steps=steps)
    with torch.no_grad():
        pred = model(x).argmax(1)
    ok = (pred == targets) if targeted else (pred != labels)
    return torch.where(ok.view(-1, 1, 1, 1), x, torch.zeros_like(x))


def label_keeper(model, inputs, labels, *, targeted=False, targets=None, steps=25, alpha=0.01):
    """Success test ignores the target: walks towards the target (or away from the label), and
    keeps the last point whose prediction equals the *label* (the wrong comparison)."""
    aim, towards = _aim(labels, targeted, targets)
    x, kept = inputs.clone(), inputs.clone()
    for _ in range(steps):
        x = (x + alpha * _grad(model, x, aim, towards).sign()).clamp(0, 1)
        with torch.no_grad():
            keep = model(x).argmax(1) == labels
        kept[keep] = x[keep]
    return kept


def batch_stop(model, inputs, labels, *, targeted=False, targets=None, steps=25, alpha=0.01):
    """batch_dependence: the walk stops for every image as soon as one image of the batch is adversarial."""
    aim, towards = _aim(labels, targeted, targets)
    x = inputs.clone()
    for _ in range(steps):
        with torch.no_grad():
            pred = model(x).argmax(1)
        done = (pred == targets) if targeted else (pred != labels)
        if done.any():  # a batch-wide stopping test
            break
        x = torch.where(done.view(-1, 1, 1, 1), x,
                        (x + alpha * _grad(model, x, aim, towards).sign()).clamp(0, 1))
    return x.detach()


def half_ball(model, inputs, labels, *, eps, targeted=False, targets=None, steps=10):
    """ε use: PGD projected onto half of the ε it was given."""
    return pgd(model, inputs, labels, eps=_ball(eps, inputs) / 2, targeted=targeted, targets=targets, steps=steps)


def specs():
    mk = partial(AttackSpec, "defects")
    return [
        mk("pgd", "pgd", "linf", "fixed", {"steps": 10}, partial(pgd, steps=10), per_sample_eps=True),
        mk("no_projection", "pgd", "linf", "fixed", {"steps": 10}, partial(no_projection, steps=10),
           per_sample_eps=True),
        mk("fixed_step", "pgd", "linf", "fixed", {"steps": 5}, partial(fixed_step, steps=5), per_sample_eps=True),
        mk("batch_step", "pgd", "l2", "fixed", {"steps": 10}, partial(batch_step, steps=10), per_sample_eps=True),
        mk("untargeted_walk", "walk", "linf", "minimal", {"steps": 25}, partial(untargeted_walk, steps=25)),
        mk("untargeted_pgd", "pgd", "linf", "fixed", {"steps": 10}, partial(untargeted_pgd, steps=10),
           per_sample_eps=True),
        mk("zero_fallback", "walk", "linf", "minimal", {"steps": 3}, partial(zero_fallback, steps=3)),
        mk("zero_fallback_pgd", "pgd", "linf", "fixed", {"steps": 3}, partial(zero_fallback_pgd, steps=3),
           per_sample_eps=True),
        mk("label_keeper", "walk", "linf", "minimal", {"steps": 25}, partial(label_keeper, steps=25)),
        mk("batch_stop", "walk", "linf", "minimal", {"steps": 25}, partial(batch_stop, steps=25)),
        mk("half_ball", "pgd", "linf", "fixed", {"steps": 10}, partial(half_ball, steps=10), per_sample_eps=True),
    ]
