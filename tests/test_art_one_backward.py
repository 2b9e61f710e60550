"""ART's CW-L2 and EAD run the whole batch through the one-backward classifier (adapters/art.py):
the same gradients as ART's own class gradient, one backward per row instead of one per distinct
label, so the batched attack returns the rows and charges the backwards of one image at a time.
Real ART, the digits MLP (no batch interaction between rows), steps scaled down."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from attackaudit.adapters import load_library
from attackaudit.run.job import attack_with_tracker, seed_everything
from attackaudit.measure.tracker import QueryTracker
from attackaudit.sources.subset import load_subset
from attackaudit.sources.zoo import load_model

ENTRY = load_library("art")
pytestmark = pytest.mark.skipif(not ENTRY.available, reason=ENTRY.reason)
SPECS = {spec.key: spec for spec in ENTRY.specs}


@pytest.fixture(scope="module")
def mlp():
    return load_model("digits-mlp").eval()


@pytest.fixture(scope="module")
def digits():
    sub = load_subset("digits", 10, 0)
    return sub.inputs, sub.labels


def test_the_class_gradient_is_art_s_at_one_backward_a_row(mlp, digits):
    from attackaudit.adapters.art import classifier

    x, y = digits
    label = ((y + 1) % 10).numpy()  # ten rows, several distinct labels
    grads = {}
    for one in (False, True):
        tracker = QueryTracker(mlp, x, y, norm="l2", budget=10**6)
        grads[one] = classifier(tracker, x, one_backward=one).class_gradient(x.numpy(), label=label)
        grads[one, "backwards"] = tracker.backwards.clone()
    assert grads[True].shape == grads[False].shape == (10, 1, 1, 8, 8)
    assert np.allclose(grads[True], grads[False], atol=1e-6)
    distinct = len(np.unique(label))
    assert grads[False, "backwards"].tolist() == [distinct] * 10  # ART: one per distinct label, each row
    assert grads[True, "backwards"].tolist() == [1] * 10


@pytest.mark.parametrize("key", ["art/CarliniL2Method/l2", "art/ElasticNet/l1"])
def test_the_batched_attack_returns_and_charges_what_one_image_at_a_time_did(key, mlp, digits):
    x, y = digits
    spec = SPECS[key].scaled(0.1)
    assert spec.params["batch_size"] == "all" and spec.params["one_backward"]
    old = spec.with_params(batch_size=1, one_backward=False)  # how the spec ran before
    runs = {}
    for name, s in (("batched", spec), ("one at a time", old)):
        seed_everything(0)
        tracker, returned, error = attack_with_tracker(s, mlp, x, y, budget=2000)
        assert not error
        runs[name] = tracker, returned
    (t_b, r_b), (t_o, r_o) = runs["batched"], runs["one at a time"]
    assert torch.allclose(r_b, r_o, atol=1e-5)
    assert torch.equal(t_b.backwards, t_o.backwards)
    # forwards: the same in all; a line-search point far from its image may be charged to another
    assert int(t_b.forwards.sum()) == int(t_o.forwards.sum())
    assert torch.allclose(t_b.best_distance, t_o.best_distance, atol=1e-5)
