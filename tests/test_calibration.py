"""Calibration, reduced (benchmarks/calibration.py): each verdict's and each flag rule's
false-positive rate under realistic nulls is at most α plus a Monte-Carlo tolerance, and its power
on planted defects reaches a floor. Synthetic per-image tables (fidelity.synthetic); the full table
(100–200 repetitions per cell, 16–256 images) is in fidelity/README.md.

Sized for ``make test`` (about 80 s of CPU in all): 200 repetitions for the cheap trust verdicts,
20 per model count for the flag rules and the audit. With so few repetitions the tolerance is the
exact binomial one: a rule whose true false-positive rate is α exceeds it in at most 1% of
seeds, while a rule that fires on a third of sound attacks cannot pass. The power floors sit
below the measured power at 16 images (README table) by a few binomial standard errors of 20
repetitions; at 16 images the perm twin's power on its planted 40%/30% defect is 0.14–0.22 and a
randomised attack's batch dependence beside its seed twin is barely seen, so those two are
checked where they are measured to work (64 images) or with a low floor.
"""
import os
import sys
from pathlib import Path

import pandas as pd
import pytest
from scipy import stats as sps

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from calibration import POWER, calibrate  # noqa: E402
import real_nulls  # noqa: E402
import real_noise  # noqa: E402

ALPHA = 0.05
#: a null cell at exactly α exceeds its tolerance with at most this chance
TOLERANCE_LEVEL = 0.01


def tolerance(reps: int) -> float:
    """The largest false-positive rate over ``reps`` repetitions that a rule whose true rate is α
    reaches with chance above ``TOLERANCE_LEVEL`` (exact binomial quantile), minus α."""
    return sps.binom.ppf(1 - TOLERANCE_LEVEL, reps, ALPHA) / reps - ALPHA


def _check(res, floors: dict[tuple[str, str], float]):
    assert len(res), "no cell was run"
    for r in res.itertuples(index=False):
        if (r.rule, r.scenario) in POWER:
            assert r.rate >= floors[(r.rule, r.scenario)], r
        else:
            assert r.rate <= ALPHA + tolerance(r.reps), r


def test_tolerance_is_tight_enough_to_fail():
    """The check itself: a rule firing on 30% of nulls fails it at 20 repetitions."""
    assert ALPHA + tolerance(20) < 0.3 and ALPHA + tolerance(200) < 0.1


FAST = {"trust exclusion | aa", "trust exclusion | seeds", "trust exclusion | far20",
        "tied (equivalence) | seeds", "tied (equivalence) | far20"}


def test_trust_verdicts_fpr_and_power():
    """At 16 images "tied" is never shown (both endpoints must be inside their margins, and 16
    images cannot bound a failure-rate difference within 5 points): its power is checked at 64."""
    res = calibrate(200, [16], [1, 3], only=FAST - {"tied (equivalence) | seeds"})
    _check(res, {("trust exclusion", "far20"): 0.8})
    tied = calibrate(50, [64], [1, 3], only={"tied (equivalence) | seeds"})
    _check(tied, {("tied (equivalence)", "seeds"): 0.8})


SLOW = {"optimality_gap | seeds", "optimality_gap | far20", "audit regressed/improved | seeds",
        "audit regressed | far20", "label_bug (perm twin) | aa", "label_bug (perm twin) | seeds",
        "label_bug (class) | weak", "label_bug (class) | class"}
DEFECT_RULES = {"out_of_ball | inside", "out_of_ball | out10", "eps_unused | weak", "eps_unused | unused",
                "batch_dependence | aa", "batch_dependence | seeds", "batch_dependence | chaos", "batch_dependence | ead",
                "label_bug (targets ignored) | weak", "label_bug (targets ignored) | ignore"}


@pytest.mark.parametrize("models", [1, pytest.param(3, marks=pytest.mark.slow)])
def test_flag_rules_and_audit_fpr_and_power(models):
    res = calibrate(20, [16], [models], only=SLOW)
    _check(res, {("optimality_gap", "far20"): 0.8, ("audit regressed", "far20"): 0.8,
                 ("label_bug (class)", "class"): 0.2})


@pytest.mark.parametrize("models", [1, pytest.param(3, marks=pytest.mark.slow)])
def test_defect_rules_fpr_and_power(models):
    """At 16 images a deterministic batch dependence on 35% of them (about 6 differing images)
    is found in 0.39–0.42 of the repetitions (0.96/0.86 before its split twin's differences had
    to lean one way, which the real noise's chaotic C&W L2 needs, twins.one_way_p); at 64, always."""
    res = calibrate(20, [16], [models], only=DEFECT_RULES)
    assert set(res["rule"] + " | " + res["scenario"]) == DEFECT_RULES
    _check(res, {("out_of_ball", "out10"): 0.8, ("eps_unused", "unused"): 0.8, ("batch_dependence", "ead"): 0.25,
                 ("label_bug (targets ignored)", "ignore"): 0.8})
    ead = calibrate(20, [64], [models], only={"batch_dependence | ead", "batch_dependence | chaos"})
    _check(ead, {("batch_dependence", "ead"): 0.9})


def test_twin_rules_against_the_seed_twin_find_their_defects_at_64_images():
    """The perm twin's label bug and a randomised attack's batch dependence, both judged against
    a seed twin, where the README table shows them found (64 images, 3 models)."""
    res = calibrate(20, [64], [3], only={"label_bug (perm twin) | seeds", "label_bug (perm twin) | perm40",
                                        "batch_dependence | seeds", "batch_dependence | rand40"})
    _check(res, {("label_bug (perm twin)", "perm40"): 0.5, ("batch_dependence", "rand40"): 0.6})


JOB_RULES = {"last_not_best | fixed", "last_not_best | minimal", "last_not_best | last58",
             "last_not_best | minimal26", "silent_failure | weak", "silent_failure | feeble",
             "silent_failure | feeble random", "silent_failure | inert", "silent_failure | no gradient",
             "budget_overrun | within", "budget_overrun | over5", "nondeterminism | float",
             "nondeterminism | unseeded", "nondeterminism | rare5", "shift_sensitivity | aa",
             "shift_sensitivity | sign", "shift_sensitivity | seeds", "below_expected_strength | seeds",
             "below_expected_strength | weak", "below_expected_strength | starved",
             "below_expected_strength | family starved",
             "below_expected_strength | far3", "below_exact | float", "below_exact | under5"}


@pytest.mark.parametrize("models", [1, pytest.param(3, marks=pytest.mark.slow)])
def test_job_rules_shift_and_strength_fpr_and_power(models):
    """last_not_best, silent_failure, budget_overrun, nondeterminism, shift_sensitivity's nulls and
    below_expected_strength at 16 images. The rare defects (5% of the cases) are floors near the
    measured power (0.40–0.56 at 16 × 1), as is the minimal attack's 26% (0.75)."""
    res = calibrate(20, [16], [models], only=JOB_RULES)
    assert set(res["rule"] + " | " + res["scenario"]) == JOB_RULES
    _check(res, {("last_not_best", "last58"): 0.8, ("last_not_best", "minimal26"): 0.4,
                 ("silent_failure", "inert"): 0.9, ("silent_failure", "no gradient"): 0.9,
                 ("budget_overrun", "over5"): 0.15, ("nondeterminism", "unseeded"): 0.9,
                 ("nondeterminism", "rare5"): 0.2, ("below_expected_strength", "starved"): 0.8,
                 ("below_expected_strength", "far3"): 0.8, ("below_exact", "under5"): 0.2})


def test_shift_sensitivity_finds_its_defects_at_64_images():
    """A deterministic attack 30% farther on 35% of the images of its shift twin, and a randomised
    one beside its seed twin, where the README table shows them found. The deterministic one is
    judged against the 26% null that sound one-step FGMs need at 512 images (fidelity/README.md,
    "Null rates that hold at every n"; 15% before): at 64 images it is found in about a third of
    the repetitions (0.94 before), at 256 in most; the real shift defects differ on 62–100%."""
    res = calibrate(20, [64], [1], only={"shift_sensitivity | shift35", "shift_sensitivity | rand40",
                                        "shift_sensitivity | sign", "shift_sensitivity | seeds"})
    _check(res, {("shift_sensitivity", "shift35"): 0.15, ("shift_sensitivity", "rand40"): 0.6})
    _check(calibrate(20, [256], [1], only={"shift_sensitivity | shift35"}), {("shift_sensitivity", "shift35"): 0.6})


# ------------------------------------------------------------------ real noise (benchmarks/noise/corpus.parquet)
#: the opt-in long run: every null at ``LONG_REPS`` repetitions per cell
LONG = os.environ.get("ATTACKAUDIT_LONG_CALIBRATION") == "1"
LONG_REPS = 200
#: level of the one-sided exact test "the false-positive rate is above α"
LONG_LEVEL = 0.05


def above_alpha(fired: int, reps: int, level: float = LONG_LEVEL) -> bool:
    """One-sided exact binomial test of H0 "false-positive rate ≤ α": P(X ≥ fired | reps, α) < level."""
    return fired > 0 and sps.binom.sf(fired - 1, reps, ALPHA) < level


def test_the_long_run_tells_alpha_from_twice_alpha():
    """At ``LONG_REPS`` repetitions the exact test passes a rule at α with probability ≥ 1 − level
    and fails one at 2α with probability ≥ 0.85 (16 or more of 200 fire: 0.044 at α, 0.857 at 2α)."""
    k = next(k for k in range(LONG_REPS + 1) if above_alpha(k, LONG_REPS))
    assert sps.binom.sf(k - 1, LONG_REPS, ALPHA) <= LONG_LEVEL
    assert sps.binom.sf(k - 1, LONG_REPS, 2 * ALPHA) >= 0.85
    assert not above_alpha(k - 1, LONG_REPS) and above_alpha(k, LONG_REPS)


#: real-noise nulls the rules fail (fidelity/README.md, "Real noise"): an open finding, not a
#: calibrated cell, run but not asserted here, and the long run checks that its worst still fails,
#: so that a fix of the rule (or of the null) is noticed and the README updated. Empty: the split
#: twin's worst (adv_lib's ALMA L1, whose 44 differing images of 125 lean 27 to 17 by chance) failed
#: at 64 resampled images (0.56-0.58) while the resample kept that chance lean as the truth; under
#: the exchangeability null (real_nulls.exchange) it fires in 0.00-0.02 of 200
REAL_OPEN: set[tuple[str, str]] = set()


def _check_real(res, power_floors: dict[tuple[str, str], float] | None = None, level: float = LONG_LEVEL):
    assert len(res), "no real-noise cell was run"
    for r in res.itertuples(index=False):
        if (r.rule, r.scenario) in REAL_OPEN:
            continue
        if (r.rule, r.scenario) in real_nulls.POWER:
            if power_floors and (r.rule, r.scenario) in power_floors:
                assert r.rate >= power_floors[(r.rule, r.scenario)], r
        else:
            assert not above_alpha(r.fired, r.evaluated, level), r


def test_the_split_null_exchanges_batched_and_alone_per_image_and_keeps_each_row_s_place():
    """real_nulls.exchange: on the swapped images the batched job's row carries the one-per-call
    result and the reverse; model, sample and job names stay, and swapping twice gives back the
    resampled rows (the null keeps the real differences and drops only their side)."""
    import numpy as np

    R = real_nulls.resampler()
    impl, norm = real_nulls.pools()["split_worst"]
    a, b = real_noise.Job(impl, norm, "digits-mlp"), real_noise.Job(impl, norm, "digits-mlp~split")
    images = R.common([a, b])[:12]
    tables = {a: R.rows(a, images), b: R.rows(b, images)}
    before = {k: t.copy() for k, t in tables.items()}
    swap = np.arange(12) % 3 == 0
    real_nulls.exchange(tables, a, b, swap)
    for col in ("best_distance", "best_margin", "status"):
        assert tables[a][col][swap].tolist() == before[b][col][swap].tolist()
        assert tables[b][col][swap].tolist() == before[a][col][swap].tolist()
        assert tables[a][col][~swap].tolist() == before[a][col][~swap].tolist()
    for col in ("model", "sample", "job_id"):
        assert tables[a][col].tolist() == before[a][col].tolist()
        assert tables[b][col].tolist() == before[b][col].tolist()
    real_nulls.exchange(tables, a, b, swap)
    for k in tables:
        pd.testing.assert_frame_equal(tables[k], before[k])


def test_real_corpus_is_there_and_measured():
    """The stored corpus holds two seeds of randomised built-ins on three models, ≥ 64 images, and
    its measurements are what the calibration's nulls are drawn from."""
    c = real_noise.load()
    assert set(real_noise.BASE_MODELS) <= set(c["base"]) and c["sample"].nunique() >= 64
    m = real_noise.measure(c)
    assert len(m["seed"]) >= 8 and (m["seed"]["both_broke"] > 0).all()
    pools = real_nulls.pools()
    assert pools["seed"] and pools["not_best_worst"] and pools["fixed"]
    # the batch twins' rows and the base rows they are judged against carry best_margin (the
    # boundary exemption reads both sides), and the batch-composition twin has every base spec
    mlp = c[c["base"] == "digits-mlp"]
    for twin in ("", "split", "batch"):
        assert mlp.loc[mlp["twin"] == twin, "best_margin"].notna().any(), twin
    specs = {t: set(zip(g["implementation"], g["norm"])) for t, g in mlp.groupby("twin")}
    assert specs["batch"] == specs[""] and len(m["batch"]) == len(specs[""])
    assert pools["batch"] and pools["batch_worst"] and pools["split"]
    # every deterministic built-in batched and one image per call on two models, 64 images each
    split = c[c["twin"] == "split"]
    assert set(real_nulls.SPLIT_MODELS) <= set(split["base"]) and len(real_nulls.SPLIT_MODELS) >= 2
    assert split.groupby("base", observed=True)["sample"].nunique().min() >= 64
    assert c.loc[(c["base"] == "digits-cnn") & (c["twin"].isin(["", "split"])), "best_margin"].notna().any()


def test_real_noise_fast_subset():
    """Two repetitions of every real-noise group at 16 images on one model (``make test``): each
    null may fire at most once (two of two has p = 0.0025 at α)."""
    res = real_nulls.calibrate_real(2, [16], [1], power=False)
    cells = set(zip(res["rule"], res["scenario"]))
    assert REAL_OPEN <= cells
    assert {("batch_dependence", "real split"), ("batch_dependence", "real split, worst"), ("batch_dependence", "real batch"),
            ("batch_dependence", "real batch, worst")} <= cells
    assert {"pair", "report"} <= {g for g, names in real_nulls.NAMES.items()
                                  if any((r, s) in set(zip(res["rule"], res["scenario"])) for r, s in names.values())}
    _check_real(res, level=0.01)


def test_real_defect_last_iterate_is_found():
    """The corpus's foolbox L1 PGD returns its last iterate (a traced last_not_best defect): flags
    finds it on 64 real images; the worst sound fixed-ε attack beside it is left alone."""
    from attackaudit.fidelity import flags
    R, pools = real_nulls.resampler(), real_nulls.pools()
    bad = ("foolbox/L1ProjectedGradientDescentAttack", "l1")
    sound = pools["not_best_worst"]["fixed"]
    jobs = [real_noise.Job(*bad, "digits-mlp"), real_noise.Job(*sound, "digits-mlp")]
    images = R.common(jobs)[:64]
    found = flags(pd.concat([R.rows(j, images) for j in jobs], ignore_index=True))
    lnb = found[found["flag"] == "last_not_best"]
    assert bad[0] in set(lnb["implementation"])
    assert sound[0] not in set(lnb["implementation"])


@pytest.mark.skipif(not LONG, reason="set ATTACKAUDIT_LONG_CALIBRATION=1 (about an hour of CPU)")
@pytest.mark.parametrize("group", list(real_nulls.NAMES))
def test_long_real_noise_nulls(group):
    res = real_nulls.calibrate_real(LONG_REPS, [16, 64], [1, 3], groups=(group,))
    _check_real(res, {("tied (equivalence)", "real seeds"): 0.3, ("trust exclusion", "real far20"): 0.8})
    worst = res[[(r, sc) in REAL_OPEN and sc.endswith("worst") for r, sc in zip(res["rule"], res["scenario"])]]
    for r in worst.itertuples(index=False):  # still an open finding: see REAL_OPEN
        assert above_alpha(r.fired, r.evaluated), r


@pytest.mark.skipif(not LONG, reason="set ATTACKAUDIT_LONG_CALIBRATION=1 (about an hour of CPU)")
@pytest.mark.parametrize("models", [1, 3])
def test_long_synthetic_nulls(models):
    """Every synthetic null at ``LONG_REPS`` repetitions, 16 and 64 images."""
    res = calibrate(LONG_REPS, [16, 64], [models])
    res = res[[(r, s) not in POWER and s != "starved random" for r, s in zip(res["rule"], res["scenario"])]]
    for r in res.itertuples(index=False):
        assert not above_alpha(round(r.rate * r.reps), r.reps), r


# ------------------------------------------------------------------ held-out calibration (issue 48, item 5)
import held_out  # noqa: E402

#: held-out cells the rules are known to fail (fidelity/README.md, "Held-out calibration"): stored
#: and shown, checked to fail still, so that the day a rule or a null changes the list must shrink.
#: None now: ART's ElasticNet L1 (10 of 100 at 64 held-out images against the minimal attacks' 5%
#: null) is judged against EAD's own null (flags.LAST_NOT_BEST_FAMILY_NULL_RATE)
HELD_OUT_OPEN: set[tuple[str, str, str, int]] = set()


def test_held_out_split_is_a_fixed_hash_disjoint_and_covers_the_corpus():
    """The threshold and held-out halves are a fixed function of the sample id (SHA-256, not the
    rows), disjoint, and together the corpus's images; the held-out model sets no threshold."""
    import hashlib

    import numpy as np

    c = real_noise.load()
    ids = np.unique(c["sample"].to_numpy())
    ho = real_noise.held_out(ids)
    again = [hashlib.sha256(f"{real_noise.SPLIT_SALT}:{int(s)}".encode()).digest()[0] < 128 for s in ids]
    assert ho.tolist() == again
    assert 20 <= ho.sum() <= len(ids) - 20
    parts = {p: real_noise.part(c, p) for p in real_noise.PARTS}
    thr, out = set(parts["threshold"]["sample"]), set(parts["held-out"]["sample"])
    assert thr and out and not thr & out and thr | out == set(ids)
    assert set(parts["threshold"]["base"]) == set(real_noise.THRESHOLD_MODELS) == set(parts["held-out"]["base"])
    assert real_noise.HELD_OUT_MODEL not in real_noise.THRESHOLD_MODELS
    assert set(parts["held-out model"]["base"]) == {real_noise.HELD_OUT_MODEL}
    # the pools (and worst specs) a held-out run draws from are measured on the threshold part
    assert real_nulls.resampler(part="held-out").base_models == real_noise.THRESHOLD_MODELS


def test_stored_held_out_rates_are_under_the_bound():
    """benchmarks/noise/held_out.csv (``calibration.py --real ... --part P --save``): every flag
    rule's real null on the held-out images and on the held-out model, with pools and worst specs
    from the threshold part. A cell fails the bound when the one-sided exact test rejects "false-
    positive rate ≤ α" at level 0.05 (``above_alpha``, as the long run)."""
    t = pd.read_csv(held_out.STORED)
    assert {"held-out", "held-out model", "held-out seed"} <= set(t["part"])
    for part in ("held-out", "held-out model", "held-out seed"):
        rules = set(t.loc[t["part"] == part, "rule"])
        assert {"last_not_best", "silent_failure", "eps_unused", "out_of_ball", "label_bug (class)",
                "optimality_gap"} <= rules, part
    assert {"batch_dependence", "shift_sensitivity"} <= set(t.loc[t["part"] == "held-out", "rule"])
    for r in t.itertuples(index=False):
        if (r.rule, r.scenario) in real_nulls.POWER:
            continue
        if (r.part, r.rule, r.scenario, r.images) in HELD_OUT_OPEN:
            assert above_alpha(int(r.fired), int(r.evaluated)), f"{r} passes now: take it off HELD_OUT_OPEN"
            continue
        assert r.evaluated >= 50 and not above_alpha(int(r.fired), int(r.evaluated)), r


def test_the_held_out_seed_part_exchanges_each_spec_with_its_seed_twin():
    """``held-out seed``: the held-out images with a randomised spec's two seeds exchanged (the
    thresholds were set on the first seed), deterministic specs as they were."""
    import real_noise as rn

    c = rn.load()
    ho, seed = rn.part(c, "held-out"), rn.part(c, "held-out seed")
    assert len(seed) == len(ho)
    key = ["base", "implementation", "norm", "sample"]
    twin = ho[ho["twin"] == "seed"][key + ["best_distance"]]
    now_base = seed[seed["twin"] == ""].merge(twin, on=key, suffixes=("", "_seed"))
    assert len(now_base) == len(twin) > 0
    assert (now_base["best_distance"].fillna(-1) == now_base["best_distance_seed"].fillna(-1)).all()
    assert set(seed.loc[seed["twin"] == "", "model"]) == set(ho.loc[ho["twin"] == "", "model"])
