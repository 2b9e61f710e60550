"""The embedded zoo's architectures (inputs N×1×8×8 in [0, 1], outputs 10 logits)."""
from __future__ import annotations

from torch import nn


def digits_mlp() -> nn.Sequential:
    """ReLU MLP 64-64-32-10: small enough for exact (MILP) minimal distances."""
    return nn.Sequential(nn.Flatten(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 32), nn.ReLU(),
                         nn.Linear(32, 10))


def digits_mlp_tiny() -> nn.Sequential:
    """ReLU MLP 64-16-10: every test sample solves exactly within seconds."""
    return nn.Sequential(nn.Flatten(), nn.Linear(64, 16), nn.ReLU(), nn.Linear(16, 10))


def digits_cnn() -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(),
        nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU(),
        nn.Flatten(), nn.Linear(32 * 4 * 4, 64), nn.ReLU(), nn.Linear(64, 10),
    )


ARCHITECTURES = {"mlp": digits_mlp, "mlp-tiny": digits_mlp_tiny, "cnn": digits_cnn}
