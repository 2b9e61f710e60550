"""cleverhans (``cleverhans.torch.attacks``): functions of ``(model_fn, x, ..., y, targeted)``.

cleverhans 3.x ships the same PyTorch functions, with the same signatures, under
``cleverhans.future.torch.attacks``; ``_function`` takes them from whichever this release has.

``model_fn`` is the model itself. With ``targeted=True`` cleverhans reads ``y`` as the target.
Clipping to [0, 1] happens only when both ``clip_min`` and ``clip_max`` are given, so they
always are. Outputs keep ``requires_grad`` and ``grad_fn``: the adapter detaches them.
"""
from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np
from torch import Tensor, nn

from .release import per_eps_group, rows_follow_eps
from .spec import AttackSpec, declare_randomness, num_classes

LIBRARY = "cleverhans"

#: (name, variant) of the attacks whose results depend on the seed, and of those whose call moves a
#: global random state without that (measured: ``spec.declare_randomness``)
RANDOMISED = {("projected_gradient_descent", "")}
MOVES_GLOBAL_RNG = set()
ORD = {"l2": 2, "linf": np.inf}


#: where releases keep the PyTorch attacks: cleverhans 4, then cleverhans 3.x
PACKAGES = ("cleverhans.torch.attacks", "cleverhans.future.torch.attacks")


def _function(module: str):
    """``module``'s function of the same name from this release's PyTorch attack package."""
    import importlib

    for package in PACKAGES:
        path = f"{package}.{module}"
        try:
            return getattr(importlib.import_module(path), module)
        except ModuleNotFoundError as exc:
            if not exc.name or not path.startswith(exc.name):
                raise  # a dependency of the release is missing: that is the error to show
            continue
    raise ModuleNotFoundError(f"this cleverhans release has no PyTorch {module} (looked in {', '.join(PACKAGES)})")


def _y(labels: Tensor, targeted: bool, targets: Tensor | None) -> Tensor:
    if targeted and targets is None:
        raise ValueError("targeted=True needs targets")
    return targets if targeted else labels


class RowEps(Tensor):
    """One ε per row (N×1×…×1) that cleverhans' scalar checks can read honestly.

    ``fast_gradient_method`` tests ``if eps < 0`` (raise) and ``if eps == 0`` (return the input);
    a plain tensor of several values raises there. This one's truth value is that of its rows when
    they all agree, and it raises when they do not, so a check passes only if it passes for every
    row (the search's ε are all positive: both checks are false for every row). Everything else
    is torch's own arithmetic, which broadcasts the rows.
    """

    def __bool__(self) -> bool:
        rows = self.as_subclass(Tensor)
        if bool(rows.all()):
            return True
        if not bool(rows.any()):
            return False
        raise RuntimeError("the rows of a per-sample ε disagree on a check cleverhans reads as one truth value")


def _fgm(spec_norm: str, model: nn.Module, inputs: Tensor, labels: Tensor, *, eps: float | Tensor,
         targeted: bool = False, targets: Tensor | None = None) -> Tensor:
    """One signed/normalised gradient step of size ``eps`` (a float, or one per row: ``RowEps``):
    N×C×H×W -> N×C×H×W in [0, 1]."""
    if isinstance(eps, Tensor) and not _rows_eps_works(spec_norm):
        def scalar(x: Tensor, y: Tensor, t: Tensor | None, e: float) -> Tensor:
            return _fgm(spec_norm, model, x, y, eps=e, targeted=targeted, targets=t)
        return per_eps_group(scalar, inputs, labels, targets, eps)
    return _fgm_call(spec_norm, model, inputs, labels, eps=eps, targeted=targeted, targets=targets)


def _fgm_call(spec_norm: str, model: nn.Module, inputs: Tensor, labels: Tensor, *, eps: float | Tensor,
              targeted: bool, targets: Tensor | None) -> Tensor:
    """``_fgm`` without the probe: ``eps`` a float or an (N,) tensor, as given."""
    fast_gradient_method = _function("fast_gradient_method")
    e = (eps.to(device=inputs.device, dtype=inputs.dtype).view(-1, *[1] * (inputs.dim() - 1)).as_subclass(RowEps)
         if isinstance(eps, Tensor) else float(eps))
    adv = fast_gradient_method(model, inputs, e, ORD[spec_norm], clip_min=0.0, clip_max=1.0,
                               y=_y(labels, targeted, targets), targeted=targeted)
    return adv.detach().as_subclass(Tensor)


def _rows_eps_works(spec_norm: str) -> bool:
    """Whether this release's ``fast_gradient_method`` gives each row of a ``RowEps`` the row of a
    scalar call (``release.rows_follow_eps`` on a tiny model); else one call per ε."""
    return rows_follow_eps(("cleverhans", "fast_gradient_method", spec_norm),
                           lambda model, x, y, e: _fgm_call(spec_norm, model, x, y, eps=e, targeted=False,
                                                            targets=None))


def _pgd(spec_norm: str, model: nn.Module, inputs: Tensor, labels: Tensor, *, eps: float,
         targeted: bool = False, targets: Tensor | None = None, nb_iter: int = 50,
         step_factor: float = 2.5, rand_init: bool = True) -> Tensor:
    """PGD with ``eps_iter = min(1, step_factor / nb_iter) * eps``: N×C×H×W -> N×C×H×W in [0, 1].

    cleverhans asserts ``eps_iter <= eps``, so the step is tied to ε (Madry et al.'s 2.5·ε/steps)
    and stays sensible when the steps are scaled down.
    """
    projected_gradient_descent = _function("projected_gradient_descent")
    eps = float(eps)
    adv = projected_gradient_descent(model, inputs, eps, min(1.0, step_factor / nb_iter) * eps, nb_iter,
                                     ORD[spec_norm], clip_min=0.0, clip_max=1.0,
                                     y=_y(labels, targeted, targets), targeted=targeted,
                                     rand_init=rand_init)
    return adv.detach()


def _cw(model: nn.Module, inputs: Tensor, labels: Tensor, *, targeted: bool = False,
        targets: Tensor | None = None, **params: Any) -> Tensor:
    """Carlini-Wagner L2 (the best point found): N×C×H×W -> N×C×H×W in [0, 1]."""
    carlini_wagner_l2 = _function("carlini_wagner_l2")
    adv = carlini_wagner_l2(model, inputs, num_classes(model, inputs), y=_y(labels, targeted, targets),
                            targeted=targeted, clip_min=0.0, clip_max=1.0, **params)
    return adv.detach()


def specs() -> list[AttackSpec]:
    _function("fast_gradient_method")  # an import failure marks the library unavailable

    out: list[AttackSpec] = []
    for norm in ("l2", "linf"):
        # per-sample ε (``RowEps``); PGD's random start draws ``uniform_(-eps, eps)``, which takes floats only
        out.append(AttackSpec(LIBRARY, "fast_gradient_method", "fgm", norm, "fixed", {},
                              partial(_fgm, norm), per_sample_eps=True))
        # 2 queries per iteration: 50 iterations = 100 per call of the minimal-ε search
        pgd = {"nb_iter": 50, "step_factor": 2.5, "rand_init": True}
        out.append(AttackSpec(LIBRARY, "projected_gradient_descent", "pgd", norm, "fixed", pgd,
                              partial(_pgd, norm, **pgd), steps_param="nb_iter"))
    # 9 binary-search steps × 100 iterations × (forward + backward) = 1800 queries, as adv-lib's CW
    cw = {"binary_search_steps": 9, "max_iterations": 100, "lr": 5e-3, "initial_const": 1e-2}
    out.append(AttackSpec(LIBRARY, "carlini_wagner_l2", "cw", "l2", "minimal", cw, partial(_cw, **cw),
                          steps_param="max_iterations",
                          note="loops over samples in Python each iteration; does not reset Adam or "
                               "the modifier between binary-search steps"))
    return declare_randomness(out, RANDOMISED, MOVES_GLOBAL_RNG)
