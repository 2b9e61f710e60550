"""Issue 38's defect classes: fallback outputs, a targeted success test that ignores the target,
batch effects on every image (the batch-composition twin ``~batch``), ε use in release audits.
Each rule catches a planted attack (tests/plugins/defect_classes.py) or a real library's defect and
leaves sound built-ins of the five libraries alone."""
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attackaudit.fidelity import diff, flags
from attackaudit.fidelity._table import prepare
from attackaudit.fidelity.defects import fallback_output, success_ignores_target
from attackaudit.fidelity.eps_use import eps_use, parse_eps
from attackaudit.fidelity.synthetic import job_rows, table
from attackaudit.fidelity.twins import BOUNDARY_MARGIN, judge
from attackaudit.measure.fallback import default_outputs
from attackaudit.results.schema import parse_model_name

PLUGIN = Path(__file__).parent / "plugins" / "defect_classes.py"
SAMPLES, BUDGET, SCALE = 16, 400, 0.2
N = 16
D = np.random.default_rng(7).uniform(0.05, 0.3, N)


def _run(keys: list[str], models: list[str], targeted: bool = False) -> pd.DataFrame:
    from attackaudit.adapters import catalogue
    from attackaudit.run.job import Job, job_rows as run_job
    from attackaudit.run.worker import job_companions, job_targets
    from attackaudit.sources.subset import load_subset
    from attackaudit.results.schema import parse_model_name
    from attackaudit.sources.run_twins import has_job
    from attackaudit.sources.zoo import load_model

    libraries = sorted({k.split("/")[0] for k in keys} - {"defects"})
    specs = {s.key: (s, e.version) for e in catalogue(libraries, plugins=(str(PLUGIN),)) for s in e.specs}
    subset = load_subset("digits", SAMPLES, 0)
    frames = []
    for key in keys:
        spec, version = specs[key]
        for model in (m for m in models if has_job(parse_model_name(m), spec)):
            job = Job(run="t", twin=parse_model_name(model), spec_key=key, samples=SAMPLES, budget=BUDGET, targeted=targeted)
            scaled = spec if spec.library == "defects" else spec.scaled(SCALE)
            frames.append(run_job(job, scaled, version, load_model(parse_model_name(model)), subset, job_targets(job, subset, 10),
                                  companions=job_companions(job, 10, load_model(parse_model_name(model)))))
    return pd.concat(frames, ignore_index=True)


def _impl(key: str) -> str:
    return key.rsplit("/", 1)[0]


# ---------------------------------------------------------------- default outputs (unit)
def test_default_outputs_names_shared_and_constant_rows_only():
    inputs = torch.rand(5, 8)
    rows = inputs.clone()
    rows[0] = 0.0
    rows[1] = 0.0          # shared with row 0, and all zero
    rows[2] = 0.5          # a constant
    rows[3] += 0.01        # a search result
    mask, words = default_outputs(rows.clamp(0, 1), inputs)
    assert mask.tolist() == [True, True, True, False, False]
    assert words[0] == "all-zero image shared by 2 images" and words[2] == "constant 0.5 image"
    # identical images in the data may honestly share their output
    same = inputs[[0, 0]]
    assert not default_outputs(same + 0.01, same)[0].any()


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 12), st.floats(1e-3, 0.2))
def test_distinct_perturbed_rows_are_never_defaults(n, step):
    """Property: rows that differ from each other and are not constant are never a default output."""
    g = torch.Generator().manual_seed(n)
    inputs = torch.rand(n, 16, generator=g) * 0.8 + 0.1
    rows = (inputs + step * torch.randn(n, 16, generator=g).sign()).clamp(0, 1)
    assert not default_outputs(rows, inputs)[0].any()


class _FirstPixelBelow(torch.nn.Module):
    """Class 1 exactly where the first pixel is below 0.1 (the all-zero image is class 1)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        first = x.flatten(1)[:, :1]
        return torch.cat([first - 0.1, 0.1 - first], 1)


def test_a_default_the_attack_queried_itself_is_dropped_from_the_bests():
    """foolbox's C&W L2 queries the all-zero image it returns for every failed image: one output
    shared by images never counts, even when the attack evaluated it (the next kept one stands)."""
    from attackaudit.measure.tracker import QueryTracker
    # a walk away from digit a (the rows of a step stay with their positions, attribution step 4)
    inputs = torch.tensor([[0.5, 0.4, 0.4, 0.4], [0.5, 1.0, 1.0, 1.0]]).view(2, 1, 2, 2)
    labels = torch.zeros(2, dtype=torch.long)
    tracker = QueryTracker(_FirstPixelBelow(), inputs, labels, norm="l2", budget=10)
    for first_row in ([0.15, 0.4, 0.4, 0.4], [0.0, 1.0, 0.0, 1.0]):  # the second: adversarial, far
        step = inputs.clone()
        step[0] = torch.tensor(first_row).view(1, 2, 2)
        tracker(step)
    tracker(torch.zeros_like(inputs))  # the shared default: adversarial on both, nearer a
    assert torch.allclose(tracker.best_distance, torch.tensor([0.73, 3.25]).sqrt())
    assert tracker.drop_shared_bests().tolist() == [1, 1]
    assert torch.allclose(tracker.best_distance[0], torch.tensor(1.13).sqrt())
    assert tracker.best_distance[1] == float("inf")
    alone = QueryTracker(_FirstPixelBelow(), inputs[:1], labels[:1], norm="l2", budget=10)
    alone(torch.zeros_like(inputs[:1]))  # one image's constant output is no shared one: it stands
    assert alone.drop_shared_bests().tolist() == [0] and torch.isfinite(alone.best_distance).all()


# ---------------------------------------------------------------- fallback_output (real attacks)
FALLBACK = ["defects/zero_fallback/linf", "defects/zero_fallback_pgd/linf", "foolbox/L2CarliniWagnerAttack/l2"]
SOUND = ["defects/pgd/linf", "adv_lib/ddn/l2", "foolbox/L2DeepFoolAttack/l2", "art/DeepFool/l2",
         "torchattacks/FGSM/linf", "cleverhans/fast_gradient_method/linf"]


@pytest.fixture(scope="module")
def untargeted() -> pd.DataFrame:
    pytest.importorskip("adv_lib.attacks")
    return _run([*FALLBACK, *SOUND], ["digits-mlp"])


def test_fallback_outputs_are_flagged_and_never_counted(untargeted):
    found = flags(untargeted)
    named = set(found.loc[found.flag == "fallback_output", "implementation"])
    assert named == {_impl(k) for k in FALLBACK}, found.to_string()
    walk = untargeted[untargeted.implementation == "defects/zero_fallback"]
    # the all-zero image is misclassified on most digits, yet none of them counts as broken
    assert (walk.returned_fallback != "").sum() >= 8 and not np.isfinite(walk.best_distance).any()
    assert not walk.returned_adversarial.any()
    # the fixed-ε one: the search took each default for a failure and went on to a real adversarial
    pgd = untargeted[untargeted.implementation == "defects/zero_fallback_pgd"]
    zero = untargeted.loc[untargeted.implementation == "defects/pgd", "best_distance"].to_numpy()
    assert (pgd.best_distance.to_numpy() < 0.5).all() and np.isfinite(zero).all()
    evidence = found.loc[(found.flag == "fallback_output") & (found.implementation == "foolbox/L2CarliniWagnerAttack"),
                         "evidence"].iat[0]
    assert "all-zero image" in evidence


def test_sound_builtins_return_no_fallback(untargeted):
    sound = untargeted[untargeted.implementation.isin([_impl(k) for k in SOUND])]
    assert (sound.returned_fallback == "").all()
    # ART's DeepFool returns its overshoot point, never queried: a search result, counted
    art = sound[sound.implementation == "art/DeepFool"]
    assert np.isfinite(art.best_distance).all()


# ---------------------------------------------------------------- targeted runs
TARGETED_SOUND = ["defects/pgd/linf", "adv_lib/ddn/l2", "art/ProjectedGradientDescent/l2",
                  "cleverhans/carlini_wagner_l2/l2", "foolbox/L2CarliniWagnerAttack/l2"]


@pytest.fixture(scope="module")
def targeted() -> pd.DataFrame:
    pytest.importorskip("adv_lib.attacks")
    return _run(["defects/label_keeper/linf", "defects/zero_fallback/linf", *TARGETED_SOUND], ["digits-mlp"],
                targeted=True)


def test_success_test_that_ignores_the_target_is_a_label_bug(targeted):
    found = flags(targeted)
    bug = found[(found.flag == "label_bug") & found.evidence.str.contains("success test ignores the target")]
    assert set(bug.implementation) == {"defects/label_keeper"}, found.to_string()
    assert "still at the label" in bug.evidence.iat[0]
    assert success_ignores_target(prepare(targeted[targeted.implementation != "defects/label_keeper"])) == []


def test_a_default_output_in_a_targeted_run_is_named_as_such(targeted):
    found = flags(targeted)
    for impl in ("defects/zero_fallback", "foolbox/L2CarliniWagnerAttack"):
        mine = found[found.implementation == impl]
        assert "fallback_output" in set(mine.flag), found.to_string()
        assert not mine.evidence.str.contains("targets ignored").any()


# ---------------------------------------------------------------- the batch-composition twin
@pytest.fixture(scope="module")
def batch() -> pd.DataFrame:
    pytest.importorskip("adv_lib.attacks")
    return _run(["defects/batch_step/l2", "defects/batch_stop/linf", "defects/pgd/linf", "art/DeepFool/l2",
                 "adv_lib/ddn/l2"], ["digits-mlp", "digits-mlp~batch", "digits-mlp~seed"])


def test_batch_twin_catches_batch_wide_steps_and_stops_on_every_image(batch):
    found = flags(batch)
    named = set(found.loc[found.flag == "batch_dependence", "implementation"])
    assert named == {"defects/batch_step", "defects/batch_stop"}, found.to_string()
    assert found.loc[found.flag == "batch_dependence", "evidence"].str.contains("digits-mlp~batch").all()
    # the twin attacked every image, reversed and with companions in its one call; it reports the run's own
    twin = batch[batch.model == "digits-mlp~batch"]
    assert twin.groupby("implementation").size().eq(SAMPLES).all()
    own = batch[batch.model == "digits-mlp"]
    for impl, rows in twin.groupby("implementation", observed=True):
        assert rows["sample"].tolist() == own.loc[own.implementation == impl, "sample"].tolist()


def test_batch_twin_companions_are_the_datasets_next_images():
    from attackaudit.run.job import Job
    from attackaudit.run.worker import job_companions
    from attackaudit.results.schema import parse_model_name
    from attackaudit.sources import run_twins
    from attackaudit.sources.subset import load_subset, random_targets

    assert run_twins.companions(parse_model_name("digits-mlp~batch"), 16, 360) == 8
    assert run_twins.companions(parse_model_name("digits-mlp~batch"), 15, 360) == 8      # half, rounded up
    assert run_twins.companions(parse_model_name("digits-mlp~batch"), 356, 360) == 4     # what the dataset has left
    assert run_twins.companions(parse_model_name("digits-mlp~batch"), 360, 360) == 0     # none: half batches instead
    assert run_twins.companions(parse_model_name("digits-mlp~batch"), 16, None) == 0
    assert run_twins.companions(parse_model_name("digits-mlp"), 16, 360) == 0
    assert run_twins.companions(parse_model_name("digits-mlp~split"), 16, 360) == 0
    assert run_twins.batch_size(parse_model_name("digits-mlp~batch"), 0, 16, companions=8) == 0      # one call
    assert run_twins.batch_size(parse_model_name("digits-mlp~batch"), 0, 16) == 8                    # two half batches
    assert run_twins.batch_size(parse_model_name("digits-mlp~batch"), 4, 16, companions=8) == 4      # the user's batches
    job = Job(run="t", twin=parse_model_name("digits-mlp~batch"), spec_key="adv_lib/ddn/l2", samples=12, targeted=True)
    comp = job_companions(job, 10)
    wide = load_subset("digits", 18, 0)
    assert comp.indices.tolist() == wide.indices[12:].tolist()
    assert torch.equal(comp.inputs, wide.inputs[12:]) and torch.equal(comp.labels, wide.labels[12:])
    assert torch.equal(comp.criterion.targets, random_targets(wide.labels, 10, 0)[12:])
    assert job_companions(Job(run="t", twin=parse_model_name("digits-mlp"), spec_key="adv_lib/ddn/l2", samples=12), 10) is None


def test_the_first_companion_is_adversarial_before_any_step():
    from attackaudit.measure.criterion import Targeted, Untargeted
    from attackaudit.measure.success import is_success
    from attackaudit.run.job import Job
    from attackaudit.run.worker import job_companions
    from attackaudit.sources.run_twins import already_adversarial
    from attackaudit.sources.zoo import load_model

    labels, crit = already_adversarial(torch.tensor([3, 4, 5]), Untargeted(), predicted=9, num_classes=10)
    assert labels.tolist() == [0, 4, 5] and isinstance(crit, Untargeted)
    labels, crit = already_adversarial(torch.tensor([3, 4]), Targeted(torch.tensor([1, 2])), predicted=3,
                                       num_classes=10)
    assert labels.tolist() == [4, 4] and crit.targets.tolist() == [3, 2]
    assert Targeted(torch.tensor([1])).extend(Targeted(torch.tensor([2, 3]))).targets.tolist() == [1, 2, 3]
    assert Untargeted().extend(Untargeted()) == Untargeted()
    model = load_model("digits-mlp")
    for targeted in (False, True):
        job = Job(run="t", twin=parse_model_name("digits-mlp~batch"), spec_key="adv_lib/ddn/l2", samples=12, targeted=targeted)
        comp = job_companions(job, 10, model)
        with torch.no_grad():
            logits = model(comp.inputs)
        done = is_success(logits, comp.labels, comp.criterion.targets if targeted else None)
        assert done[0] and not done[1:].all()  # the first only: the others are the dataset's own


def test_boundary_bests_and_measured_randomness(batch):
    art = batch[(batch.implementation == "art/DeepFool") & (batch.model == "digits-mlp")]
    # ART's DeepFool lands exactly on the boundary of the ReLU net: those bests are left out
    assert (art.best_margin.abs() <= BOUNDARY_MARGIN).sum() >= 4
    assert art.rng_used.all()  # it moves torch's RNG, yet its seed twin equals it: deterministic
    pgd = batch[batch.implementation == "defects/pgd"]
    assert not pgd.rng_used.any()


def _twin_table(base, twin, margin_base, margin_twin, rng=False, seed=None):
    jobs = [job_rows("m", "lib/x", "l2", base).assign(best_margin=margin_base, rng_used=rng),
            job_rows("m~batch", "lib/x", "l2", twin).assign(best_margin=margin_twin, rng_used=rng)]
    if seed is not None:
        jobs.append(job_rows("m~seed", "lib/x", "l2", seed).assign(best_margin=0.1, rng_used=rng))
    return prepare(table(*jobs))


def test_batch_rule_ignores_boundary_points_and_unmeasured_randomness():
    off = D * np.where(np.arange(N) < 6, 1.02, 1.0)
    far = np.full(N, 0.1)
    assert judge(_twin_table(D, off, far, far), ("batch",))["flagged"].all()
    at_edge = np.where(np.arange(N) < 6, 1e-7, 0.1)  # the 6 that differ sit on the boundary
    assert not judge(_twin_table(D, off, at_edge, far), ("batch",))["flagged"].any()
    # randomised (it moved a global random state) and no seed twin: not judged at all
    assert judge(_twin_table(D, off, far, far, rng=True), ("batch",)).empty
    # a seed twin equal to the model: the attack is deterministic after all, judged against the null
    assert judge(_twin_table(D, off, far, far, rng=True, seed=D.copy()), ("batch",))["flagged"].all()


def test_batch_rule_ignores_images_whose_output_was_a_default():
    """foolbox's C&W L2 returns an all-zero image for the images it failed and evaluates it itself:
    alone (one image per call) the tracker credits that query, in a batch the default is shared by
    many images and is not: on the demo, 4 of 4 images "differed" between digits-mlp and its split
    twin, the harness's bookkeeping of one default read as the attack's batch dependence. Images
    with a default output on either side carry no batch evidence (fallback_output names them)."""
    far = np.full(N, 0.1)
    failed = np.where(np.arange(N) < 6, np.inf, D)  # the batch failed 6 images ...
    alone = np.where(np.arange(N) < 6, 3.9, D)      # ... alone, the default was credited
    assert judge(_twin_table(failed, alone, far, far), ("batch", "split"))["flagged"].all()
    jobs = [job_rows("m", "lib/x", "l2", failed).assign(
                best_margin=far, rng_used=False,
                returned_fallback=np.where(np.arange(N) < 6, "all-zero image shared by 6 images", "")),
            job_rows("m~batch", "lib/x", "l2", alone).assign(best_margin=far, rng_used=False, returned_fallback="")]
    assert not judge(prepare(table(*jobs)), ("batch",))["flagged"].any()


# ---------------------------------------------------------------- ε use in release audits
def _eps_table(impl_rows: pd.DataFrame, version: str) -> pd.DataFrame:
    return impl_rows.assign(implementation="lib/pgd", library="lib", attack="pgd", library_version=version)


def test_eps_use_regression_with_unchanged_distances():
    pytest.importorskip("adv_lib.attacks")
    rows = _run(["defects/pgd/linf", "defects/half_ball/linf"], ["digits-mlp"])
    a = _eps_table(rows[rows.implementation == "defects/pgd"], "1.0")
    b = _eps_table(rows[rows.implementation == "defects/half_ball"], "1.1")
    found = eps_use(prepare(a), prepare(b), {"linf": 0.1})
    (r,) = found.itertuples()
    assert r.direction == "regressed" and r.ratio_b < r.ratio_a - 0.3 and r.ra_b > r.ra_a
    out = diff(a, b, eps={"linf": 0.1})
    assert out["verdict"].iat[0] in ("regressed", "mixed") and "ε use" in out["reason"].iat[0]
    same = diff(a, _eps_table(a, "1.1"))
    assert same["verdict"].iat[0] == "unchanged"


def test_eps_use_alone_moves_an_otherwise_unchanged_verdict():
    """Same best distances, rows that stop at half the ball: the diff's own part says nothing."""
    base = job_rows("m", "lib/pgd", "linf", D, kind="fixed")
    a = base.assign(ball_mean_ratio=0.95, eps_success=D * 1.05, library_version="1")
    b = base.assign(ball_mean_ratio=0.45, eps_success=D * 2.1, library_version="2")
    out = diff(a, b, eps={"linf": float(np.median(D) * 1.5)})
    assert out["verdict"].iat[0] == "regressed" and "0.95 → 0.45 of ε" in out["reason"].iat[0]
    assert eps_use(prepare(a), prepare(a.assign(library_version="2")), {"linf": 0.1})["direction"].eq("").all()


def test_eps_flag_values():
    assert parse_eps(["0.1", "l2=0.5"]) == {"*": 0.1, "l2": 0.5}
    for bad in ("linf=-1", "lx=0.1", "linf=abc"):
        with pytest.raises(ValueError, match="--eps"):
            parse_eps([bad])


def test_old_runs_without_the_new_columns_are_not_judged():
    old = table(job_rows("m", "lib/a", "linf", D), job_rows("m", "lib/b", "linf", D * 1.1))
    assert fallback_output(prepare(old)) == []
    assert eps_use(prepare(old), prepare(old), {"linf": 0.1}).empty
