"""adv-lib: each attack is already ``attack(model, inputs, labels, targeted=False, **kw)``.

Targets go in the ``labels`` argument with ``targeted=True``. Steps are chosen so one run fits
the 2000-query budget (one forward and one backward per step for most attacks); fixed-ε
attacks take a per-sample ε tensor. An attack a release lacks is not in its catalogue; one whose
keywords differ is bridged or ``unsupported`` when run (``adapters/release.py``).
"""
from __future__ import annotations

from functools import partial
from typing import Any

from torch import Tensor, nn

from .release import bridge_keywords
from .spec import AttackSpec, declare_randomness

LIBRARY = "adv_lib"

#: (name, variant) of the attacks whose results depend on the seed, and of those whose call moves a
#: global random state without that (measured: ``spec.declare_randomness``)
RANDOMISED = {("apgd", ""), ("apgd", "ce"), ("apgd_targeted", ""), ("pgd_linf", "")}
MOVES_GLOBAL_RNG = {("vfga", "")}
P = {"l0": 0, "l1": 1, "l2": 2, "linf": float("inf")}


def _minimal(fn, model: nn.Module, inputs: Tensor, labels: Tensor, *, targeted: bool = False,
             targets: Tensor | None = None, **params: Any) -> Tensor:
    params = bridge_keywords(fn, params, what=f"adv-lib {fn.__name__}")
    return fn(model, inputs, targets if targeted else labels, targeted=targeted, **params)


def _fixed(fn, eps_name: str, model: nn.Module, inputs: Tensor, labels: Tensor, *, eps,
           targeted: bool = False, targets: Tensor | None = None, **params: Any) -> Tensor:
    if isinstance(eps, Tensor):
        eps = eps.to(inputs.device, inputs.dtype)
    params = bridge_keywords(fn, {eps_name: eps, **params}, what=f"adv-lib {fn.__name__}")
    return fn(model, inputs, targets if targeted else labels, targeted=targeted, **params)


class _Release:
    """``adv_lib.attacks`` of the installed release; an attack it lacks is ``None``. Releases
    differ (``df`` arrived in 0.2.6): detect features, never compare version numbers."""

    def __init__(self, module) -> None:
        self._module = module

    def __getattr__(self, name: str):
        return getattr(self._module, name, None)


def specs() -> list[AttackSpec]:
    from adv_lib import attacks

    A = _Release(attacks)
    out: list[AttackSpec] = []

    def minimal(name, fn, family, spec_norm, steps_param="", targeted_support=True, **params):
        if fn is None:  # absent from this release: not in the catalogue
            return
        # adv-lib's df, fab and tr warn and return the input unchanged when targeted=True
        note = "" if targeted_support else f"adv-lib's {name} has no targeted mode (returns the input)"
        out.append(AttackSpec(LIBRARY, name, family, spec_norm, "minimal", params,
                              partial(_minimal, fn, **params), targeted_support=targeted_support,
                              steps_param=steps_param, note=note))

    def fixed(name, fn, family, spec_norm, eps_name="eps", steps_param="", variant="", targeted_support=True,
              **params):
        if fn is None:
            return
        note = "" if targeted_support else f"adv-lib's {name} has no targeted mode"
        out.append(AttackSpec(LIBRARY, name, family, spec_norm, "fixed", params,
                              partial(_fixed, fn, eps_name, **params), per_sample_eps=True,
                              steps_param=steps_param, variant=variant, targeted_support=targeted_support,
                              note=note))

    for norm in ("l0", "l1", "l2", "linf"):
        minimal("fmn", A.fmn, "fmn", norm, "steps", norm=P[norm], steps=500)
        minimal("pdpgd", A.pdpgd, "pdpgd", norm, "num_steps", norm=P[norm], num_steps=500)
    minimal("ddn", A.ddn, "ddn", "l2", "steps", steps=500)
    minimal("pdgd", A.pdgd, "pdgd", "l2", "num_steps", num_steps=500)
    for norm in ("l1", "l2"):
        minimal("alma", A.alma, "alma", norm, "num_steps", distance=norm, num_steps=500)
    for norm in ("l1", "l2", "linf"):
        # adv-lib's FAB with targeted=True warns and returns the input unchanged
        minimal("fab", A.fab, "fab", norm, "n_iter", targeted_support=False, norm=P[norm], n_iter=100)
        fixed("apgd", A.apgd, "apgd", norm, "eps", "n_iter", norm=P[norm], n_iter=100, loss_function="dlr")
        fixed("apgd", A.apgd, "apgd", norm, "eps", "n_iter", norm=P[norm], n_iter=100, loss_function="ce",
              variant="ce")
        # APGD-T picks its own target classes (the runner-up logits) to break the label: an
        # untargeted attack; targeted=True fails an assertion inside adv-lib
        fixed("apgd_targeted", A.apgd_targeted, "apgd_t", norm, "eps", "n_iter", norm=P[norm], n_iter=100,
              num_targets=3, targeted_support=False)
    for norm in ("l2", "linf"):
        minimal("df", A.df, "deepfool", norm, "steps", targeted_support=False, norm=P[norm], steps=50)
        # the adaptive trust region of Yao et al.: adv-lib's default (adaptive=False) caps every step
        # at eps=0.001, at most 0.05 in 50 steps, scaled for large images; on the digits zoo (median
        # minimal L2 0.48) it broke none of 16 images, adaptive all 16 at DeepFool's distances
        minimal("tr", A.tr, "tr", norm, "iter", targeted_support=False, p=P[norm], iter=50, adaptive=True)
    minimal("carlini_wagner_l2", A.carlini_wagner_l2, "cw", "l2", "max_iterations",
            binary_search_steps=9, max_iterations=100)
    minimal("carlini_wagner_linf", A.carlini_wagner_linf, "cw", "linf", "max_iterations",
            max_iterations=40)
    minimal("vfga", A.vfga, "vfga", "l0", "max_iter", max_iter=20)
    # sigma-zero is untargeted only: with targeted=True it warns and returns its input
    minimal("sigma_zero", A.sigma_zero, "sigma_zero", "l0", "num_steps", targeted_support=False, num_steps=500)
    fixed("pgd_linf", A.pgd_linf, "pgd", "linf", "ε", "steps", steps=100)
    return declare_randomness(out, RANDOMISED, MOVES_GLOBAL_RNG)
