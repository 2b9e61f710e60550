"""Calibration of attackaudit's verdicts: false-positive rates under realistic nulls and power on
defects of known size, at 16, 64 and 256 images on 1 and 3 models (fidelity/README.md,
"Calibration"). Every rule runs through the project's own code (fidelity/).

    .venv/bin/python benchmarks/calibration.py [--reps R] [--images 16 64 256] [--models 1 3] [--rules R ...] [RUN_DIR]
    .venv/bin/python benchmarks/calibration.py --real [pair "pair worst" report twins] [--reps R] ...

``--real`` runs the nulls on real attack noise instead: tables resampled per image from the stored
corpus ``benchmarks/noise/corpus.parquet`` (``benchmarks/noise_corpus.py`` makes it), judged by
the public ``recommend``, ``flags``, ``optimality_gap`` and ``diff`` (``benchmarks/real_nulls.py``
says what each group holds); the cells it prints are the "real …" scenarios of fidelity/README.md.

The default (20 repetitions per cell) takes a few minutes; the table in fidelity/README.md used
``--reps 100`` for the verdicts and the older flag rules (34 min on the shared 2-core machine) and
``--reps 200`` for the defect rules (about 4 min of CPU: they are cheap) and ``--reps 100`` for
the per-job rules, shift_sensitivity and below_expected_strength (470 s).

Per-image distances are synthesised (``fidelity.synthetic``: one difficulty per image shared by
every model, per-model scale, 10% clean errors), or, with RUN_DIR, resampled from a real run: the
envelope of each real model's images is the truth and images are drawn with replacement (every
model's row of an image together). Scenarios (null: any verdict is a false positive; defect: the
verdict is the power):

| scenario | kind | what |
|---|---|---|
| ``aa`` | null | two identical copies of a deterministic sound attack |
| ``seeds`` | null | four sound randomised attacks of equal strength (independent seed noise); for "tied" the power to show two of them equivalent |
| ``weak`` | null | a weak but correct attack whose failures (15%) follow image difficulty |
| ``far20`` | defect | an attack 20% farther on every image than a sound sibling; for "tied" a false tie |
| ``perm40`` | defect | the class-permuted twin moves 40% of the images by 30% |
| ``class`` | defect | fails every image of one class, sound elsewhere |

The defect rules of fidelity/defects.py, on fixed-ε attacks whose minimal-ε search recorded
``CALLS_PER_IMAGE`` calls per image (the ``ball_*`` / ``eps_fail_*`` columns) and on targeted runs:

| scenario | kind | what |
|---|---|---|
| ``inside`` | null | out_of_ball: a sound attack whose rows stay inside the ball up to float noise (ratio ≤ 1 + 4e-7, as measured) |
| ``out10`` | defect | out_of_ball: 10% of its calls return a row at 1.05–2 ε |
| ``weak`` | null | eps_unused: a correct attack failing the 15% hardest images, its failed rows at 0.47–1.0 of ε (the measured range of sound built-ins) |
| ``unused`` | defect | eps_unused: fails the 30% hardest images with failed rows at 0.005–0.03 of ε (ART's L1 FGM/PGD) |
| ``aa`` | null | batch_dependence: a deterministic attack whose split twin differs by float noise (≤ 1e-6) |
| ``seeds`` | null | batch_dependence: a randomised attack; base, split and seed twins are three independent seeds |
| ``chaos`` | null | batch_dependence: a deterministic long search whose split twin differs by amplified float rounding, no side: ±1–8% on half the images (cleverhans' C&W L2 measured 17 of 32, 10 farther and 7 closer) |
| ``ead`` | defect | batch_dependence: deterministic, the split twin 3–5% farther on 35% of the images (foolbox EAD measured 3 of 8) |
| ``rand40`` | defect | batch_dependence: randomised, the split twin 30% farther on 40% of the images, beside its seed twin |
| ``weak`` | null | label_bug (targets ignored): a correct targeted attack failing the 15% hardest images, where 30% of its failed outputs land in a third class |
| ``ignore`` | defect | label_bug (targets ignored): goes for the nearest wrong class, which is the target on one image in nine |

The per-job rules and the rest of flags.py (each beside a sound sibling, whose rows the rules that
read a family's envelope see; every adjustment is over the attack's own jobs):

| scenario | kind | what |
|---|---|---|
| ``fixed`` | null | last_not_best: a fixed-ε attack whose returned output is 6–50% worse than its best on 10.7% of its images (the worst sound APGD on the demo) |
| ``minimal`` | null | last_not_best: a minimal attack doing so on 0.5% of its images (sound ones measured 0 of about 2,500) |
| ``last58`` | defect | last_not_best: a fixed-ε attack returning its last iterate, worse on 58% of its images (foolbox L1 PGD) |
| ``minimal26`` | defect | last_not_best: a minimal attack worse on 26% of its images (ART C&W L2) |
| ``weak`` | null | silent_failure: a correct attack failing the 15% hardest images |
| ``feeble`` | null | silent_failure: a correct attack breaking only the easiest 25% of the live images (the floor) |
| ``feeble random`` | null | silent_failure: breaking 25% of the cases at random (the floor, without difficulty to help) |
| ``starved random`` | null | silent_failure: breaking 16% at random, below the floor (the budget-starved adv_lib fmn L2): a stress cell |
| ``inert`` | defect | silent_failure: runs its queries, breaks nothing |
| ``no gradient`` | defect | silent_failure: a gradient attack that never ran a backward pass |
| ``within`` | null | budget_overrun: query counts vary per image, all within the budget |
| ``over5`` | defect | budget_overrun: 1–50 queries past the budget on 5% of the (model, image) cases |
| ``float`` | null | nondeterminism: a rerun differing by float noise (≤ 1e-6 relative) |
| ``unseeded`` | defect | nondeterminism: the rerun draws fresh seed noise (2% per image) |
| ``rare5`` | defect | nondeterminism: 1–10% apart on 5% of the cases (e.g. a tie broken by hash order) |
| ``aa`` | null | shift_sensitivity: deterministic; the shift twin moves by float32 log-softmax rounding, and takes another bisection path (±5–15%) on 2% of the images |
| ``sign`` | null | shift_sensitivity: a one-step sign-gradient attack, 10–45% apart on 11% of the images (foolbox L∞ FGM, 3 of 28 measured) |
| ``seeds`` | null | shift_sensitivity: randomised; base, shift and seed twins three independent seeds |
| ``shift35`` | defect | shift_sensitivity: deterministic, 30% farther on 35% of the images (torchattacks EAD measured 6 of 16) |
| ``rand40`` | defect | shift_sensitivity: randomised, 30% farther on 40% of the images beside its seed twin |
| ``float`` | null | below_exact: an attack at the proven minimum up to float noise (±1e-6 relative) on 30% of the images, 0–10% above it elsewhere |
| ``under5`` | defect | below_exact: its distance under-reported by 30% on 5% of the cases (a distance or tracker bug) |
| ``seeds`` | null | below_expected_strength: an APGD (published L2 optimality 0.979) as strong as another library's APGD up to seed noise |
| ``weak`` | null | below_expected_strength: an APGD failing the 30% hardest images, 10% farther on the rest |
| ``family starved`` | null | below_expected_strength: two libraries' APGDs both failing the 84% hardest images beside a sound attack of another family (the run's settings, or a shared flaw: no one implementation is singled out) |
| ``starved`` | defect | below_expected_strength: an APGD failing the 84% hardest images (adv_lib fmn L2, ξ 0.12) beside a sound APGD of another library |
| ``far3`` | defect | below_expected_strength: an APGD 3× farther on every image beside a sound one |
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from attackaudit.fidelity import diff
from attackaudit.fidelity.class_failure import judge_table as judge_classes
from attackaudit.fidelity.defects import batch_dependence, eps_unused, out_of_ball, targets_ignored
from attackaudit.fidelity.equivalence import ImageBlocks, answer, pair_test, pair_values
from attackaudit.fidelity.recommend import trust_tests
from attackaudit.fidelity.stats import ALPHA
from attackaudit.fidelity.synthetic import (SEED_NOISE, attack_distances, table_from_arrays,
                                            true_distances)
from attackaudit.fidelity.twins import judge as judge_twins
from attackaudit.fidelity._table import prepare

EMPTY_FLAGS = pd.DataFrame(columns=["model", "norm", "implementation", "library_version", "flag"])


def _truth_sampler(run_dir: str | None):
    """A function (rng, n_images, n_models) → (M, n) true distances: synthetic, or resampled
    images of a real run's envelope."""
    if not run_dir:
        return true_distances
    from attackaudit.fidelity import envelope
    from attackaudit.results.store import load_run

    rows = load_run(run_dir)
    env = envelope(rows[rows["twin"] == ""])  # the models themselves, not their twins
    norm = env["norm"].value_counts().index[0]
    wide = env[env["norm"] == norm].pivot_table(index="model", columns="sample", values="d_star").to_numpy()

    def sample(rng: np.random.Generator, n_images: int, n_models: int) -> np.ndarray:
        cols = rng.integers(0, wide.shape[1], n_images)
        rows = rng.integers(0, wide.shape[0], n_models) if n_models > wide.shape[0] else np.arange(n_models)
        return wide[np.ix_(rows, cols)]
    return sample


def _excluded(dist: list[np.ndarray]) -> np.ndarray:
    """Trust-set exclusions (all pairs, Holm) among implementations with (M, n) distances."""
    blocks = ImageBlocks.from_arrays(np.stack(dist, axis=1))
    return trust_tests(blocks, list(range(len(dist))), ALPHA)[1]


def _pair_answer(a: np.ndarray, b: np.ndarray) -> str:
    """The answer for two implementations (k = 2: no multiplicity), per image over models."""
    live = (a > 0) | (b > 0)  # an image misclassified clean needed no attack
    res = pair_test(pair_values(a, b, live=live))
    return answer(res["p_different"], res["p_equivalent"], ALPHA)


def _gap_flagged(dist: dict[str, np.ndarray], models: list[str]) -> set[str]:
    from attackaudit.fidelity.flags import optimality_gap
    return {f["implementation"] for f in optimality_gap(table_from_arrays(dist, models))}


def _audit(before: np.ndarray, after: np.ndarray, sibling: np.ndarray, models: list[str]) -> str:
    ta = table_from_arrays({"x/a": before, "x/s": sibling}, models)
    tb = table_from_arrays({"x/a": after, "x/s": sibling}, models, version="2.0")
    d = diff(ta, tb, flags_a=EMPTY_FLAGS, flags_b=EMPTY_FLAGS)
    return str(d.set_index("implementation").loc["x/a", "verdict"])


def _twin_table(kind: str, base: np.ndarray, twin: np.ndarray, seed: np.ndarray | None,
                models: list[str]) -> pd.DataFrame:
    """One attack ``x/a`` on ``models`` (``base``), on their ``~kind`` twins (``twin``) and, when
    ``seed`` is given, on their seed twins; each array (M, n)."""
    arrays = [base, twin] + ([seed] if seed is not None else [])
    names = models + [f"{m}~{kind}" for m in models] + ([f"{m}~seed" for m in models] if seed is not None else [])
    return table_from_arrays({"x/a": np.vstack(arrays)}, names)


def _twin_flagged(kind: str, base: np.ndarray, twin: np.ndarray, seed: np.ndarray | None,
                  models: list[str]) -> bool:
    """The twin check of ``kind`` (perm: label_bug, shift: shift_sensitivity) fires on ``twin``,
    judged against ``seed``'s twin when given, else against the kind's null rate."""
    return bool(judge_twins(_twin_table(kind, base, twin, seed, models), (kind,))["flagged"].any())


def _class_bug(truth: np.ndarray, attack: np.ndarray, labels: np.ndarray, models: list[str]) -> bool:
    j = judge_classes(table_from_arrays({"x/sound": truth, "x/a": attack}, models, labels=labels))
    return bool(j["flagged"].any())


# ------------------------------------------------------------------ the defect rules (defects.py)
#: calls of the minimal-ε search per image of a fixed-ε attack (doubling, then bisecting to 1/64)
CALLS_PER_IMAGE = 8


def _fixed(dists: dict[str, np.ndarray], models: list[str], recorded: dict[str, np.ndarray]) -> pd.DataFrame:
    """A prepared table of fixed-ε attacks; ``recorded``: the minimal-ε search's columns of
    ``x/a``, each (M, n) (model-major like the rows)."""
    t = table_from_arrays(dists, models).assign(kind="fixed")
    mine = (t["implementation"] == "x/a").to_numpy()
    for col, v in recorded.items():
        t.loc[mine, col] = np.asarray(v, dtype=float).reshape(-1)
    return prepare(t)


def _out_of_ball(rng: np.random.Generator, sound: np.ndarray, models: list[str], share: float) -> bool:
    """out_of_ball fires on an attack that returns a row outside the ball on ``share`` of its
    calls (0: rows inside up to the measured float noise)."""
    out = rng.binomial(CALLS_PER_IMAGE, share, sound.shape)
    worst = np.where(out > 0, rng.uniform(1.05, 2.0, sound.shape), 1.0 + rng.uniform(0, 4e-7, sound.shape))
    t = _fixed({"x/a": sound}, models, {"ball_calls": np.full(sound.shape, CALLS_PER_IMAGE), "ball_out": out,
                                        "ball_worst_ratio": worst, "ball_worst_eps": np.ones(sound.shape)})
    return bool(out_of_ball(t))


def _eps_unused(rng: np.random.Generator, truth: np.ndarray, models: list[str], fail_rate: float,
                moved: tuple[float, float]) -> bool:
    """eps_unused fires on an attack failing the ``fail_rate`` hardest images, beside a sound
    sibling, whose failed rows moved ``moved`` (low, high) of the largest ε it tried (2–8× d*)."""
    attack = attack_distances(rng, truth, fail_rate=fail_rate)
    failed = ~np.isfinite(attack)
    eps = np.where(failed, truth * 2.0 ** rng.integers(1, 4, truth.shape), np.nan)
    t = _fixed({"x/sound": truth, "x/a": attack}, models,
               {"eps_fail_max": eps, "eps_fail_ratio": np.where(failed, rng.uniform(*moved, truth.shape), np.nan)})
    return bool(eps_unused(t))


def _batch(base: np.ndarray, split: np.ndarray, seed: np.ndarray | None, models: list[str]) -> bool:
    """batch_dependence fires on the split twin of ``base`` (judged against ``seed``'s twin when given)."""
    return bool(batch_dependence(prepare(_twin_table("split", base, split, seed, models))))


def _targets(rng: np.random.Generator, truth: np.ndarray, models: list[str], ignores: bool) -> bool:
    """label_bug (targets ignored) fires in a targeted run beside a sound sibling: an attack that
    ``ignores`` the target (it reaches the nearest wrong class, the target on one image in nine),
    or a correct one failing the 15% hardest images, 30% of those outputs in a third class."""
    m, n = truth.shape
    labels = rng.integers(0, 10, n)
    target = (labels + rng.integers(1, 10, n)) % 10
    third = rng.integers(0, 8, n)  # one of the 8 classes that are neither label nor target
    lo, hi = np.minimum(labels, target), np.maximum(labels, target)
    third = third + (third >= lo)
    third = third + (third >= hi)
    if ignores:
        lands_on_target = rng.random(n) < 1 / 9
        attack = np.where(lands_on_target, truth, np.inf)
        cls = np.where(lands_on_target, target, third)
    else:
        attack = attack_distances(rng, truth, fail_rate=0.15)
        cls = np.where(np.isfinite(attack), target, np.where(rng.random((m, n)) < 0.3, third, labels))
    t = table_from_arrays({"x/sound": truth, "x/a": attack}, models, labels=labels).assign(
        targeted=True, target=np.tile(target, 2 * m))
    t["returned_class"] = np.concatenate([np.tile(target, m), np.broadcast_to(cls, (m, n)).reshape(-1)])
    return bool(targets_ignored(prepare(t)))


# ------------------------------------------------------------------ the per-job rules and the rest of flags.py
#: the worst per-image rate of a returned output > 5% worse than the best queried among sound
#: fixed-ε attacks (adv_lib apgd:ce L2, 9 of 84 images on the demo), and the planted sizes, as
#: measured: foolbox L1 PGD (last iterate, 58%), ART C&W L2 (26%, a minimal attack)
SOUND_FIXED_NOT_BEST = 0.107


def _job_flag(t: pd.DataFrame, rule: str, impl: str = "x/a") -> bool:
    """Whether the per-job rules of flags.py (facts, ``last_not_best``, ``silent_failure``) give
    ``rule`` to ``impl`` in the prepared table ``t``."""
    from attackaudit.fidelity._table import with_envelope
    from attackaudit.fidelity.flags import _per_job
    return any(f["flag"] == rule and f["implementation"] == impl for f in _per_job(with_envelope(t)))


def _not_best(rng: np.random.Generator, sound: np.ndarray, models: list[str], kind: str, rate: float) -> bool:
    """last_not_best on an attack of ``kind`` whose returned output is 5–50% worse than its best
    on a ``rate`` share of its images, beside a sound sibling (both judged, each BH over its own jobs)."""
    t = table_from_arrays({"x/sound": sound, "x/a": sound}, models).assign(kind=kind)
    mine = (t["implementation"] == "x/a").to_numpy()
    worse = np.where(rng.random(sound.size) < rate, rng.uniform(1.06, 1.5, sound.size), 1.0)
    t.loc[mine, "returned_distance"] = sound.reshape(-1) * worse
    return _job_flag(prepare(t), "last_not_best")


def _breaks_easiest(rng: np.random.Generator, truth: np.ndarray, share: float, by_difficulty: bool = True
                    ) -> np.ndarray:
    """A correct attack that breaks only ``share`` of each model's live images: the easiest (by
    difficulty, with the same scoring noise as ``attack_distances``) or a random choice."""
    live = truth > 0
    score = np.log(np.where(live, truth, 1.0)) + rng.normal(0.0, 0.3, truth.shape) if by_difficulty \
        else rng.random(truth.shape)
    score = np.where(live, score, np.inf)
    rank = np.argsort(np.argsort(score, axis=1), axis=1)  # 0 = easiest live image
    broken = rank < np.round(share * live.sum(axis=1, keepdims=True))
    return np.where(live, np.where(broken, truth, np.inf), 0.0)


def _silent(rng: np.random.Generator, truth: np.ndarray, models: list[str], attack: np.ndarray,
            backwards: int = 300) -> bool:
    """silent_failure on ``attack`` beside a sound sibling; ``backwards`` per image (0: a
    gradient attack that never computed a gradient)."""
    t = table_from_arrays({"x/sound": truth, "x/a": attack}, models)
    t.loc[(t["implementation"] == "x/a").to_numpy(), "backwards"] = backwards
    return _job_flag(prepare(t), "silent_failure")


def _overrun(rng: np.random.Generator, sound: np.ndarray, models: list[str], share: float) -> bool:
    """budget_overrun on an attack whose query counts vary up to the budget and which makes 1–50
    queries past it on a ``share`` of its images."""
    t = table_from_arrays({"x/a": sound}, models)
    budget = int(t["budget"].iat[0])
    t["forwards"] = rng.integers(budget // 4, budget // 2 + 1, len(t))
    t["backwards"] = rng.integers(budget // 4, budget // 2 + 1, len(t))
    t["refused"] = np.where(rng.random(len(t)) < share, rng.integers(1, 51, len(t)), 0)
    return _job_flag(prepare(t), "budget_overrun")


def _nondeterministic(first: np.ndarray, second: np.ndarray, models: list[str]) -> bool:
    """nondeterminism between two seeded runs of the same config."""
    from attackaudit.fidelity.flags import _nondeterminism
    return bool(_nondeterminism(prepare(table_from_arrays({"x/a": first}, models)),
                                table_from_arrays({"x/a": second}, models)))


def _float_shift(rng: np.random.Generator, d: np.ndarray, path_rate: float = 0.02) -> np.ndarray:
    """A deterministic attack on the shift twin: float32 log-softmax rounding (≤ 2.7% relative, as
    measured) and, on ``path_rate`` of the images, another bisection path ±5–15%."""
    noise = np.exp(rng.normal(0.0, 0.005, d.shape))
    path = np.where(rng.random(d.shape) < path_rate, rng.uniform(1.05, 1.15, d.shape) ** rng.choice([-1, 1], d.shape),
                    1.0)
    return d * noise * path


def _moved(rng: np.random.Generator, d: np.ndarray, share: float, low: float, high: float) -> np.ndarray:
    """``d`` moved by a factor in [low, high] on a ``share`` of the images (the same images on every model)."""
    hit = rng.random(d.shape[1]) < share
    return d * np.where(hit, rng.uniform(low, high, d.shape), 1.0)


def _below_strength(models: list[str], attack: np.ndarray, sibling: np.ndarray, other: np.ndarray | None = None
                    ) -> bool:
    """below_expected_strength on an APGD ``x/a`` (published L2 optimality 0.979) beside another
    library's APGD ``y/apgd`` (``sibling``) and, when given, a strong attack of another family
    ``z/ddn`` (``other``)."""
    from attackaudit.fidelity.strength import below_expected_strength
    from attackaudit.fidelity._table import without_twins
    t = table_from_arrays({"x/a": attack, "y/apgd": sibling}, models, family="apgd")
    if other is not None:
        t = pd.concat([t, table_from_arrays({"z/ddn": other}, models, family="ddn")], ignore_index=True)
    return any(f["implementation"] == "x/a" for f in below_expected_strength(without_twins(prepare(t))))


def _below_exact(rng: np.random.Generator, truth: np.ndarray, models: list[str], share: float) -> bool:
    """below_exact against exact minimal distances (``truth``, proven by the MILP): a sound attack
    reaches the minimum up to float noise (±1e-6 relative) on 30% of the images and is 0–10% above
    it elsewhere; on a ``share`` of the cases its distance is under-reported by 30% (a bug)."""
    from attackaudit.fidelity.true_optimality import below_exact_flags
    at_min = rng.random(truth.shape) < 0.3
    d = truth * np.where(at_min, 1 + rng.uniform(-1e-6, 1e-6, truth.shape), rng.uniform(1.0, 1.1, truth.shape))
    d = np.where(rng.random(truth.shape) < share, d * 0.7, d)
    t = table_from_arrays({"x/a": d}, models)
    m, n = truth.shape
    exact = pd.DataFrame({"model": np.repeat(models, n), "dataset": "digits", "norm": "l2",
                          "sample": np.tile(np.arange(n), m), "status": np.where(truth.reshape(-1) > 0, "optimal",
                                                                                 "clean_misclassified"),
                          "exact_distance": truth.reshape(-1), "lower_bound": truth.reshape(-1)})
    return bool(len(below_exact_flags(t, exact)))


def one_rep(rng: np.random.Generator, n: int, m: int, truth_of, only: set[str] | None = None) -> dict[str, bool]:
    """Every rule × scenario once (or those named in ``only``: "rule | scenario" keys or rule
    names): True where the rule fired."""
    models = [f"m{i}" for i in range(m)]
    truth = truth_of(rng, n, m)
    sound = attack_distances(rng, truth)
    seeds = [attack_distances(rng, truth, seed_noise=SEED_NOISE) for _ in range(4)]
    weak = attack_distances(rng, truth, fail_rate=0.15)
    far = attack_distances(rng, truth, farther=1.2, seed_noise=SEED_NOISE)
    moved = seeds[0] * np.where(rng.random(seeds[0].shape) < 0.4, 1.3, 1.0)
    labels = rng.integers(0, 10, n)
    dead = attack_distances(rng, truth, fail_images=np.flatnonzero(labels == labels[0]))
    checks = {
        "trust exclusion | aa": lambda: bool(_excluded([sound, sound.copy()]).any()),
        "trust exclusion | seeds": lambda: bool(_excluded(seeds).any()),
        "trust exclusion | far20": lambda: bool(_excluded([seeds[0], far])[1]),
        "tied (equivalence) | seeds": lambda: _pair_answer(seeds[0], seeds[1]) == "equivalent",
        "tied (equivalence) | far20": lambda: _pair_answer(seeds[0], far) == "equivalent",
        "optimality_gap | seeds": lambda: bool(_gap_flagged({f"x/s{i}": s for i, s in enumerate(seeds)}, models)),
        "optimality_gap | far20": lambda: "x/far" in _gap_flagged({"x/s": seeds[0], "x/far": far}, models),
        "audit regressed/improved | seeds": lambda: _audit(seeds[0], seeds[1], sound, models) in ("regressed",
                                                                                                 "improved"),
        "audit regressed | far20": lambda: _audit(seeds[0], far, sound, models) == "regressed",
        "label_bug (perm twin) | aa": lambda: _twin_flagged("perm", sound, sound.copy(), None, models),
        "label_bug (perm twin) | seeds": lambda: _twin_flagged("perm", seeds[0], seeds[1], seeds[2], models),
        "label_bug (perm twin) | perm40": lambda: _twin_flagged("perm", seeds[0], moved, seeds[1], models),
        "label_bug (class) | weak": lambda: _class_bug(sound, weak, labels, models),
        "label_bug (class) | class": lambda: _class_bug(sound, dead, labels, models),
        "out_of_ball | inside": lambda: _out_of_ball(rng, sound, models, 0.0),
        "out_of_ball | out10": lambda: _out_of_ball(rng, sound, models, 0.10),
        "eps_unused | weak": lambda: _eps_unused(rng, truth, models, 0.15, (0.47, 1.0)),
        "eps_unused | unused": lambda: _eps_unused(rng, truth, models, 0.30, (0.005, 0.03)),
        "batch_dependence | aa": lambda: _batch(sound, sound * (1 + rng.uniform(-1e-6, 1e-6, sound.shape)), None,
                                                models),
        "batch_dependence | seeds": lambda: _batch(seeds[0], seeds[1], seeds[2], models),
        "batch_dependence | chaos": lambda: _batch(sound, sound * np.where(rng.random(n) < 0.5, 1 + rng.choice([-1, 1], n)
                                                                           * rng.uniform(0.01, 0.08, n), 1.0), None,
                                                   models),
        "batch_dependence | ead": lambda: _batch(sound, sound * np.where(rng.random(n) < 0.35,
                                                                         rng.uniform(1.03, 1.05, n), 1.0), None, models),
        "batch_dependence | rand40": lambda: _batch(seeds[0], seeds[1] * np.where(rng.random(n) < 0.4, 1.3, 1.0),
                                                    seeds[2], models),
        "label_bug (targets ignored) | weak": lambda: _targets(rng, truth, models, ignores=False),
        "label_bug (targets ignored) | ignore": lambda: _targets(rng, truth, models, ignores=True),
        "last_not_best | fixed": lambda: _not_best(rng, sound, models, "fixed", SOUND_FIXED_NOT_BEST),
        "last_not_best | minimal": lambda: _not_best(rng, sound, models, "minimal", 0.005),
        "last_not_best | last58": lambda: _not_best(rng, sound, models, "fixed", 0.58),
        "last_not_best | minimal26": lambda: _not_best(rng, sound, models, "minimal", 0.26),
        "silent_failure | weak": lambda: _silent(rng, sound, models, weak),
        "silent_failure | feeble": lambda: _silent(rng, sound, models, _breaks_easiest(rng, truth, 0.25)),
        "silent_failure | feeble random": lambda: _silent(rng, sound, models, attack_distances(
            rng, truth, fail_rate=0.75, fail_by_difficulty=False)),
        "silent_failure | starved random": lambda: _silent(rng, sound, models, attack_distances(
            rng, truth, fail_rate=0.84, fail_by_difficulty=False)),
        "silent_failure | inert": lambda: _silent(rng, sound, models, np.where(truth > 0, np.inf, 0.0)),
        "silent_failure | no gradient": lambda: _silent(rng, sound, models, weak, backwards=0),
        "budget_overrun | within": lambda: _overrun(rng, sound, models, 0.0),
        "budget_overrun | over5": lambda: _overrun(rng, sound, models, 0.05),
        "nondeterminism | float": lambda: _nondeterministic(sound, sound * (1 + rng.uniform(-1e-6, 1e-6, sound.shape)),
                                                            models),
        "nondeterminism | unseeded": lambda: _nondeterministic(seeds[0], seeds[1], models),
        "nondeterminism | rare5": lambda: _nondeterministic(sound, np.where(rng.random(sound.shape) < 0.05,
                                                                             sound * rng.uniform(1.01, 1.1, sound.shape),
                                                                             sound), models),
        "shift_sensitivity | aa": lambda: _twin_flagged("shift", sound, _float_shift(rng, sound), None, models),
        "shift_sensitivity | sign": lambda: _twin_flagged("shift", sound, np.where(rng.random(sound.shape) < 0.11,
                                                                   sound * rng.uniform(1.1, 1.45, sound.shape),
                                                                   sound), None, models),
        "shift_sensitivity | seeds": lambda: _twin_flagged("shift", seeds[0], seeds[1], seeds[2], models),
        "shift_sensitivity | shift35": lambda: _twin_flagged("shift", sound, _moved(rng, sound, 0.35, 1.3, 1.3),
                                                             None, models),
        "shift_sensitivity | rand40": lambda: _twin_flagged("shift", seeds[0], _moved(rng, seeds[1], 0.4, 1.3, 1.3),
                                                            seeds[2], models),
        "below_exact | float": lambda: _below_exact(rng, truth, models, 0.0),
        "below_exact | under5": lambda: _below_exact(rng, truth, models, 0.05),
        "below_expected_strength | seeds": lambda: _below_strength(models, seeds[0], seeds[1]),
        "below_expected_strength | weak": lambda: _below_strength(models, attack_distances(
            rng, truth, fail_rate=0.3, farther=1.1), sound),
        "below_expected_strength | family starved": lambda: _below_strength(
            models, attack_distances(rng, truth, fail_rate=0.84), attack_distances(rng, truth, fail_rate=0.84), sound),
        "below_expected_strength | starved": lambda: _below_strength(models, attack_distances(
            rng, truth, fail_rate=0.84), sound),
        "below_expected_strength | far3": lambda: _below_strength(models, attack_distances(rng, truth, farther=3.0),
                                                                  sound),
    }
    return {k: f() for k, f in checks.items() if only is None or k in only or k.split(" | ")[0] in only}


def calibrate(reps: int, images: list[int], n_models: list[int], run_dir: str | None = None,
              seed: int = 0, only: set[str] | None = None) -> pd.DataFrame:
    """One row per (rule | scenario, images, models): the share of ``reps`` repetitions where it
    fired (the false-positive rate under a null, the power on a defect). ``only``: the
    "rule | scenario" keys or the rule names to run (all by default)."""
    truth_of = _truth_sampler(run_dir)
    rows = []
    for n in images:
        for m in n_models:
            rng = np.random.default_rng([seed, n, m])
            hits = [one_rep(rng, n, m, truth_of, only) for _ in range(reps)]
            for key in hits[0]:
                rule, scenario = key.split(" | ")[:2]
                rows.append({"rule": rule, "scenario": scenario, "images": n, "models": m,
                             "rate": float(np.mean([h[key] for h in hits])), "reps": reps})
    return pd.DataFrame(rows)


#: (rule, scenario) pairs that measure power (the verdict is right); every other one is a null
POWER = frozenset({("trust exclusion", "far20"), ("tied (equivalence)", "seeds"), ("optimality_gap", "far20"),
                   ("audit regressed", "far20"), ("label_bug (perm twin)", "perm40"), ("label_bug (class)", "class"),
                   ("out_of_ball", "out10"), ("eps_unused", "unused"), ("batch_dependence", "ead"),
                   ("batch_dependence", "rand40"), ("label_bug (targets ignored)", "ignore"),
                   ("last_not_best", "last58"), ("last_not_best", "minimal26"), ("silent_failure", "inert"),
                   ("silent_failure", "no gradient"), ("budget_overrun", "over5"), ("nondeterminism", "unseeded"),
                   ("nondeterminism", "rare5"), ("shift_sensitivity", "shift35"), ("shift_sensitivity", "rand40"),
                   ("below_expected_strength", "starved"), ("below_expected_strength", "far3"),
                   ("below_exact", "under5")})


def as_table(res: pd.DataFrame) -> str:
    """Markdown: rule, scenario, FPR or power, then one column per (images, models)."""
    from real_nulls import POWER as REAL_POWER
    res = res.assign(kind=["power" if (r, s) in POWER | REAL_POWER else "FPR"
                           for r, s in zip(res["rule"], res["scenario"])])
    wide = res.pivot_table(index=["rule", "scenario", "kind"], columns=["images", "models"], values="rate",
                           sort=False)
    head = "| rule | scenario | measures | " + " | ".join(f"{n} img × {m}" for n, m in wide.columns) + " |"
    lines = [head, "|" + "---|" * (3 + len(wide.columns))]
    for (rule, scen, kind), vals in wide.iterrows():
        lines.append(f"| {rule} | {scen} | {kind} | " + " | ".join(f"{v:.2f}" for v in vals) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("run_dir", nargs="?", help="a finished run to resample real per-image tables from")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--images", type=int, nargs="+", default=[16, 64, 256])
    ap.add_argument("--models", type=int, nargs="+", default=[1, 3])
    ap.add_argument("--rules", nargs="+", help='only these rules (e.g. out_of_ball "label_bug (targets ignored)")')
    ap.add_argument("--real", nargs="*", metavar="GROUP",
                    help="real-noise groups (pair, 'pair worst', report, twins; none named: all)")
    ap.add_argument("--part", choices=["held-out", "held-out model", "held-out seed"],
                    help="with --real or --report-wide: draw from this part of the corpus (benchmarks/held_out.py)")
    ap.add_argument("--report-wide", action="store_true",
                    help="P(at least one false defect flag) in reports of K sound implementations (report_wide.py)")
    ap.add_argument("--k", type=int, nargs="+", default=[1, 5, 20, 98], help="with --report-wide: the K to measure")
    ap.add_argument("--held-out", action="store_true",
                    help="the thresholds recomputed on the threshold part, beside the shipped ones (held_out.py)")
    ap.add_argument("--save", action="store_true",
                    help="merge the rows into benchmarks/noise/report_wide.csv, held_out.csv or thresholds.csv")
    args = ap.parse_args(argv)
    if args.report_wide or args.held_out or (args.real is not None and args.part):
        return _held_out_main(args)
    if args.real is not None:
        import real_nulls
        start = time.perf_counter()
        res = real_nulls.calibrate_real(args.reps, args.images, args.models,
                                        groups=tuple(args.real) or tuple(real_nulls.NAMES))
        print(as_table(res))
        print(f"\n{args.reps} repetitions per cell, α = {ALPHA}; {time.perf_counter() - start:.0f} s")
        return 0
    if args.run_dir and not Path(args.run_dir).is_dir():
        print(f"calibration: {args.run_dir} is not a run directory", file=sys.stderr)
        return 2
    start = time.perf_counter()
    res = calibrate(args.reps, args.images, args.models, args.run_dir, only=set(args.rules) if args.rules else None)
    print(as_table(res))
    print(f"\n{args.reps} repetitions per cell, α = {ALPHA}; {time.perf_counter() - start:.0f} s")
    return 0


NOISE = Path(__file__).resolve().parent / "noise"


def _save(df: pd.DataFrame, name: str, keys: list[str]) -> None:
    """Merge ``df`` into ``benchmarks/noise/<name>``: stored rows with the same ``keys`` are replaced."""
    path = NOISE / name
    if path.is_file():
        old = pd.read_csv(path, keep_default_na=False, na_values=[""])
        new_keys = set(map(tuple, df[keys].astype(str).to_numpy()))
        old = old[[tuple(k) not in new_keys for k in old[keys].astype(str).to_numpy()]]
        df = pd.concat([old, df], ignore_index=True)
    df.to_csv(path, index=False, float_format="%.6g")
    print(f"saved {path}")


def _held_out_main(args) -> int:
    """``--report-wide``, ``--held-out`` and ``--real --part``: benchmarks/report_wide.py and
    benchmarks/held_out.py, printed and, with ``--save``, stored beside the corpus."""
    import held_out
    import real_noise
    import real_nulls
    import report_wide
    start = time.perf_counter()
    part = args.part or "all"
    if args.report_wide:
        for n in args.images:
            res, named = report_wide.measure(args.k, args.reps, n, part=args.part)
            res.insert(0, "part", part)
            print(res.to_string(index=False))
            for k, counts in named.items():
                print(f"K = {k}: " + "; ".join(f"{name} ×{c}" for name, c in counts.items()))
            if args.save:
                _save(res, "report_wide.csv", ["part", "K", "images"])
    elif args.held_out:
        c = real_noise.load()
        rows = []
        for p in ("threshold", None):
            t = held_out.thresholds(real_noise.part(c, p)).assign(part=p or "all")
            rows.append(t)
            print(f"{p or 'whole corpus'}:\n{t.to_string(index=False)}")
        print(held_out.split_sizes(c))
        if args.save:
            _save(pd.concat(rows, ignore_index=True), "thresholds.csv", ["part", "threshold"])
    else:
        res = real_nulls.calibrate_real(args.reps, args.images, args.models, groups=tuple(args.real) or
                                        ("report", "split", "batch", "shift"), power=False, part=args.part)
        res.insert(0, "part", part)
        print(res.to_string(index=False))
        if args.save:
            _save(res, "held_out.csv", ["part", "rule", "scenario", "images", "models"])
    print(f"\n{args.reps} repetitions per cell, α = {ALPHA}; {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
