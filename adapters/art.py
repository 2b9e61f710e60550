"""ART (adversarial-robustness-toolbox): numpy attacks on a fresh ``PyTorchClassifier`` per call.

Conventions converted here: torch N×C×H×W in [0, 1] <-> float32 numpy; labels -> int arrays
(ART one-hot-encodes them itself); ``targeted`` -> the attack's ``targeted`` flag with the
targets as ``y`` (JSMA and DeepFool differ, see ``LABEL_RULES``); ε -> ``eps`` (a per-sample
array where the installed release accepts one for that norm, else one call per group of equal ε
with a scalar: ART before 1.18 raises NotImplementedError on arrays in L1 and L2; see
``adapters/release.py``) plus an ``eps_step`` relative to it. ART's defaults are weak or slow
(``batch_size=1``, CW ``max_iter=10``, tqdm bars), so attacks get the whole batch (CW-L2 and EAD
through a classifier whose per-row class gradient is one backward, see ``specs``), no progress
bar, and steps sized to the 2000-query budget. ART calls ``eval()`` on the model and leaves it so; it also accumulates
parameter ``.grad``. Neither matters for the harness's eval-mode models.
"""
from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from .release import bridge_keywords, per_eps_group, probe_inputs, supports, tiny_classifier
from .spec import AttackSpec, declare_randomness, num_classes

LIBRARY = "art"

#: (name, variant) of the attacks whose results depend on the seed, and of those whose call moves a
#: global random state without that (measured: ``spec.declare_randomness``)
RANDOMISED = {("AutoProjectedGradientDescent", "ce"), ("AutoProjectedGradientDescent", "dlr"),
              ("SaliencyMapMethod", "")}
MOVES_GLOBAL_RNG = {("BasicIterativeMethod", ""), ("CarliniL2Method", ""), ("CarliniLInfMethod", ""), ("DeepFool", ""),
                    ("ElasticNet", ""), ("ProjectedGradientDescent", "")}
ORD = {"l1": 1, "l2": 2, "linf": np.inf}

# How an attack receives labels:
#   "flag":        ``targeted=`` in the constructor; ``y`` = labels, or targets when targeted
#   "predictions": untargeted only; ART attacks the model's own prediction (DeepFool ignores y)
#   "target":      ``y`` is always a target (JSMA); untargeted passes ``y=None``, for which ART
#                  draws a random class other than the prediction (from the seeded numpy RNG)
LABEL_RULES = ("flag", "predictions", "target")
#: ``batch_size`` value meaning "the whole batch the adapter is given"
ALL = "all"


class _Forward(nn.Module):
    """A plain module around the model: ART calls an ``nn.Sequential``'s children one by one,
    which would bypass the wrapped model's own ``forward`` (and the QueryTracker with it)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: Tensor) -> Tensor:
        return self.model(x)


def _one_backward_classifier():
    """``PyTorchClassifier`` whose ``class_gradient`` for one label per row is one backward of the
    rows' own logits. ART's takes one backward of the whole batch per distinct label, which the
    tracker charges to every row: a batch of ten classes paid ten backwards a step. The gradients
    are the same rows (each row's logit depends only on that row), so CW and EAD run the whole
    batch at the queries of one image at a time (tests/test_adapter_art.py checks both)."""
    from art.estimators.classification import PyTorchClassifier

    class OneBackwardClassifier(PyTorchClassifier):
        def class_gradient(self, x: np.ndarray, label=None, training_mode: bool = False, **kwargs: Any) -> np.ndarray:
            # ART's own path wherever it does more than this (preprocessing, a layer's gradient,
            # RNNs) or a release lacks what this reads
            if (label is None or np.ndim(label) == 0 or not getattr(self, "all_framework_preprocessing", False)
                    or getattr(self, "_layer_idx_gradients", -1) >= 0 or getattr(self, "is_rnn", False)):
                return super().class_gradient(x, label=label, training_mode=training_mode, **kwargs)
            self._model.train(mode=training_mode)
            x_grad = torch.from_numpy(x).to(self._device).requires_grad_(True)
            x_input, _ = self._apply_preprocessing(x_grad, y=None, fit=False, no_grad=False)
            outputs = self._model(x_input)
            logits = outputs[-1] if isinstance(outputs, (list, tuple)) else outputs
            rows = torch.as_tensor(np.asarray(label), device=logits.device).long().view(-1, 1)
            grads, = torch.autograd.grad(logits.gather(1, rows).sum(), x_grad)
            return grads.detach().cpu().numpy()[:, None]  # N×1×…, as ART's

    return OneBackwardClassifier


def classifier(model: nn.Module, inputs: Tensor, one_backward: bool = False):
    """A fresh ``PyTorchClassifier`` for ``inputs`` (N×C×H×W) on their device; ``one_backward``:
    the one whose per-row class gradient is one backward (``_one_backward_classifier``)."""
    from art.estimators.classification import PyTorchClassifier

    cls = _one_backward_classifier() if one_backward else PyTorchClassifier
    return cls(
        model=_Forward(model), loss=nn.CrossEntropyLoss(), input_shape=tuple(inputs.shape[1:]),
        nb_classes=num_classes(model, inputs), clip_values=(0.0, 1.0),
        device_type="gpu" if inputs.device.type == "cuda" else "cpu")


def _eps_array(eps: float | Tensor, n: int, ndim: int) -> float | np.ndarray:
    """A float stays a float; a length-N tensor becomes an N×1×…×1 float32 array (ART broadcasts it)."""
    if isinstance(eps, Tensor):
        return eps.detach().cpu().numpy().astype(np.float32).reshape((n,) + (1,) * (ndim - 1))
    return float(eps)


def _eps_kwargs(eps: float | Tensor, n: int, ndim: int, step_rule: str, step: float,
                max_iter: int | None) -> dict[str, Any]:
    """``eps`` and ``eps_step`` for ART.

    ``step_rule``: "per_iter" gives ``eps_step = step·eps/max_iter`` (Madry et al.'s 2.5·ε/steps),
    "relative" gives ``eps_step = step·eps`` (APGD's initial step, FGM's single step).
    Per-sample ε needs ``eps_step`` as an array too, or ART ignores the per-sample slicing.
    """
    e = _eps_array(eps, n, ndim)
    factor = step / max_iter if step_rule == "per_iter" else step
    return {"eps": e, "eps_step": e * np.float32(factor) if isinstance(e, np.ndarray) else e * factor}


def _array_eps_works(attack_cls, params: dict[str, Any]) -> bool:
    """Whether this release's ``attack_cls`` takes per-sample ε arrays with ``params``' norm:
    one iteration on a tiny model of its own (cached per process, see ``release.supports``)."""
    def probe() -> None:
        x, y = probe_inputs()
        kw = {k: v for k, v in params.items() if k in ("norm", "batch_size", "verbose")}
        kw["batch_size"] = len(x)
        if "max_iter" in params:
            kw["max_iter"] = 1
        eps = np.array([0.1, 0.2], dtype=np.float32).reshape(2, 1, 1, 1)
        attack = attack_cls(classifier(tiny_classifier(), x), eps=eps, eps_step=eps / 2,
                            **bridge_keywords(attack_cls, kw, what=attack_cls.__name__))
        attack.generate(x.numpy(), y.numpy())

    return supports(("art", attack_cls.__name__, str(params.get("norm"))), probe)


def _run(attack_cls, label_rule: str, model: nn.Module, inputs: Tensor, labels: Tensor, *,
         targeted: bool = False, targets: Tensor | None = None, eps: float | Tensor | None = None,
         step_rule: str = "", step: float = 0.0, one_backward: bool = False, **params: Any) -> Tensor:
    """Build ``attack_cls(classifier, **params)`` and run it on ``inputs`` (N×C×H×W) -> N×C×H×W."""
    if targeted and label_rule == "predictions":
        raise ValueError(f"ART {attack_cls.__name__} cannot run targeted")
    if isinstance(eps, Tensor) and not _array_eps_works(attack_cls, params):
        def scalar(x: Tensor, y: Tensor, t: Tensor | None, e: float) -> Tensor:
            return _run(attack_cls, label_rule, model, x, y, targeted=targeted, targets=t, eps=e,
                        step_rule=step_rule, step=step, one_backward=one_backward, **params)
        return per_eps_group(scalar, inputs, labels, targets, eps)
    kw = dict(params)
    if kw.get("batch_size") == ALL:
        kw["batch_size"] = len(inputs)
    if eps is not None:
        kw.update(_eps_kwargs(eps, len(inputs), inputs.dim(), step_rule, step, kw.get("max_iter")))
    if label_rule == "flag":
        kw["targeted"] = targeted
    attack = attack_cls(classifier(model, inputs, one_backward), **bridge_keywords(attack_cls, kw, what=f"ART {attack_cls.__name__}"))
    x = inputs.detach().cpu().numpy().astype(np.float32)
    if label_rule == "target":
        y = targets.cpu().numpy().astype(np.int64) if targeted else None
    else:
        y = (targets if targeted else labels).cpu().numpy().astype(np.int64)
    adv = attack.generate(x, y)
    # ART returns float32 numpy in clip_values; no clamping here, so a box violation stays visible
    return torch.as_tensor(np.asarray(adv, dtype=np.float32)).reshape(inputs.shape).to(inputs.device)


def specs() -> list[AttackSpec]:
    from art.attacks import evasion as E

    out: list[AttackSpec] = []

    def add(cls, family: str, spec_norm: str, kind: str, label_rule: str = "flag", steps_param: str = "",
            variant: str = "", per_sample_eps: bool = False, note: str = "", step_rule: str = "",
            step: float = 0.0, run_kw: dict[str, Any] | None = None, **params: Any) -> None:
        if kind == "fixed":
            params = dict(params, step_rule=step_rule, step=step)
        params = dict(params, **(run_kw or {}))  # recorded: a change of how ART is called is a new params_hash
        out.append(AttackSpec(
            LIBRARY, cls.__name__, family, spec_norm, kind, params, partial(_run, cls, label_rule, **params),
            targeted_support=label_rule != "predictions", per_sample_eps=per_sample_eps,
            steps_param=steps_param, variant=variant, note=note))

    for norm in ("l1", "l2", "linf"):
        p = ORD[norm]
        # ART's APGD makes a forward for the loss besides each forward+backward (~3 queries a
        # step): 60 steps keep one call near 200 queries per sample. eps must be a scalar.
        for loss, variant in (("cross_entropy", "ce"), ("difference_logits_ratio", "dlr")):
            add(E.AutoProjectedGradientDescent, "apgd", norm, "fixed", steps_param="max_iter",
                variant=variant, step_rule="relative", step=2.0, norm=p, max_iter=60,
                nb_random_init=1, loss_type=loss, batch_size=ALL, verbose=False)
        add(E.ProjectedGradientDescent, "pgd", norm, "fixed", steps_param="max_iter",
            per_sample_eps=True, step_rule="per_iter", step=2.5, norm=p, max_iter=100,
            num_random_init=0, batch_size=ALL, verbose=False)
        add(E.FastGradientMethod, "fgm", norm, "fixed", per_sample_eps=True, step_rule="relative",
            step=1.0, norm=p, batch_size=ALL)
    add(E.BasicIterativeMethod, "bim", "linf", "fixed", steps_param="max_iter", per_sample_eps=True,
        step_rule="per_iter", step=2.5, max_iter=100, batch_size=ALL, verbose=False)
    # ART computes class gradients with one backward per distinct label in the batch, and the
    # tracker charges every row for each: in a batch of all ten classes CW-L2 and EAD would cost
    # up to 10x the queries per sample, so they ran one image at a time (batch_size=1, 8-15x the
    # time of a batch at 128 images). The one-backward classifier (``_one_backward_classifier``)
    # gives the same gradients at one backward a row: the whole batch now gets the rows and the
    # per-sample backwards of batch_size=1 (~1450 queries here; tests/test_art_one_backward.py).
    add(E.CarliniL2Method, "cw", "l2", "minimal", steps_param="max_iter", binary_search_steps=9,
        max_iter=20, learning_rate=0.01, initial_const=0.01, batch_size=ALL, verbose=False,
        run_kw={"one_backward": True})
    # In ART 1.20 CarliniLInfMethod is unbounded: per sample it shrinks a threshold tau until no
    # constant succeeds, i.e. a minimal attack. Its default learning rate (0.01) barely moves
    # saturated pixels in tanh space within 10 Adam steps and never succeeded here; 0.1 does.
    add(E.CarliniLInfMethod, "cw", "linf", "minimal", steps_param="max_iter", max_iter=10,
        learning_rate=0.1, decrease_factor=0.9, initial_const=0.1, largest_const=20.0,
        const_factor=4.0, batch_size=ALL, verbose=False)
    add(E.DeepFool, "deepfool", "l2", "minimal", label_rule="predictions", steps_param="max_iter",
        note="ART DeepFool is untargeted only and attacks the model's prediction (y is ignored)",
        max_iter=100, epsilon=0.02, nb_grads=10, batch_size=ALL, verbose=False)
    add(E.ElasticNet, "ead", "l1", "minimal", steps_param="max_iter", binary_search_steps=6,
        max_iter=40, beta=1e-2, learning_rate=1e-2, initial_const=1e-2, decision_rule="L1",
        batch_size=ALL, verbose=False, run_kw={"one_backward": True})
    add(E.SaliencyMapMethod, "jsma", "l0", "minimal", label_rule="target",
        note="ART JSMA only ever attacks a target class: untargeted runs pass y=None, for which "
             "ART draws a random class other than the prediction (numpy's global RNG)",
        theta=1.0, gamma=1.0, batch_size=ALL, verbose=False)
    return declare_randomness(out, RANDOMISED, MOVES_GLOBAL_RNG)
