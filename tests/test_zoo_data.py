"""The embedded zoo and the hashed evaluation subset."""
import json
import subprocess
import sys

import torch

from attackaudit.sources.subset import digits, load_subset, random_targets
from attackaudit.sources.zoo import ZOO, load_model


def test_zoo_accuracy_floors():
    x, y = digits("test")
    assert x.shape[1:] == (1, 8, 8) and 0 <= float(x.min()) and float(x.max()) <= 1
    for name, entry in ZOO.items():
        with torch.no_grad():
            acc = (load_model(name)(x).argmax(1) == y).float().mean().item()
        floor = 0.95 if entry.training == "standard" else 0.90
        assert acc >= floor, (name, acc)


def test_weights_load_with_weights_only(tmp_path):
    import pickle

    from attackaudit.sources.zoo import WEIGHTS_DIR

    state = torch.load(WEIGHTS_DIR / "digits-cnn.pt", weights_only=True)
    assert all(isinstance(v, torch.Tensor) for v in state.values())
    evil = tmp_path / "evil.pt"
    torch.save(torch.nn.Linear(2, 2), evil)  # a whole pickled module, not just tensors
    try:
        torch.load(evil, weights_only=True)
    except pickle.UnpicklingError:
        return
    raise AssertionError("weights_only=True loaded a pickled module")

def test_robust_models_are_more_robust_under_a_real_attack():
    from adv_lib.attacks import apgd

    sub = load_subset("digits", 64, 1)
    acc = {}
    for name in ("digits-cnn", "digits-cnn-at-linf"):
        model = load_model(name)
        torch.manual_seed(0)
        adv = apgd(model, sub.inputs, sub.labels, eps=0.1, norm=float("inf"), n_iter=30)
        with torch.no_grad():
            acc[name] = (model(adv).argmax(1) == sub.labels).float().mean().item()
    assert acc["digits-cnn-at-linf"] >= acc["digits-cnn"] + 0.25, acc
    sub2 = load_subset("digits", 64, 1)
    acc2 = {}
    for name in ("digits-cnn", "digits-cnn-at-l2"):
        model = load_model(name)
        torch.manual_seed(0)
        adv = apgd(model, sub2.inputs, sub2.labels, eps=0.75, norm=2, n_iter=30)
        with torch.no_grad():
            acc2[name] = (model(adv).argmax(1) == sub2.labels).float().mean().item()
    assert acc2["digits-cnn-at-l2"] >= acc2["digits-cnn"] + 0.25, acc2


def test_subset_is_seeded_and_hashed():
    a, b, c = load_subset("digits", 20, 3), load_subset("digits", 20, 3), load_subset("digits", 20, 4)
    assert a.hash == b.hash and (a.indices == b.indices).all()
    assert a.hash != c.hash
    assert len(a.hash) == 64
    # the hash is over the exact bytes: a one-ulp change moves it
    from attackaudit.sources.subset import subset_hash

    x = a.inputs.clone()
    x[0, 0, 0, 0] = torch.nextafter(x[0, 0, 0, 0], torch.tensor(2.0))
    assert subset_hash(x, a.labels) != a.hash


def test_subsets_nest():
    """With one seed the first k samples of an n-sample subset are the k-sample subset, in order,
    for every k (``--samples 64`` extends a run of 16); another seed draws another subset."""
    from attackaudit.sources.subset import subset_indices

    big = load_subset("digits", 64, 5)
    for k in (1, 7, 16, 63):
        small = load_subset("digits", k, 5)
        assert (small.indices == big.indices[:k]).all()
        assert torch.equal(small.inputs, big.inputs[:k]) and torch.equal(small.labels, big.labels[:k])
    assert len(set(big.indices.tolist())) == 64
    assert not (load_subset("digits", 16, 6).indices == big.indices[:16]).all()
    assert (subset_indices(10, 50, 0) == subset_indices(10, 10, 0)).all()  # capped at the dataset


def test_targets_differ_from_labels_and_are_seeded():
    y = torch.arange(10).repeat(5)
    t1, t2 = random_targets(y, 10, 0), random_targets(y, 10, 0)
    assert (t1 == t2).all() and (t1 != y).all() and t1.max() < 10


def test_models_command_lists_clean_accuracy():
    out = subprocess.run([sys.executable, "-m", "attackaudit", "models", "--format", "json"],
                         capture_output=True, text=True, check=True).stdout
    rows = {r["name"]: r for r in json.loads(out)}
    assert set(rows) == set(ZOO)
    assert rows["digits-cnn"]["clean_accuracy"] >= 0.95


def test_the_perm_twin_is_checked_in_its_own_classes():
    # the twin answers σ[label]: checked against unmapped labels it would look like a broken model
    from attackaudit.run.config import resolve
    from attackaudit.sources.subset import load_subset
    from attackaudit.sources.model_checks import check_models

    config = resolve(None, {"models": ["digits-cnn", "digits-cnn~perm"], "out": "unused"})
    checks = check_models(config, load_subset("digits", 16, 0))
    assert checks["digits-cnn~perm"]["clean_accuracy"] == checks["digits-cnn"]["clean_accuracy"] > 0.9
    assert checks["digits-cnn~perm"]["warnings"] == []
