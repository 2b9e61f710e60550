"""What mutation testing asks of the verdict rules in fidelity/ (docs/testing.md): the statistics
every "significantly better", "equivalent" and "different" rests on, each against an independent
reference (scipy, a brute-force enumeration, a hand count), at the edges where a verdict flips.
"""
from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from attackaudit.fidelity import stats as fidelity_stats
from attackaudit.fidelity.flags import FLAGS, flagged
from attackaudit.fidelity.optimality import envelope
from attackaudit.fidelity.equivalence import (DELTA, ImageBlocks, pair_test, distance_pair_test, pair_values, per_image,
                                              signed_rank_z, swapped)
from attackaudit.fidelity.paired_binary import (FAILURE_MARGIN, beyond_p, discordant, estimate, images_needed,
                                                mcnemar_p, min_beyond_p, score_z, within_p)
from attackaudit.fidelity.stats import (ALPHA, holm, paired_comparison, samples_to_separate, signed_rank_exact_p,
                                        significant, tie_aware_diff, tie_correction, wilcoxon_batch)


@pytest.fixture(autouse=True)
def computed_not_cached():
    """Each test computes its paired comparisons itself: ``paired_comparison`` caches results by
    input, and a result cached by an earlier test (or, under mutmut, by the unmutated parent
    process every mutant is forked from) would stand in for the code under test."""
    fidelity_stats._PAIRED_CACHE.clear()
    yield
    fidelity_stats._PAIRED_CACHE.clear()


# --------------------------------------------------------------------------- multiple comparisons
def test_holm_with_three_candidates_close_to_the_margin_rejects_none():
    """Each raw p is below α, none survives the family-wise correction: 3·0.02, 2·0.03, 1·0.04."""
    p = holm([0.02, 0.03, 0.04])
    assert p.tolist() == pytest.approx([0.06, 0.06, 0.06])
    assert not any(significant(q, 5, 1) for q in p)


def test_holm_keeps_the_order_skips_nan_and_never_exceeds_one():
    assert holm([0.03, float("nan"), 0.01, 0.02]).tolist()[::2] == pytest.approx([0.04, 0.03])
    assert math.isnan(holm([0.03, float("nan"), 0.01, 0.02])[1])
    assert holm([0.01, 0.04]).tolist() == pytest.approx([0.02, 0.04])  # k = 2, not 3: NaN-free
    assert holm([0.6, 0.7]).tolist() == [1.0, 1.0]
    assert holm([0.04, 0.01, 0.04]).tolist() == pytest.approx([0.08, 0.03, 0.08])  # equal p: both steps
    assert np.isnan(holm([float("nan")])).all() and holm([]).size == 0


def test_significance_needs_a_p_below_alpha_and_more_wins_for():
    assert significant(0.049, 3, 2) and not significant(ALPHA, 3, 2)
    assert not significant(0.01, 2, 2) and not significant(0.01, 1, 2)
    assert not significant(float("nan"), 5, 0)
    assert significant(0.009, 3, 2, alpha=0.01) and not significant(0.011, 3, 2, alpha=0.01)


# ------------------------------------------------------------------------------- paired distances
def test_failures_rank_above_every_distance_and_near_equal_distances_tie():
    a = np.array([1.0, np.inf, 2.0, np.inf, 3.0])
    b = np.array([1.0 + 1e-12, 4.0, np.inf, np.inf, 2.5])
    d = tie_aware_diff(a, b)
    big = 2 * 4.0 + 1
    assert d.tolist() == [0.0, big - 4.0, 2.0 - big, 0.0, 0.5]
    # the tolerance is relative: at distance 100 a difference of 1e-8 is float noise, 1e-6 is not
    assert tie_aware_diff(np.array([100.0, 100.0]), np.array([100.0 + 1e-8, 100.0 + 1e-6])).tolist() == \
        pytest.approx([0.0, -1e-6])


def brute_force_p(diff: np.ndarray) -> float:
    """Two-sided exact signed-rank p by enumerating every sign flip of the mid-ranks."""
    nz = diff[diff != 0]
    ranks = stats.rankdata(np.abs(nz))
    observed = ranks[nz > 0].sum()
    null = [sum(r for r, s in zip(ranks, signs) if s) for signs in itertools.product([0, 1], repeat=len(ranks))]
    null = np.array(null)
    tol = 1e-9
    return min(1.0, 2 * min(np.mean(null <= observed + tol), np.mean(null >= observed - tol)))


def test_the_exact_signed_rank_p_with_ties_is_the_enumerated_one():
    diff = np.array([1.0, -1.0, 2.0, 2.0, 3.0, -3.0, 4.0, 5.0, 5.0])
    ranks = stats.rankdata(np.abs(diff))
    assert signed_rank_exact_p(ranks, ranks[diff > 0].sum()) == pytest.approx(brute_force_p(diff))
    res = paired_comparison(np.array([2.0, 1.0, 4.0, 4.0, 6.0, 1.0, 8.0, 10.0, 10.0]),
                            np.array([1.0, 2.0, 2.0, 2.0, 3.0, 4.0, 4.0, 5.0, 5.0]))
    assert res["p_value"] == pytest.approx(brute_force_p(np.array([1.0, -1, 2, 2, 3, -3, 4, 5, 5])))


def test_all_differences_one_way_with_ties_have_the_exact_smallest_p():
    diff = np.array([-1.0, -1.0, -2.0, -3.0])  # W+ = 0: one of the 2**4 sign patterns, doubled
    ranks = stats.rankdata(np.abs(diff))
    assert signed_rank_exact_p(ranks, 0.0) == pytest.approx(2 / 16) == pytest.approx(brute_force_p(diff))


def test_wins_and_ties_are_counted_by_the_sign_of_each_difference():
    res = paired_comparison(np.array([1.5, 1.0, 2.0, 4.0]), np.array([1.0, 2.0, 3.0, 4.0]))
    assert (res["wins_a"], res["wins_b"], res["ties"]) == (2, 1, 1)
    res = paired_comparison(np.array([3.0, 4.0, 5.0, 1.0]), np.array([2.0, 2.0, 2.0, 2.0]))  # a difference of 1
    assert (res["wins_a"], res["wins_b"], res["ties"]) == (1, 3, 0)
    ranks = stats.rankdata([1.0, 2.0, 3.0, 1.0])
    assert res["p_value"] == pytest.approx(signed_rank_exact_p(ranks, ranks[:3].sum()))
    assert res["statistic"] == min(ranks[:3].sum(), ranks[3])  # the exact path's statistic: min(W+, W−)


def test_a_paired_comparison_without_ties_is_scipy_s_wilcoxon():
    rng = np.random.default_rng(0)
    a = rng.uniform(0.5, 1.5, 30)
    b = a + rng.normal(0.1, 0.2, 30)
    res = paired_comparison(a, b)
    ref = stats.wilcoxon(a - b, zero_method="wilcox", alternative="two-sided")
    assert res["p_value"] == pytest.approx(ref.pvalue) and res["statistic"] == pytest.approx(ref.statistic)
    assert res["n_samples"] == 30 and res["wins_a"] + res["wins_b"] + res["ties"] == 30
    assert res["wins_a"] == int((a < b).sum())
    ranks = stats.rankdata(np.abs(a - b))
    assert res["effect_size"] == pytest.approx((ranks[a < b].sum() - ranks[a > b].sum()) / ranks.sum())
    assert res["median_difference"] == pytest.approx(np.median(a - b))


def test_a_paired_comparison_s_edges():
    one_sided = paired_comparison(np.array([1.0, 2.0, 3.0, np.inf]), np.array([2.0, 3.0, 4.0, 1.0]))
    assert one_sided["effect_size"] == pytest.approx((1 + 2 + 3 - 4) / 10)
    assert one_sided["median_difference"] == -1.0  # over the images both broke
    ties = paired_comparison(np.array([1.0, np.inf]), np.array([1.0, np.inf]))
    assert ties == {"n_samples": 2, "wins_a": 0, "wins_b": 0, "ties": 2, "statistic": 0.0, "p_value": 1.0,
                    "effect_size": 0.0, "median_difference": 0.0}
    assert paired_comparison(np.array([]), np.array([])) == {**ties, "n_samples": 0, "ties": 0}
    with pytest.raises(ValueError, match="differ in length: 2 vs 3"):
        paired_comparison(np.ones(2), np.ones(3))
    all_a = paired_comparison(np.array([1.0, 2.0, 3.0]), np.array([2.0, 4.0, 9.0]))
    assert all_a["effect_size"] == 1.0 and all_a["wins_a"] == 3 and all_a["median_difference"] == -2.0


def test_the_batched_wilcoxon_is_scipy_s_normal_approximation_with_ties():
    rng = np.random.default_rng(1)
    diffs = np.round(rng.normal(0.2, 1.0, (4, 25)), 1)  # rounded: ties among |differences|
    diffs[1, :5] = 0.0  # zeros are dropped
    p, effect = wilcoxon_batch(diffs)
    for row, pv, ef in zip(diffs, p, effect):
        nz = row[row != 0]
        ref = stats.wilcoxon(nz, zero_method="wilcox", correction=True, method="approx")
        assert pv == pytest.approx(ref.pvalue, rel=1e-6)
        ranks = stats.rankdata(np.abs(nz))
        assert ef == pytest.approx((ranks[nz < 0].sum() - ranks[nz > 0].sum()) / ranks.sum())
    p0, e0 = wilcoxon_batch(np.zeros((2, 5)))
    assert p0.tolist() == [1.0, 1.0] and e0.tolist() == [0.0, 0.0]


def test_tie_correction_counts_each_group_of_equal_values_in_its_row():
    values = np.array([[1.0, 2.0, 1.0, 2.0, 2.0, np.nan], [3.0, np.nan, np.nan, 4.0, 5.0, 3.0]])
    assert tie_correction(values).tolist() == [(8 - 2) + (27 - 3), 8 - 2]
    assert tie_correction(np.ones((3, 1))).tolist() == [0.0, 0.0, 0.0]


def test_samples_to_separate_follows_the_normal_approximation_at_the_holm_step():
    z = stats.norm.isf(ALPHA / 2)
    assert samples_to_separate(0.5, 10, 20) == math.ceil((z / 0.5) ** 2 * 4 / 3 * 20 / 10)
    z3 = stats.norm.isf(ALPHA / 3 / 2)
    assert samples_to_separate(-0.5, 10, 20, k=3) == math.ceil((z3 / 0.5) ** 2 * 4 / 3 * 20 / 10)
    assert samples_to_separate(0.0, 10, 20) == math.inf and samples_to_separate(0.5, 0, 20) == math.inf


# --------------------------------------------------------------------------- the failure endpoint
def test_discordant_images_are_counted_by_their_failure_shares():
    assert discordant(np.array([0.0, 1.0, 0.5, 1.0]), np.array([1.0, 1.0, 0.0, 0.25])) == (1.0, 1.25, 4)
    assert estimate(np.array([0.0, 1.0, 0.5, 1.0]), np.array([1.0, 1.0, 0.0, 0.25])) == pytest.approx(0.0625)
    assert estimate(np.array([]), np.array([])) == 0.0


def test_mcnemar_is_the_exact_sign_test_on_the_discordant_images():
    fa = np.array([0, 0, 0, 0, 0, 1, 1, 0, 0, 0], dtype=float)
    fb = np.array([1, 1, 1, 1, 1, 0, 1, 0, 0, 0], dtype=float)
    assert mcnemar_p(fa, fb) == pytest.approx(stats.binomtest(5, 6, 0.5).pvalue)
    assert mcnemar_p(fa, fa) == 1.0


def test_the_score_statistic_at_zero_is_mcnemar_s_z_and_moves_with_the_null():
    assert float(score_z(8.0, 2.0, 50.0, 0.0)) == pytest.approx(6 / math.sqrt(10))
    assert float(score_z(0.0, 0.0, 50.0, 0.0)) == 0.0 and float(score_z(3.0, 1.0, 0.0, 0.0)) == 0.0
    z = [float(score_z(8.0, 2.0, 50.0, d)) for d in (-0.1, 0.0, 0.1, 0.2)]
    assert z == sorted(z, reverse=True) and z[2] > 0 > z[3]  # Δ̂ = 0.12: above 0.1, below 0.2


def test_identical_implementations_are_equivalent_only_from_about_52_images():
    """No discordant image: equivalence within 5 points needs n ≥ z²·(1 − m)/m ≈ 52 at α = 0.05."""
    need = stats.norm.isf(ALPHA) ** 2 * (1 - FAILURE_MARGIN) / FAILURE_MARGIN
    below, above = math.floor(need), math.ceil(need) + 1
    assert within_p(np.zeros(below), np.zeros(below)) > ALPHA > within_p(np.zeros(above), np.zeros(above))
    assert within_p(np.array([]), np.array([])) == 1.0
    assert beyond_p(np.zeros(above), np.zeros(above)) == 1.0 and min_beyond_p(np.zeros(above), np.zeros(above)) == 1.0


def test_a_failure_rate_far_beyond_the_margin_is_different_in_its_direction():
    fa = np.r_[np.ones(30), np.zeros(70)]  # a fails 30 images more than b: Δ = +0.30
    fb = np.zeros(100)
    p = beyond_p(fa, fb)
    assert p < 1e-5 and p == pytest.approx(beyond_p(fb, fa))  # the mirror image, the same p
    assert p == pytest.approx(2 * stats.norm.cdf(float(score_z(0.0, 30.0, 100, -FAILURE_MARGIN))))
    assert within_p(fa, fb) > 0.5
    assert min_beyond_p(fa, fb) <= p  # all 30 discordant images one way is the best arrangement
    assert beyond_p(np.r_[np.ones(3), np.zeros(97)], fb) == 1.0  # Δ̂ = 0.03: inside the margin
    assert min_beyond_p(np.r_[np.ones(5), np.zeros(95)], fb) == 1.0  # 5 of 100 cannot pass 5 points


def test_images_needed_grows_as_the_truth_nears_the_margin_and_is_inf_at_it():
    fb = np.zeros(200)
    far = images_needed(np.r_[np.ones(80), np.zeros(120)], fb, ALPHA)
    near = images_needed(np.r_[np.ones(40), np.zeros(160)], fb, ALPHA)
    assert math.isfinite(far) and far < near
    assert images_needed(np.r_[np.ones(12), np.zeros(188)], fb, ALPHA) == math.inf  # 6 points: bound under 5
    same = images_needed(np.zeros(200), fb, ALPHA)
    assert same == 52  # no discordant image: where none shows equivalence, z²(1 − m)/m = 51.4
    assert images_needed(np.array([]), np.array([]), ALPHA) == math.inf


# ----------------------------------------------------------------------- equivalence's building blocks
def test_the_signed_rank_z_is_scipy_s_normal_approximation_without_continuity_correction():
    rng = np.random.default_rng(2)
    rows = np.round(rng.normal(0.3, 1.0, (3, 30)), 1)
    rows[2, :6] = 0.0
    for row, z in zip(rows, signed_rank_z(rows)):
        ref = stats.wilcoxon(row[row != 0], zero_method="wilcox", correction=False, method="approx")
        assert 2 * stats.norm.sf(abs(z)) == pytest.approx(ref.pvalue, rel=1e-9)
        assert np.sign(z) == np.sign(np.median(row[row != 0]))
    assert signed_rank_z(np.zeros((1, 4))).tolist() == [0.0]


def test_per_image_values_are_means_over_the_models_that_compared_the_image():
    v = np.array([[0.2, np.nan, 0.4, np.nan], [0.4, 0.1, np.nan, np.nan]])
    assert per_image(v).tolist() == pytest.approx([0.3, 0.1, 0.4])
    assert per_image(np.array([0.5, np.nan, -0.5])).tolist() == [0.5, -0.5]
    assert per_image(np.full((2, 3), np.nan)).size == 0


def test_a_comparison_seen_from_the_other_side_is_its_mirror_image():
    rng = np.random.default_rng(3)
    a = rng.uniform(0.5, 1.0, 40)
    b = a * rng.uniform(1.0, 1.4, 40)
    b[:6] = np.inf  # b failed on six images a broke
    values = pair_values(a, b)
    ab, ba = pair_test(values), pair_test(swapped(values))
    assert (ab["fail_a"], ab["fail_b"]) == (ba["fail_b"], ba["fail_a"]) and ab["fail_b"] == pytest.approx(6 / 40)
    assert (ab["broke_only_a"], ab["wins_a"]) == (ba["broke_only_b"], ba["wins_b"])
    assert ab["estimate"] == pytest.approx(-ba["estimate"]) and ab["estimate"] < 0
    assert ab["direction"] == -ba["direction"] == -1


def test_images_both_found_adversarial_at_distance_zero_are_left_out():
    a = np.array([0.0, 0.0, 1.0, 2.0, 3.0])
    b = np.array([0.0, 0.5, 1.0, 2.5, np.inf])
    res = distance_pair_test(a, b)
    assert res["n_images"] == 4 and res["n_both"] == 3 and res["broke_only_a"] == 1
    other = distance_pair_test(a[1:], b[1:])
    assert res.keys() == other.keys()
    assert all(res[k] == other[k] or (res[k] != res[k] and other[k] != other[k]) for k in res)  # NaN == NaN


def test_image_blocks_from_arrays_take_the_envelope_unless_given_one():
    dist = np.array([[[1.0, 2.0, np.inf], [0.5, np.nan, 3.0]]])  # one model, two implementations
    blocks = ImageBlocks.from_arrays(dist)
    assert blocks.d_star.tolist() == [[0.5, 2.0, 3.0]] and blocks.models == ["0"] and blocks.images.tolist() == [0, 1, 2]
    given = ImageBlocks.from_arrays(dist, d_star=np.array([[0.25, 1.0, 1.0]]))
    assert given.d_star.tolist() == [[0.25, 1.0, 1.0]] and DELTA == pytest.approx(math.log(1.05))


# --------------------------------------------------------------------------- what a report lists
def test_an_implementation_s_flags_are_listed_in_the_order_of_flags_then_by_name():
    rows = [("x/pgd", "1.0", "l2", flag) for flag in ("zz_plugin_flag", "optimality_gap", "crash", "aa_plugin_flag")]
    rows.append(("y/fmn", "2.0", "l2", "label_bug"))
    table = pd.DataFrame(rows, columns=["implementation", "library_version", "norm", "flag"])
    listed = flagged(table)
    assert listed[("x/pgd", "1.0", "l2")] == ["crash", "optimality_gap", "aa_plugin_flag", "zz_plugin_flag"]
    assert FLAGS.index("crash") < FLAGS.index("optimality_gap")
    assert listed[("y/fmn", "2.0", "l2")] == ["label_bug"] and flagged(None) == {} and flagged(table[:0]) == {}


def test_the_envelope_of_no_rows_has_the_envelope_s_columns():
    empty = envelope(pd.DataFrame(columns=["model", "norm", "sample", "implementation", "library_version",
                                           "best_distance", "status"]))
    assert list(empty.columns) == ["model", "norm", "sample", "d_star", "found_by"] and empty.empty
