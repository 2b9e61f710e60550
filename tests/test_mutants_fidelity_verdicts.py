"""What mutation testing asks of the verdict files fidelity/paired_binary.py, fidelity/diff.py and
fidelity/flags.py (docs/testing.md): the failure endpoint's statistics against independent
references (a numeric restricted maximum likelihood, scipy's binomial test, the documented planning
rule and a simulation of its power), the release audit's verdict fields and reason texts on small
constructed runs, and the evidence texts and thresholds of the flags users read.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import optimize, stats

from attackaudit.fidelity import stats as fidelity_stats
from attackaudit.fidelity.paired_binary import (FAILURE_MARGIN, beyond_p, discordant, estimate, images_needed,
                                                mcnemar_p, min_beyond_p, score_z, within_p)
from attackaudit.fidelity.stats import ALPHA
from attackaudit.fidelity.flags import LAST_NOT_BEST_NULL_RATE


@pytest.fixture(autouse=True)
def computed_not_cached():
    """``paired_comparison`` caches results by input: each test computes its own (under mutmut a
    result cached by the unmutated parent would stand in for the mutant)."""
    fidelity_stats._PAIRED_CACHE.clear()
    yield
    fidelity_stats._PAIRED_CACHE.clear()


# =========================================================================== paired_binary.py
def shares(x10, x01, n, both_fail=0):
    """Per-image failure shares with ``x10`` images only ``b`` failed (``a`` broke them), ``x01``
    images only ``a`` failed, ``both_fail`` images both failed, the rest broken by both."""
    fa = np.r_[np.zeros(x10), np.ones(x01), np.ones(both_fail), np.zeros(n - x10 - x01 - both_fail)]
    fb = np.r_[np.ones(x10), np.zeros(x01), np.ones(both_fail), np.zeros(n - x10 - x01 - both_fail)]
    return fa, fb


def tango_reference(x10, x01, n, delta0):
    """Tango's score z with the restricted MLE found numerically: maximise the multinomial
    likelihood of (x10, x01, rest) under p10 − p01 = delta0, then
    z = (x10 − x01 − n·delta0) / sqrt(n·(p10 + p01 − delta0²))."""
    rest = n - x10 - x01
    lo, hi = max(0.0, -delta0), (1 - delta0) / 2

    def nll(p01):
        p10 = p01 + delta0
        out = 0.0
        for count, p in ((x10, p10), (x01, p01), (rest, 1 - p10 - p01)):
            if count:
                out -= count * math.log(max(p, 1e-300))
        return out

    p01 = optimize.minimize_scalar(nll, bounds=(lo + 1e-12, hi - 1e-12), method="bounded",
                                   options={"xatol": 1e-13}).x
    var = n * (2 * p01 + delta0 - delta0 ** 2)
    return (x10 - x01 - n * delta0) / math.sqrt(var)


@pytest.mark.parametrize("x10, x01, n, delta0", [
    (8, 2, 50, 0.1), (8, 2, 50, -0.1), (3, 9, 40, 0.05), (3, 9, 40, -0.05), (20, 1, 60, 0.2),
    (0, 6, 30, -0.05), (5, 0, 30, 0.05), (12, 4, 100, 0.0), (0.3, 0.1, 1, 0.0), (0.5, 0.25, 2, 0.05)])
def test_the_score_z_is_tango_s_restricted_likelihood_statistic(x10, x01, n, delta0):
    assert float(score_z(x10, x01, n, delta0)) == pytest.approx(tango_reference(x10, x01, n, delta0), rel=1e-6)


def test_the_score_z_is_vectorised_and_zero_without_data_or_variance():
    z = score_z(np.array([8.0, 3.0, 0.0, 2.0]), np.array([2.0, 9.0, 0.0, 1.0]), np.array([50.0, 40.0, 30.0, 0.0]), 0.05)
    assert z.shape == (4,)
    assert z[:2].tolist() == pytest.approx([tango_reference(8, 2, 50, 0.05), tango_reference(3, 9, 40, 0.05)], rel=1e-6)
    # no discordant image tested at Δ₀ = 0.05: the restricted MLE has p01 = 0 and p10 = 0.05, z = −n·Δ₀/sqrt(...)
    assert z[2] == pytest.approx(-30 * 0.05 / math.sqrt(30 * (0.05 - 0.05 ** 2)))
    assert z[3] == 0.0  # no images
    assert float(score_z(0.0, 0.0, 50.0, 0.0)) == 0.0  # variance 0 at Δ₀ = 0
    assert float(score_z(1.0, 0.0, 1.0, 0.0)) == pytest.approx(1.0)  # one image, n = 1 counts
    # a null of Δ₀ = 1 (every image broken by a alone) leaves no variance: z = 0, not the raw difference
    assert float(score_z(3.0, 0.0, 5.0, 1.0)) == 0.0


def test_discordant_counts_fractional_shares_in_each_direction():
    x10, x01, n = discordant([0.0, 0.5, 1.0, 0.25, 1.0], [1.0, 0.0, 1.0, 0.75, 0.5])
    assert (x10, x01, n) == (1.5, 1.0, 5) and isinstance(n, int)
    assert discordant([], []) == (0.0, 0.0, 0)
    assert estimate([0.0, 0.5, 1.0, 0.25, 1.0], [1.0, 0.0, 1.0, 0.75, 0.5]) == pytest.approx((2.75 - 3.25) / 5)
    assert estimate([1.0, 1.0], [0.0, 1.0]) == 0.5
    assert estimate([], []) == 0.0


def test_mcnemar_p_is_the_exact_binomial_test_of_the_discordant_images():
    fa, fb = shares(7, 2, 30)
    assert mcnemar_p(fa, fb) == pytest.approx(stats.binomtest(7, 9, 0.5).pvalue)
    assert mcnemar_p(fb, fa) == pytest.approx(stats.binomtest(2, 9, 0.5).pvalue)
    # fractional shares: an image counts as discordant whenever the shares differ, the sign decides
    assert mcnemar_p([0.0, 0.5, 0.5, 0.5, 1.0], [0.5, 1.0, 1.0, 1.0, 1.0]) == pytest.approx(stats.binomtest(4, 4).pvalue)
    assert mcnemar_p([1.0, 0.0], [1.0, 0.0]) == 1.0
    assert mcnemar_p(*shares(1, 0, 10)) == 1.0


@pytest.mark.parametrize("x10, x01, n", [(30, 0, 100), (25, 5, 100), (14, 2, 80)])
def test_beyond_p_doubles_the_one_sided_score_p_at_the_margin_in_the_estimate_s_direction(x10, x01, n):
    fa, fb = shares(x10, x01, n, both_fail=3)
    p = beyond_p(fa, fb)
    assert p == pytest.approx(2 * stats.norm.sf(tango_reference(x10, x01, n, FAILURE_MARGIN)), rel=1e-5)
    assert p < 1
    back = beyond_p(fb, fa)  # a failed more: the lower tail at −margin
    assert back == pytest.approx(2 * stats.norm.cdf(tango_reference(x01, x10, n, -FAILURE_MARGIN)), rel=1e-5)
    assert back == pytest.approx(p, rel=1e-6)
    assert beyond_p(fa, fb, margin=0.1) == pytest.approx(2 * stats.norm.sf(tango_reference(x10, x01, n, 0.1)), rel=1e-5)


def test_beyond_p_is_one_inside_the_margin_and_without_images():
    assert beyond_p(*shares(8, 4, 100)) == 1.0 and beyond_p(*shares(4, 8, 100)) == 1.0  # |Δ̂| = 4 points
    assert beyond_p([], []) == 1.0
    assert beyond_p(*shares(1, 0, 1)) < 1.0  # one image, one discordance: Δ̂ = 100 points


def test_the_smallest_beyond_p_puts_every_discordant_image_in_one_direction():
    fa, fb = shares(9, 6, 100)
    assert min_beyond_p(fa, fb) == pytest.approx(2 * stats.norm.sf(tango_reference(15, 0, 100, FAILURE_MARGIN)), rel=1e-5)
    assert min_beyond_p(*shares(5, 0, 100)) == 1.0  # 5 of 100 cannot pass 5 points
    assert min_beyond_p(*shares(6, 0, 100)) < 1.0
    assert min_beyond_p([], []) == 1.0


@pytest.mark.parametrize("x10, x01, n", [(3, 1, 200), (1, 3, 200), (10, 10, 300), (0, 0, 120)])
def test_within_p_is_the_larger_of_the_two_one_sided_score_tests(x10, x01, n):
    fa, fb = shares(x10, x01, n)
    lower = stats.norm.sf(tango_reference(x10, x01, n, -FAILURE_MARGIN))
    upper = stats.norm.cdf(tango_reference(x10, x01, n, FAILURE_MARGIN))
    assert within_p(fa, fb) == pytest.approx(max(lower, upper), rel=1e-5)
    assert within_p(fa, fb, margin=0.1) == pytest.approx(max(stats.norm.sf(tango_reference(x10, x01, n, -0.1)),
                                                             stats.norm.cdf(tango_reference(x10, x01, n, 0.1))), rel=1e-5)
    assert within_p([], []) == 1.0


def planned_images(x10, x01, n, alpha, power=0.8, margin=FAILURE_MARGIN):
    """The documented planning rule, from the counts: the truth planned for is the one-sided 80%
    confidence bound of |Δ| nearer the margin (beyond it) or farther from 0 (inside), the
    discordance rate its 80% upper bound (exact, 1 − 0.2^(1/n), at zero discordant images); the
    images are those of the score test at that truth: (z_α σ₀ + z_β σ₁)² / (Δ − m)²; with no
    discordant image at all, the size at which none shows equivalence."""
    diff, disc = (x10 - x01) / n, (x10 + x01) / n
    z80 = stats.norm.ppf(0.8)
    se = math.sqrt(max(disc - diff ** 2, 0.0) / n)
    disc_hi = max(disc + z80 * math.sqrt(disc * (1 - disc) / n), 1 - 0.2 ** (1 / n))
    z_beta = stats.norm.ppf(power)
    if abs(diff) > margin:
        truth = abs(diff) - z80 * se
        if truth <= margin:
            return math.inf
        s0 = math.sqrt(max(disc_hi, margin) - margin ** 2)
        s1 = math.sqrt(max(disc_hi - truth ** 2, 1e-12))
        return math.ceil((stats.norm.ppf(1 - alpha / 2) * s0 + z_beta * s1) ** 2 / (truth - margin) ** 2)
    if x10 + x01 == 0:  # no discordant image: where none shows equivalence, z²(1 − m)/m
        return math.ceil(stats.norm.ppf(1 - alpha) ** 2 * (1 - margin) / margin)
    truth = abs(diff) + z80 * se
    if truth >= margin:
        return math.inf
    return math.ceil((stats.norm.ppf(1 - alpha) + z_beta) ** 2 * (max(disc_hi, margin) - margin ** 2)
                     / (margin - truth) ** 2)


@pytest.mark.parametrize("x10, x01, n, alpha, power, margin", [
    (80, 0, 200, 0.05, 0.8, 0.05), (40, 0, 200, 0.05, 0.8, 0.05), (50, 10, 200, 0.01, 0.9, 0.05),
    (10, 50, 200, 0.05, 0.8, 0.1), (0, 0, 200, 0.05, 0.8, 0.05), (0, 0, 40, 0.05, 0.9, 0.05),
    (2, 1, 300, 0.05, 0.8, 0.05), (60, 55, 400, 0.05, 0.8, 0.05), (1, 3, 500, 0.01, 0.7, 0.05),
    (0, 0, 20, 0.05, 0.8, 0.05)])
def test_images_needed_follows_the_documented_planning_rule(x10, x01, n, alpha, power, margin):
    fa, fb = shares(x10, x01, n)
    assert images_needed(fa, fb, alpha, power, margin) == planned_images(x10, x01, n, alpha, power, margin)


def test_images_needed_is_inf_when_the_planning_bound_reaches_the_margin():
    assert images_needed(*shares(12, 0, 200), ALPHA) == math.inf  # 6 points, the 80% bound under 5
    assert images_needed(*shares(9, 0, 200), ALPHA) == math.inf  # 4.5 points, the bound above 5
    assert images_needed([], [], ALPHA) == math.inf
    # the bound exactly at the margin: Δ̂ = 5 points with no spread is neither beyond nor inside it
    assert images_needed(*shares(10, 0, 200), ALPHA, margin=0.05) == math.inf


def test_images_needed_gives_the_promised_power_at_the_planned_truth():
    """Simulate the beyond-the-margin score test at the projected sample size and the truth it plans
    for (|Δ| at its 80% bound nearer the margin, the discordance rate at its 80% upper bound): it
    rejects with about the planned power; at half the images clearly less often."""
    x10, x01, n = 50, 10, 200
    need = int(images_needed(*shares(x10, x01, n), ALPHA))
    z80 = stats.norm.ppf(0.8)
    diff, disc = (x10 - x01) / n, (x10 + x01) / n
    truth = diff - z80 * math.sqrt((disc - diff ** 2) / n)
    disc_hi = disc + z80 * math.sqrt(disc * (1 - disc) / n)
    p10, p01 = (disc_hi + truth) / 2, (disc_hi - truth) / 2
    rng = np.random.default_rng(0)

    def power(m):
        counts = rng.multinomial(m, [p10, p01, 1 - p10 - p01], size=4000)
        z = score_z(counts[:, 0], counts[:, 1], m, FAILURE_MARGIN)
        return float(np.mean(((counts[:, 0] - counts[:, 1]) / m > FAILURE_MARGIN) & (2 * stats.norm.sf(z) < ALPHA)))

    assert 0.74 < power(need) < 0.9
    assert power(need // 2) < 0.6


# =================================================================================== diff.py
from attackaudit.fidelity.diff import DIFF_COLUMNS, diff, weigh  # noqa: E402
from attackaudit.fidelity.equivalence import pair_test, pair_values  # noqa: E402
from attackaudit.fidelity.sample_size import images_to_decide  # noqa: E402
from attackaudit.fidelity.synthetic import job_rows, table  # noqa: E402
from attackaudit.fidelity import FLAG_COLUMNS  # noqa: E402


def new_against_old(factor=0.6, seed=5):
    """``equivalence.pair_test`` of a new run against an old one on 30 images: the new one ``factor``
    times the old distance on 25, it alone broke 2, the old one alone broke 3."""
    old = np.random.default_rng(seed).uniform(0.2, 0.6, 30)
    new = old * factor
    new[:3] = np.inf
    old[3:5] = np.inf
    return pair_test(pair_values(new[None], old[None]))


def test_weigh_counts_images_either_run_broke_alone_and_weighs_a_large_change_more():
    res = new_against_old()
    assert (res["wins_a"], res["broke_only_a"], res["wins_b"], res["broke_only_b"]) == (25, 2, 0, 3)
    verdict, reason, score = weigh(res, "different", 0.003, (0.5, 0.55), set(), set(), 30, 30, "")
    assert (verdict, score) == ("improved", 2)
    assert reason.startswith("ξ 0.50 → 0.55, 27 better / 3 worse images (new better on the robustness curve")
    assert "adjusted p = 0.003" in reason and "; new:" not in reason and "rows that ran in both" not in reason
    # ξ moved by at least LARGE_DELTA: the change weighs as much as a crash
    assert weigh(res, "different", 0.003, (0.5, 0.625), set(), set(), 30, 30, "")[2] == 3
    assert weigh(res, "different", 0.003, (0.625, 0.5), set(), set(), 30, 30, "")[2] == 3
    assert weigh(res, "different", 0.003, (0.0, 0.1), set(), set(), 30, 30, "")[2] == 3  # exactly LARGE_DELTA
    assert weigh(res, "different", 0.003, (float("nan"), 0.9), set(), set(), 30, 30, "")[2] == 2
    assert weigh(res, "different", 0.003, (0.9, float("nan")), set(), set(), 30, 30, "")[2] == 2
    worse = new_against_old(factor=1.6)
    assert worse["direction"] > 0
    assert weigh(worse, "different", 0.003, (0.5, 0.55), set(), set(), 30, 30, "")[0::2] == ("regressed", -2)


def test_weigh_scores_flags_by_severity_lists_new_ones_and_skips_relative_flags():
    res = new_against_old()
    verdict, reason, score = weigh(res, "equivalent", 0.9, (0.5, 0.5), {"crash", "optimality_gap", "nondeterminism"},
                                   {"last_not_best", "below_expected_strength"}, 25, 30, "")
    assert score == 1 - 3 - 1 and verdict == "regressed"
    assert reason.startswith("last_not_best gone, ξ 0.50 → 0.50 on the 25 of 30 (model, image) rows that ran in "
                             "both, 27 better / 3 worse images (")
    assert reason.endswith("; new: crash, nondeterminism")
    verdict, reason, score = weigh(res, "equivalent", 0.9, (0.5, 0.5), set(), {"crash", "timeout"}, 30, 30, "")
    assert (verdict, score) == ("improved", 6) and reason.startswith("crash gone, timeout gone, ξ")


def test_weigh_calls_material_evidence_both_ways_mixed():
    res = new_against_old()
    verdict, reason, score = weigh(res, "different", 0.003, (0.5, 0.55), {"crash"}, set(), 30, 30, "")
    assert (verdict, score) == ("mixed", -1) and reason.startswith("mixed: ξ 0.50 → 0.55")
    both_ways = {**res, "mixed": True}
    assert weigh(both_ways, "different", 0.003, (0.5, 0.8), set(), set(), 30, 30, "")[0::2] == ("mixed", 0)
    assert weigh(res, "equivalent", 0.9, (0.5, 0.5), {"last_not_best"}, {"budget_overrun"}, 30, 30, "")[0::2] == \
        ("mixed", 0)
    assert weigh(res, "equivalent", 0.9, (0.5, 0.5), {"last_not_best"}, set(), 30, 30, "")[0::2] == ("regressed", -1)


def test_weigh_an_undecided_change_is_inconclusive_with_what_would_decide_it():
    res = new_against_old()
    verdict, reason, score = weigh(res, "inconclusive", 0.3, (0.5, 0.5), set(), set(), 30, 30,
                                   "rerun with --samples 99")
    assert (verdict, score) == ("inconclusive", 0)
    assert reason.endswith(": rerun with --samples 99)") and "neither shown different nor equivalent" in reason
    assert weigh(res, "equivalent", 0.01, (0.5, 0.5), set(), set(), 30, 30, "rerun")[0] == "unchanged"
    still = pair_test(pair_values(np.full((1, 10), 0.3), np.full((1, 10), 0.3)))
    assert weigh(still, "inconclusive", 1.0, (0.5, 0.5), set(), set(), 10, 10, "")[0] == "unchanged"


def flag_rows(**impl_flags):
    rows = [{"model": "m1", "library": impl.split("_")[0], "library_version": "", "attack": "pgd",
             "implementation": impl.replace("_", "/"), "family": "pgd", "norm": "linf", "flag": f, "evidence": ""}
            for impl, fs in impl_flags.items() for f in fs]
    return pd.DataFrame(rows, columns=FLAG_COLUMNS)


def small_run(version, d, impl="x/pgd", model="m1", **kw):
    return job_rows(model, impl, "linf", d, library_version=version, **kw)


def test_diff_reads_optimality_on_both_sides_against_the_joint_envelope_and_eps_max():
    a = table(small_run("1.0", [0.2, 0.4, 0.3, 0.5]))
    b = table(small_run("1.1", [0.4, 0.4, 0.3, 0.5]), small_run("2.0", [0.3, 0.3, 0.3, 0.3], impl="y/fmn"))
    # joint envelope [0.2, 0.3, 0.3, 0.3]; at ε₀ = 1: gains 0.8 + 0.7·3 = 2.9 for the envelope,
    # 0.8 + 0.6 + 0.7 + 0.5 before, 0.6 + 0.6 + 0.7 + 0.5 after, 0.7·4 for y/fmn
    none = {"flags_a": flag_rows(), "flags_b": flag_rows()}
    d = diff(a, b, eps_max={"linf": 1.0}, **none).set_index("implementation")
    assert d.loc["x/pgd", "optimality_a"] == pytest.approx(2.6 / 2.9)
    assert d.loc["x/pgd", "optimality_b"] == pytest.approx(2.4 / 2.9)
    assert d.loc["x/pgd", "delta_optimality"] == pytest.approx(-0.2 / 2.9)
    assert d.loc["y/fmn", "optimality_b"] == pytest.approx(2.8 / 2.9) and np.isnan(d.loc["y/fmn", "optimality_a"])
    # without ε_max, ε₀ is the envelope's largest distance (0.3): only the first image counts
    d = diff(a, b, **none).set_index("implementation")
    assert (d.loc["x/pgd", "optimality_a"], d.loc["x/pgd", "optimality_b"]) == (1.0, 0.0)
    assert d.loc["x/pgd", "statistic"] == 0.0 and d.loc["x/pgd", "n_models"] == 1
    # one image per model: ε₀ = 1 against the envelope 0.2
    one = diff(table(small_run("1.0", [0.2])), table(small_run("1.1", [0.4])), eps_max={"linf": 1.0}, **none).iloc[0]
    assert (one.optimality_a, one.optimality_b) == (1.0, pytest.approx(0.75))


def test_a_new_implementation_is_never_identical_and_has_no_test_fields():
    a = table(small_run("1.0", [0.2, 0.4, 0.3, 0.5]))
    b = table(small_run("1.0", [0.2, 0.4, 0.3, 0.5]), small_run("2.0", [0.3, 0.3, 0.3, 0.3], impl="y/fmn"))
    none = {"flags_a": flag_rows(), "flags_b": flag_rows()}
    d = diff(a, b, **none).set_index("implementation")
    assert list(d.reset_index().columns) == DIFF_COLUMNS
    new = d.loc["y/fmn"]
    assert new.verdict == "new" and new.reason == "only in run b" and not new.identical
    assert (new.version_a, new.version_b, new.n_models, new.n_samples, new.score) == ("", "2.0", 0, 0, 0)
    assert np.isnan(new.p_adjusted) and new.answer == ""
    same = d.loc["x/pgd"]
    assert same.identical and same.verdict == "unchanged" and same.answer == "identical"
    assert same.reason == "identical results on every image" and same.score == 0
    gone = diff(b, a, **none).set_index("implementation").loc["y/fmn"]
    assert gone.verdict == "removed" and gone.reason == "only in run a" and not gone.identical


def test_diff_lists_each_side_s_flags_joined_by_commas_and_what_moved():
    a = table(small_run("1.0", [0.2, 0.4, 0.3, 0.5]))
    b = table(small_run("1.1", [0.2, 0.4, 0.3, 0.5]))
    d = diff(a, b, flags_a=flag_rows(x_pgd=["last_not_best", "crash"]),
             flags_b=flag_rows(x_pgd=["crash", "nondeterminism", "timeout"])).iloc[0]
    assert (d.flags_a, d.flags_b) == ("crash,last_not_best", "crash,nondeterminism,timeout")
    assert (d.flags_appeared, d.flags_disappeared) == ("nondeterminism,timeout", "last_not_best")
    # identical rows: unchanged, the flags that moved named
    assert d.verdict == "unchanged"
    assert d.reason == ("identical results on every image; flags moved because other implementations changed: "
                        "last_not_best, nondeterminism, timeout")
    only_b = diff(a, b, flags_a=flag_rows(), flags_b=flag_rows(x_pgd=["crash"])).iloc[0]
    assert (only_b.flags_a, only_b.flags_b, only_b.flags_appeared, only_b.flags_disappeared) == ("", "crash", "crash", "")
    only_a = diff(a, b, flags_a=flag_rows(x_pgd=["crash"]), flags_b=flag_rows()).iloc[0]
    assert (only_a.flags_a, only_a.flags_b, only_a.flags_appeared, only_a.flags_disappeared) == ("crash", "", "", "crash")


def test_an_inconclusive_verdict_by_model_projects_images_at_the_adjusted_level():
    rng = np.random.default_rng(3)
    old = {m: rng.uniform(0.1, 0.5, 30) for m in ("m1", "m2")}
    a = table(*[small_run("1.0", old[m], model=m) for m in old])
    b = table(*[small_run("1.1", old[m] * 1.005, model=m) for m in old])
    d = diff(a, b, by_model=True, flags_a=flag_rows(), flags_b=flag_rows()).set_index("model")
    for m in ("m1", "m2"):
        assert d.loc[m, "answer"] == "inconclusive" and d.loc[m, "verdict"] == "inconclusive"
        x = pair_values((old[m] * 1.005)[None], old[m][None])
        need = images_to_decide(x, ALPHA / 2)
        assert math.isfinite(need) and need != images_to_decide(x, ALPHA)
        assert d.loc[m, "images_to_decide"] == need
        assert d.loc[m, "reason"].endswith(f": rerun with --samples {int(need)} (planned for 80% power))")
    # in the API's words, and against the dataset's size (a dataset of exactly that many images is enough)
    need1 = int(d.loc["m1", "images_to_decide"])
    no_flags = {"flags_a": flag_rows(), "flags_b": flag_rows()}
    from attackaudit.reports.wording import speak

    api = diff(a, b, by_model=True, dataset_images=need1, **no_flags).set_index("model")
    assert speak(api.loc["m1", "reason"], "api").endswith(f": rerun with samples={need1} (planned for 80% power))")
    small = diff(a, b, by_model=True, dataset_images=need1 - 1, **no_flags).set_index("model")
    assert small.loc["m1", "reason"].endswith(
        f": cannot be decided on this dataset (needs ≈{need1} images, it has {need1 - 1}))")


def test_the_severity_text_lists_each_weighed_flag_once_under_its_weight_most_severe_first():
    """The severities the verdict rule prints (``VERDICT_RULE``, in every audit report's JSON):
    tiers from 3 down to 1, each flag under its own weight in ``SEVERITY``'s order, the flags that
    compare with siblings (listed, never weighed) left out."""
    from attackaudit.fidelity.diff import RELATIVE_FLAGS, SEVERITY, VERDICT_FLAGS, VERDICT_RULE, _severity_text

    text = _severity_text()
    assert text.startswith("3: crash, timeout, invalid, out_of_box, out_of_ball, ")
    assert text.endswith("; 1: last_not_best, budget_overrun, nondeterminism")
    tiers = [tier.split(": ") for tier in text.split("; ")]
    assert [int(w) for w, _ in tiers] == [3, 2, 1]
    listed = {w: names.split(", ") for w, names in tiers}
    assert listed["2"] == ["shift_sensitivity", "eps_unused", "batch_dependence"]
    every = [f for names in listed.values() for f in names]
    assert sorted(every) == sorted(VERDICT_FLAGS - RELATIVE_FLAGS) and len(every) == len(set(every))
    assert all(SEVERITY[f] == int(w) for w, names in listed.items() for f in names)
    assert "optimality_gap" not in text and "below_expected_strength" not in text
    assert f"new ({text}); mixed if" in VERDICT_RULE


def test_a_best_margin_moved_by_float_rounding_near_zero_leaves_the_rows_identical():
    """``best_margin`` is a difference of two logits: near the decision boundary a refactor moves
    it by far more than 1e-6 relative (adv-lib FMN 0.2.2 → 0.2.6: 2.0164e-5 against 2.0127e-5)
    while every distance and status is the same: the rows are identical (``MARGIN_ATOL``); a margin
    that really moved is not."""
    d = [0.2, 0.4, 0.3, 0.5]

    def run(version, margins, first_returned=0.2):
        return table(small_run(version, d, returned=[first_returned, 0.4, 0.3, 0.5])).assign(best_margin=margins)

    none = {"flags_a": flag_rows(), "flags_b": flag_rows()}
    a = run("0.2.2", [2.0164e-5, 0.5, 1.25, -3e-7])
    r = diff(a, run("0.2.6", [2.0127e-5, 0.5, 1.25, 4e-7]), **none).iloc[0]
    assert r.identical and r.verdict == "unchanged" and r.answer == "identical"
    moved = diff(a, run("0.2.6", [2.0164e-5, 0.5, 1.25, 5e-6]), **none).iloc[0]
    assert not moved.identical and moved.answer != "identical"
    # the absolute tolerance is the margins' only: a returned distance 5e-7 apart near 0 differs
    margins = [2.0164e-5, 0.5, 1.25, -3e-7]
    assert not diff(run("0.2.2", margins, 1e-3), run("0.2.6", margins, 1e-3 + 5e-7), **none).iloc[0].identical
    assert diff(run("0.2.2", margins, 1e-3), run("0.2.6", margins, 1e-3), **none).iloc[0].identical


def test_the_diff_of_two_runs_without_a_real_model_row_has_the_diff_columns():
    """Two empty runs, or runs of twins only (no row of a real model to compare): no row, but the
    columns every reader of a diff indexes."""
    none = {"flags_a": flag_rows(), "flags_b": flag_rows()}
    empty = table(small_run("1.0", [0.3]))[:0]
    d = diff(empty, empty, **none)
    assert d.empty and list(d.columns) == DIFF_COLUMNS
    twins = table(small_run("1.0", [0.3, 0.4], model="m1~shift"))
    d = diff(twins, twins, **none)
    assert d.empty and list(d.columns) == DIFF_COLUMNS


# ================================================================================== flags.py
from attackaudit.fidelity.flags import _causes, _nondeterminism, _per_job, flags  # noqa: E402
from attackaudit.fidelity._table import prepare, with_envelope  # noqa: E402
from attackaudit.results.schema import OUT_OF_BOX_ERROR  # noqa: E402


def per_job(t):
    """The per-job findings of ``flags`` (status, effort, last_not_best), without the other rules."""
    return pd.DataFrame(_per_job(with_envelope(prepare(t))), columns=["implementation", "flag", "evidence"])


def repeat(t, other):
    """The ``nondeterminism`` findings of ``flags(t, other)``."""
    return pd.DataFrame(_nondeterminism(prepare(t), other), columns=["implementation", "flag", "evidence"])


def evidence(found, impl, flag):
    rows = found[(found["implementation"] == impl) & (found["flag"] == flag)]
    return rows["evidence"].iloc[0] if len(rows) else None


def test_crash_and_timeout_evidence_names_the_causes_and_what_the_tracker_kept():
    d = np.linspace(0.1, 0.6, 12)
    best = d.copy()
    best[10:] = np.inf
    status = ["ok"] * 6 + ["crash"] * 4 + ["timeout"] * 2
    error = [""] * 6 + ["ValueError: a", "KeyError: b", "ValueError: a", "OSError: c", "", ""]
    t = table(job_rows("m1", "x/pgd", "linf", best, family="pgd", status=status, error=error,
                       refused=[0] * 5 + [3] + [0] * 6),
              job_rows("m1", "y/pgd", "linf", d, family="pgd"))
    found = flags(t)
    assert list(found.columns) == FLAG_COLUMNS
    assert found["flag"].tolist() == ["crash", "timeout", "budget_overrun"]
    assert evidence(found, "x/pgd", "crash") == (
        "4 of 12 samples in batches that raised: ValueError: a; KeyError: b (+1 more); "
        "the tracker's results before it are kept (4 of these samples broken)")
    assert evidence(found, "x/pgd", "timeout") == (
        "2 of 12 samples in a job that timed out: no error recorded; "
        "the tracker's results before it are kept (0 of these samples broken)")
    assert evidence(found, "x/pgd", "budget_overrun") == (
        "1 of 12 samples made queries past the budget of 2000: 3 refused in total, 3 on sample 5")


def test_a_job_killed_before_any_query_keeps_no_tracker_results():
    d = np.linspace(0.1, 0.6, 6)
    best = np.r_[d[:4], np.inf, np.inf]
    t = table(job_rows("m1", "x/pgd", "linf", best, family="pgd", status=["ok"] * 4 + ["timeout"] * 2,
                       forwards=[500] * 4 + [0, 0], backwards=[500] * 4 + [0, 0], error="killed"),
              job_rows("m1", "y/pgd", "linf", d, family="pgd"))
    assert evidence(per_job(t), "x/pgd", "timeout") == (
        "2 of 6 samples in a job that timed out: killed; "
        "no tracker results survive: every one of these samples counts as not broken")
    # one forward pass is enough for the tracker to have kept something
    t2 = table(job_rows("m1", "x/pgd", "linf", best, family="pgd", status=["ok"] * 4 + ["timeout"] * 2,
                        forwards=[500] * 4 + [1, 0], backwards=[500] * 4 + [0, 0], error="killed"))
    assert evidence(per_job(t2), "x/pgd", "timeout").endswith(
        "the tracker's results before it are kept (0 of these samples broken)")


def test_crash_causes_are_deduplicated_cut_at_160_characters_and_counted_beyond_two():
    assert _causes(pd.Series(["A", "B", "A", "", "C", "D"])) == "A; B (+2 more)"
    assert _causes(pd.Series(["A", "B", "A"])) == "A; B"
    assert _causes(pd.Series(["A", "B", "C"])) == "A; B (+1 more)"
    assert _causes(pd.Series(["A", "B", "C"]), limit=3) == "A; B; C"
    assert _causes(pd.Series(["x" * 200])) == "x" * 160
    assert _causes(pd.Series(["", ""])) == "no error recorded"


def test_invalid_batches_outside_the_box_are_out_of_box_the_others_invalid():
    d = np.linspace(0.1, 0.6, 8)
    status = ["ok"] * 4 + ["invalid"] * 4
    error = [""] * 4 + [f"output {OUT_OF_BOX_ERROR}"] * 3 + ["NaN in output"]
    t = table(job_rows("m1", "x/pgd", "linf", d, family="pgd", status=status, error=error),
              job_rows("m1", "y/pgd", "linf", d, family="pgd"))
    found = per_job(t)
    assert evidence(found, "x/pgd", "out_of_box") == (
        f"3 of 8 samples returned an invalid batch: output {OUT_OF_BOX_ERROR}")
    assert evidence(found, "x/pgd", "invalid") == "1 of 8 samples returned an invalid batch: NaN in output"


def lnb_table(kind="minimal", worse_factor=1.5):
    d = np.linspace(0.1, 0.6, 20)
    ret = d.copy()
    ret[[2, 5, 7]] = d[[2, 5, 7]] * worse_factor
    ret[9] = np.inf
    ret[11] = d[11] * 1.04  # within LAST_NOT_BEST_RTOL: not worse
    return table(job_rows("m1", "x/pgd", "linf", d, family="pgd", returned=ret, kind=kind),
                 job_rows("m1", "y/pgd", "linf", d, family="pgd"))


def test_last_not_best_evidence_counts_the_worse_returns_against_the_null_rate():
    found = per_job(lnb_table())
    rate = LAST_NOT_BEST_NULL_RATE["minimal"]
    p = stats.binom.sf(3, 20, rate)  # 4 of 20 worse at the minimal attacks' null rate
    assert evidence(found, "x/pgd", "last_not_best") == (
        "returned output worse than the best it had queried on 4 of 20 images it broke (1 returned no "
        f"adversarial at all; median returned/best 1.50); null rate {rate:.0%} for a sound minimal attack, p = {p:.2g}, "
        f"BH q = {p:.2g} over its 1 job: images 2, 5, 7, 9")
    assert evidence(found, "y/pgd", "last_not_best") is None
    # a fixed-ε attack's null rate (18%) explains 4 of 20
    assert evidence(per_job(lnb_table(kind="fixed")), "x/pgd", "last_not_best") is None
    # just past the 5% tolerance counts, just inside does not
    assert "on 4 of 20" in evidence(per_job(lnb_table(worse_factor=1.06)), "x/pgd", "last_not_best")
    assert "on 1 of 20" not in str(evidence(per_job(lnb_table(worse_factor=1.049)), "x/pgd", "last_not_best"))


def test_last_not_best_over_several_jobs_is_adjusted_over_the_implementation_s_models():
    d = np.linspace(0.1, 0.6, 20)
    ret = d.copy()
    ret[[2, 5, 7, 9]] = d[[2, 5, 7, 9]] * 2.0
    t = table(*[job_rows(m, "x/pgd", "linf", d, family="pgd", returned=ret) for m in ("m1", "m2")])
    found = per_job(t)
    p = stats.binom.sf(3, 20, LAST_NOT_BEST_NULL_RATE["minimal"])
    ev = found.loc[found["flag"] == "last_not_best", "evidence"].tolist()
    assert len(ev) == 2
    assert all(e.endswith(f"BH q = {p:.2g} over its 2 jobs: images 2, 5, 7, 9") for e in ev)
    assert all("(0 returned no adversarial at all; median returned/best 2.00)" in e for e in ev)


def test_a_gradient_attack_without_backward_passes_failed_silently():
    d = np.linspace(0.1, 0.6, 20)
    t = table(job_rows("m1", "y/pgd", "linf", d, family="pgd", backwards=0),
              job_rows("m1", "z/boundary", "linf", d, family="boundary", backwards=0))
    found = per_job(t)
    assert evidence(found, "y/pgd", "silent_failure") == (
        "no backward pass on any of 20 samples for a gradient attack; ASR 1.00 vs clean error rate 0.00")
    assert evidence(found, "z/boundary", "silent_failure") is None


def test_nondeterminism_lists_up_to_three_examples_of_samples_that_moved_beyond_the_tolerance():
    d = np.linspace(0.1, 0.6, 20)
    again = d.copy()
    again[[0, 1, 2, 3]] *= 1.01
    again[4] *= 1 + 5e-5  # float noise, under NONDETERMINISM_RTOL
    again[6] = np.inf  # failed on the repeat: differs
    t = table(job_rows("m1", "x/pgd", "linf", d, family="pgd"))
    found = repeat(t, table(job_rows("m1", "x/pgd", "linf", again, family="pgd")))
    assert evidence(found, "x/pgd", "nondeterminism") == (
        "5 of 20 samples differ between two seeded runs of the same config (best distance or status): "
        f"sample 0: {d[0]:.4g} vs {again[0]:.4g}; sample 1: {d[1]:.4g} vs {again[1]:.4g}; "
        f"sample 2: {d[2]:.4g} vs {again[2]:.4g}")
    status = table(job_rows("m1", "x/pgd", "linf", d, family="pgd", status=["ok"] * 19 + ["crash"]))
    ev = evidence(repeat(t, status), "x/pgd", "nondeterminism")
    assert ev.startswith("1 of 20 samples differ") and ev.endswith(f"sample 19: {d[19]:.4g} vs {d[19]:.4g}")
    assert evidence(repeat(t, t), "x/pgd", "nondeterminism") is None


def silent_table(n_images, models=("m1",), forwards=100):
    d = np.linspace(0.1, 0.6, n_images)
    jobs = []
    for m in models:
        jobs += [job_rows(m, "x/square", "linf", np.full(n_images, np.inf), family="square", forwards=forwards,
                          backwards=0),
                 job_rows(m, "y/square", "linf", d, family="square", backwards=0)]
    return table(*jobs)


def test_an_attack_that_breaks_none_of_what_its_siblings_broke_fails_silently_from_11_images():
    p12 = 0.75 ** 12
    assert evidence(per_job(silent_table(12)), "x/square", "silent_failure") == (
        "broke none of the 12 images other implementations broke (100 forwards, 0 backwards per sample here); "
        f"a working attack breaks at least 25% of them (p = {p12:.2g}); ASR 0.00 vs clean error rate 0.00")
    assert evidence(per_job(silent_table(11)), "x/square", "silent_failure") is not None  # 0.75^11 = 0.042
    assert evidence(per_job(silent_table(10)), "x/square", "silent_failure") is None  # 0.75^10 = 0.056
    # counted once over the models: 6 images on each of two models are 6 images, not 12
    assert evidence(per_job(silent_table(6, models=("m1", "m2"))), "x/square", "silent_failure") is None
    two = per_job(silent_table(12, models=("m1", "m2")))
    assert evidence(two, "x/square", "silent_failure").startswith(
        "broke none of the 12 images other implementations broke on any of its 2 models (and their twins) (")
    assert evidence(two, "y/square", "silent_failure") is None


def test_an_attack_that_queried_once_per_sample_and_broke_nothing_fails_silently():
    ev = evidence(per_job(silent_table(5, forwards=1)), "x/square", "silent_failure")
    assert ev == ("at most one query per sample and none of the 5 samples other implementations broke was broken; "
                  "ASR 0.00 vs clean error rate 0.00")
    assert evidence(per_job(silent_table(5, forwards=2)), "x/square", "silent_failure") is None


def test_a_twin_s_repeat_of_its_model_s_finding_is_dropped_and_a_seed_twin_s_moves_to_the_model():
    d = np.linspace(0.1, 0.6, 8)

    def job(model, impl, backwards):
        return job_rows(model, impl, "linf", d, family="pgd", backwards=backwards)

    t = table(job("m1", "a/pgd", 0), job("m1~shift", "a/pgd", 0),          # the twin repeats the model
              job("m1", "b/pgd", 500), job("m1~seed", "b/pgd", 0),         # only the seed twin
              job("m1", "c/pgd", 500), job("m1~shift", "c/pgd", 0),        # only the shift twin
              job("m1", "e/pgd", 0), job("m1~seed", "e/pgd", 0))           # both: the model's own kept
    found = flags(t)
    silent = found[found["flag"] == "silent_failure"].set_index("implementation")
    assert sorted(silent.index) == ["a/pgd", "b/pgd", "c/pgd", "e/pgd"]
    assert silent.loc["a/pgd", "model"] == "m1" and silent.loc["c/pgd", "model"] == "m1~shift"
    plain = "no backward pass on any of 8 samples for a gradient attack; ASR 1.00 vs clean error rate 0.00"
    assert silent.loc["b/pgd", "model"] == "m1"
    assert silent.loc["b/pgd", "evidence"] == (
        f"on its seed twin m1~seed (the same model and images, another seed): {plain}")
    assert silent.loc["e/pgd", "model"] == "m1" and silent.loc["e/pgd", "evidence"] == plain
    assert silent.loc["a/pgd", "library"] == "a" and silent.loc["a/pgd", "attack"] == "pgd"


def test_an_optimality_gap_names_the_better_sibling_and_both_endpoints():
    from attackaudit.fidelity.flags import optimality_gap
    d = np.random.default_rng(1).uniform(0.1, 0.5, 30)
    w = d * 1.5
    w[:3] = np.inf
    t = table(job_rows("m1", "x/pgd", "linf", d, family="pgd", library_version="1.0"),
              job_rows("m1", "y/pgd", "linf", w, family="pgd", library_version="2.0"),
              job_rows("m1", "z/pgd", "linf", d * 1.01, family="pgd", library_version="3.0"),
              job_rows("m1", "q/fmn", "linf", d * 0.5, family="fmn", library_version="1.0"))
    found = optimality_gap(t)
    assert [(f["implementation"], f["library_version"], f["model"], f["norm"], f["flag"]) for f in found] == \
        [("y/pgd", "2.0", "m1", "linf", "optimality_gap")]
    # ξ against the pgd family's envelope (d): ε₀ = max d; q/fmn, another family, does not move it
    eps0 = d.max()
    xi_y = np.clip(eps0 - w, 0, None).sum() / np.clip(eps0 - d, 0, None).sum()
    # all 27 images both broke one way: the exact signed-rank p over its weighted share of α (the
    # headline's weighted Bonferroni over the share and distance endpoints, 0.3 of 0.9; the
    # failure endpoint cannot reach α)
    p = (2 * 0.5 ** 27) * 0.9 / 0.3
    assert found[0]["evidence"] == (
        f"optimality against its family's envelope {xi_y:.3f} vs 1.000 for x/pgd 1.0; failure rates 10% vs 0%; "
        "on the 27 images both broke typically 50% farther per image (pseudo-median), smaller perturbation on 0 "
        f"vs 27; different beyond the margins with p = {p:.2g} (×2 siblings: {2 * p:.2g}; BH q = {2 * p:.2g} over "
        "its 1 models) on 30 images")


def test_an_optimality_gap_on_two_models_is_flagged_on_each_with_bh_over_the_two():
    """The gap is tested per model (the implementation's models are its multiplicity family): a
    worse sibling on two models is flagged on each, BH over those two, never on a pooled row."""
    from attackaudit.fidelity.flags import optimality_gap
    rng = np.random.default_rng(1)
    jobs = []
    for m in ("m1", "m2"):
        d = rng.uniform(0.1, 0.5, 30)
        w = d * 1.5
        w[:3] = np.inf
        jobs += [job_rows(m, "x/pgd", "linf", d, family="pgd"), job_rows(m, "y/pgd", "linf", w, family="pgd")]
    found = optimality_gap(table(*jobs))
    assert [(f["model"], f["implementation"]) for f in found] == [("m1", "y/pgd"), ("m2", "y/pgd")]
    assert all(f["evidence"].endswith("over its 2 models) on 30 images") for f in found)


def test_a_single_worse_return_is_never_a_last_not_best_pattern():
    """One image of one broken image is significant at the minimal null rate (p = the rate) but one
    stray image is not a pattern (LAST_NOT_BEST_MIN_IMAGES = 2)."""
    t = table(job_rows("m1", "x/pgd", "linf", [0.3], family="pgd", returned=[np.inf]))
    assert evidence(per_job(t), "x/pgd", "last_not_best") is None
    two = table(job_rows("m1", "x/pgd", "linf", [0.3, 0.4], family="pgd", returned=[np.inf, np.inf]))
    assert evidence(per_job(two), "x/pgd", "last_not_best").startswith(
        "returned output worse than the best it had queried on 2 of 2 images it broke (2 returned no adversarial "
        f"at all); null rate {LAST_NOT_BEST_NULL_RATE['minimal']:.0%} for a sound minimal attack")


def test_flags_of_an_empty_table_have_the_flag_columns():
    empty = flags(table(job_rows("m1", "x/pgd", "linf", [0.3]))[:0])
    assert list(empty.columns) == FLAG_COLUMNS and empty.empty


def test_a_job_that_crashed_everywhere_or_only_overran_its_budget_is_flagged():
    d = np.linspace(0.1, 0.6, 4)
    crashed = per_job(table(job_rows("m1", "x/pgd", "linf", d, family="pgd", status="crash", error="boom")))
    assert evidence(crashed, "x/pgd", "crash") == (
        "4 of 4 samples in batches that raised: boom; the tracker's results before it are kept "
        "(4 of these samples broken)")
    overran = per_job(table(job_rows("m1", "x/pgd", "linf", d, family="pgd", refused=[0, 2, 5, 0], budget=0)))
    assert overran["flag"].tolist() == ["budget_overrun"]
    assert evidence(overran, "x/pgd", "budget_overrun") == (
        "2 of 4 samples made queries past the budget: 7 refused in total, 5 on sample 2")


# --------------------------------------------------------------------------- log ratios and HL at their edges
def test_log_ratios_truth_table_against_a_plain_reference():
    """Each image's log ratio by the rule the docstring states, one case at a time: a 0 below a
    positive distance and a success below a failure (NaN counts as a failure) are ±FAILURE."""
    from attackaudit.fidelity.equivalence import FAILURE, LOG_RATIO_CAP, log_ratios

    inf, nan = np.inf, np.nan
    cases = {(0.0, 0.5): -FAILURE, (0.5, 0.0): FAILURE, (0.0, 2.0): -FAILURE, (2.0, 0.0): FAILURE,
             (0.2, inf): -FAILURE, (inf, 0.2): FAILURE, (nan, 0.2): FAILURE, (0.2, nan): -FAILURE,
             (0.0, 0.0): 0.0, (inf, inf): 0.0, (nan, inf): 0.0, (0.2, 0.4): math.log(0.5),
             (1.0, 1000.0): -LOG_RATIO_CAP, (0.3, 0.3 * (1 + 1e-12)): 0.0}
    a = np.array([k[0] for k in cases])
    b = np.array([k[1] for k in cases])
    assert log_ratios(a, b).tolist() == pytest.approx(list(cases.values()))


def test_hodges_lehmann_is_exact_up_to_the_largest_exact_size():
    """At 1000 images (500,500 Walsh averages, WALSH_EXACT_MAX) the estimate is still the exact
    median of every Walsh average, not the sampled one of larger runs."""
    from attackaudit.fidelity.equivalence import WALSH_EXACT_MAX, hodges_lehmann

    x = np.random.default_rng(3).standard_normal(1000)
    assert x.size * (x.size + 1) // 2 == WALSH_EXACT_MAX
    i, j = np.triu_indices(x.size)
    assert hodges_lehmann(x) == float(np.median((x[i] + x[j]) / 2))


def test_a_pair_that_breaks_more_images_but_farther_is_mixed_only_where_the_curves_cross_materially():
    """``a`` breaks 30 images ``b`` cannot (failure endpoint: a better) and is 20% farther on the
    12 images both broke (distance endpoint: b better, exact p ≈ 0.0005): the endpoints are beyond
    their margins in opposite directions, but ``b``'s curve leads by only 2 of the 42 images it
    could lead on: no material crossing, the headline is the curve's (a better). Make ``a`` 50%
    farther on those 12 and break its 30 far out, and ``b`` leads by up to 12 of 42 at small
    distances (7 of them, where ``a``'s far 30 start), ``a`` by more at large: mixed, at the distance where the lead changes sides."""
    old = np.random.default_rng(2).uniform(0.2, 0.6, 100)
    a, b = old * 1.2, old.copy()
    a[12:42] = old[12:42]    # only a broke these 30
    b[12:] = np.inf
    a[42:] = np.inf          # neither broke the rest
    res = pair_test(pair_values(a[None], b[None]))
    assert (res["broke_only_a"], res["broke_only_b"], res["n_both"]) == (30, 0, 12)
    assert res["p_failure_different"] < res["p_distance_different"] < 0.05
    assert res["lead_b"] == pytest.approx(2 / 42) and res["mixed"] is False
    assert res["headline"] == "better" and res["direction"] == -1
    a[:12], a[12:42] = old[:12] * 1.5, old[12:42] * 3
    crossed = pair_test(pair_values(a[None], b[None]))
    assert crossed["mixed"] is True and crossed["headline"] == "mixed"
    assert crossed["lead_b"] >= 0.05 and crossed["lead_a"] >= 0.05
    assert old[:12].min() <= crossed["crossing"] <= 3 * old.max()
    # the distance endpoint alone (both broke the same images): b better, not mixed
    alone = pair_test(pair_values((old * 1.2)[None], old[None]))
    assert alone["mixed"] is False and alone["direction"] == 1


def test_with_nothing_beyond_a_margin_the_direction_is_the_larger_effect_relative_to_its_margin():
    """Inside both margins the direction only words the result: the endpoint whose estimate is the
    larger share of its own margin (5 points of failure rate, δ of the log ratio) gives it."""
    old = np.random.default_rng(4).uniform(0.2, 0.6, 100)

    def pair(only_b, factor):
        a, b = old * factor, old.copy()
        a[:only_b] = np.inf      # b alone broke these: a's failure rate is higher
        return pair_test(pair_values(a[None], b[None]))

    # a fails 4 points more (0.8 of the margin), is 1% closer (0.2 of δ): the failures decide, b
    res = pair(4, 0.99)
    assert res["p_failure_different"] == res["p_distance_different"] == 1.0
    assert res["fail_a"] - res["fail_b"] == pytest.approx(0.04) and res["estimate"] == pytest.approx(np.log(0.99))
    assert res["direction"] == 1
    # a fails 1 point more (0.2 of the margin), is 3% closer (0.6 of δ): the distances decide, a
    res = pair(1, 0.97)
    assert res["p_failure_different"] == res["p_distance_different"] == 1.0
    assert res["direction"] == -1
