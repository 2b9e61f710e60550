"""The four defect rules of fidelity/defects.py: each catches a real defective attack
(tests/plugins/defect_classes.py) for what it is, and leaves sound built-in attacks of every
library alone; the rules' thresholds on hand-built tables; old runs without the columns."""
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attackaudit.fidelity import flags, recommend
from attackaudit.fidelity.defects import (EPS_UNUSED_RATIO, OUT_OF_BALL_MIN_ROWS, batch_dependence, eps_unused,
                                          out_of_ball, targets_ignored)
from attackaudit.fidelity.synthetic import job_rows, table
from attackaudit.fidelity._table import prepare
from attackaudit.results.schema import parse_model_name

INF = np.inf
N = 16
D = np.random.default_rng(3).uniform(0.05, 0.3, N)
NEW_FLAGS = {"out_of_ball", "eps_unused", "batch_dependence"}


def fixed(model="m", impl="lib/pgd", best=D, **columns) -> pd.DataFrame:
    """A fixed-ε job whose minimal-ε search recorded ``columns`` (scalars or N values)."""
    rows = job_rows(model, impl, "linf", best, family="pgd", kind="fixed")
    defaults = {"ball_calls": 9, "ball_out": 0, "ball_worst_ratio": 1.0, "ball_worst_eps": 0.03,
                "eps_fail_max": np.nan, "eps_fail_ratio": np.nan, "returned_class": -1}
    return rows.assign(**(defaults | columns))


# ---------------------------------------------------------------- out_of_ball, eps_unused (tables)
def test_out_of_ball_needs_rows_outside_the_ball():
    assert out_of_ball(prepare(fixed())) == []
    one = np.zeros(N, dtype=int)
    one[4] = 1
    assert out_of_ball(prepare(fixed(ball_out=one, ball_worst_ratio=np.where(one, 2.0, 1.0)))) == []
    many = np.zeros(N, dtype=int)
    many[[1, 4, 7]] = [9, 9, 3]
    ratio = np.where(many > 0, 1.0, 1.0)
    ratio[4] = 2.5
    (finding,) = out_of_ball(prepare(fixed(ball_out=many, ball_worst_ratio=ratio, ball_worst_eps=0.06)))
    assert finding["flag"] == "out_of_ball" and finding["implementation"] == "lib/pgd"
    ev = finding["evidence"]
    assert "21 of 144 calls" in ev and "3 of 16 images" in ev and "2.5" in ev and "image 4" in ev and "0.15" in ev


def test_eps_unused_needs_failures_far_inside_the_ball_where_others_succeeded():
    sibling = job_rows("m", "lib2/pgd", "linf", D, family="pgd", kind="fixed")
    failing = np.isin(np.arange(N), [0, 2, 3, 5, 8, 9])
    best = np.where(failing, INF, D)

    def job(ratio, eps_max=1.0):
        rows = fixed(best=best, eps_fail_max=np.where(failing, eps_max, np.nan),
                     eps_fail_ratio=np.where(failing, ratio, np.nan))
        return rows.assign(returned_adversarial=~failing, returned_distance=best)

    (finding,) = eps_unused(prepare(table(sibling, job(0.05))))
    assert finding["flag"] == "eps_unused"
    assert "6 of the 6 images" in finding["evidence"] and "up to 1" in finding["evidence"]
    assert eps_unused(prepare(table(sibling, job(0.9)))) == []  # it used the ball: merely weak
    assert eps_unused(prepare(table(sibling, job(0.05, eps_max=0.01)))) == []  # nobody broke them within ε
    assert eps_unused(prepare(job(0.05))) == []  # alone: no evidence that an adversarial existed within ε


def test_old_runs_without_the_columns_are_not_judged():
    old = table(job_rows("m", "lib/pgd", "linf", np.full(N, INF), kind="fixed", returned=INF),
                job_rows("m", "lib2/pgd", "linf", D, kind="fixed"))
    assert set(flags(old).flag) & (NEW_FLAGS | {"label_bug"}) == set()
    for rule in (out_of_ball, eps_unused, targets_ignored):
        assert rule(prepare(old.drop(columns=["ball_calls", "ball_out", "ball_worst_ratio", "eps_fail_max",
                                               "eps_fail_ratio", "returned_class"]))) == []


@settings(max_examples=25, deadline=None)
@given(calls=st.lists(st.integers(1, 20), min_size=N, max_size=N),
       ratio=st.lists(st.floats(EPS_UNUSED_RATIO, 1.0), min_size=N, max_size=N))
def test_attacks_inside_their_ball_that_use_it_are_never_flagged(calls, ratio):
    """Property: rows never outside the ball (ball_out 0) and failures that use at least
    EPS_UNUSED_RATIO of ε give neither flag, whatever the counts."""
    rows = fixed(best=np.full(N, INF), ball_calls=calls, ball_worst_ratio=ratio, eps_fail_max=1.0,
                 eps_fail_ratio=ratio).assign(returned_adversarial=False)
    t = prepare(table(job_rows("m", "lib2/x", "linf", D), rows))
    assert out_of_ball(t) == [] and eps_unused(t) == []


# ---------------------------------------------------------------- batch_dependence (tables)
def _twins(base, split, seed=None, impl="lib/pgd"):
    jobs = [job_rows("m", impl, "l2", base), job_rows("m~split", impl, "l2", split)]
    if seed is not None:
        jobs.append(job_rows("m~seed", impl, "l2", seed))
    return prepare(table(*jobs))


def test_batch_dependence_deterministic_and_against_the_seed_twin():
    rng = np.random.default_rng(0)
    assert batch_dependence(_twins(D, D.copy())) == []
    off = D * np.where(np.arange(N) < 8, 1.5, 1.0)
    (finding,) = batch_dependence(_twins(D, off))
    assert finding["model"] == "m" and finding["flag"] == "batch_dependence"
    assert "8 of 16 informative images" in finding["evidence"] and "deterministic" in finding["evidence"]
    # randomised: the split twin differs no more than a second seed does -> noise, not a defect
    noisy = lambda: D * rng.uniform(0.9, 1.1, N)  # noqa: E731
    assert batch_dependence(_twins(D, noisy(), seed=noisy())) == []
    # ... but far more often than the seed twin -> a finding that names the noise floor
    seed = D * np.where(np.arange(N) < 2, 1.05, 1.0)
    (finding,) = batch_dependence(_twins(D, D * 1.5, seed=seed))
    assert "a second seed differs on 2" in finding["evidence"]


def test_a_deterministic_split_twin_must_differ_one_way():
    """Float chaos has no side: a long search's batch of 64 and batch of one round differently,
    and cleverhans' C&W L2 ends 10 of 17 differing digits farther alone, 7 closer. Half of the
    images 4% farther alone and half 4% closer is not batch dependence; all of them farther is."""
    both_ways = D * np.where(np.arange(N) % 2 == 0, 1.04, 0.96)
    assert batch_dependence(_twins(D, both_ways)) == []
    (finding,) = batch_dependence(_twins(D, D * 1.04))
    assert "16 of 16 informative images" in finding["evidence"] and "16 of 16 worse alone, 0 better" in finding["evidence"]
    # the sign test alone needs 6 images one way (2 · 2⁻⁶ < 0.05 < 2 · 2⁻⁵): 5 are not enough
    five = D * np.where(np.arange(N) < 5, 1.2, 1.0)
    assert batch_dependence(_twins(D, five)) == []
    assert batch_dependence(_twins(D, D * np.where(np.arange(N) < 6, 1.2, 1.0)))
    # a failure alone leans the same way as a farther best
    i = np.arange(N)
    assert batch_dependence(_twins(D, np.where(i < 3, INF, np.where(i < 6, D * 1.2, D))))
    assert batch_dependence(_twins(D, np.where(i < 3, INF, np.where(i < 6, D * 0.8, D)))) == []


@settings(max_examples=25, deadline=None)
@given(st.lists(st.one_of(st.floats(0.01, 2.0), st.just(INF)), min_size=4, max_size=24))
def test_a_split_twin_equal_to_its_model_is_never_batch_dependent(d):
    d = np.asarray(d)
    assert batch_dependence(_twins(d, d.copy())) == []
    assert batch_dependence(_twins(d, d.copy(), seed=d * 1.3)) == []


# ---------------------------------------------------------------- targets ignored (tables)
def _targeted(impl, best, cls, target):
    rows = job_rows("m", impl, "l2", best, targeted=True, labels=np.zeros(N, dtype=int))
    return rows.assign(target=target, returned_class=cls)


def test_targets_ignored_is_a_label_bug_only_beside_a_sibling_that_reached_the_target():
    target = np.full(N, 3)
    sibling = _targeted("lib/sound", D, target, target)
    third = np.where(np.arange(N) < 12, 7, 0)  # class 7 on 12 images, the label on 4
    ignoring = _targeted("lib/ignore", np.full(N, INF), third, target)
    (finding,) = targets_ignored(prepare(table(sibling, ignoring)))
    assert finding["flag"] == "label_bug" and finding["implementation"] == "lib/ignore"
    assert "12 of 16 images" in finding["evidence"] and "class 7, target 3" in finding["evidence"]
    # failing without misclassifying (stuck at the label) is weakness, not ignored targets
    assert targets_ignored(prepare(table(sibling, _targeted("lib/weak", np.full(N, INF), np.zeros(N), target)))) == []
    # alone: no sibling reached the target, no evidence that it could be reached
    assert targets_ignored(prepare(ignoring)) == []
    # untargeted runs are not judged
    assert targets_ignored(prepare(table(sibling, ignoring).assign(targeted=False))) == []


# ---------------------------------------------------------------- real attacks
PLUGIN = Path(__file__).parent / "plugins" / "defect_classes.py"
SAMPLES, BUDGET, SCALE = 16, 400, 0.2
#: sound built-ins of every library, fixed-ε and minimal, deterministic and randomised
SOUND = ["adv_lib/ddn/l2", "adv_lib/apgd:ce/linf", "foolbox/LinfProjectedGradientDescentAttack/linf",
         "foolbox/L2FastGradientAttack/l2", "art/ProjectedGradientDescent/l2", "art/FastGradientMethod/linf",
         "torchattacks/PGD/linf", "torchattacks/FGSM/linf", "cleverhans/projected_gradient_descent/linf",
         "cleverhans/fast_gradient_method/l2"]
DEFECTIVE = {"defects/no_projection/linf": "out_of_ball", "defects/fixed_step/linf": "eps_unused",
             "defects/batch_step/l2": "batch_dependence"}
IGNORING = ["defects/untargeted_walk/linf", "defects/untargeted_pgd/linf"]
TARGETED_SOUND = ["defects/pgd/linf", "adv_lib/ddn/l2", "torchattacks/PGD/linf", "art/ProjectedGradientDescent/l2"]


def _run(keys: list[str], models: list[str], targeted: bool) -> pd.DataFrame:
    from attackaudit.adapters import catalogue
    from attackaudit.sources.subset import load_subset
    from attackaudit.run.job import Job, job_rows as run_job
    from attackaudit.results.schema import parse_model_name
    from attackaudit.sources.run_twins import has_job
    from attackaudit.run.worker import job_targets
    from attackaudit.sources.zoo import load_model

    libraries = sorted({k.split("/")[0] for k in keys})
    specs = {s.key: (s, e.version) for e in catalogue(libraries, plugins=(str(PLUGIN),)) for s in e.specs}
    subset = load_subset("digits", SAMPLES, 0)
    frames = []
    for key in keys:
        spec, version = specs[key]
        for model in (m for m in models if has_job(parse_model_name(m), spec)):
            job = Job(run="t", twin=parse_model_name(model), spec_key=key, samples=SAMPLES, budget=BUDGET, targeted=targeted)
            scaled = spec if spec.library == "defects" else spec.scaled(SCALE)
            frames.append(run_job(job, scaled, version, load_model(parse_model_name(model)), subset, job_targets(job, subset, 10)))
    return pd.concat(frames, ignore_index=True)


@pytest.fixture(scope="module")
def untargeted() -> pd.DataFrame:
    pytest.importorskip("adv_lib.attacks")
    return _run(["defects/pgd/linf", *DEFECTIVE, *SOUND], ["digits-mlp", "digits-mlp~split", "digits-mlp~seed"],
                targeted=False)


def test_each_defect_is_named_and_sound_attacks_are_left_alone(untargeted):
    found = flags(untargeted)
    named = {(r.implementation, r.flag) for r in found.itertuples()}
    for key, flag in DEFECTIVE.items():
        assert (key.rsplit("/", 1)[0], flag) in named, found.to_string()
    sound = found[found.implementation.isin([k.rsplit("/", 1)[0] for k in ["defects/pgd/linf", *SOUND]])]
    assert set(sound.flag) & (NEW_FLAGS | {"label_bug"}) == set(), sound.to_string()
    # the minimal-ε search's record: the sound PGD stays in its ball, the unprojected one leaves it
    real = untargeted[untargeted.model == "digits-mlp"].groupby("implementation")
    assert real["ball_out"].sum()["defects/pgd"] == 0 and real["ball_worst_ratio"].max()["defects/pgd"] <= 1.001
    assert real["ball_worst_ratio"].max()["defects/no_projection"] > 2
    assert (real["ball_calls"].sum()["adv_lib/ddn"] == 0)  # a minimal attack has no balls


def test_flagged_defects_are_never_trusted(untargeted):
    found = flags(untargeted)
    rec = recommend(untargeted, found)
    trusted = {m["implementation"] for members in rec["trust_set"] for m in members}
    for key in DEFECTIVE:
        assert key.rsplit("/", 1)[0] not in trusted


def test_targets_ignored_in_a_targeted_run():
    pytest.importorskip("adv_lib.attacks")
    rows = _run([*IGNORING, *TARGETED_SOUND], ["digits-mlp"], targeted=True)
    found = flags(rows)
    bugs = found[(found.flag == "label_bug") & found.evidence.str.contains("targets ignored")]
    assert set(bugs.implementation) == {k.rsplit("/", 1)[0] for k in IGNORING}, found.to_string()
    # the harness recorded the class each output reached: the target where a sound attack reached it
    sound = rows[(rows.implementation == "defects/pgd") & np.isfinite(rows.best_distance) & (rows.best_distance > 0)]
    assert len(sound) and (sound.returned_class == sound.target).all()
