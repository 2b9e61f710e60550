"""Deliberately broken attacks, run for real through the harness (QueryTracker, re-check) on the
digits MLP and its log-softmax twin: each is flagged for what it is, a correct one is not."""
from functools import partial

import numpy as np
import pandas as pd
import pytest
import torch

from attackaudit.fidelity import flags, local_optimality
from attackaudit.results.schema import parse_model_name

adv_attacks = pytest.importorskip("adv_lib.attacks")

STEPS = 60
BUDGET = 400


def ddn(model, inputs, labels, *, steps=STEPS, targeted=False, targets=None):
    return adv_attacks.ddn(model, inputs, labels, steps=steps)


def returns_clean(model, inputs, labels, **kw):
    return inputs.clone()


def wanders_off(model, inputs, labels, **kw):
    adv = ddn(model, inputs, labels)
    return (inputs + 2.5 * (adv - inputs)).clamp(0, 1)  # keeps walking past its best point


def ignores_budget(model, inputs, labels, **kw):
    return ddn(model, inputs, labels, steps=250)  # 2 queries per step: 500 > the budget of 400


def raises_sometimes(model, inputs, labels, **kw):
    ddn(model, inputs, labels, steps=20)  # queries first: the tracker keeps what they found
    if raises_sometimes.calls % 2 == 0:  # the first of each job's two batches
        raises_sometimes.calls += 1
        raise RuntimeError("upstream bug: index 10 is out of bounds for dimension 1")
    raises_sometimes.calls += 1
    return ddn(model, inputs, labels)


raises_sometimes.calls = 0


def off_by_one(model, inputs, labels, **kw):
    return ddn(model, inputs, (labels + 1) % 10)


def true_logit_descent(model, inputs, labels, **kw):
    """Pushes the true class's raw logit down: not invariant to a per-sample logit shift."""
    x = inputs.clone()
    for _ in range(STEPS):
        x.requires_grad_(True)
        z = model(x).gather(1, labels[:, None]).sum()
        (g,) = torch.autograd.grad(z, x)
        g = g / g.flatten(1).norm(dim=1).clamp_min(1e-12).view(-1, 1, 1, 1)
        x = (x.detach() - 0.05 * g).clamp(0, 1)
    return x


ATTACKS = {"correct": ddn, "clean": returns_clean, "wander": wanders_off, "greedy": ignores_budget,
           "raise": raises_sometimes, "offbyone": off_by_one, "logit": true_logit_descent}


@pytest.fixture(scope="module")
def result_table():
    from attackaudit.adapters import AttackSpec
    from attackaudit.sources.subset import load_subset
    from attackaudit.run.job import Job, job_rows
    from attackaudit.sources.zoo import load_model

    subset = load_subset("digits", 16, 0)
    frames = []
    for model_name in ("digits-mlp", "digits-mlp~shift"):
        model = load_model(parse_model_name(model_name))
        for name, fn in ATTACKS.items():
            if model_name.endswith("~shift") and name not in ("correct", "logit"):
                continue
            spec = AttackSpec("plug", name, "ddn" if name != "logit" else "logit", "l2", "minimal", {}, partial(fn))
            job = Job(run="t", twin=parse_model_name(model_name), spec_key=spec.key, samples=16, budget=BUDGET, batch_size=8)
            frames.append(job_rows(job, spec, "0.0", model, subset, None))
    return pd.concat(frames, ignore_index=True)


@pytest.fixture(scope="module")
def found(result_table):
    f = flags(result_table)
    return {name: set(f[f.implementation == f"plug/{name}"].flag) for name in ATTACKS}, f


def test_correct_attack_is_not_flagged(found, result_table):
    sets, f = found
    assert sets["correct"] == set(), f[f.implementation == "plug/correct"].to_string()
    lo = local_optimality(result_table).set_index(["model", "implementation"])
    assert lo.loc[("digits-mlp", "plug/correct"), "optimality"] > 0.9


def test_each_broken_attack_is_flagged_for_what_it_is(found):
    sets, f = found
    assert "silent_failure" in sets["clean"]
    assert "last_not_best" in sets["wander"]
    assert "budget_overrun" in sets["greedy"]
    assert "crash" in sets["raise"]
    # labels off by one make DDN believe every input is adversarial already: it breaks nothing, on
    # the permutation twin too, so there is no label evidence, only the failure itself
    assert "silent_failure" in sets["offbyone"] and "label_bug" not in sets["offbyone"]
    assert "shift_sensitivity" in sets["logit"]
    # and not for what it is not
    assert "label_bug" not in sets["clean"] and "crash" not in sets["wander"] | sets["greedy"]
    assert not {"budget_overrun", "last_not_best"} & sets["raise"]


def test_crash_keeps_what_the_tracker_saw(result_table):
    rows = result_table[result_table.implementation == "plug/raise"]
    crashed = rows[rows.status == "crash"]
    ok = rows[rows.status == "ok"]
    assert len(crashed) == 8 and len(ok) == 8
    assert np.isfinite(ok.best_distance).mean() > 0.8
    # the crashed batch's 20 DDN steps broke digits before the raise: their bests are kept
    assert np.isfinite(crashed.best_distance).any()
    assert (crashed.forwards > 0).all()
