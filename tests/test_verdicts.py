"""Verdicts a user can act on, end to end: real defective attacks (tests/plugins/defective.py) and
sound ones run through the harness (QueryTracker, re-check) on the digits zoo and its
class-permutation twin; each defect is caught for what it is, the sound attacks are left alone."""
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from attackaudit.fidelity import diff, flags, recommend
from attackaudit.results.schema import parse_model_name

pytest.importorskip("adv_lib.attacks")

PLUGIN = Path(__file__).parent / "plugins" / "defective.py"
MISBEHAVING = Path(__file__).parent / "plugins" / "misbehaving.py"
SAMPLES, BUDGET = 16, 400
#: (model, spec key, steps scale): the grid, kept tiny
GRID = [
    *[(m, key, 1.0) for m in ("digits-cnn", "digits-cnn~perm")
      for key in ("defective/walk_away/linf", "defective/walk_coarse/linf", "defective/wrong_class/linf")],
    *[(m, "defective/class_table/l2", 1.0) for m in ("digits-cnn", "digits-mlp")],
    *[(m, "adv_lib/ddn/l2", 0.08) for m in ("digits-cnn", "digits-cnn~perm", "digits-mlp")],
    ("digits-cnn", "defective/ddn_short/l2", 1.0),
    ("digits-cnn", "defective/fmn_tiny_step/l2", 1.0),
    ("digits-cnn", "misbehaving/raise/linf", 1.0),
]


@pytest.fixture(scope="module")
def rows() -> pd.DataFrame:
    from attackaudit.adapters import catalogue
    from attackaudit.sources.subset import load_subset
    from attackaudit.run.job import Job, failure_rows, job_rows
    from attackaudit.sources.zoo import load_model

    specs = {s.key: (s, e.version) for e in catalogue(["adv_lib", "defective", "misbehaving"],
                                                      plugins=(str(PLUGIN), str(MISBEHAVING)))
             for s in e.specs}
    subset = load_subset("digits", SAMPLES, 0)
    frames, models = [], {}
    for model, key, scale in GRID:
        spec, version = specs[key]
        model_net = models.setdefault(model, load_model(parse_model_name(model)))
        job = Job(run="t", twin=parse_model_name(model), spec_key=key, samples=SAMPLES, budget=BUDGET)
        frames.append(job_rows(job, spec.scaled(scale), version, model_net, subset, None))
    # what the runner writes for a job it had to kill (timeout): rows without any tracker result
    killed = Job(run="t", twin=parse_model_name("digits-cnn"), spec_key="misbehaving/hang/linf", samples=SAMPLES, budget=BUDGET)
    frames.append(failure_rows(killed, subset, "timeout", "timed out after 60 s", specs[killed.spec_key][0]))
    return pd.concat(frames, ignore_index=True)


@pytest.fixture(scope="module")
def found(rows):
    return flags(rows)


def flags_of(found: pd.DataFrame, impl: str) -> set[str]:
    return set(found[found.implementation == impl].flag)


def test_perm_twin_gives_sound_attacks_identical_distances(rows):
    """A correct attack on the class-permutation twin (labels mapped) finds the same distances."""
    for impl in ("defective/walk_away", "defective/walk_coarse", "adv_lib/ddn"):
        part = rows[(rows.implementation == impl) & rows.model.isin(["digits-cnn", "digits-cnn~perm"])]
        d = part.pivot(index="sample", columns="model", values="best_distance")
        base, twin = d["digits-cnn"].to_numpy(), d["digits-cnn~perm"].to_numpy()
        assert (np.isfinite(base) == np.isfinite(twin)).all(), impl
        both = np.isfinite(base)
        assert np.allclose(base[both], twin[both], rtol=1e-3), impl


def test_wrong_class_is_a_label_bug_even_alone_in_its_family(found):
    assert "label_bug" in flags_of(found, "defective/wrong_class")
    ev = found[(found.implementation == "defective/wrong_class") & (found.flag == "label_bug")].evidence.iloc[0]
    assert "digits-cnn~perm" in ev
    # its sound twin (same walk, away from the true class) is not flagged at all
    assert flags_of(found, "defective/walk_away") == set()


def test_class_table_is_a_label_bug_from_class_conditional_failure(found):
    row = found[(found.implementation == "defective/class_table") & (found.flag == "label_bug")]
    assert len(row) == 1 and row.model.iloc[0] == "*"
    assert "class 3" in row.evidence.iloc[0]


def test_weak_correct_attack_gets_a_weakness_note_never_label_bug(rows, found):
    assert "label_bug" not in flags_of(found, "defective/walk_coarse")
    rec = recommend(rows, found).set_index(["family", "norm"]).loc[("walk", "linf")]
    assert [m["implementation"] for m in rec.trust_set] == ["defective/walk_away"]
    weak = " ".join(rec.weak)
    assert "defective/walk_coarse" in weak and "no label evidence" in weak


def test_clearly_worse_ddn_is_flagged_and_out_of_the_trust_set(rows, found):
    assert "optimality_gap" in flags_of(found, "defective/ddn_short")
    rec = recommend(rows, found).set_index(["family", "norm"]).loc[("ddn", "l2")]
    names = [m["implementation"] for m in rec.trust_set]
    # ddn_short carries a defect flag, so adv_lib/ddn is the only candidate left
    assert names == ["adv_lib/ddn"] and rec.verdict == "only implementation"
    assert rec.summary.startswith("only implementation: adv_lib/ddn") and "only unflagged" in rec.summary
    lo, hi = rec.optimality_ci
    assert lo <= rec.optimality <= hi


def test_broken_strong_family_is_never_trusted(rows, found):
    assert "below_expected_strength" in flags_of(found, "defective/fmn_tiny_step")
    assert "label_bug" not in flags_of(found, "defective/fmn_tiny_step")
    rec = recommend(rows, found).set_index(["family", "norm"]).loc[("fmn", "l2")]
    assert not rec.trusted and rec.verdict == "none" and rec.trust_set == []
    assert "no implementation reaches the expected strength of fmn" in rec.note and "adv_lib/ddn" in rec.note


def test_audit_verdict_weighs_the_evidence_of_real_runs(rows):
    """The same implementation name, before (3-step DDN: silent, far worse) and after (DDN)."""
    def release(impl: str, version: str) -> pd.DataFrame:
        cnn = rows[(rows.model == "digits-cnn") & (rows.norm == "l2")]
        part = cnn[cnn.implementation == impl].assign(implementation="plug/ddn", library="plug", attack="ddn",
                                                      library_version=version)
        return pd.concat([part, cnn[cnn.implementation == "adv_lib/ddn"]], ignore_index=True)  # the rest of the grid
    before, after = release("defective/ddn_short", "1.0"), release("adv_lib/ddn", "2.0")
    row = diff(before, after).set_index("implementation").loc["plug/ddn"]
    assert row.verdict == "improved" and row.score > 0
    assert "ξ 0.00 → 1.00" in row.reason and "16 better / 0 worse images (new better on the robustness curve" in row.reason
    assert "silent_failure gone" in row.reason
    back = diff(after, before).set_index("implementation").loc["plug/ddn"]
    assert back.verdict == "regressed" and "new: " in back.reason and "silent_failure" in back.reason


def test_crash_and_timeout_evidence_is_true_of_their_rows(rows, found):
    crash = found[(found.implementation == "misbehaving/raise") & (found.flag == "crash")].evidence.iloc[0]
    raised = rows[rows.implementation == "misbehaving/raise"]
    assert (raised.forwards > 0).all() and "the tracker's results before it are kept (0 of these" in crash
    timeout = found[(found.implementation == "misbehaving/hang") & (found.flag == "timeout")].evidence.iloc[0]
    killed = rows[rows.implementation == "misbehaving/hang"]
    assert np.isinf(killed.best_distance).all() and "no tracker results survive" in timeout
    assert "kept" not in timeout


def test_metamorphic_adds_both_twins_and_the_perm_twin_maps_labels(tmp_path):
    import torch

    from attackaudit.run.config import RunConfig
    from attackaudit.sources.subset import load_subset
    from attackaudit.sources.zoo import perm_twin_classes
    from attackaudit.run.runner import plan
    from attackaudit.sources.zoo import class_permutation, load_model

    config = RunConfig(out=str(tmp_path / "r"), models=["digits-mlp"], attacks=["adv_lib/ddn"], samples=4,
                       metamorphic=True)
    # ddn is deterministic: the batch-split and batch-composition twins, no seed twin
    # (harness/sources/run_twins.py)
    assert {j.model for j in plan(config).jobs} == {"digits-mlp", "digits-mlp~shift", "digits-mlp~perm",
                                                    "digits-mlp~split", "digits-mlp~batch"}
    perm = class_permutation(10)
    assert sorted(perm.tolist()) == list(range(10)) and (perm != torch.arange(10)).all()  # a derangement
    subset = load_subset("digits", 16, 0)
    base, twin = load_model("digits-mlp"), load_model(parse_model_name("digits-mlp~perm"))
    labels, targets = perm_twin_classes(twin, subset.inputs, subset.labels, (subset.labels + 1) % 10)
    with torch.no_grad():
        # the twin decides class σ(k) exactly where the base model decides k
        assert torch.equal(twin(subset.inputs).argmax(1), perm[base(subset.inputs).argmax(1)])
    assert torch.equal(labels, perm[subset.labels]) and torch.equal(targets, perm[(subset.labels + 1) % 10])
