"""A plugin attack whose memory use grows without bound."""
import time
from functools import partial

import torch

from attackaudit.adapters import AttackSpec


def hog(model, inputs, labels, **kw):
    hoard = []
    for _ in range(64):  # up to 16 GiB, 256 MiB at a time, slowly enough to be watched
        hoard.append(torch.ones(64, 1024, 1024, dtype=torch.float32))
        time.sleep(0.1)
    return inputs


def specs():
    return [AttackSpec("memhog", "hog", "pgd", "linf", "minimal", {}, partial(hog))]
