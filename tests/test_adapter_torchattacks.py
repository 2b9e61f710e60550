"""torchattacks-specific behaviour behind the adapter (the common checks: tests/test_adapter_conformance.py)."""
from __future__ import annotations

import pytest
import torch

from attackaudit.adapters.release import Unsupported
from attackaudit.sources.subset import random_targets
from attackaudit.measure.tracker import QueryTracker

from conftest import library_specs

SPECS = library_specs("torchattacks", "torchattacks")
SCALE = 0.1


def test_fab_targeted_gets_true_labels_and_targets(model, data):
    # set_mode_targeted_by_label would hand FAB the targets as labels and attack nothing
    x, y = data
    targets = random_targets(y, 10, 0)
    tracker = QueryTracker(model, x, y, norm="l2", targeted=True, targets=targets)
    adv = SPECS["torchattacks/FAB/l2"].scaled(0.5).run(tracker, x, y, targeted=True, targets=targets)
    with torch.no_grad():
        pred = model(adv).argmax(1)
    assert (pred != y).float().mean() >= 0.8
    assert (pred == targets).any()


@pytest.mark.parametrize("key", ["torchattacks/APGD:ce/linf", "torchattacks/DeepFool/l2"])
def test_untargeted_only_specs_refuse_targets(key, model, data):
    # the release has no targeted mode for them: the adapter says so before calling the library
    x, y = data
    tracker = QueryTracker(model, x, y, norm=SPECS[key].norm)
    kw = {"eps": 0.1} if SPECS[key].kind == "fixed" else {}
    assert not SPECS[key].targeted_support
    with pytest.raises(Unsupported, match="has no targeted mode"):
        SPECS[key].run(tracker, x, y, targeted=True, targets=(y + 1) % 10, **kw)


def test_apgdt_uses_the_models_class_count(model, data):
    x, y = data
    calls = []

    class Probe(torch.nn.Module):
        """Five of the ten logits: APGDT's default n_classes=10 would index past them."""

        num_classes = 5

        def __init__(self) -> None:
            super().__init__()
            self.model = model  # torchattacks reads the device from the parameters

        def forward(self, inp):
            calls.append(len(inp))
            return self.model(inp)[:, :5]

    keep = y < 5
    adv = SPECS["torchattacks/APGDT/linf"].scaled(SCALE).run(Probe(), x[keep], y[keep], eps=0.1)
    assert adv.shape == x[keep].shape and calls

