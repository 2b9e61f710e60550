"""Checks of a model's declared properties before a run, as a robustness evaluator should make.

- the outputs are logits, not probabilities (a softmax output weakens gradient attacks: warned,
  as AutoAttack's checks warn);
- the model is deterministic: two forward passes on the same inputs agree (dropout left in
  training mode, or a randomised defence, makes attack results irreproducible);
- the clean accuracy on the run's subset, reported (near-chance accuracy usually means a wrong
  normalisation or preprocessing, and is warned).

Labels outside the model's classes, a non-2-D or non-finite output are errors
(``ModelCheckError``): no attack result on such a model means anything.
``check_model`` returns a small JSON-able dict that the runner writes into the manifest.
"""
from __future__ import annotations

import math
import warnings

import torch
from torch import Tensor, nn
from attackaudit.errors import InputError

#: two passes may differ by this much (relative to the logits' scale) and still count as equal
DETERMINISM_RTOL = 1e-4
#: rows in [0, 1] whose sums are within this of 1 look like probabilities
PROBABILITY_ATOL = 1e-3


class ModelCheckError(InputError):
    """The model cannot be evaluated on this data; the message is one line."""


class ModelCheckWarning(UserWarning):
    """A model property that makes attack results doubtful."""


def _forward(model: nn.Module, inputs: Tensor, batch_size: int, device) -> Tensor:
    size = batch_size if batch_size and batch_size > 0 else len(inputs)
    outs = []
    with torch.no_grad():
        for i in range(0, len(inputs), size):
            outs.append(model(inputs[i:i + size].to(device)).detach().float().cpu())
    return torch.cat(outs) if outs else torch.zeros(0, 0)


def check_model(model: nn.Module, inputs: Tensor, labels: Tensor, *, batch_size: int = 0,
                device: str | torch.device | None = None, name: str = "model", warn: bool = True) -> dict:
    """Check ``model`` on ``inputs`` (N×C×H×W in [0, 1]) and ``labels``; returns a summary dict.

    Keys: ``num_classes``, ``samples``, ``clean_accuracy``, ``logits`` (False when the outputs look
    like probabilities), ``deterministic``, ``max_abs_difference`` (between the two passes),
    ``training_mode`` (modules left in training mode), ``warnings`` (one line each). With ``warn``
    each warning is also issued as a ``ModelCheckWarning``.
    """
    if device is None:
        device = next((p.device for p in model.parameters()), torch.device("cpu"))
    first = _forward(model, inputs, batch_size, device)
    if first.dim() != 2 or len(first) != len(inputs):
        raise ModelCheckError(f"{name}: output has shape {tuple(first.shape)} for {len(inputs)} inputs; "
                              "expected N×classes logits")
    if not torch.isfinite(first).all():
        raise ModelCheckError(f"{name}: output has NaN or inf on clean inputs")
    num_classes = first.shape[1]
    if num_classes < 2:
        raise ModelCheckError(f"{name}: output has {num_classes} column(s); expected one logit per class")
    if len(labels) and int(labels.max()) >= num_classes:
        raise ModelCheckError(f"{name}: label {int(labels.max())} in the data but the model has {num_classes} "
                              "classes; is this the model's dataset?")
    second = _forward(model, inputs, batch_size, device)
    messages = []

    probabilities = bool(len(first)) and float(first.min()) >= 0 and float(first.max()) <= 1 and \
        bool(torch.allclose(first.sum(1), torch.ones(len(first)), atol=PROBABILITY_ATOL))
    if probabilities:
        messages.append(f"{name}: outputs look like probabilities (each row in [0, 1], summing to 1), not "
                        "logits; gradient attacks on softmax outputs are weakened: return the logits")

    diff = float((first - second).abs().max()) if len(first) else 0.0
    scale = max(1.0, float(first.abs().max())) if len(first) else 1.0
    deterministic = diff <= DETERMINISM_RTOL * scale
    training = sorted({type(m).__name__ for m in model.modules() if m.training})
    if not deterministic:
        cause = (f"modules in training mode: {', '.join(training)}" if training else
                 "a randomised forward pass")
        messages.append(f"{name}: two forward passes on the same inputs differ (max |Δ| = {diff:.3g}; {cause}); "
                        "attack results will not be reproducible and queries may be misattributed")

    correct = (first.argmax(1) == labels.cpu()).float()
    accuracy = float(correct.mean()) if len(correct) else math.nan
    chance = 1.0 / num_classes
    if len(correct) >= 10 and accuracy <= 1.5 * chance:
        messages.append(f"{name}: clean accuracy {accuracy:.1%} on {len(correct)} samples is near chance "
                        f"({chance:.1%}); check the model's normalisation and the data's preprocessing "
                        "(models take [0, 1] inputs)")
    if warn:
        for m in messages:
            warnings.warn(ModelCheckWarning(m), stacklevel=2)
    return {"num_classes": int(num_classes), "samples": int(len(correct)),
            "clean_accuracy": round(accuracy, 6) if not math.isnan(accuracy) else None,
            "logits": not probabilities, "deterministic": bool(deterministic),
            "max_abs_difference": diff, "training_mode": training, "warnings": messages}


def check_models(config, subset) -> dict[str, dict]:
    """``check_model`` for every model of a RunConfig on its subset (twins are not checked).

    Raises ModelSourceError / ModelCheckError (one line) when a model cannot be loaded or used.
    """
    from attackaudit.sources.model_loader import load_model_source
    from attackaudit.results.schema import PERM
    from attackaudit.sources.zoo import perm_twin_classes

    results: dict[str, dict] = {}
    for twin in config.twins:
        source = twin.name
        model = load_model_source(twin, model_dir=config.model_dir, dataset=config.dataset,
                                  threat_model=config.threat_model, allow_download=config.allow_download,
                                  trust_checkpoint=config.trust_checkpoint, device=config.device)
        labels = subset.labels
        if twin.kind == PERM:  # the twin answers in permuted classes (as job.py maps them)
            labels, _ = perm_twin_classes(model, subset.inputs.to(config.device), labels.to(config.device), None)
        results[source] = check_model(model, subset.inputs, labels, batch_size=config.batch_size,
                                      device=config.device, name=source, warn=False)
        del model
    if str(config.device).startswith("cuda") and torch.cuda.is_available():
        torch.cuda.empty_cache()
    return results
