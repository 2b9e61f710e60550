"""torchattacks: ``torchattacks.X(model, **hp)(inputs, labels)`` on torch tensors.

Conventions converted here: targeted runs call ``set_mode_targeted_by_label(quiet=True)`` and
pass the targets where the labels go (FAB instead needs the true labels plus a target map, see
``_run``); ε (``eps``; PGD/BIM step ``alpha`` relative to it) is an N×1×1×1 tensor for the
attacks that broadcast it (``per_sample_eps``, where a probe on a tiny model says this release
does; else one call per distinct ε), a float for the others; the class count that
APGDT and FAB hard-code to 10 comes from the model; the output is detached (APGD's keeps
``requires_grad``). APGD, APGDT and FAB reseed the global torch RNG with their ``seed`` on every
call, so a job stays reproducible but later draws in the same process repeat.
"""
from __future__ import annotations

from functools import partial
from typing import Any

import torch
from torch import Tensor, nn

from .release import Unsupported, bridge_keywords, call_accepting, per_eps_group, rows_follow_eps
from .spec import AttackSpec, declare_randomness, num_classes

LIBRARY = "torchattacks"

#: (name, variant) of the attacks whose results depend on the seed, and of those whose call moves a
#: global random state without that (measured: ``spec.declare_randomness``)
RANDOMISED = {("APGD", "ce"), ("APGD", "dlr"), ("APGDT", ""), ("PGD", ""), ("PGDL2", ""), ("SparseFool", "")}
MOVES_GLOBAL_RNG = set()
NAMES = {"l1": "L1", "l2": "L2", "linf": "Linf"}
#: FAB keeps only adversarials within ``eps``; this makes it a minimum-norm attack
UNBOUNDED_EPS = 1e6
#: our hyperparameter name -> the names older releases gave it (FAB's multi-targeted switch was
#: ``targeted`` until 3.3)
RENAMES = {"multi_targeted": ("targeted",)}


def _run(attack_cls, model: nn.Module, inputs: Tensor, labels: Tensor, *, targeted: bool = False,
         targets: Tensor | None = None, eps: float | Tensor | None = None, alpha_scale: float = 0.0,
         with_classes: bool = False, target_by_map: bool = False, **params: Any) -> Tensor:
    """Run ``attack_cls(model, **params)`` on ``inputs`` (N×C×H×W in [0, 1]) -> N×C×H×W.

    ``alpha_scale``: step ``alpha = alpha_scale·eps/steps`` (Madry et al.'s 2.5·ε/steps).
    ``with_classes``: pass ``n_classes`` (APGDT/FAB default to 10).
    ``target_by_map``: FAB's targeted mode must get the true labels and the targets through a
    target map (``set_mode_targeted_by_label`` would make it compare the prediction with the
    target as if it were the label, and attack nothing).
    """
    if isinstance(eps, Tensor) and not _tensor_eps_works(attack_cls, alpha_scale, params):
        def scalar(x: Tensor, y: Tensor, t: Tensor | None, e: float) -> Tensor:
            return _run(attack_cls, model, x, y, targeted=targeted, targets=t, eps=e, alpha_scale=alpha_scale,
                        with_classes=with_classes, target_by_map=target_by_map, **params)
        return per_eps_group(scalar, inputs, labels, targets, eps)
    return _call(attack_cls, model, inputs, labels, targeted=targeted, targets=targets, eps=eps,
                 alpha_scale=alpha_scale, with_classes=with_classes, target_by_map=target_by_map, **params)


def _call(attack_cls, model: nn.Module, inputs: Tensor, labels: Tensor, *, targeted: bool, targets: Tensor | None,
          eps: float | Tensor | None, alpha_scale: float, with_classes: bool, target_by_map: bool,
          **params: Any) -> Tensor:
    """``_run`` without the probe: ``eps`` a float or an (N,) tensor, as given."""
    kw = dict(params)
    if eps is not None:
        # per-sample ε (N) as N×1×…×1 on the inputs' device, which the attacks that declare
        # per_sample_eps broadcast (tests/test_per_sample_eps_conformance.py); else a float
        kw["eps"] = (eps.to(device=inputs.device, dtype=inputs.dtype).view(-1, *[1] * (inputs.dim() - 1))
                     if isinstance(eps, Tensor) else float(eps))
        if alpha_scale:
            kw["alpha"] = alpha_scale * kw["eps"] / kw["steps"]
    if with_classes:
        kw["n_classes"] = num_classes(model, inputs)
    attack = attack_cls(model, **bridge_keywords(attack_cls, kw, what=f"torchattacks {attack_cls.__name__}",
                                                 renames=RENAMES))
    y = labels
    if targeted:
        _set_targeted(attack, targets if target_by_map else None)
        y = labels if target_by_map else targets
    adv = attack(inputs, y)
    return adv.detach().to(device=inputs.device, dtype=inputs.dtype)


def _tensor_eps_works(attack_cls, alpha_scale: float, params: dict[str, Any]) -> bool:
    """Whether this release's ``attack_cls`` gives each row of a per-sample ε tensor the row a
    scalar call at that row's ε gives (``release.rows_follow_eps``: two steps on a tiny model).
    Releases where it does not (or raises) get one call per distinct ε."""
    small = {**params, **({"steps": 2} if "steps" in params else {})}
    common = {"targeted": False, "targets": None, "alpha_scale": alpha_scale, "with_classes": False,
              "target_by_map": False, **small}
    return rows_follow_eps(
        ("torchattacks", attack_cls.__name__, str(params.get("norm")), str(params.get("loss"))),
        lambda model, x, y, eps: _call(attack_cls, model, x, y, eps=eps, **common))


def _set_targeted(attack, targets: Tensor | None) -> None:
    """Targeted mode on this release: ``targets`` through a target map, or (None) the labels
    argument read as the targets. ``set_mode_targeted_by_label`` arrived in 3.3; before it,
    ``set_mode_targeted_by_function`` with the identity map meant the same. ``quiet`` arrived in
    3.3 as well (the older setters print a line)."""
    supported = getattr(attack, "supported_mode", getattr(attack, "_supported_mode", ["targeted"]))
    if "targeted" not in supported:
        raise Unsupported(f"torchattacks {type(attack).__name__} of this release has no targeted mode")
    if targets is not None:
        call_accepting(attack.set_mode_targeted_by_function, lambda _inputs, _labels: targets, quiet=True)
    elif hasattr(attack, "set_mode_targeted_by_label"):
        call_accepting(attack.set_mode_targeted_by_label, quiet=True)
    else:
        call_accepting(attack.set_mode_targeted_by_function, lambda _inputs, labels: labels, quiet=True)


def specs() -> list[AttackSpec]:
    import torchattacks as ta

    out: list[AttackSpec] = []

    def add(cls, family: str, spec_norm: str, kind: str, steps_param: str = "steps",
            targeted_support: bool = True, variant: str = "", note: str = "", per_sample_eps: bool = False,
            run_kw: dict[str, Any] | None = None, **params: Any) -> None:
        # feature detection, not version checks: a release without the class does not have this
        # spec; one whose class takes other hyperparameters is bridged or ``unsupported`` when run
        if cls is None:
            return
        run_kw = run_kw or {}
        out.append(AttackSpec(
            LIBRARY, cls.__name__, family, spec_norm, kind, dict(params, **run_kw),
            partial(_run, cls, **run_kw, **params), targeted_support=targeted_support,
            steps_param=steps_param, variant=variant, note=note, per_sample_eps=per_sample_eps))

    untargeted = "torchattacks {} supports only the default (untargeted) mode"
    for norm in ("l2", "linf"):
        # ~one forward and one backward per step: 100 steps ~ 200 queries per call
        for loss in ("ce", "dlr"):
            add(getattr(ta, "APGD", None), "apgd", norm, "fixed", targeted_support=False, variant=loss,
                note=untargeted.format("APGD"), per_sample_eps=True, norm=NAMES[norm], steps=100, n_restarts=1,
                loss=loss, seed=0, eot_iter=1, rho=0.75, verbose=False)
        # APGDT tries every other class in turn (n_classes - 1 targets) to reach any
        # misclassification: 10 steps per target keep a call near 200 queries.
        add(getattr(ta, "APGDT", None), "apgd_t", norm, "fixed", targeted_support=False,
            note=untargeted.format("APGDT") + "; its targets are internal (top-k classes)",
            run_kw={"with_classes": True}, norm=NAMES[norm], steps=10, n_restarts=1, seed=0,
            eot_iter=1, rho=0.75, verbose=False)
    add(getattr(ta, "PGD", None), "pgd", "linf", "fixed", run_kw={"alpha_scale": 2.5}, steps=100, random_start=True)
    add(getattr(ta, "PGDL2", None), "pgd", "l2", "fixed", run_kw={"alpha_scale": 2.5}, steps=100, random_start=True)
    # per-sample ε: APGD, BIM and FGSM broadcast an N×1×1×1 ε (APGDT takes its rows apart per
    # target, PGD's random start needs a float, PGDL2 divides by an (N,) norm)
    add(getattr(ta, "BIM", None), "bim", "linf", "fixed", run_kw={"alpha_scale": 2.5}, per_sample_eps=True, steps=100)
    add(getattr(ta, "FGSM", None), "fgm", "linf", "fixed", steps_param="", per_sample_eps=True)
    fab_note = ("torchattacks 3.5.1 FAB: targeted runs count any misclassification as success, and "
                "the targets shift when the batch holds an already misclassified sample (the target "
                "map is indexed by positions among the correctly classified ones)")
    for norm in ("l1", "l2", "linf"):
        # each step: one forward and one backward per class (the Jacobian), ~1200 queries
        add(getattr(ta, "FAB", None), "fab", norm, "minimal", run_kw={"with_classes": True, "target_by_map": True},
            note=fab_note + ("; norm='L1' raises UnboundLocalError in perturb" if norm == "l1" else ""),
            norm=NAMES[norm], eps=UNBOUNDED_EPS, steps=100, n_restarts=1, alpha_max=0.1, eta=1.05,
            beta=0.9, seed=0, multi_targeted=False, verbose=False)
    add(getattr(ta, "CW", None), "cw", "l2", "minimal",
        note="torchattacks CW uses one fixed c (no binary search) and stops early when the cost rises",
        c=1.0, kappa=0.0, steps=500, lr=0.01)
    add(getattr(ta, "DeepFool", None), "deepfool", "l2", "minimal", targeted_support=False,
        note=untargeted.format("DeepFool"), steps=50, overshoot=0.02)
    for norm in ("l0", "l1"):
        # SparseFool runs a DeepFool (50 steps, not settable) inside each of its steps; it also
        # queries the unclamped extrapolation x + lam·(deepfool - x), which may leave the box
        add(getattr(ta, "SparseFool", None), "sparsefool", norm, "minimal", targeted_support=False,
            note=untargeted.format("SparseFool") + "; it minimises L1 as a proxy for L0",
            steps=10, lam=3.0, overshoot=0.02)
    ead_note = ("torchattacks 3.5.1 EAD: y_k = nn.Parameter(images) shares storage with images, so "
                "the first gradient step moves the reference image (outputs leave [0, 1]); "
                "max_iterations < 10 divides by zero in abort_early")
    for cls in (getattr(ta, "EADL1", None), getattr(ta, "EADEN", None)):
        # abort_early stops most binary-search steps early: ~600 queries measured
        add(cls, "ead", "l1", "minimal", steps_param="max_iterations", note=ead_note, kappa=0.0,
            lr=0.01, binary_search_steps=9, max_iterations=100, abort_early=True,
            initial_const=0.001, beta=0.001)
    # gamma caps the fraction of features JSMA may change (default 0.1, i.e. 6 of 64 pixels
    # here): a minimum-L0 attack gets them all; one Jacobian (1 forward + C backwards) per 2 pixels
    add(getattr(ta, "JSMA", None), "jsma", "l0", "minimal", steps_param="",
        note="torchattacks JSMA is always targeted: untargeted runs aim at (label + 1) % 10",
        theta=1.0, gamma=1.0)
    return declare_randomness(out, RANDOMISED, MOVES_GLOBAL_RNG)
