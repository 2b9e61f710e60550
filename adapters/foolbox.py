"""foolbox 3: ``Attack(**hp)(PyTorchModel(model, bounds=(0, 1)), x, criterion, epsilons=...)``.

foolbox returns ``(raw, clipped, success)``; the adapter returns ``clipped`` (the point clipped
to the ε-ball and the box) and ignores the library's success flag. Targets go in a
``TargetedMisclassification`` criterion. Minimum-norm attacks take ``epsilons=None``; fixed-ε
attacks a scalar ε (the minimal-ε search groups samples by ε), or for the L∞ ones one ε per row
(``_fixed_rows``, where a probe on a tiny model says this release broadcasts it). Iteration counts mirror the
adv-lib adapter where the family exists there, so implementations are compared at equal steps.
A class this release lacks (FMN before 3.3.2) is not in its catalogue; hyperparameters go through
``release.bridge_keywords`` (``unsupported`` rows when a release cannot take one).
"""
from __future__ import annotations

from functools import partial
from typing import Any

from torch import Tensor, nn

from .release import Unsupported, bridge_keywords, per_eps_group, rows_follow_eps
from .spec import AttackSpec, declare_randomness

LIBRARY = "foolbox"

#: (name, variant) of the attacks whose results depend on the seed, and of those whose call moves a
#: global random state without that (measured: ``spec.declare_randomness``)
RANDOMISED = {("L1ProjectedGradientDescentAttack", ""), ("L2ProjectedGradientDescentAttack", ""),
              ("LinfProjectedGradientDescentAttack", "")}
MOVES_GLOBAL_RNG = {("DDNAttack", "")}

#: the minimum-norm attack that gives Brendel-Bethge its adversarial starting point, per norm.
#: Same-norm FMN starts closest, except L1: foolbox's L1FMNAttack (100 steps) left 2 of 6 digits
#: unbroken, while BB-L1 from an L2FMN start broke all 6 and matched L1FMN's distances on the rest.
BB_INIT = {"l0": "L0FMNAttack", "l1": "L2FMNAttack", "l2": "L2FMNAttack", "linf": "LInfFMNAttack"}
BB_CLASS = {"l0": "L0BrendelBethgeAttack", "l1": "L1BrendelBethgeAttack", "l2": "L2BrendelBethgeAttack",
            "linf": "LinfinityBrendelBethgeAttack"}


def _fmodel(model: nn.Module, inputs: Tensor):
    import foolbox as fb

    # foolbox warns on every call when the module is in training mode; the QueryTracker always
    # forwards its inner model in eval mode, so present it as such.
    if model.training:
        model.eval()
    return fb.PyTorchModel(model, bounds=(0, 1), device=inputs.device)


def _criterion(labels: Tensor, targeted: bool, targets: Tensor | None):
    import foolbox as fb

    if targeted:
        if targets is None:
            raise ValueError("targeted=True needs targets")
        return fb.criteria.TargetedMisclassification(targets)
    return fb.criteria.Misclassification(labels)


def _attack(cls_name: str, params: dict[str, Any]):
    """This release's ``fb.attacks.<cls_name>(**params)``, or Unsupported."""
    import foolbox as fb

    cls = getattr(fb.attacks, cls_name, None)
    if cls is None:
        raise Unsupported(f"foolbox {fb.__version__} has no {cls_name}")
    return cls(**bridge_keywords(cls, params, what=f"foolbox {cls_name}"))


def _minimal(cls_name: str, model: nn.Module, inputs: Tensor, labels: Tensor, *, targeted: bool = False,
             targets: Tensor | None = None, **params: Any) -> Tensor:
    """Minimum-norm attack on N×C×H×W ``inputs``; returns N×C×H×W in [0, 1], detached."""
    attack = _attack(cls_name, params)
    _, clipped, _ = attack(_fmodel(model, inputs), inputs, _criterion(labels, targeted, targets),
                           epsilons=None)
    return clipped.detach()


def _fixed(cls_name: str, model: nn.Module, inputs: Tensor, labels: Tensor, *, eps: float | Tensor,
           targeted: bool = False, targets: Tensor | None = None, **params: Any) -> Tensor:
    """Fixed-ε attack at ``eps`` (a float, or one per row for the specs that declare
    ``per_sample_eps``); returns N×C×H×W in [0, 1] (within ε), detached."""
    if isinstance(eps, Tensor):
        if _rows_eps_works(cls_name, params):
            return _fixed_rows(cls_name, model, inputs, labels, eps=eps, targeted=targeted, targets=targets,
                               **params)

        def scalar(x: Tensor, y: Tensor, t: Tensor | None, e: float) -> Tensor:
            return _fixed(cls_name, model, x, y, eps=e, targeted=targeted, targets=t, **params)
        return per_eps_group(scalar, inputs, labels, targets, eps)
    attack = _attack(cls_name, params)
    _, clipped, _ = attack(_fmodel(model, inputs), inputs, _criterion(labels, targeted, targets),
                           epsilons=float(eps))
    return clipped.detach()


def _fixed_rows(cls_name: str, model: nn.Module, inputs: Tensor, labels: Tensor, *, eps: Tensor,
                targeted: bool, targets: Tensor | None, **params: Any) -> Tensor:
    """``_fixed`` with one ε per row (``eps``: N), as an N×1×…×1 tensor on the inputs' device.

    foolbox's ``__call__`` reads a tensor of ε as a list of N separate ε, so this makes the steps
    of its fixed-ε ``__call__`` itself: ``run`` at the ε, the clip to the ball, and the forward of
    the clipped point that ``__call__`` makes for its success flag (the tracker charges it, so
    the queries stay those of a scalar call). Only the L∞ attacks broadcast such an ε in every
    step (step size, random start, ``ep.clip``); the L1/L2 ones divide it by an (N,) norm.
    """
    from foolbox.attacks.base import get_criterion, get_is_adversarial

    attack = _attack(cls_name, params)
    fmodel = _fmodel(model, inputs)
    e = eps.to(device=inputs.device, dtype=inputs.dtype).view(-1, *[1] * (inputs.dim() - 1))
    criterion = get_criterion(_criterion(labels, targeted, targets))
    adv = attack.run(fmodel, inputs, criterion, epsilon=e)
    clipped = attack.distance.clip_perturbation(inputs, adv, e)
    import eagerpy as ep

    get_is_adversarial(criterion, fmodel)(ep.astensor(clipped))
    return clipped.detach()


def _rows_eps_works(cls_name: str, params: dict[str, Any]) -> bool:
    """Whether this release's ``cls_name`` gives each row of a per-sample ε the row of a scalar
    call (``release.rows_follow_eps``: two steps on a tiny model); else one call per ε."""
    small = {**params, **({"steps": 2} if "steps" in params else {})}

    def call(model: nn.Module, x: Tensor, y: Tensor, e: float | Tensor) -> Tensor:
        if isinstance(e, Tensor):
            return _fixed_rows(cls_name, model, x, y, eps=e, targeted=False, targets=None, **small)
        return _fixed(cls_name, model, x, y, eps=e, **small)

    return rows_follow_eps(("foolbox", cls_name), call)


def _brendel_bethge(spec_norm: str, model: nn.Module, inputs: Tensor, labels: Tensor, *,
                    targeted: bool = False, targets: Tensor | None = None, init: str = "L2FMNAttack",
                    init_steps: int = 100, **params: Any) -> Tensor:
    """Brendel-Bethge from an FMN starting point (``init``); N×C×H×W -> N×C×H×W in [0, 1].

    foolbox's BB asserts that *every* starting point is adversarial, which no init attack
    guarantees (its default, a blended-uniform-noise search, least of all for a target class).
    So the init attack runs first and BB runs only on the samples it broke; the others get the
    init's output (not adversarial), which the harness records as a failure.
    """
    fmodel = _fmodel(model, inputs)
    criterion = _criterion(labels, targeted, targets)
    start_attack = _attack(init, {"steps": init_steps})
    _, start, success = start_attack(fmodel, inputs, criterion, epsilons=None)
    out = start.detach().clone()
    ok = success.bool()
    if ok.any():
        sub = _criterion(labels[ok], targeted, targets[ok] if targeted and targets is not None else None)
        attack = _attack(BB_CLASS[spec_norm], params)
        _, adv, _ = attack(fmodel, inputs[ok], sub, epsilons=None, starting_points=start[ok])
        out[ok] = adv.detach().to(out.dtype)
    return out


def specs() -> list[AttackSpec]:
    import foolbox  # an import failure marks the library unavailable

    out: list[AttackSpec] = []

    def minimal(cls_name: str, family: str, spec_norm: str, steps_param: str = "steps",
                targeted_support: bool = True, note: str = "", **params: Any) -> None:
        if not hasattr(foolbox.attacks, cls_name):  # absent from this release: not in its catalogue
            return
        out.append(AttackSpec(LIBRARY, cls_name, family, spec_norm, "minimal", params,
                              partial(_minimal, cls_name, **params), targeted_support=targeted_support,
                              steps_param=steps_param, note=note))

    def fixed(cls_name: str, family: str, spec_norm: str, steps_param: str = "steps",
              targeted_support: bool = True, note: str = "", per_sample_eps: bool = False, **params: Any) -> None:
        if not hasattr(foolbox.attacks, cls_name):
            return
        out.append(AttackSpec(LIBRARY, cls_name, family, spec_norm, "fixed", params,
                              partial(_fixed, cls_name, **params), targeted_support=targeted_support,
                              steps_param=steps_param, note=note, per_sample_eps=per_sample_eps))

    # 2 queries (forward + backward) per step: 500 steps = 1000 queries, as adv-lib's fmn/ddn
    for norm, cls_name in (("l0", "L0FMNAttack"), ("l1", "L1FMNAttack"), ("l2", "L2FMNAttack"),
                           ("linf", "LInfFMNAttack")):
        minimal(cls_name, "fmn", norm, steps=500)
    minimal("DDNAttack", "ddn", "l2", steps=500)
    # 9 binary-search steps × 100 Adam steps × 2 queries = 1800; abort_early may stop sooner
    minimal("L2CarliniWagnerAttack", "cw", "l2", binary_search_steps=9, steps=100)
    # EAD queries 3 times per step (value_and_grad, then a forward on the new iterate): 9×70×3 = 1890
    minimal("EADAttack", "ead", "l1", binary_search_steps=9, steps=70)
    # (candidates - 1) forward+backward pairs per step: 9 × 2 × 50 = 900 at most
    for norm, cls_name in (("l2", "L2DeepFoolAttack"), ("linf", "LinfDeepFoolAttack")):
        minimal(cls_name, "deepfool", norm, targeted_support=False, steps=50, candidates=10,
                note="foolbox DeepFool is untargeted only: it steps towards the nearest of the top "
                     "classes and uses a TargetedMisclassification only as its stopping rule")
    # Fixed-ε attacks are called ~10-20 times by the minimal-ε search: ≤ 100 queries per call.
    fgm_note = "foolbox's fast gradient attacks raise ValueError('unsupported criterion') when targeted"
    for norm, prefix in (("l1", "L1"), ("l2", "L2"), ("linf", "Linf")):
        # per-sample ε: the L∞ attacks broadcast an N×1×…×1 ε (``_fixed_rows``); L1/L2 get one ε per call
        rows = norm == "linf"
        fixed(f"{prefix}ProjectedGradientDescentAttack", "pgd", norm, per_sample_eps=rows, steps=50)
        fixed(f"{prefix}BasicIterativeAttack", "bim", norm, per_sample_eps=rows, steps=10)  # foolbox's default
        fixed(f"{prefix}FastGradientAttack", "fgm", norm, steps_param="", targeted_support=False,
              per_sample_eps=rows, note=fgm_note)
    # BB: FMN init (2×100) + 10 binary-search forwards + 2 queries per step: 200 + 10 + 2×850 ≈ 1910
    for norm in ("l0", "l1", "l2", "linf"):
        params = {"init": BB_INIT[norm], "init_steps": 100, "steps": 850}
        out.append(AttackSpec(LIBRARY, BB_CLASS[norm], "bb", norm, "minimal", params,
                              partial(_brendel_bethge, norm, **params), steps_param="steps",
                              note=f"starts from foolbox's {BB_INIT[norm]} (100 steps); samples it does "
                                   "not break are returned unattacked (BB asserts adversarial starts)"))
    return declare_randomness(out, RANDOMISED, MOVES_GLOBAL_RNG)
