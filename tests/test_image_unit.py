"""The image is the unit of evidence: one image on several models is one block. Adding a copy of
every model (same rows, another name, twins included) changes no verdict or flag, and p-values
only by rounding."""
import numpy as np
import pandas as pd
import pytest

from attackaudit.fidelity import align, diff, flags, recommend
from attackaudit.fidelity.synthetic import attack_distances, table_from_arrays, true_distances

N = 30


def _grid(seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    truth = true_distances(rng, N, 2)
    labels = np.arange(N) % 10
    d = {"a/sound": attack_distances(rng, truth),
         "b/noisy": attack_distances(rng, truth, seed_noise=0.02),
         "c/weak": attack_distances(rng, truth, fail_rate=0.15),
         "d/far": attack_distances(rng, truth, farther=1.3),
         "e/classbug": attack_distances(rng, truth, fail_images=np.flatnonzero(labels == 3))}
    t = table_from_arrays(d, ["m1", "m2"], labels=labels)
    moved = d["d/far"] * np.where(np.arange(N) % 2 == 0, 1.5, 1.0)
    twin = table_from_arrays({"d/far": moved[:1], "a/sound": d["a/sound"][:1]}, ["m1~perm"], labels=labels)
    return pd.concat([t, twin], ignore_index=True)


def _with_copies(t: pd.DataFrame) -> pd.DataFrame:
    copy = t.assign(model=t["model"].str.replace("m", "copy", n=1, regex=False))
    return pd.concat([t, copy], ignore_index=True)


def _flag_set(f: pd.DataFrame) -> set:
    return {(r.implementation, r.norm, r.flag) for r in f.itertuples()}


def test_copies_of_every_model_change_no_flag():
    t = _grid()
    f, g = flags(t), flags(_with_copies(t))
    assert _flag_set(f) == _flag_set(g)
    assert {("e/classbug", "l2", "label_bug"), ("d/far", "l2", "label_bug")} <= _flag_set(f)


def test_copies_change_no_trust_verdict_and_no_pooled_p_value():
    t = _grid()
    a = recommend(t, flags(t)).set_index("family")
    b = recommend(_with_copies(t), flags(_with_copies(t))).set_index("family")
    pd.testing.assert_series_equal(a["verdict"], b["verdict"])
    assert [m["implementation"] for m in a.loc["f", "trust_set"]] == [m["implementation"] for m in b.loc["f", "trust_set"]]
    pa, pb = align(t)[1], align(_with_copies(t))[1]
    key = ["implementation_a", "implementation_b"]
    pooled = pa[pa.model == "*"].set_index(key)
    pooled_b = pb[pb.model == "*"].set_index(key)
    for col in ("p_value", "p_different", "p_equivalent", "estimate"):
        assert np.allclose(pooled[col], pooled_b.loc[pooled.index, col], rtol=1e-9, atol=1e-12), col
    assert (pooled["answer"] == pooled_b.loc[pooled.index, "answer"]).all()


def test_copies_change_no_audit_verdict():
    t = _grid()
    after = t.assign(best_distance=np.where(t["implementation"] == "b/noisy", t["best_distance"] * 1.3,
                                            t["best_distance"]), library_version="2.0")
    v1 = diff(t, after).set_index("implementation")[["verdict", "p_value"]]
    v2 = diff(_with_copies(t), _with_copies(after)).set_index("implementation")[["verdict", "p_value"]]
    assert (v1["verdict"] == v2["verdict"]).all() and v1.loc["b/noisy", "verdict"] == "regressed"
    assert np.allclose(v1["p_value"], v2["p_value"])


@pytest.mark.parametrize("n_models", [1, 3])
def test_a_sound_attack_missing_hard_images_is_no_label_bug_on_any_number_of_models(n_models):
    """The issue's case: failures that follow difficulty, the same images on every model."""
    hits = 0
    for seed in range(15):
        rng = np.random.default_rng(seed)
        truth = true_distances(rng, 16, n_models)
        t = table_from_arrays({"a/sound": attack_distances(rng, truth),
                               "b/weak": attack_distances(rng, truth, fail_rate=0.15)},
                              [f"m{i}" for i in range(n_models)], labels=rng.integers(0, 10, 16))
        hits += "label_bug" in set(flags(t).flag)
    assert hits <= 1


def test_weak_label_evidence_is_named_in_the_trust_notes_not_flagged():
    """A deterministic attack whose perm twin differs on one image of 16 (15 informative: one is
    misclassified clean): tie-breaking by class index, a note; no label_bug."""
    rng = np.random.default_rng(5)
    truth = true_distances(rng, 16, 1)
    d = attack_distances(rng, truth)
    twin = d.copy()
    twin[0, np.flatnonzero(truth[0] > 0)[0]] *= 1.5
    t = pd.concat([table_from_arrays({"a/x": d, "b/y": d * 1.01}, ["m"]), table_from_arrays({"a/x": twin}, ["m~perm"])],
                  ignore_index=True)
    assert "label_bug" not in set(flags(t).flag)
    note = recommend(t, flags(t)).iloc[0].note
    assert "a/x: its class-permuted twin m~perm differs on 1 of 15 informative images" in note and "tie-breaking" in note
