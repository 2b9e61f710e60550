"""The embedded model zoo: small models trained on scikit-learn's 8×8 digits.

Weights ship in ``weights/`` and are produced by ``python -m attackaudit.sources.zoo.train`` from fixed
seeds; they load with ``torch.load(..., weights_only=True)``.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import torch
from torch import Tensor, nn

from attackaudit.results.schema import MODEL_TWINS, PERM, SHIFT, Twin, as_twin
from attackaudit.sources.zoo.architectures import ARCHITECTURES

WEIGHTS_DIR = Path(__file__).parent / "weights"


@dataclass(frozen=True)
class ZooModel:
    name: str
    architecture: str
    training: str          # "standard" | "pgd-at-linf" | "pgd-at-l2"
    dataset: str
    seed: int
    epsilon: float | None  # adversarial-training radius
    description: str


ZOO: dict[str, ZooModel] = {m.name: m for m in [
    ZooModel("digits-mlp", "mlp", "standard", "digits", 1, None, "ReLU MLP 64-64-32-10"),
    ZooModel("digits-mlp-tiny", "mlp-tiny", "standard", "digits", 2, None,
             "ReLU MLP 64-16-10, small enough for exact distances on every sample"),
    ZooModel("digits-cnn", "cnn", "standard", "digits", 3, None, "two-conv CNN"),
    ZooModel("digits-cnn-at-linf", "cnn", "pgd-at-linf", "digits", 4, 0.1,
             "two-conv CNN, PGD adversarial training, L∞ ε=0.1"),
    ZooModel("digits-cnn-at-l2", "cnn", "pgd-at-l2", "digits", 5, 0.75,
             "two-conv CNN, PGD adversarial training, L2 ε=0.75"),
]}


class LogitShift(nn.Module):
    """Metamorphic twin: log-softmax of the model's logits, a per-sample constant shift.

    Every sound attack on CE, margin, DLR or DeepFool objectives is invariant to it.
    """

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: Tensor) -> Tensor:
        return torch.log_softmax(self.model(x), dim=1)


def class_permutation(num_classes: int) -> Tensor:
    """The perm twin's fixed permutation σ of ``num_classes`` classes, (C,) int64: class k of the
    base model is class σ[k] of the twin. One C-cycle conjugated by a seeded shuffle, so no class
    keeps its index (a derangement: every label changes) and ``label + 1``-style index arithmetic
    does not commute with it."""
    order = torch.randperm(num_classes, generator=torch.Generator().manual_seed(20250))
    perm = torch.empty(num_classes, dtype=torch.int64)
    perm[order] = order.roll(-1)
    return perm


def permute_classes(classes: Tensor, num_classes: int) -> Tensor:
    """Labels or targets (N,) of the base model as the perm twin's classes σ[classes]."""
    return class_permutation(num_classes).to(classes.device)[classes]


def perm_twin_classes(model: nn.Module, inputs: Tensor, labels: Tensor, targets: Tensor | None,
                      clean_logits: Tensor | None = None) -> tuple[Tensor, Tensor | None]:
    """Labels and targets (N,) of the base model mapped onto the class-permutation twin's classes,
    so that a correct attack faces exactly the base model's problem under renamed classes."""
    if clean_logits is not None:
        num_classes = int(clean_logits.shape[1])
    else:
        with torch.no_grad():
            num_classes = int(model(inputs[:1]).shape[1])
    return permute_classes(labels, num_classes), (permute_classes(targets, num_classes)
                                                  if targets is not None else None)


class LogitPermutation(nn.Module):
    """Metamorphic twin: the model's logits with class k moved to index σ[k]
    (``class_permutation``). Decisions are the same up to renaming classes, so an attack that
    handles labels correctly (given σ-mapped labels and targets) finds the same distances; one
    that does index arithmetic on labels, or aims at a fixed class, does not."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: Tensor) -> Tensor:
        logits = self.model(x)
        inverse = torch.argsort(class_permutation(logits.shape[1]).to(logits.device))
        return logits[:, inverse]


def model_names(include_twins: bool = False) -> list[str]:
    names = list(ZOO)
    return names + [Twin(n, k).name for k in MODEL_TWINS for n in names] if include_twins else names


@lru_cache(maxsize=1)
def metadata() -> dict:
    path = WEIGHTS_DIR / "zoo.json"
    return json.loads(path.read_text()) if path.exists() else {}


def load_model(model: Twin | str, device: str | torch.device = "cpu") -> nn.Module:
    """A zoo model in eval mode: ``model`` a zoo name or a ``Twin`` of one: ``Twin(NAME, SHIFT)``
    is its log-softmax twin, ``Twin(NAME, PERM)`` its class-permutation twin; the seed, split and
    batch twins are the model itself (those twins change how the job runs the attack, not the network)."""
    twin = as_twin(model)
    base = twin.base_model
    if base not in ZOO:
        raise KeyError(f"unknown model {twin.name!r}; the zoo has {', '.join(ZOO)}")
    entry = ZOO[base]
    model = ARCHITECTURES[entry.architecture]()
    path = WEIGHTS_DIR / f"{base}.pt"
    if not path.exists():
        raise FileNotFoundError(f"weights for {base} missing at {path}; run python -m attackaudit.sources.zoo.train")
    model.load_state_dict(torch.load(path, map_location="cpu", weights_only=True))
    if twin.kind == SHIFT:
        model = LogitShift(model)
    elif twin.kind == PERM:
        model = LogitPermutation(model)
    return model.to(device).eval()
