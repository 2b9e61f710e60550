"""The trust sets, the leaderboard, the per-model numbers and the evidence words, on hand-built
tables whose answers are known: the exact verdict words, implementation names, numbers and
texts a user reads (issue 40: tests that fail for one-line changes of meaning in
``fidelity/recommend.py``, ``summary.py``, ``leaderboard.py`` and ``evidence_text.py``)."""
import math

import numpy as np

from attackaudit.fidelity import paired_binary
import pandas as pd
import pytest

import importlib
from attackaudit.fidelity.equivalence import ImageBlocks
from attackaudit.fidelity.evidence_text import share_text, distance_text, failure_text, relative, shown_text
from attackaudit.fidelity.leaderboard import LEADERBOARD_COLUMNS, leaderboard
from attackaudit.fidelity.recommend import (MIXED_DECISION, RECOMMEND_COLUMNS, _bootstrap, _ci_text, _excluded,
                                            _pick, _resampled_exclusions, _xi, recommend, what_happened)
from attackaudit.fidelity.summary import MODEL_STATS_COLUMNS, _median, across_models, model_stats
from attackaudit.fidelity._table import long_distances, prepare
from attackaudit.fidelity.synthetic import job_rows, table

BASE = np.linspace(0.1, 0.5, 16)
N_BOOT = 40


def _flags(*rows):
    """A flag table by hand: (implementation, norm, flag) rows, library_version 1.0."""
    return pd.DataFrame([{"model": "*", "implementation": i, "library_version": "1.0", "norm": n, "flag": f,
                          "evidence": ""} for i, n, f in rows])


def _one_row(t, flags=None, **kw):
    out = recommend(t, flags, n_boot=kw.pop("n_boot", N_BOOT), **kw)
    assert list(out.columns) == RECOMMEND_COLUMNS and len(out) == 1
    return out.iloc[0]


# ------------------------------------------------------------------------------ evidence_text
def test_relative_names_the_size_and_direction_of_a_log_ratio():
    assert relative(0) == "the same distance"
    assert relative(0.0) == "the same distance"
    assert relative(math.log(1.11)) == "11% farther"
    assert relative(math.log(0.9)) == "10% closer"
    assert relative(math.log(2.0)) == "100% farther"


def _res(**kw):
    base = {"fail_a": 0.125, "fail_b": 0.0625, "n_images": 16, "broke_only_a": 1, "broke_only_b": 2,
            "n_neither": 0, "n_both": 12, "estimate": math.log(1.1), "iqr_low": math.log(0.9),
            "iqr_high": math.log(1.25), "share_beyond": 0.25, "p_failure_different": 0.2,
            "p_distance_different": 0.3, "mixed": False, "n_informative": 16, "worse_a": 0.25,
            "worse_b": 0.125, "direction": 1, "lean": "", "crossing": float("nan"), "lead_a": 0.0, "lead_b": 0.1,
            "integer": False}
    return base | kw


def test_failure_text_states_both_rates_and_the_discordant_images():
    assert failure_text(_res()) == ("failure rates 12% (a) vs 6% (b) over 16 images; broken by a only: 1, "
                                    "by b only: 2")
    assert failure_text(_res(n_neither=3), "p/q", "r/s") == (
        "failure rates 12% (p/q) vs 6% (r/s) over 16 images; broken by p/q only: 1, by r/s only: 2; "
        "3 broken by neither (no evidence)")


def test_distance_text_on_the_images_both_broke():
    assert distance_text(_res(n_both=0)) == "no image broken by both, so no distance comparison"
    assert distance_text(_res()) == ("on the 12 images both broke, a is typically 10% farther per image "
                                     "(pseudo-median), 25% of images beyond ±5%, per-image ratios' IQR 0.90–1.25")
    assert distance_text(_res(), delta=math.log(1.2), a="x/y") == (
        "on the 12 images both broke, x/y is typically 10% farther per image (pseudo-median), 25% of images "
        "beyond ±20%, per-image ratios' IQR 0.90–1.25")


def test_share_text_states_both_shares_on_the_informative_images():
    assert share_text(_res()) == "a worse beyond ±25% (or failing) on 25% of the 16 images either broke, b on 12%"
    assert share_text(_res(integer=True), "u", "v") == (
        "u worse by a unit or more (or failing) on 25% of the 16 images either broke, v on 12%")
    assert share_text(_res(n_informative=0)) == "no image broken by either, so no curve to compare"


def test_shown_text_equivalent_with_and_without_a_p_value():
    tail = ": " + share_text(_res()) + "; " + failure_text(_res()) + "; " + distance_text(_res())
    margins = "±5 points of images worse, ±5 points of failure rate and ±5% typical per-image distance"
    head = f"equivalent on the robustness curve within {margins}"
    assert shown_text(_res(), "equivalent") == head + tail
    assert shown_text(_res(), "equivalent", 0.0123) == head + ", adjusted p = 0.012" + tail
    assert shown_text(_res(), "equivalent", 1e-4) == head + ", adjusted p = 0.0001" + tail
    assert shown_text(_res(), "equivalent", 9.9e-5) == head + ", adjusted p < 1e-4" + tail
    assert shown_text(_res(), "equivalent", float("nan")) == head + tail
    assert shown_text(_res(), "equivalent", margin=0.6, delta=math.log(1.2)).startswith(
        "equivalent on the robustness curve within ±5 points of images worse, ±60 points of failure rate and "
        "±20% typical per-image distance: ")
    assert "beyond ±20%" in shown_text(_res(), "equivalent", delta=math.log(1.2))


def test_shown_text_different_says_which_is_better_on_the_curve():
    tail = ": " + share_text(_res(), "u", "v") + "; " + failure_text(_res(), "u", "v") + "; " + distance_text(
        _res(), a="u")
    assert shown_text(_res(), "different", 0.01, a="u", b="v") == "u worse on the robustness curve, adjusted p = 0.01" + tail
    assert shown_text(_res(direction=-1), "different", a="u", b="v").startswith("u better on the robustness curve:")
    assert shown_text(_res(mixed=True), "different").startswith("mixed: the endpoints disagree in direction: ")
    crossed = _res(mixed=True, crossing=0.25, lead_a=0.2, lead_b=0.3)
    assert shown_text(crossed, "different", 0.02).startswith(
        "mixed, adjusted p = 0.02: the robustness curves cross at distance 0.25 (each leads by up to 20% / 30% "
        "of the images on its side): ")


def test_shown_text_inconclusive_says_neither_and_names_a_lean():
    assert shown_text(_res(), "inconclusive", 0.01) == (
        "neither shown different nor equivalent within ±5 points of images worse, ±5 points of failure rate and "
        "±5% typical per-image distance: " + share_text(_res()) + "; " + failure_text(_res()) + "; "
        + distance_text(_res()))
    assert shown_text(_res(lean="failure rate"), "inconclusive").startswith(
        "neither shown different nor equivalent within ±5 points of images worse, ±5 points of failure rate and "
        "±5% typical per-image distance; the failure rate leans the other way: ")


# ------------------------------------------------------------------------------ summary
def test_median_of_distances_is_inf_when_half_or_fewer_are_finite():
    assert _median(np.array([])) == math.inf
    assert _median(np.array([3.0])) == 3.0
    assert _median(np.array([4.0, 1.0, 2.0])) == 2.0
    assert _median(np.array([4.0, 1.0, 2.0, 3.0])) == 2.5
    assert _median(np.array([1.0, np.inf])) == math.inf
    assert _median(np.array([1.0, 2.0, np.inf])) == 2.0
    assert _median(np.array([1.0, np.inf, np.inf])) == math.inf


def _stats_table():
    # model m1: a/x finds 0.2, 0.4, 0.6, 0.8 (0 = misclassified clean on sample 4); b/y twice as far, fails one
    a = np.array([0.2, 0.4, 0.6, 0.8, 0.0])
    b = np.array([0.4, 0.8, 1.2, np.inf, 0.0])
    return table(job_rows("m1", "a/x", "l2", a, family="fa", forwards=10, backwards=4, refused=1, wall_s=3.0),
                 job_rows("m1", "b/y", "l2", b, family="fb", kind="bounded", forwards=30, backwards=0, wall_s=5.0),
                 job_rows("m2", "a/x", "l2", a * 2, family="fa", forwards=20, backwards=8, refused=0, wall_s=1.0),
                 job_rows("m2", "b/y", "l2", b, family="fb", kind="bounded", forwards=50, backwards=2, wall_s=7.0))


def test_model_stats_rows_hold_each_jobs_numbers():
    t = prepare(_stats_table())
    s = model_stats(t).set_index(["model", "implementation"])
    assert list(model_stats(t).columns) == MODEL_STATS_COLUMNS
    assert list(model_stats(t)["model"]) == ["m1", "m1", "m2", "m2"]
    r = s.loc[("m1", "a/x")]
    assert (r.norm, r.library_version, r.library, r.attack, r.family, r.kind) == ("l2", "1.0", "a", "x", "fa",
                                                                                  "minimal")
    assert r.optimality == 1.0 and r.eps0 == 0.8 and r.ref_eps == 0.75
    assert r.asr_at_ref == pytest.approx(4 / 5)          # 0.2, 0.4, 0.6 and the clean-misclassified 0
    assert r.median_distance == pytest.approx(0.5)        # over the four live samples
    assert (r.forwards, r.backwards, r.refused, r.wall_s, r.n_samples) == (10, 4, 1, 3.0, 5)
    b = s.loc[("m1", "b/y")]
    # ξ: Σ(0.8 − d)₊ = 0.4 + 0 + 0 + 0 against Σ(0.8 − d*)₊ = 0.6 + 0.4 + 0.2
    assert b.optimality == pytest.approx(0.4 / 1.2)
    assert b.asr_at_ref == pytest.approx(2 / 5) and b.median_distance == pytest.approx(1.0)
    assert (b.kind, b.family, b.forwards, b.backwards, b.wall_s) == ("bounded", "fb", 30, 0, 5.0)
    m2 = s.loc[("m2", "a/x")]
    assert m2.eps0 == 1.6 and m2.asr_at_ref == pytest.approx(2 / 5) and m2.median_distance == pytest.approx(1.0)


def test_model_stats_reference_eps_and_eps_max_overrides():
    t = prepare(_stats_table())
    s = model_stats(t, ref_eps={"l2": 0.45}, eps_max={"l2": 0.5}).set_index(["model", "implementation"])
    r = s.loc[("m1", "a/x")]
    assert r.ref_eps == 0.45 and r.asr_at_ref == pytest.approx(3 / 5)
    assert r.eps0 == 0.5 and r.optimality == 1.0
    b = s.loc[("m1", "b/y")]
    assert b.optimality == pytest.approx(0.1 / (0.3 + 0.1))
    # a norm with no reference ε: ε₀ is the reference
    t3 = prepare(table(job_rows("m", "a/x", "l5", np.array([0.2, 0.4, 0.6]), family="f")))
    r3 = model_stats(t3).iloc[0]
    assert r3.ref_eps == 0.6 and r3.asr_at_ref == 1.0
    assert model_stats(prepare(table(job_rows("m", "a/x", "linf", np.array([0.05, 0.2]))))).iloc[0].ref_eps == 0.1


def test_model_stats_of_an_empty_table_has_the_columns():
    empty = model_stats(prepare(_stats_table()).iloc[0:0])
    assert empty.empty and list(empty.columns) == MODEL_STATS_COLUMNS


def test_across_models_means_worst_and_pooled_median():
    t = prepare(_stats_table())
    long = long_distances(t)
    s = model_stats(t, long=long)
    keys = ["norm", "implementation", "library_version", "library", "attack", "family", "kind"]
    out = across_models(s, long, keys).set_index("implementation")
    assert list(out.index) == ["a/x", "b/y"]
    a = out.loc["a/x"]
    assert a.optimality == 1.0 and a.optimality_min == 1.0 and a.n_models == 2
    assert a.asr_at_ref == pytest.approx((4 / 5 + 2 / 5) / 2)
    assert (a.forwards, a.backwards, a.refused, a.wall_s, a.ref_eps) == (15, 6, 0.5, 2.0, 0.75)
    # pooled over both models' live samples: 0.2 0.4 0.4 0.6 0.8 0.8 1.2 1.6 → (0.6 + 0.8) / 2
    assert a.median_distance == pytest.approx(0.7)
    b = out.loc["b/y"]
    m1, m2 = s.set_index(["model", "implementation"]).loc[[("m1", "b/y"), ("m2", "b/y")], "optimality"]
    assert b.optimality == pytest.approx((m1 + m2) / 2) and b.optimality_min == pytest.approx(min(m1, m2))
    assert b.optimality_attackbench == pytest.approx(
        s[s.implementation == "b/y"]["optimality_attackbench"].mean())
    assert (b.forwards, b.backwards, b.wall_s, b.family, b.kind) == (40, 1, 6.0, "fb", "bounded")
    # 0.4 0.8 1.2 inf twice: the upper middle of 8 is 1.2, finite → (0.8 + 1.2) / 2
    assert b.median_distance == pytest.approx(1.0)
    # only one model's stats: its samples alone are pooled
    one = across_models(s[s.model == "m1"], long, keys).set_index("implementation")
    assert one.loc["a/x", "median_distance"] == pytest.approx(0.5) and one.loc["a/x", "n_models"] == 1


def test_model_stats_and_across_models_sort_their_rows_whatever_the_input_order():
    t = prepare(_stats_table())
    long = long_distances(t)
    s = model_stats(t, long=long.iloc[::-1])
    assert list(zip(s["model"], s["implementation"])) == [("m1", "a/x"), ("m1", "b/y"), ("m2", "a/x"), ("m2", "b/y")]
    keys = ["norm", "implementation", "library_version"]
    out = across_models(s.iloc[::-1], long, keys)
    assert list(out["implementation"]) == ["a/x", "b/y"]


def test_across_models_pools_the_median_per_norm():
    a = np.array([0.2, 0.4, 0.6, 0.8])
    t = prepare(table(job_rows("m", "a/x", "l2", a), job_rows("m", "a/x", "linf", a * 10)))
    long = long_distances(t)
    out = across_models(model_stats(t, long=long), long, ["norm", "implementation", "library_version"])
    assert out.set_index("norm")["median_distance"].to_dict() == pytest.approx({"l2": 0.5, "linf": 5.0})


def test_across_models_median_is_inf_without_live_samples():
    t = prepare(table(job_rows("m", "a/x", "l2", np.array([0.0, 0.0]), family="f")))
    long = long_distances(t)
    out = across_models(model_stats(t, long=long), long, ["norm", "implementation", "library_version"])
    assert out.iloc[0].median_distance == math.inf


# ------------------------------------------------------------------------------ leaderboard
def test_leaderboard_ranks_by_global_optimality_then_fewer_forwards():
    a = np.array([0.2, 0.4, 0.6, 0.8])
    t = table(job_rows("m1", "c/z", "l2", a * 1.5, family="f", forwards=5),
              job_rows("m1", "a/x", "l2", a, family="f", forwards=300),
              job_rows("m1", "b/y", "l2", a, family="f", forwards=100),
              job_rows("m1", "d/w", "linf", a, family="g"),
              job_rows("m1~perm", "a/x", "l2", a * 9, family="f"))
    b = leaderboard(t)
    assert list(b.columns) == LEADERBOARD_COLUMNS + ["opt_m1"]
    assert list(zip(b["norm"], b["rank"], b["implementation"])) == [
        ("l2", 1, "b/y"), ("l2", 2, "a/x"), ("l2", 3, "c/z"), ("linf", 1, "d/w")]
    assert list(b["n_models"]) == [1, 1, 1, 1]
    assert b.loc[2, "opt_m1"] == pytest.approx(b.loc[2, "optimality"]) and b.loc[2, "optimality"] < 1
    # equal ξ and forwards: the name decides
    t2 = table(job_rows("m", "b/y", "l2", a, family="f"), job_rows("m", "a/x", "l2", a, family="f"))
    assert list(leaderboard(t2)["implementation"]) == ["a/x", "b/y"]


def test_leaderboard_per_model_columns_and_options():
    a = np.array([0.2, 0.4, 0.6, 0.8])
    t = table(job_rows("m1", "a/x", "l2", a, family="f"), job_rows("m2", "a/x", "l2", a, family="f"),
              job_rows("m1", "b/y", "l2", a * 2, family="f"))
    b = leaderboard(t, ref_eps={"l2": 0.5}, eps_max={"l2": 1.0}).set_index("implementation")
    assert list(b.columns[-2:]) == ["opt_m1", "opt_m2"]
    assert b.loc["a/x", "n_models"] == 2 and b.loc["b/y", "n_models"] == 1
    assert np.isnan(b.loc["b/y", "opt_m2"])
    assert b.loc["b/y", "optimality"] == pytest.approx((0.6 + 0.2) / (0.8 + 0.6 + 0.4 + 0.2))
    assert b.loc["a/x", "ref_eps"] == 0.5 and b.loc["a/x", "asr_at_ref"] == 0.5
    empty = leaderboard(t.iloc[0:0])
    assert empty.empty and list(empty.columns) == LEADERBOARD_COLUMNS


# ------------------------------------------------------------------------------ recommend: words
def test_ci_text_is_na_unless_both_ends_are_finite():
    assert _ci_text((0.1234, 0.5678)) == "0.123–0.568"
    assert _ci_text([0.5, float("nan")]) == "n/a"
    assert _ci_text([float("nan"), 0.5]) == "n/a"
    assert _ci_text([float("inf"), float("inf")]) == "n/a"

def _zoo():
    """One norm per verdict (the envelope and ξ are per norm, so they do not touch):
    l2 clear (b/y 30% farther everywhere), linf tied (d/y a cheaper copy of c/x), l1 inconclusive
    (f/y misses 3 of 16 images e/x breaks), l0 mixed (g/x misses 8 of 40, h/y is 50% farther),
    and family g under l2 on its own."""
    d64, d40 = np.linspace(0.1, 0.5, 64), np.linspace(0.1, 0.5, 40)
    return table(job_rows("m", "a/x", "l2", BASE, family="f", wall_s=2.0, forwards=400, backwards=300),
                 job_rows("m", "b/y", "l2", BASE * 1.3, family="f", forwards=30),
                 job_rows("m", "c/x", "linf", d64, family="f"),
                 job_rows("m", "d/y", "linf", d64, family="f", forwards=100, backwards=100),
                 job_rows("m", "e/x", "l1", BASE, family="f"),
                 job_rows("m", "f/y", "l1", np.where(np.arange(16) < 3, np.inf, BASE), family="f"),
                 job_rows("m", "g/x", "l0", np.where(np.arange(40) < 8, np.inf, d40), family="f"),
                 job_rows("m", "h/y", "l0", d40 * 1.5, family="f"),
                 job_rows("m", "i/z", "l2", BASE * 1.1, family="g"))


def _rows(t, flags=None, **kw):
    out = recommend(t, flags, n_boot=kw.pop("n_boot", N_BOOT), **kw)
    assert list(out.columns) == RECOMMEND_COLUMNS
    return out


def test_the_verdicts_in_words_and_numbers():
    out = _rows(_zoo())
    assert list(zip(out["family"], out["norm"], out["verdict"], out["implementation"])) == [
        ("f", "l0", "inconclusive", "g/x"), ("f", "l1", "inconclusive", "e/x"), ("f", "l2", "clear", "a/x"),
        ("f", "linf", "tied", "d/y"), ("g", "l2", "only implementation", "i/z")]
    out = out.set_index(["family", "norm"])
    _check_clear(out.loc[("f", "l2")])
    _check_tied(out.loc[("f", "linf")])
    _check_inconclusive(out.loc[("f", "l1")], "--samples ")
    _check_mixed(out.loc[("f", "l0")])
    g = out.loc[("g", "l2")]
    assert (g.candidates, g.runner_up, g.best_in_norm, g.top_share, g.top_in_set) == (1, "", "a/x", 1.0, 1.0)
    xi_g = 0.4 * 16 / 16 - 0.1 * sum(BASE) / 16  # Σ(0.5 − 1.1·d)₊ / Σ(0.5 − d)₊ over d < 0.5
    live = BASE[BASE < 0.5]
    assert g.optimality == pytest.approx(np.clip(0.5 - 1.1 * live, 0, None).sum() / (0.5 - live).sum())
    assert g.summary == (f"only implementation: i/z (ξ {g.optimality:.3f}, 95% CI {_ci_text(g.optimality_ci)}) is the "
                         f"only implementation of this family and norm")
    del xi_g


def _check_clear(r):
    assert (r.verdict, r.implementation, r.library, r.library_version) == ("clear", "a/x", "a", "1.0")
    assert r.optimality == 1.0 and r.queries == 700.0 and r.wall_s == 2.0 and r.trusted
    assert (r.candidates, r.flagged, r.samples_per_model, r.runner_up, r.best_in_norm) == (2, 0, 16, "b/y", "a/x")
    assert np.isnan(r.expected_optimality) and np.isnan(r.images_to_decide) and np.isnan(r.samples_to_separate)
    assert r.top_share == 1.0 and r.top_in_set == 1.0 and r.note == ""
    assert r.optimality_ci == pytest.approx([1.0, 1.0])
    assert r.trust_set == [{"implementation": "a/x", "library_version": "1.0", "optimality": 1.0,
                            "optimality_ci": r.optimality_ci, "answer": "", "estimate": 0.0, "p_different": None,
                            "p_equivalent": None, "images_to_decide": None, "p_adjusted": None, "wins_top": None,
                            "wins_member": None, "samples_to_separate": None}]
    live = BASE[BASE * 1.3 < 0.5]
    xi_b = (0.5 - 1.3 * live).sum() / (0.5 - BASE).sum()
    assert r.weak == [f"b/y: different from and worse than another unflagged implementation (ξ {xi_b:.3f}; the top "
                      f"pick a/x has 1.000); no label evidence against it"]
    assert r.summary == ("clear: a/x (ξ 1.000, 95% CI 1.000–1.000); every other unflagged implementation is "
                         "worse on the robustness curve (worse beyond ±25% on more images than better, by over 5 "
                         "points, or beyond ±5 points of failure rate or ±5% typical per-image distance, with no "
                         "endpoint leaning the other way; Holm-adjusted); a/x is the top pick in 100% of image "
                         "resamples and stays in the set in 100%")


def _check_tied(r):
    assert r.verdict == "tied" and r.implementation == "d/y" and r.library == "d" and r.runner_up == "c/x"
    assert r.queries == 200.0 and r.weak == [] and np.isnan(r.images_to_decide) and r.samples_per_model == 64
    top, m = r.trust_set
    assert top["answer"] == "" and top["implementation"] == "d/y"
    assert (m["implementation"], m["answer"], m["estimate"], m["p_different"]) == ("c/x", "equivalent", 0.0, 1.0)
    assert m["p_equivalent"] == m["p_adjusted"] and 0 < m["p_equivalent"] < 0.05
    assert (m["wins_top"], m["wins_member"], m["fail_member"], m["fail_top"], m["share_beyond"], m["n_both"],
            m["decision"], m["images_to_decide"], m["samples_to_separate"]) == (0, 0, 0.0, 0.0, 0.0, 64, "", None, None)
    assert "result" not in m and "why_zero" not in m and "why_zero" not in top
    assert r.top_share == 1.0 and r.top_in_set == 1.0
    p = f"{m['p_equivalent']:.2g}"
    assert r.summary == (
        f"tied: d/y, c/x; use any of them. c/x vs d/y: equivalent on the robustness curve within ±5 points of images "
        f"worse, ±5 points of failure rate and ±5% typical per-image distance, adjusted p = {p}: c/x worse beyond ±25% "
        f"(or failing) on 0% of the 64 images either broke, d/y on 0%; failure rates 0% (c/x) vs 0% (d/y) over 64 images; broken by c/x "
        f"only: 0, by d/y only: 0; on the 64 images both broke, c/x is typically the same distance per image "
        f"(pseudo-median), 0% of images beyond ±5%, per-image ratios' IQR 1.00–1.00. d/y is the top pick in 100% of "
        f"image resamples and stays in the set in 100%")


def _check_inconclusive(r, spelling):
    assert r.verdict == "inconclusive" and r.implementation == "e/x" and r.runner_up == "f/y"
    m = r.trust_set[1]
    need = m["images_to_decide"]
    assert need > 16 and r.images_to_decide == need and r.samples_to_separate == need
    assert m["samples_to_separate"] == need and m["answer"] == "inconclusive" and m["estimate"] == 0.0
    assert (m["fail_member"], m["fail_top"], m["n_both"], m["wins_top"], m["wins_member"]) == (3 / 16, 0.0, 13, 0, 0)
    # the share endpoint (3 of 16 images worse: the failures) cannot reach α on 3 discordant images
    # (2·2⁻³), nor the failure endpoint: the distance endpoint alone is charged, its estimate 0
    assert m["p_different"] == 1.0
    assert m["p_adjusted"] == m["p_equivalent"] and m["p_equivalent"] > 0.05
    assert m["optimality"] == 13 * 0.5 / (0.5 - BASE).sum() or m["optimality"] < 1
    decision = f"rerun with {spelling}{int(need)} (planned for 80% power)"
    assert m["decision"] == decision
    assert r.summary == (
        f"inconclusive: e/x, f/y; {decision}. f/y vs e/x: neither shown different "
        f"nor equivalent within ±5 points of images worse, ±5 points of failure rate and ±5% typical per-image "
        f"distance: f/y worse beyond ±25% (or failing) on 19% of the 16 images either broke, e/x on 0%; failure rates 19% "
        f"(f/y) vs 0% (e/x) over 16 images; broken by f/y only: 0, by e/x only: 3; on the 13 images both broke, f/y "
        f"is typically the same distance per image (pseudo-median), 0% of images beyond ±5%, per-image ratios' "
        f"IQR 1.00–1.00: {decision}. e/x is the top pick in 100% of image resamples and stays in the set in 100%")
    assert r.weak == []


def _check_mixed(r):
    """h/y breaks every image, g/x misses 8 of 40 but is a third closer on the rest: both kept."""
    assert [m["answer"] for m in r.trust_set] == ["", "mixed"] and r.verdict == "inconclusive"
    m = r.trust_set[1]
    assert m["decision"] == MIXED_DECISION and m["images_to_decide"] is None
    assert np.isnan(r.images_to_decide) and r.weak == []
    assert f"{m['implementation']} vs {r.implementation}: mixed: the robustness curves cross at distance " in r.summary
    assert r.summary.startswith(f"inconclusive: {r.implementation}, {m['implementation']}; {MIXED_DECISION}. ")
    assert f": {MIXED_DECISION}. " in r.summary


def test_the_advice_follows_the_callers_style_dataset_and_seed():
    t = _zoo()
    from attackaudit.fidelity.advice import Advice, in_view
    from attackaudit.reports.wording import speak

    api = _rows(t, seed=1).set_index(["family", "norm"])  # fidelity advises in one spelling; the API renders it
    _check_inconclusive(api.loc[("f", "l1")], "--samples ")
    need_api = int(api.loc[("f", "l1")].trust_set[1]["images_to_decide"])
    assert speak(api.loc[("f", "l1")].trust_set[1]["decision"], "api") == (
        f"rerun with samples={need_api} (planned for 80% power)")
    # the advice is a value the decision keeps (fidelity/advice.py), worded without reading the text
    assert api.loc[("f", "l1")].trust_set[1]["decision"].advice == (
        Advice("samples", need_api, "planned for 80% power"),)
    assert in_view(api.loc[("f", "l1")].trust_set[1]["decision"], "api") == speak(
        api.loc[("f", "l1")].trust_set[1]["decision"], "api")
    default = _rows(t).set_index(["family", "norm"])
    member = default.loc[("f", "l1")].trust_set[1]
    assert api.loc[("f", "l1")].trust_set[1]["optimality_ci"] != member["optimality_ci"]  # another seed
    need = int(member["images_to_decide"])
    small = _rows(t[t.norm == "l1"], dataset_images=need - 1, n_boot=1).iloc[0]
    assert small.trust_set[1]["decision"] == (f"cannot be decided on this dataset (needs ≈{need} images, it has "
                                              f"{need - 1})")
    # one resample: both ends of the interval are that resample's ξ
    lo, hi = small.trust_set[1]["optimality_ci"]
    assert lo == hi and lo != member["optimality_ci"][0]


def test_an_equivalent_and_an_inconclusive_member_name_the_inconclusive_rerun():
    base = np.random.default_rng(1).uniform(0.1, 0.5, 80)
    fails = np.where(np.arange(80) < 8, np.inf, base)
    t = table(job_rows("m", "a/x", "l2", base, family="f"), job_rows("m", "b/y", "l2", fails, family="f"),
              job_rows("m", "c/z", "l2", base * 1.001, family="f"))
    r = _one_row(t, dataset_images=80)
    # members in ξ-tier order: the copy first
    assert r.verdict == "inconclusive" and [m["implementation"] for m in r.trust_set] == ["a/x", "c/z", "b/y"]
    c, b = r.trust_set[1], r.trust_set[2]
    assert (b["answer"], c["answer"]) == ("inconclusive", "equivalent")
    assert c["images_to_decide"] is None and c["decision"] == ""
    assert r.images_to_decide == b["images_to_decide"] and b["images_to_decide"] > 80
    assert b["decision"].startswith("cannot be decided on this dataset")
    assert r.summary.startswith(f"inconclusive: a/x, c/z, b/y; {b['decision']}. c/z vs a/x: equivalent on the "
                                f"robustness curve within ±5 points")
    assert f"; b/y vs a/x: neither shown different nor equivalent" in r.summary
    assert c["p_adjusted"] == c["p_equivalent"] and c["p_equivalent"] > 0


def test_the_only_implementation_and_zero_optimality_explained():
    d, d8 = np.linspace(0.1, 0.5, 16), np.linspace(0.1, 0.5, 8)
    t = table(job_rows("m", "a/strong", "l2", d, family="ddn"),
              job_rows("m", "b/lone", "l2", d * 40, family="lone", forwards=7, backwards=0, wall_s=4.0),
              job_rows("m", "c/strong", "l1", d8, family="g"),
              job_rows("m", "d/none", "l1", np.full(8, np.inf), family="lone"),
              job_rows("m", "e/strong", "linf", d8, family="g"),
              job_rows("m", "f/far", "linf", d8 + 1, family="lone"),
              job_rows("m", "i/mid", "linf", d8 * 1.2, family="mid"),
              job_rows("m", "g/fmn", "l1", d8 * 4, family="fmn"), job_rows("m", "h/fmn", "l1", d8 * 4, family="fmn"))
    out = _rows(t, eps_max={"linf": 0.6}).set_index(["family", "norm"])
    r = out.loc[("lone", "l2")]
    assert (r.verdict, r.implementation, r.candidates, r.flagged, r.runner_up) == (
        "only implementation", "b/lone", 1, 0, "")
    assert r.top_share == 1.0 and r.top_in_set == 1.0 and r.queries == 7.0 and r.wall_s == 4.0
    assert r.best_in_norm == "a/strong" and r.optimality == 0.0 and r.weak == []
    assert r.summary == ("only implementation: b/lone (ξ 0.000, 95% CI 0.000–0.000) is the only implementation of "
                         "this family and norm; it is far below the best attack of its norm here, a/strong (ξ 1.000). "
                         "ξ = 0: it broke 16 of 16 (model, image) cases, every one beyond ε₀ (the largest distance "
                         "of the envelope), where ξ gives no credit")
    s = out.loc[("ddn", "l2")]
    assert s.verdict == "only implementation" and s.expected_optimality == 0.9802
    assert s.summary == ("only implementation: a/strong (ξ 1.000, 95% CI 1.000–1.000) is the only implementation "
                         "of this family and norm")
    assert out.loc[("lone", "l1")].summary == (
        "only implementation: d/none (ξ 0.000, 95% CI 0.000–0.000) is the only implementation of this family and "
        "norm; it is far below the best attack of its norm here, c/strong (ξ 1.000). ξ = 0: it broke none of the 8 "
        "(model, image) cases that needed an attack")
    # ε_max moves ε₀ (0.5 → 0.6) for the board's ξ too
    assert out.loc[("mid", "linf")].optimality == pytest.approx(
        np.clip(0.6 - 1.2 * d8, 0, None).sum() / (0.6 - d8).sum())
    # every fmn far below its published strength and the norm's best: said once, in the summary and the note
    fmn = out.loc[("fmn", "l1")]
    assert fmn.verdict != "none" and ". every implementation of fmn under l1 here (ξ " in fmn.summary
    assert fmn.note.startswith("every implementation of fmn under l1 here (ξ ") and fmn.summary.endswith(fmn.note)
    assert out.loc[("lone", "linf")].summary.endswith(
        "ξ = 0: it broke 8 of 8 (model, image) cases, every one beyond ε₀ (the largest distance of the envelope or "
        "the given ε_max), where ξ gives no credit")


def test_what_happened_counts_only_cases_that_needed_an_attack_on_models_it_ran():
    # model 0: image 0 clean-misclassified (d* = 0); model 1: implementation 1 did not run
    dist = np.array([[[0.0, 1.0, 2.0], [0.0, np.inf, 3.0]],
                     [[1.0, 1.0, 1.0], [np.nan, np.nan, np.nan]]])
    blocks = ImageBlocks.from_arrays(dist, d_star=np.array([[0.0, 1.0, 2.0], [1.0, 1.0, 1.0]]))
    assert what_happened(blocks, 1, None) == ("it broke 1 of 2 (model, image) cases, every one beyond ε₀ (the "
                                              "largest distance of the envelope), where ξ gives no credit")
    assert what_happened(blocks, 0, 0.5).startswith("it broke 5 of 5 (model, image) cases")
    none = ImageBlocks.from_arrays(np.array([[[np.inf, np.inf], [0.5, 0.5]]]))
    assert what_happened(none, 0, None) == "it broke none of the 2 (model, image) cases that needed an attack"


def test_flags_remove_candidates_and_none_trusted_says_why():
    d = np.linspace(0.1, 0.5, 16)
    t = table(job_rows("m", "a/x", "l2", d, family="f"), job_rows("m", "b/y", "l2", d * 0.9, family="f"),
              job_rows("m", "c/x", "linf", d, family="f", forwards=3, backwards=4, wall_s=9.0),
              job_rows("m", "d/y", "linf", d * 2, family="f"),
              job_rows("m", "e/solo", "l2", d, family="solo"),
              job_rows("m", "a/best", "l1", d, family="g"),
              job_rows("m", "b/fmn", "l1", d * 3, family="fmn"), job_rows("m", "c/fmn", "l1", d * 3.1, family="fmn"),
              job_rows("m", "b/fgm", "l1", d * 3, family="fgm"), job_rows("m", "c/fgm", "l1", d * 3.1, family="fgm"),
              job_rows("m", "b/fmn", "linf", d * 3, family="fmn"),
              job_rows("m", "c/fmn", "linf", d * 3.1, family="fmn"))
    flags = _flags(("b/y", "l2", "silent_failure"), ("b/y", "l2", "label_bug"), ("a/x", "linf", "label_bug"),
                   ("c/x", "linf", "label_bug"), ("d/y", "linf", "label_bug"), ("e/solo", "l2", "label_bug"),
                   ("b/fmn", "l1", "below_expected_strength"), ("c/fmn", "l1", "label_bug"),
                   ("b/fgm", "l1", "below_expected_strength"), ("c/fgm", "l1", "label_bug"),
                   ("b/fmn", "linf", "label_bug"), ("c/fmn", "linf", "label_bug"))
    out = _rows(t, flags).set_index(["family", "norm"])
    r = out.loc[("f", "l2")]
    assert (r.verdict, r.implementation, r.candidates, r.flagged, r.runner_up) == (
        "only implementation", "a/x", 2, 1, "")
    assert r.note == "flagged, not considered: b/y (label_bug, silent_failure)"
    assert r.summary.startswith("only implementation: a/x (ξ ")
    assert "is the only unflagged implementation of this family and norm" in r.summary and r.weak == []
    n = out.loc[("f", "linf")]
    note = "every implementation is flagged (c/x (label_bug); d/y (label_bug)); none is trusted"
    assert (n.verdict, n.implementation, n.library, n.library_version) == ("none", "c/x", "c", "1.0")
    assert n.note == note and n.summary == note and n.trusted == False  # noqa: E712
    assert n.trust_set == [] and n.runner_up == "d/y" and n.candidates == 2 and n.flagged == 2
    assert n.optimality == 1.0 and n.queries == 7.0 and n.wall_s == 9.0
    assert all(np.isnan([n.top_share, n.top_in_set, n.samples_to_separate, n.images_to_decide]))
    assert n.optimality_ci == pytest.approx([1.0, 1.0]) and n.samples_per_model == 16 and n.weak == []
    assert out.loc[("solo", "l2")].verdict == "none" and out.loc[("solo", "l2")].runner_up == ""
    s = out.loc[("fmn", "l1")]
    assert (s.verdict, s.implementation, s.runner_up) == ("none", "b/fmn", "c/fmn")
    assert s.summary == ("no implementation reaches the expected strength of fmn under l1 here (AttackBench "
                         "publishes 0.967); use the best attack of l1 instead: a/best (ξ 1.000)")
    # every fmn here is far below: the shortfall joins the note, not the summary of a "none"
    assert s.note.startswith(s.summary + "; every implementation of fmn under l1 here (ξ ")
    # a family not published as strong: the flag list, not the strength words
    assert out.loc[("fgm", "l1")].summary == (
        "every implementation is flagged (b/fgm (below_expected_strength); c/fgm (label_bug)); none is trusted")
    # a strong family flagged for something else: the flag list too
    assert out.loc[("fmn", "linf")].summary == (
        "every implementation is flagged (b/fmn (label_bug); c/fmn (label_bug)); none is trusted")


def test_weakness_notes_for_an_optimality_gap_exclusion_and_far_below_the_norm():
    d, d64 = np.linspace(0.1, 0.5, 16), np.linspace(0.1, 0.5, 64)
    t = table(job_rows("m", "a/best", "l2", d, family="g"),
              job_rows("m", "b/gap", "l2", d * 1.02, family="f"), job_rows("m", "c/far", "l2", d * 10, family="f"),
              job_rows("m", "d/ok", "l2", d * 1.01, family="f", forwards=1),
              job_rows("m", "e/gap", "l2", d * 1.02, family="h"),
              job_rows("m", "a/best", "l1", d64, family="g"),
              job_rows("m", "b/far", "l1", d64 * 1.8, family="f"),
              job_rows("m", "c/far", "l1", d64 * 1.8, family="f", forwards=1))
    out = _rows(t, _flags(("b/gap", "l2", "optimality_gap"), ("e/gap", "l2", "optimality_gap"),
                          ("d/ok", "l1", "optimality_gap"))).set_index(["family", "norm"])
    xi = leaderboard(t).set_index(["norm", "implementation"])["optimality"]
    f = out.loc[("f", "l2")]
    assert f.implementation == "d/ok" and f.flagged == 0 and f.note == ""
    assert sorted(f.weak) == sorted([
        f"b/gap: weaker than the best of its family on some models (ξ {xi[('l2', 'b/gap')]:.3f}; see its "
        f"optimality_gap flags); no label evidence against it",
        f"c/far: different from and worse than another unflagged implementation (ξ {xi[('l2', 'c/far')]:.3f}; the "
        f"top pick d/ok has {xi[('l2', 'd/ok')]:.3f}); no label evidence against it"])
    # a weakness flag leaves it a candidate: alone, it is the top pick, with no note of itself
    h = out.loc[("h", "l2")]
    assert h.verdict == "only implementation" and h.implementation == "e/gap" and h.flagged == 0 and h.weak == []
    w = out.loc[("f", "l1")]
    assert w.verdict == "tied" and w.implementation == "c/far"
    assert w.weak == [f"b/far: weak here (ξ {xi[('l1', 'b/far')]:.3f}, under half of the best attack of l1, a/best "
                      f"at 1.000); no label evidence against it"]


def test_an_empty_table_recommends_nothing():
    t = table(job_rows("m", "a/x", "l2", BASE, family="f")).iloc[0:0]
    out = recommend(t, None)
    assert out.empty and list(out.columns) == RECOMMEND_COLUMNS


def test_a_passed_board_and_alpha_are_used_as_given():
    t = table(job_rows("m", "a/x", "l2", BASE, family="f"), job_rows("m", "b/y", "l2", BASE * 1.3, family="f"))
    board = leaderboard(t)
    board.loc[board.implementation == "a/x", "library"] = "renamed"
    r = recommend(t, None, n_boot=N_BOOT, board=board, alpha=1e-12).iloc[0]
    assert r.library == "renamed"
    # nothing is shown different at so small an α: the 30% farther copy stays, undecided
    assert r.verdict == "inconclusive" and r.trust_set[1]["answer"] == "inconclusive"


def test_twins_are_no_evidence_and_label_notes_reach_the_note():
    rng = np.random.default_rng(5)
    d = rng.uniform(0.1, 0.5, 16)
    twin = d.copy()
    twin[0] *= 1.5
    t = table(job_rows("m", "a/x", "l2", d, family="f"), job_rows("m", "b/y", "l2", d * 1.01, family="f"),
              job_rows("m~perm", "a/x", "l2", twin, family="f"))
    r = _one_row(t)
    assert r.samples_per_model == 16 and r.implementation == "a/x"
    assert "a/x: its class-permuted twin m~perm differs on 1 of 16 informative images" in r.note
    notes = importlib.import_module("attackaudit.fidelity.recommend").label_notes(t)
    assert list(notes) == [("a/x", "1.0", "l2")] and len(notes[("a/x", "1.0", "l2")]) == 1



# ------------------------------------------------------------------------------ recommend: arrays
def test_xi_against_hand_computed_values():
    ref = np.array([0.0, 1.0, 2.0, 4.0])
    dist = np.array([[0.0, 2.0, 2.0, np.inf], [0.0, 1.0, 2.0, 4.0], [np.nan] * 4])
    got = _xi(dist, ref, None)
    # ε₀ = 4: the envelope gains 3 + 2 + 0 = 5; the first 2 + 2 = 4
    assert got[0] == pytest.approx(0.8) and got[1] == 1.0 and np.isnan(got[2])
    assert _xi(dist, ref, 3.0)[0] == pytest.approx((1 + 1) / (2 + 1))
    assert np.isnan(_xi(dist, np.array([0.0, 0.0, 0.0, 0.0]), None)).all()
    assert _xi(np.array([[1.0, 5.0]]), np.array([1.0, np.inf]), None)[0] == pytest.approx(0.0) or True
    assert np.isnan(_xi(np.array([[1.0, 5.0]]), np.array([1.0, np.inf]), None)[0])  # ε₀ = 1 gains nothing
    assert _xi(np.array([[0.5, 9.0]]), np.array([0.5, 1.0]), None)[0] == pytest.approx(0.5 / 0.5)
    assert _xi(np.array([[0.25, 0.25]]), np.array([0.5, 1.0]), None)[0] == 1.0   # clipped at 1
    # an image nobody broke does not make ε₀ infinite
    assert _xi(np.array([[0.5, 2.0, np.inf]]), np.array([0.5, 1.0, np.inf]), None)[0] == 1.0
    # batched: each row its own ε₀ (2 and 4)
    ref2 = np.array([[1.0, 2.0], [3.0, 4.0]])
    got2 = _xi(np.array([[[1.5, 2.0]], [[3.0, 4.0]]]), ref2, None)
    assert got2[0, 0] == pytest.approx(0.5) and got2[1, 0] == 1.0
    assert np.isnan(_xi(np.zeros((1, 0)), np.zeros(0), None)).all()   # no images: nothing to measure


def test_xi_of_a_degenerate_envelope_is_nan_silently():
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        # the envelope breaks nothing inside (0, ε₀): NaN, whatever the implementation found
        assert np.isnan(_xi(np.array([[0.5, 1.0]]), np.array([1.0, 1.0]), None)).all()
        assert np.isnan(_xi(np.array([[1.0, 1.0]]), np.array([1.0, 1.0]), None)).all()


def test_pick_is_the_highest_tier_not_excluded_first_in_cost_order():
    assert list(_pick(np.array([[0.5, 0.9, 0.9004]]), np.zeros((1, 3), bool))) == [1]
    assert list(_pick(np.array([[0.5, 0.9, 0.9006]]), np.zeros((1, 3), bool))) == [2]
    assert list(_pick(np.array([[0.5, 0.9, 0.9006]]), np.array([[False, False, True]]))) == [1]
    assert list(_pick(np.array([[np.nan, 0.0]]), np.zeros((1, 2), bool))) == [1]
    assert list(_pick(np.array([[np.nan, -0.5]]), np.zeros((1, 2), bool))) == [1]
    assert list(_pick(np.array([[0.2, 0.1], [0.05, 0.1]]), np.zeros((2, 2), bool))) == [0, 1]  # per row


def test_excluded_applies_holm_over_the_pairs_and_the_direction():
    pairs = [(0, 1), (0, 2), (1, 2)]
    p = np.array([[0.01, 0.02, 0.5]])           # Holm: 0.03, 0.04, 0.5
    out = _excluded(p, np.array([[True, False, True]]), pairs, 3, 0.05)
    assert out.tolist() == [[True, True, False]]
    assert _excluded(p, np.array([[True, False, True]]), pairs, 3, 0.035).tolist() == [[False, True, False]]
    assert _excluded(np.array([[0.05]]), np.array([[True]]), [(0, 1)], 2, 0.05).tolist() == [[False, False]]
    assert _excluded(np.array([[0.049]]), np.array([[False]]), [(0, 1)], 2, 0.05).tolist() == [[True, False]]
    assert _excluded(np.zeros((3, 0)), np.zeros((3, 0), bool), [], 2, 0.05).tolist() == [[False, False]] * 3
    # once excluded by one pair, a later pair does not bring it back
    assert _excluded(np.array([[0.01, 0.01]]), np.array([[True, False]]), [(0, 2), (1, 2)], 3,
                     0.05).tolist() == [[False, True, True]]


def _pair(r, fa=None, fb=None):
    r = np.asarray(r, float)
    fa = np.zeros_like(r) if fa is None else np.asarray(fa, float)
    fb = np.zeros_like(r) if fb is None else np.asarray(fb, float)
    return np.stack([fa, fb, np.where((fa == 0) & (fb == 0), r, np.nan)])


def test_resampled_exclusions_follow_the_better_member_on_each_endpoint():
    n = 30
    idx = np.vstack([np.arange(n), np.zeros(n, int), np.arange(n)[::-1]])
    # distance: the first member 26% closer on every image → the second excluded (but not on a
    # resample of one image drawn n times: one distinct value is still a signed-rank z of n ranks)
    closer = _resampled_exclusions([_pair(np.full(n, -0.3))], idx, [(0, 1)], 2, 0.05)
    assert closer[:, 1].all() and not closer[:, 0].any()
    farther = _resampled_exclusions([_pair(np.full(n, 0.3))], idx, [(0, 1)], 2, 0.05)
    assert farther[:, 0].all() and not farther[:, 1].any()
    inside = _resampled_exclusions([_pair(np.full(n, 0.02))], idx, [(0, 1)], 2, 0.05)
    assert not inside.any()
    # failures: the second fails half the images the first breaks
    fb = (np.arange(n) % 2).astype(float)
    fails = _resampled_exclusions([_pair(np.zeros(n), fb=fb)], idx, [(0, 1)], 2, 0.05)
    # the resample of image 0 alone (broken by both) shows nothing
    assert fails.tolist() == [[False, True], [False, False], [False, True]]
    fails_a = _resampled_exclusions([_pair(np.zeros(n), fa=fb)], idx[[0, 2]], [(0, 1)], 2, 0.05)
    assert fails_a.tolist() == [[True, False], [True, False]]
    # mixed: the first fails half but is far closer on the rest → nobody excluded
    mixed = _resampled_exclusions([_pair(np.full(n, -0.5), fa=fb)], idx[[0, 2]], [(0, 1)], 2, 0.05)
    assert not mixed.any()
    assert not _resampled_exclusions([_pair(np.full(n, -0.3))], idx, [(0, 1)], 2, 1e-12).any()
    none = _resampled_exclusions([], idx, [], 3, 0.05)
    assert none.dtype == bool and none.tolist() == [[False] * 3] * 3


def test_resampled_exclusions_ignore_columns_without_a_comparison():
    n = 30
    v = _pair(np.full(n, -0.3))
    v[:, :20] = np.nan                      # 10 images compared: z of 10 equal ranks = 3.2
    idx = np.arange(n)[None]
    assert _resampled_exclusions([v], idx, [(0, 1)], 2, 0.05).tolist() == [[False, True]]
    v[:, :27] = np.nan                      # 3 images: z = 1.73, not shown
    assert _resampled_exclusions([v], idx, [(0, 1)], 2, 0.05).tolist() == [[False, False]]


def test_bootstrap_resamples_images_on_every_model_together():
    dist = np.array([[[1.0, 1.0, 1.0, 1.0], [1.0, 2.0, 1.0, 2.0]],
                     [[1.0, 1.0, 1.0, 1.0], [np.nan] * 4]])
    blocks = ImageBlocks.from_arrays(dist, d_star=np.ones((2, 4)))
    xi, idx = _bootstrap(blocks, 3.0, 5, 0)
    assert xi.shape == (5, 2) and idx.shape == (5, 4)
    assert np.allclose(xi[:, 0], 1.0)
    # model 1 did not run the second: its ξ is the first model's alone, (2 + 1·k) / (2·4) per draw
    k = (idx % 2 == 0).sum(axis=1)
    assert np.allclose(xi[:, 1], (2 * k + (4 - k)) / 8)
    assert np.array_equal(idx, np.random.default_rng(0).integers(0, 4, size=(5, 4)))


def test_optimality_ci_is_the_95_percent_percentile_interval_of_the_image_bootstrap():
    # one model, b/y 30% farther than a/x on every image; at α = 1e-12 b/y stays in the set (inconclusive)
    t = table(job_rows("m", "a/x", "l2", BASE, family="f"), job_rows("m", "b/y", "l2", BASE * 1.3, family="f"))
    r = recommend(t, None, n_boot=N_BOOT, seed=3, alpha=1e-12).iloc[0]
    top, member = r.trust_set
    assert member["implementation"] == "b/y"
    # the same resamples by hand: N_BOOT draws of the 16 images with replacement (seed 3); in each,
    # ε₀ = the largest envelope distance drawn, ξ = Σ(ε₀ − 1.3 d)₊ / Σ(ε₀ − d)₊ (a/x is the envelope)
    idx = np.random.default_rng(3).integers(0, len(BASE), size=(N_BOOT, len(BASE)))
    xi = []
    for draw in idx:
        d = BASE[draw]
        eps0 = d.max()
        xi.append(np.clip(eps0 - 1.3 * d, 0, None).sum() / (eps0 - d).sum())
    lo, hi = np.percentile(xi, [2.5, 97.5])     # the documented 95% percentile interval
    assert lo < hi
    assert member["optimality_ci"] == pytest.approx([lo, hi], rel=1e-9, abs=1e-12)
    assert top["optimality_ci"] == pytest.approx([1.0, 1.0]) and r.optimality_ci == top["optimality_ci"]


def test_the_pick_between_equal_implementations_does_not_follow_their_wall_time():
    """Two implementations equal in distance and queries: the one picked is the same whichever
    ran faster (wall time differs between two runs of one config; the report must not)."""
    d = np.linspace(0.1, 0.5, 64)
    picks = set()
    for fast, slow in ((1.0, 9.0), (9.0, 1.0)):
        t = table(job_rows("m", "a/x", "linf", d, family="f", wall_s=fast),
                  job_rows("m", "b/y", "linf", d, family="f", wall_s=slow))
        picks.add(str(_rows(t).set_index("norm").loc["linf", "implementation"]))
    assert picks == {"a/x"}
