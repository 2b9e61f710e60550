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

from .spec import AttackSpec, num_classes

LIBRARY = "cleverhans"
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


def _fgm(spec_norm: str, model: nn.Module, inputs: Tensor, labels: Tensor, *, eps: float,
         targeted: bool = False, targets: Tensor | None = None) -> Tensor:
    """One signed/normalised gradient step of size ``eps``: N×C×H×W -> N×C×H×W in [0, 1]."""
    fast_gradient_method = _function("fast_gradient_method")
    adv = fast_gradient_method(model, inputs, float(eps), ORD[spec_norm], clip_min=0.0, clip_max=1.0,
                               y=_y(labels, targeted, targets), targeted=targeted)
    return adv.detach()


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
        out.append(AttackSpec(LIBRARY, "fast_gradient_method", "fgm", norm, "fixed", {},
                              partial(_fgm, norm)))
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
    return out
