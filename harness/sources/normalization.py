"""Input normalisation as part of the model: attacks always see [0, 1] inputs.

A model source's ``NORM`` option (``imagenet``, ``cifar10``, ``cifar100``, ``none`` or
``M,M,M/S,S,S``; see ``attackaudit.sources.model_loader``) becomes ``Normalized(model, mean, std)``;
the RobustBench architectures use these and ``PerSampleStandardized``.
"""
from __future__ import annotations

import re

import torch
from torch import Tensor, nn

from attackaudit.sources.checkpoints import ModelSourceError

IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
CIFAR10_MEAN, CIFAR10_STD = (0.4914, 0.4822, 0.4465), (0.2471, 0.2435, 0.2616)
CIFAR100_MEAN, CIFAR100_STD = (0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762)
NORM_PRESETS = {"imagenet": (IMAGENET_MEAN, IMAGENET_STD), "cifar10": (CIFAR10_MEAN, CIFAR10_STD),
                "cifar100": (CIFAR100_MEAN, CIFAR100_STD), "none": None}


class Normalized(nn.Module):
    """``model((x - mean) / std)``: a model that takes [0, 1] inputs.

    ``mean`` and ``std`` are per-channel; they are buffers that are not saved in the state dict.
    """

    def __init__(self, model: nn.Module, mean, std) -> None:
        super().__init__()
        self.model = model
        mean_t, std_t = torch.as_tensor(mean, dtype=torch.float32), torch.as_tensor(std, dtype=torch.float32)
        if mean_t.shape != std_t.shape or mean_t.dim() != 1 or (std_t <= 0).any():
            raise ModelSourceError(f"normalisation needs per-channel mean and positive std of one length, "
                                   f"got {tuple(mean_t.tolist())} / {tuple(std_t.tolist())}")
        self.register_buffer("mean", mean_t.view(1, -1, 1, 1), persistent=False)
        self.register_buffer("std", std_t.view(1, -1, 1, 1), persistent=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.model((x - self.mean) / self.std)


class PerSampleStandardized(nn.Module):
    """Ding et al. (MMA): each input standardised by its own mean and std (std ≥ 1/√dim)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: Tensor) -> Tensor:
        mu = x.mean(dim=(1, 2, 3), keepdim=True)
        std = x.std(dim=(1, 2, 3), keepdim=True)
        std_min = torch.ones_like(std) / (x.shape[1] * x.shape[2] * x.shape[3]) ** 0.5
        return self.model((x - mu) / torch.max(std, std_min))



def is_norm_option(text: str) -> bool:
    """Whether ``text`` is a NORM option: a preset name or ``M,M,M/S,S,S``."""
    return text in NORM_PRESETS or bool(re.fullmatch(r"[\d.,eE+-]+/[\d.,eE+-]+", text))


def norm_values(option: str, default, where: str):
    """(mean, std) or None for a NORM option; ``default`` when the option is ''; ``where`` names
    the source in the one-line error."""
    if not option:
        return default
    if option in NORM_PRESETS:
        return NORM_PRESETS[option]
    try:
        mean, std = ([float(v) for v in half.split(",")] for half in option.split("/"))
    except ValueError:
        raise ModelSourceError(f"{where}: normalisation {option!r} is not MEAN,../STD,..") from None
    return tuple(mean), tuple(std)

