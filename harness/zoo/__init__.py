"""The embedded model zoo: small models trained on scikit-learn's 8×8 digits.

Weights ship in ``weights/`` and are produced by ``python -m attackaudit.zoo.train`` from fixed
seeds; they load with ``torch.load(..., weights_only=True)``.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import torch
from torch import Tensor, nn

from .architectures import ARCHITECTURES

WEIGHTS_DIR = Path(__file__).parent / "weights"
#: suffix of a model's metamorphic twin: same logits minus their log-sum-exp (log-softmax)
SHIFT_SUFFIX = "~shift"


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


def model_names(include_twins: bool = False) -> list[str]:
    names = list(ZOO)
    return names + [n + SHIFT_SUFFIX for n in names] if include_twins else names


@lru_cache(maxsize=1)
def metadata() -> dict:
    path = WEIGHTS_DIR / "zoo.json"
    return json.loads(path.read_text()) if path.exists() else {}


def load_model(name: str, device: str | torch.device = "cpu") -> nn.Module:
    """A zoo model in eval mode; ``NAME~shift`` is its log-softmax twin."""
    base = name[: -len(SHIFT_SUFFIX)] if name.endswith(SHIFT_SUFFIX) else name
    if base not in ZOO:
        raise KeyError(f"unknown model {name!r}; the zoo has {', '.join(ZOO)}")
    entry = ZOO[base]
    model = ARCHITECTURES[entry.architecture]()
    path = WEIGHTS_DIR / f"{base}.pt"
    if not path.exists():
        raise FileNotFoundError(f"weights for {base} missing at {path}; run python -m attackaudit.zoo.train")
    model.load_state_dict(torch.load(path, map_location="cpu", weights_only=True))
    if name.endswith(SHIFT_SUFFIX):
        model = LogitShift(model)
    return model.to(device).eval()
