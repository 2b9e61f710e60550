"""Exact behaviour of three verdict modules of fidelity/: the ε use of fixed-ε attacks across two runs
(``eps_use``: its table, its material-change thresholds, how ``merge`` folds it into an audit's
verdicts, how ``--eps`` is read), the metamorphic twin checks (``twins``: which images differ and
count, the p-values against a seed twin or a null rate, the findings' and notes' evidence texts,
the seed-twin noise table) and class-conditional failure (``class_failure``: the class judged, its
Holm-adjusted p, the budget rule, the evidence and notes).

Every input is built by hand with answers worked out in the comments (exact binomial and
signed-rank p-values of all-one-way samples: 2 / 2ⁿ two-sided, 1 / 2ⁿ one-sided), so that a one-line
change of meaning in those modules (an operator, a threshold, a column name, a word of an evidence
text) fails a test here. Tests call the modules through their module object.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from attackaudit.fidelity import class_failure as cf
from attackaudit.fidelity import eps_use as eu
from attackaudit.fidelity import twins as tw
from attackaudit.results.schema import parse_model_name, with_models


#: the twins' null rates these tables were worked out at: the arithmetic is checked here, the
#: calibrated values against the measured sound shares in tests/test_null_edge.py
WORKED_NULL_RATE = {"perm": 0.05, "shift": 0.15, "split": 0.05, "batch": 0.05}


@pytest.fixture(autouse=True)
def _worked_null_rates(monkeypatch):
    for kind, rate in WORKED_NULL_RATE.items():
        monkeypatch.setitem(tw.NULL_RATE, kind, rate)


# ---------------------------------------------------------------------------------------------
# eps_use
# ---------------------------------------------------------------------------------------------

def _eps_row(sample, ratio, success, *, model="m1", status="ok", best=0.02, impl="lib/pgd", norm="linf",
             kind="fixed"):
    return {"model": model, "norm": norm, "implementation": impl, "kind": kind, "sample": sample,
            "status": status, "best_distance": best, "ball_mean_ratio": ratio, "eps_success": success}


def _two_runs():
    """Run A and run B of one fixed-ε implementation (lib/pgd, linf) and distractors.

    lib/pgd, m1, images 0–6: ε use 0.9 per call in A; in B 0.2, 0.25, 0.3, 0.4, 0.45, 0.5, 0.55
    (median 0.4; seven differences all negative, distinct: Wilcoxon p = 2 / 2⁷ = 0.015625). A broke
    each at a call ε 0.01 (≤ 0.03); B at 0.05 on images 0–5 (not at 0.03) and at exactly 0.03 on
    image 6 (broken: ≤). Image 7 is misclassified clean in both (best 0, no calls: ratio and call ε
    NaN): broken in both, no ε use. Images 8 and 9 did not run on one side (status error). Robust
    accuracy at 0.03: A 0 of 8, B 6 of 8 unbroken (75%); six images changed, all one way: sign test
    p = 2 / 2⁶ = 0.03125.
    """
    a, b = [], []
    b_ratios = [0.2, 0.25, 0.3, 0.4, 0.45, 0.5, 0.55]
    for s in range(7):
        a.append(_eps_row(s, 0.9, 0.01))
        b.append(_eps_row(s, b_ratios[s], 0.05 if s < 6 else 0.03))
    a.append(_eps_row(7, np.nan, np.nan, best=0.0))
    b.append(_eps_row(7, np.nan, np.nan, best=0.0))
    # did not run on one side: would move both measures if they counted
    a.append(_eps_row(8, 0.9, 0.01, status="error"))
    b.append(_eps_row(8, 5.0, np.nan))
    a.append(_eps_row(9, 0.9, 0.01))
    b.append(_eps_row(9, 5.0, np.nan, status="error"))
    # a twin of m1: never part of the ε-use comparison
    for s in range(10):
        a.append(_eps_row(s, 0.1, np.nan, model="m1~seed"))
        b.append(_eps_row(s, 3.0, 0.001, model="m1~seed"))
    # lib/bim: identical in both runs, three images
    for s in range(3):
        a.append(_eps_row(s, 0.5, 0.01, impl="lib/bim"))
        b.append(_eps_row(s, 0.5, 0.01, impl="lib/bim"))
    # a minimal attack (not fixed), an implementation only in A, a norm without an ε
    for s in range(7):
        a.append(_eps_row(s, 0.9, 0.01, impl="lib/apgd", kind="minimal"))
        b.append(_eps_row(s, 0.1, 0.5, impl="lib/apgd", kind="minimal"))
        a.append(_eps_row(s, 0.9, 0.01, impl="lib/zonly"))
        a.append(_eps_row(s, 0.9, 0.01, norm="l2"))
        b.append(_eps_row(s, 0.1, 0.5, norm="l2"))
    return pd.DataFrame(a), pd.DataFrame(b)


def test_eps_use_table_of_a_release_that_stops_early_is_exact():
    a, b = _two_runs()
    out = eu.eps_use(a, b, {"linf": 0.03})
    assert list(out.columns) == eu.EPS_USE_COLUMNS
    assert list(out.columns) == ["norm", "implementation", "eps", "n_images", "ratio_a", "ratio_b", "p_ratio",
                                 "ra_a", "ra_b", "p_ra", "direction", "evidence"]
    assert out["implementation"].tolist() == ["lib/bim", "lib/pgd"]   # sorted; minimal, one-sided, l2 left out
    bim, pgd = out.iloc[0].to_dict(), out.iloc[1].to_dict()
    assert pgd["norm"] == "linf" and pgd["eps"] == 0.03
    assert pgd["n_images"] == 8
    assert pgd["ratio_a"] == pytest.approx(0.9) and pgd["ratio_b"] == pytest.approx(0.4)
    assert pgd["p_ratio"] == pytest.approx(2 / 2 ** 7)
    assert pgd["ra_a"] == 0.0 and pgd["ra_b"] == pytest.approx(0.75)
    assert pgd["p_ra"] == pytest.approx(2 / 2 ** 6)
    assert pgd["direction"] == "regressed"
    assert pgd["evidence"] == ("ε use: returned rows at a median 0.90 → 0.40 of ε per call (Wilcoxon p = 0.016), "
                               "robust accuracy at ε = 0.03 0% → 75% (sign test p = 0.031) on 8 images")
    assert pgd["evidence"].startswith(eu.EVIDENCE_PREFIX)
    assert bim == {"norm": "linf", "implementation": "lib/bim", "eps": 0.03, "n_images": 3, "ratio_a": 0.5,
                   "ratio_b": 0.5, "p_ratio": 1.0, "ra_a": 0.0, "ra_b": 0.0, "p_ra": 1.0, "direction": "",
                   "evidence": "ε use: returned rows at a median 0.50 → 0.50 of ε per call (Wilcoxon p = 1), "
                               "robust accuracy at ε = 0.03 0% → 0% (sign test p = 1) on 3 images"}


def test_eps_use_reversed_runs_read_as_improved():
    a, b = _two_runs()
    out = eu.eps_use(b, a, {"linf": 0.03})
    pgd = out[out["implementation"] == "lib/pgd"].iloc[0]
    assert pgd["ratio_a"] == pytest.approx(0.4) and pgd["ratio_b"] == pytest.approx(0.9)
    assert pgd["ra_a"] == pytest.approx(0.75) and pgd["ra_b"] == 0.0
    assert pgd["direction"] == "improved"


def _ratio_only(a_ratios, b_ratios, impl="lib/pgd"):
    """One model, one image per ratio; every image broken at a call ε 0.01 in both runs."""
    a = pd.DataFrame([_eps_row(s, r, 0.01, impl=impl) for s, r in enumerate(a_ratios)])
    b = pd.DataFrame([_eps_row(s, r, 0.01, impl=impl) for s, r in enumerate(b_ratios)])
    return a, b


_UP = [0.04, 0.06, 0.08, 0.1, 0.12, 0.14, 0.16]  # median exactly 0.1; seven distinct rises from 0: p = 2 / 2⁷


def test_eps_use_ratio_change_of_exactly_ratio_delta_is_material_both_ways():
    a, b = _ratio_only([0.0] * 7, _UP)
    row = eu.eps_use(a, b, {"linf": 0.03}).iloc[0]
    assert row["ratio_b"] - row["ratio_a"] == eu.RATIO_DELTA == 0.1
    assert row["p_ratio"] == pytest.approx(0.015625)
    assert row["p_ra"] == 1.0 and row["ra_a"] == row["ra_b"] == 0.0
    assert row["direction"] == "improved"
    assert eu.eps_use(b, a, {"linf": 0.03}).iloc[0]["direction"] == "regressed"


def test_eps_use_ratio_change_just_below_ratio_delta_is_not_material():
    below = [v - 0.0001 for v in _UP]
    a, b = _ratio_only([0.0] * 7, below)
    assert eu.eps_use(a, b, {"linf": 0.03}).iloc[0]["direction"] == ""
    assert eu.eps_use(b, a, {"linf": 0.03}).iloc[0]["direction"] == ""


def test_eps_use_material_needs_p_below_alpha_strictly():
    a, b = _ratio_only([0.0] * 7, _UP)
    assert eu.eps_use(a, b, {"linf": 0.03}, alpha=0.015625).iloc[0]["direction"] == ""
    assert eu.eps_use(a, b, {"linf": 0.03}, alpha=0.0157).iloc[0]["direction"] == "improved"
    assert eu.eps_use(b, a, {"linf": 0.03}, alpha=0.015625).iloc[0]["direction"] == ""
    assert eu.eps_use(b, a, {"linf": 0.03}, alpha=0.0157).iloc[0]["direction"] == "regressed"


def _ra_only(n, broken_a, broken_b, ratio=0.5):
    """n images, one model, the same ε use; broken_* the images broken at ε 0.03 on each side."""
    a = pd.DataFrame([_eps_row(s, ratio, 0.01 if s in broken_a else 0.5) for s in range(n)])
    b = pd.DataFrame([_eps_row(s, ratio, 0.01 if s in broken_b else 0.5) for s in range(n)])
    return a, b


def test_eps_use_robust_accuracy_thresholds_and_direction():
    # 20 images, all broken in A; B misses images 0-5: 30 points higher, p = 2 / 2⁶
    a, b = _ra_only(20, set(range(20)), set(range(6, 20)))
    row = eu.eps_use(a, b, {"linf": 0.03}).iloc[0]
    assert row["ra_a"] == 0.0 and row["ra_b"] == pytest.approx(0.3) and row["p_ra"] == pytest.approx(0.03125)
    assert row["p_ratio"] == 1.0 and row["direction"] == "regressed"
    assert eu.eps_use(b, a, {"linf": 0.03}).iloc[0]["direction"] == "improved"
    # the same six changes at alpha 0.03125: not significant
    assert eu.eps_use(a, b, {"linf": 0.03}, alpha=0.03125).iloc[0]["direction"] == ""
    assert eu.eps_use(b, a, {"linf": 0.03}, alpha=0.03125).iloc[0]["direction"] == ""
    # 120 images: six changes are 5 points (material), five of 120 are not; alpha 0.1 lets p = 2 / 2⁵ pass
    a, b = _ra_only(120, set(range(120)), set(range(6, 120)))
    row = eu.eps_use(a, b, {"linf": 0.03}).iloc[0]
    assert row["ra_b"] - row["ra_a"] >= 0.05 and row["direction"] == "regressed"
    a, b = _ra_only(120, set(range(120)), set(range(5, 120)))
    row = eu.eps_use(a, b, {"linf": 0.03}, alpha=0.1).iloc[0]
    assert row["ra_b"] - row["ra_a"] < 0.05 and row["p_ra"] == pytest.approx(0.0625)
    assert row["direction"] == ""
    assert eu.eps_use(b, a, {"linf": 0.03}, alpha=0.1).iloc[0]["direction"] == ""


def test_eps_use_less_use_and_higher_accuracy_against_more_is_mixed():
    # ε use drops (0.9 → 0.2..0.55) while six images newly broken (robust accuracy 6/8 → 0)
    n = 8
    a = pd.DataFrame([_eps_row(s, 0.9, 0.01 if s >= 6 else 0.5) for s in range(n)])
    b_ratios = [0.2, 0.25, 0.3, 0.4, 0.45, 0.5, 0.55, 0.6]
    b = pd.DataFrame([_eps_row(s, b_ratios[s], 0.01) for s in range(n)])
    row = eu.eps_use(a, b, {"linf": 0.03}).iloc[0]
    assert row["ra_a"] == pytest.approx(0.75) and row["ra_b"] == 0.0
    assert row["p_ratio"] == pytest.approx(2 / 2 ** 8)
    assert row["direction"] == "mixed"
    assert eu.eps_use(b, a, {"linf": 0.03}).iloc[0]["direction"] == "mixed"


def test_eps_use_averages_an_images_models_before_the_median():
    # image 0: m1 0.25 and m2 0.75 (mean 0.5); images 1, 2: 0.125 on both models; B all 0.5
    a = pd.DataFrame([_eps_row(0, 0.25, 0.01), _eps_row(0, 0.75, 0.01, model="m2"),
                      _eps_row(1, 0.125, 0.01), _eps_row(1, 0.125, 0.01, model="m2"),
                      _eps_row(2, 0.625, 0.01), _eps_row(2, 0.625, 0.5, model="m2")])
    b = pd.DataFrame([_eps_row(s, 0.5, 0.01, model=m) for s in range(3) for m in ("m1", "m2")])
    row = eu.eps_use(a, b, {"linf": 0.03}).iloc[0]
    assert row["n_images"] == 3
    assert row["ratio_a"] == 0.5 and row["ratio_b"] == 0.5
    # image 2 half broken in A (one of two models): robust accuracy 1/2 / 3 images
    assert row["ra_a"] == pytest.approx(1 / 6) and row["ra_b"] == 0.0


def test_eps_use_counts_a_call_eps_equal_to_eps_as_broken_and_zero_distance_as_broken():
    a = pd.DataFrame([_eps_row(0, 0.5, 0.03), _eps_row(1, 0.5, np.nan, best=0.0), _eps_row(2, 0.5, 0.0300001),
                      _eps_row(3, 0.5, "n/a")])
    row = eu.eps_use(a, a, {"linf": 0.03}).iloc[0]
    assert row["ra_a"] == pytest.approx(0.5) and row["ra_b"] == pytest.approx(0.5)


def test_eps_use_image_without_eps_use_on_one_side_leaves_the_ratio_but_counts_for_accuracy():
    a = pd.DataFrame([_eps_row(0, 0.5, 0.01), _eps_row(1, 0.5, 0.01), _eps_row(2, 0.5, 0.01)])
    b = pd.DataFrame([_eps_row(0, 0.5, 0.01), _eps_row(1, 0.5, 0.01), _eps_row(2, np.nan, 0.5)])
    row = eu.eps_use(a, b, {"linf": 0.03}).iloc[0]
    assert row["ratio_a"] == 0.5 and row["ratio_b"] == 0.5 and row["n_images"] == 3
    assert row["ra_b"] == pytest.approx(1 / 3)
    row = eu.eps_use(b, a, {"linf": 0.03}).iloc[0]
    assert row["ratio_a"] == 0.5 and row["ratio_b"] == 0.5 and row["ra_a"] == pytest.approx(1 / 3)


def test_eps_use_skips_what_cannot_be_compared():
    a, b = _two_runs()
    empty = eu.eps_use(a.drop(columns="eps_success"), b, {"linf": 0.03})
    assert empty.empty and list(empty.columns) == eu.EPS_USE_COLUMNS
    for missing in ("ball_mean_ratio", "kind"):
        assert eu.eps_use(a, b.drop(columns=missing), {"linf": 0.03}).empty
    none = eu.eps_use(a, b, {"l1": 2.0})
    assert none.empty and list(none.columns) == eu.EPS_USE_COLUMNS
    # no ε use recorded on one side, or no image ok on both sides
    a2, b2 = _ratio_only([0.5, 0.5], [0.5, 0.5])
    assert len(eu.eps_use(a2, b2, {"linf": 0.03})) == 1
    assert eu.eps_use(a2.assign(ball_mean_ratio=np.nan), b2, {"linf": 0.03}).empty
    assert eu.eps_use(a2, b2.assign(ball_mean_ratio=np.nan), {"linf": 0.03}).empty
    assert eu.eps_use(a2.assign(status="error"), b2, {"linf": 0.03}).empty
    assert eu.eps_use(a2, b2.assign(status="error"), {"linf": 0.03}).empty
    # a skipped implementation (no ε use in B) does not end the table: lib/b after it still counts
    a3 = pd.concat([a2.assign(implementation="lib/a"), a2.assign(implementation="lib/b")])
    b3 = pd.concat([b2.assign(implementation="lib/a", ball_mean_ratio=np.nan), b2.assign(implementation="lib/b")])
    assert eu.eps_use(a3, b3, {"linf": 0.03})["implementation"].tolist() == ["lib/b"]
    b3 = pd.concat([b2.assign(implementation="lib/b")])
    assert eu.eps_use(a3, b3, {"linf": 0.03})["implementation"].tolist() == ["lib/b"]
    # l2 read at its own ε
    out = eu.eps_use(a, b, {"l2": 0.5})
    assert out["norm"].tolist() == ["l2"] and out["eps"].tolist() == [0.5]


def test_eps_use_alpha_default_is_five_percent():
    # robust accuracy 0 → 30% with p = 2 / 2⁶ = 0.031 (below 0.05) and ε use unchanged
    a, b = _ra_only(20, set(range(20)), set(range(6, 20)))
    assert eu.eps_use(a, b, {"linf": 0.03})["direction"].tolist() == ["regressed"]
    # five changes: p = 2 / 2⁵ = 0.0625, not below 0.05
    a, b = _ra_only(20, set(range(20)), set(range(5, 20)))
    assert eu.eps_use(a, b, {"linf": 0.03})["direction"].tolist() == [""]


def test_eps_use_ignores_zero_differences_in_both_tests():
    # nine images: six lose ε use (distinct drops), three unchanged: Wilcoxon on the six, p = 2 / 2⁶
    a = pd.DataFrame([_eps_row(s, 0.9, 0.01 if s >= 6 else 0.01) for s in range(9)])
    b_ratios = [0.2, 0.25, 0.3, 0.4, 0.45, 0.5, 0.9, 0.9, 0.9]
    b = pd.DataFrame([_eps_row(s, b_ratios[s], 0.5 if s < 2 else 0.01) for s in range(9)])
    row = eu.eps_use(a, b, {"linf": 0.03}).iloc[0]
    assert row["p_ratio"] == pytest.approx(2 / 2 ** 6)
    # two images newly unbroken, seven unchanged: sign test on the two, p = 2 / 2² = 0.5
    assert row["p_ra"] == pytest.approx(0.5)


def test_eps_use_two_differing_images_give_the_exact_wilcoxon_p():
    a = pd.DataFrame([_eps_row(0, 0.9, 0.01), _eps_row(1, 0.9, 0.01), _eps_row(2, 0.5, 0.01)])
    b = pd.DataFrame([_eps_row(0, 0.1, 0.01), _eps_row(1, 0.2, 0.01), _eps_row(2, 0.5, 0.01)])
    assert eu.eps_use(a, b, {"linf": 0.03}).iloc[0]["p_ratio"] == pytest.approx(0.5)


def test_eps_use_one_differing_image_carries_no_evidence():
    a = pd.DataFrame([_eps_row(0, 0.9, 0.01), _eps_row(1, 0.5, 0.01)])
    b = pd.DataFrame([_eps_row(0, 0.1, 0.5), _eps_row(1, 0.5, 0.01)])
    row = eu.eps_use(a, b, {"linf": 0.03}).iloc[0]
    assert row["p_ratio"] == 1.0
    assert row["p_ra"] == 1.0


def _diff_rows(*rows):
    return pd.DataFrame([{"model": "*", "norm": n, "implementation": i, "verdict": v, "reason": r}
                         for n, i, v, r in rows])


def _found(*rows):
    return pd.DataFrame([{"norm": n, "implementation": i, "direction": d, "evidence": e} for n, i, d, e in rows],
                        columns=eu.EPS_USE_COLUMNS)


def test_merge_replaces_unchanged_and_inconclusive_and_appends_the_evidence():
    diff = _diff_rows(("linf", "a", "unchanged", ""), ("linf", "b", "inconclusive", "few images"),
                      ("linf", "c", "unchanged", ""), ("l2", "a", "unchanged", "same"))
    found = _found(("linf", "a", "regressed", "EV-a"), ("linf", "b", "improved", "EV-b"),
                   ("linf", "c", "mixed", "EV-c"))
    out = eu.merge(diff, found)
    assert out["verdict"].tolist() == ["regressed", "improved", "mixed", "unchanged"]
    assert out["reason"].tolist() == ["EV-a", "few images; EV-b", "EV-c", "same"]
    # the input is not changed in place
    assert diff["verdict"].tolist() == ["unchanged", "inconclusive", "unchanged", "unchanged"]


def test_merge_opposite_directions_become_mixed_and_agreeing_ones_stay():
    diff = _diff_rows(("linf", "a", "regressed", "r"), ("linf", "b", "improved", "r"),
                      ("linf", "c", "regressed", "r"), ("linf", "d", "improved", ""),
                      ("linf", "e", "mixed", "r"), ("linf", "f", "regressed", "r"), ("linf", "g", "improved", "r"))
    found = _found(("linf", "a", "improved", "E"), ("linf", "b", "regressed", "E"),
                   ("linf", "c", "regressed", "E"), ("linf", "d", "improved", "E"),
                   ("linf", "e", "regressed", "E"), ("linf", "f", "mixed", "E"), ("linf", "g", "mixed", "E"))
    out = eu.merge(diff, found)
    assert out["verdict"].tolist() == ["mixed", "mixed", "regressed", "improved", "mixed", "mixed", "mixed"]
    assert out["reason"].tolist() == ["r; E", "r; E", "r; E", "E", "r; E", "r; E", "r; E"]


def test_merge_leaves_one_sided_verdicts_and_immaterial_changes_alone():
    diff = _diff_rows(("linf", "a", "new", "only in B"), ("linf", "b", "removed", "only in A"),
                      ("linf", "c", "could not run", "x"), ("linf", "d", "unchanged", "same"),
                      ("linf", "zz", "unchanged", "no ε use"), ("linf", "e", "unchanged", "r"))
    found = _found(("linf", "a", "regressed", "E"), ("linf", "b", "improved", "E"),
                   ("linf", "c", "mixed", "E"), ("linf", "d", "", "E"), ("linf", "e", "improved", "E"))
    out = eu.merge(diff, found)
    assert out["verdict"].tolist() == ["new", "removed", "could not run", "unchanged", "unchanged", "improved"]
    assert out["reason"].tolist() == ["only in B", "only in A", "x", "same", "no ε use", "r; E"]
    assert eu.merge(diff, found.iloc[:0]) is diff
    empty = diff.iloc[:0]
    assert eu.merge(empty, found) is empty


def test_merge_per_model_rows_each_take_the_change():
    diff = pd.DataFrame([{"model": m, "norm": "linf", "implementation": "a", "verdict": "unchanged", "reason": "ok"}
                         for m in ("m1", "m2")])
    out = eu.merge(diff, _found(("linf", "a", "improved", "E")))
    assert out["verdict"].tolist() == ["improved", "improved"]
    assert out["reason"].tolist() == ["ok; E", "ok; E"]


def test_parse_eps_reads_bare_and_per_norm_values():
    assert eu.parse_eps(None) == {}
    assert eu.parse_eps([]) == {}
    assert eu.parse_eps(["0.1"]) == {"*": 0.1}
    assert eu.parse_eps(["linf=0.03", " L2 =0.5", "l1=2", "l0=4", "=0.2"]) == {
        "linf": 0.03, "l2": 0.5, "l1": 2.0, "l0": 4.0, "*": 0.2}


@pytest.mark.parametrize("text", ["linf=abc", "linf=0", "linf=-0.1", "linf=inf", "linf=nan", "0", "linf="])
def test_parse_eps_rejects_a_non_positive_or_unreadable_eps(text):
    with pytest.raises(ValueError) as err:
        eu.parse_eps(["l2=0.5", text])
    assert str(err.value) == f"--eps {text!r}: ε must be a positive number (e.g. --eps linf=0.03)"


def test_parse_eps_rejects_an_unknown_norm():
    for text in ("l3=0.1", "foo=0.1"):
        with pytest.raises(ValueError) as err:
            eu.parse_eps([text])
        assert str(err.value) == f"--eps {text!r}: the norm must be l0, l1, l2 or linf (e.g. --eps linf=0.03)"


def test_at_reads_a_norms_own_eps_then_the_bare_one_then_the_reference():
    refs = {"linf": 0.1, "l2": 0.75}
    assert eu.at(refs, None) == {"linf": 0.1, "l2": 0.75}
    assert eu.at(refs, {}) == {"linf": 0.1, "l2": 0.75}
    assert eu.at(refs, {"*": 0.2}) == {"linf": 0.2, "l2": 0.2}
    assert eu.at(refs, {"*": 0.2, "l2": 1.0}) == {"linf": 0.2, "l2": 1.0}
    assert eu.at(refs, {"l2": 1.0}) == {"linf": 0.1, "l2": 1.0}


# ---------------------------------------------------------------------------------------------
# twins
# ---------------------------------------------------------------------------------------------

def _twin_rows(model, dists, *, impl="lib/cw", version="1", family="cw", norm="l2", margins=None, fallback=None,
               rng=False):
    twin = parse_model_name(model)  # a table made by hand carries the twin columns, as rows do
    return [{"model": model, "base_model": twin.base_model, "twin": twin.kind, "norm": norm, "implementation": impl,
             "library_version": version, "family": family,
             "sample": s, "best_distance": d, "best_margin": np.nan if margins is None else margins[s],
             "rng_used": rng, "returned_fallback": "" if fallback is None else fallback[s]}
            for s, d in enumerate(dists)]


INF = np.inf
#: a deterministic attack on m and its class-permuted twin: images 0–3 broken by one of them, 4 by
#: neither, 5 misclassified clean; 0 (1 → 1.5) and 2 (3 → failed) differ beyond 1%, 3 (4 → 4.02) does not
PERM_BASE = [1.0, 2.0, 3.0, 4.0, INF, 0.0]
PERM_TWIN = [1.5, 2.0, INF, 4.02, INF, 0.0]
#: p of 2 of 4 informative images differing against a 5% null: 1 − 0.95⁴ − 4 · 0.05 · 0.95³
PERM_P = 1 - 0.95 ** 4 - 4 * 0.05 * 0.95 ** 3


def _perm_table():
    return pd.DataFrame(_twin_rows("m", PERM_BASE) + _twin_rows("m~perm", PERM_TWIN))


def test_judge_perm_twin_without_seed_counts_informative_differing_images():
    out = tw.judge(_perm_table())
    assert list(out.columns) == ["base", "model", "kind", "norm", "implementation", "library_version", "n",
                                 "n_images", "n_differ", "n_twin_farther", "n_differ_seed", "p_value", "examples",
                                 "q_value", "flagged"]
    assert len(out) == 1
    r = out.iloc[0]
    assert (r["base"], r["model"], r["kind"], r["norm"], r["implementation"], r["library_version"]) == (
        "m", "m~perm", "perm", "l2", "lib/cw", "1")
    assert (r["n"], r["n_images"], r["n_differ"], r["n_twin_farther"]) == (4, 6, 2, 2)
    assert math.isnan(r["n_differ_seed"])
    assert r["p_value"] == pytest.approx(PERM_P) and r["q_value"] == pytest.approx(PERM_P)
    assert bool(r["flagged"]) is True
    assert r["examples"]["sample"].tolist() == [0, 2]


def test_twin_findings_perm_evidence_text_is_exact():
    found = tw.twin_findings(_perm_table())
    assert found == [{
        "model": "m", "norm": "l2", "implementation": "lib/cw", "library_version": "1", "flag": "label_bug",
        "evidence": "best distances differ beyond 1% on 2 of 4 informative images (of 6; 2 that neither it nor the "
                    "twin broke carry no evidence) between m and its twin m~perm (same network with its classes "
                    "renamed, labels and targets mapped alike: the result depends on class indices, i.e. on how the "
                    "attack handles labels); null rate 5% for a deterministic attack; p = 0.014, BH q = 0.014 over its "
                    "own twins: image 0: 1 vs 1.5; image 2: 3 vs inf"}]
    assert tw.twin_findings(_perm_table(), ("shift",)) == []
    assert tw.twin_notes(_perm_table()) == []


def test_judge_adjusts_p_values_over_the_models_of_one_implementation():
    # n: the same twin pattern but only image 0 differs: p = 1 − 0.95⁴ (note, not a finding)
    weak_twin = [1.5, 2.0, 3.0, 4.0, INF, 0.0]
    t = pd.DataFrame(_twin_rows("m", PERM_BASE) + _twin_rows("m~perm", PERM_TWIN)
                     + _twin_rows("n", PERM_BASE) + _twin_rows("n~perm", weak_twin))
    out = tw.judge(t).set_index("base")
    p_weak = 1 - 0.95 ** 4
    assert out.loc["n", "p_value"] == pytest.approx(p_weak)
    assert out.loc["m", "q_value"] == pytest.approx(min(2 * PERM_P, p_weak))
    assert out.loc["n", "q_value"] == pytest.approx(p_weak)
    assert out["flagged"].tolist() == [True, False]
    assert tw.twin_notes(t) == [{
        "norm": "l2", "implementation": "lib/cw", "library_version": "1",
        "note": "its class-permuted twin n~perm differs on 1 of 4 informative images, too few to be label "
                "evidence (p = 0.19): consistent with tie-breaking by class index"}]
    # another implementation is its own family: its twins do not enter m's adjustment
    other = pd.DataFrame(_twin_rows("m", PERM_BASE, impl="lib/x") + _twin_rows("m~perm", weak_twin, impl="lib/x"))
    out = tw.judge(pd.concat([_perm_table(), other]))
    assert out.set_index("implementation")["q_value"].to_dict() == pytest.approx({"lib/cw": PERM_P, "lib/x": p_weak})


def test_judge_perm_needs_two_differing_images_even_when_significant():
    # a seed twin equal to m except on image 9 (floor); the perm twin 0.5% farther on images 0–8
    # (within 1%, so not "differing") and 50% on image 9: u − v > 0 on ten images, p = 1 / 2¹⁰, one differs
    base = [1.0 + i for i in range(10)]
    twin = [b * 1.005 for b in base[:9]] + [base[9] * 1.5]
    seed = base[:9] + [base[9] * 1.2]
    t = pd.DataFrame(_twin_rows("m", base) + _twin_rows("m~perm", twin) + _twin_rows("m~seed", seed))
    r = tw.judge(t, ("perm",)).iloc[0]
    assert r["p_value"] == pytest.approx(1 / 2 ** 10)
    assert (r["n_differ"], r["n_differ_seed"]) == (1, 1)
    assert bool(r["flagged"]) is False
    assert tw.twin_notes(t)[0]["note"] == (
        "its class-permuted twin m~perm differs on 1 of 10 informative images, no more than a second seed does (1): "
        "a random choice tied to class indices (e.g. of a target class or a restart), not a label bug")
    # image 8 beyond 1% as well: two differ, flagged
    twin[8] = base[8] * 1.3
    r = tw.judge(pd.DataFrame(_twin_rows("m", base) + _twin_rows("m~perm", twin) + _twin_rows("m~seed", seed)),
                 ("perm",)).iloc[0]
    assert r["n_differ"] == 2 and bool(r["flagged"]) is True


def _shift_table():
    """m (lib/pgd 2, linf) with its shift twin and a second seed, ten images at 0.1 · (i + 1).

    The shift twin is farther by 10 %, 20 %, … 70 % on images 0–6 and 80 % on image 9; images 7 and
    8 sit at a decision boundary (|margin| = 1e-5 on the base, on the twin) and are left out. The
    seed twin equals m but on image 6 (1.5 ×). Per image |log ratio| twin − seed > 0 on the eight
    judged images: one-sided signed rank p = 1 / 2⁸.
    """
    base = [0.1 * (i + 1) for i in range(10)]
    factor = [1.1, 1.2, 1.3, 1.4, 1.5, 1.6, 1.7, 3.0, 3.0, 1.8]
    twin = [b * f for b, f in zip(base, factor)]
    seed = [b * (1.5 if i == 6 else 1.0) for i, b in enumerate(base)]
    margins = [np.nan] * 7 + [1e-5, 0.5, 2e-5]
    twin_margins = [np.nan] * 7 + [0.5, -1e-5, 2e-5]
    kw = {"impl": "lib/pgd", "version": "2", "family": "pgd", "norm": "linf"}
    return pd.DataFrame(_twin_rows("m", base, margins=margins, **kw)
                        + _twin_rows("m~shift", twin, margins=twin_margins, **kw)
                        + _twin_rows("m~seed", seed, **kw))


def test_judge_shift_twin_against_a_seed_twin_leaves_out_boundary_images():
    out = tw.judge(_shift_table())
    assert out["kind"].tolist() == ["shift"]
    r = out.iloc[0]
    assert (r["n"], r["n_images"], r["n_differ"], r["n_twin_farther"], r["n_differ_seed"]) == (8, 10, 8, 8, 1)
    assert r["p_value"] == pytest.approx(1 / 2 ** 8)
    assert bool(r["flagged"]) is True
    assert r["examples"]["sample"].tolist() == [0, 1, 2, 3, 4, 5, 6, 9]


def test_twin_findings_shift_evidence_names_the_seed_and_three_examples():
    assert tw.twin_findings(_shift_table()) == [{
        "model": "m", "norm": "linf", "implementation": "lib/pgd", "library_version": "2",
        "flag": "shift_sensitivity",
        "evidence": "best distances differ beyond 5% on 8 of 8 informative images (of 10; 2 that neither it nor the "
                    "twin nor its seed twin broke carry no evidence) between m and its twin m~shift (same decisions, "
                    "logits shifted per sample); a second seed differs on 1; p = 0.0039, BH q = 0.0039 over its own "
                    "twins: image 0: 0.1 vs 0.11; image 1: 0.2 vs 0.24; image 2: 0.3 vs 0.39"}]


def test_shift_twin_of_a_jsma_attack_is_not_judged():
    t = _shift_table().assign(family="jsma")
    assert tw.judge(t).empty
    assert len(tw.judge(t.assign(family="pgd"))) == 1


def test_seed_twin_check_reports_the_noise_floor():
    out = tw.seed_twin_check(_shift_table())
    assert out.to_dict("records") == [{"model": "m", "norm": "linf", "implementation": "lib/pgd",
                                       "library_version": "2", "n": 10, "n_differ": 1,
                                       "largest_relative_difference": pytest.approx(1 / 3)}]
    # failures on one side, and a zero on both sides: no relative difference; 1% is not beyond 1%
    t = pd.DataFrame(_twin_rows("m", [1.0, 2.0, 0.0, INF, 4.0]) + _twin_rows("m~seed", [1.01, INF, 0.0, INF, 4.2])
                     + _twin_rows("m", [1.0], impl="lib/b") + _twin_rows("m~seed", [INF], impl="lib/b"))
    out = tw.seed_twin_check(t)
    assert out.to_dict("records") == [
        {"model": "m", "norm": "l2", "implementation": "lib/b", "library_version": "1", "n": 1, "n_differ": 1,
         "largest_relative_difference": 0.0},
        {"model": "m", "norm": "l2", "implementation": "lib/cw", "library_version": "1", "n": 5, "n_differ": 2,
         "largest_relative_difference": pytest.approx(0.2 / 4.2)}]
    empty = tw.seed_twin_check(_perm_table())
    assert empty.empty and list(empty.columns) == ["model", "norm", "implementation", "library_version", "n",
                                                   "n_differ", "largest_relative_difference"]


def test_a_seed_twin_equal_to_its_model_is_no_floor():
    base = [1.0, 2.0, 3.0, 4.0]
    t = pd.DataFrame(_twin_rows("m", base) + _twin_rows("m~perm", [1.5, 2.5, 3.0, 4.0])
                     + _twin_rows("m~seed", [1.0, 2.0, 3.0, INF][:3]))
    r = tw.judge(t).iloc[0]
    assert math.isnan(r["n_differ_seed"])
    assert r["p_value"] == pytest.approx(1 - 0.95 ** 4 - 4 * 0.05 * 0.95 ** 3)


def _split_table(kind="split", rng=False, fallback=None, margins=None):
    """m (lib/ead, deterministic) and its split or batch twin on eight images: images 0–5 farther
    alone by 50 %, 6 and 7 equal."""
    base = [0.1 * (i + 1) for i in range(8)]
    twin = [b * 1.5 for b in base[:6]] + base[6:]
    kw = {"impl": "lib/ead", "family": "ead", "rng": rng}
    return pd.DataFrame(_twin_rows("m", base, fallback=fallback, margins=margins, **kw)
                        + _twin_rows(f"m~{kind}", twin, **kw))


def test_split_twin_of_a_deterministic_attack_needs_differences_leaning_one_way():
    r = tw.judge(_split_table(), ("split",)).iloc[0]
    # six of eight against a 5% null is tiny; six of six farther alone: sign test p = 2 / 2⁶
    assert (r["n"], r["n_differ"], r["n_twin_farther"]) == (8, 6, 6)
    assert r["p_value"] == pytest.approx(2 / 2 ** 6)
    assert tw.twin_findings(_split_table(), ("split",)) == [{
        "model": "m", "norm": "l2", "implementation": "lib/ead", "library_version": "1", "flag": "batch_dependence",
        "evidence": "best distances differ beyond 1% on 6 of 8 informative images (of 8; every one broken by at "
                    "least one of them) between m and its twin m~split (the same attack called on one image at a "
                    "time: the result depends on the rest of the batch); null rate 5% for a deterministic attack, "
                    "and the differences lean one way: 6 of 6 worse alone, 0 better (float rounding has no side); "
                    "p = 0.031, BH q = 0.031 over its own twins: image 0: 0.1 in the batch vs 0.15 alone; "
                    "image 1: 0.2 in the batch vs 0.3 alone; image 2: 0.3 in the batch vs 0.45 alone"}]
    # the default kinds are perm and shift
    assert tw.twin_findings(_split_table()) == []
    # three farther and three closer alone: no side, p = 1
    t = _split_table()
    t.loc[(t["model"] == "m~split") & (t["sample"] < 3), "best_distance"] = [0.05, 0.1, 0.15]
    r = tw.judge(t, ("split",)).iloc[0]
    assert (r["n_differ"], r["n_twin_farther"], r["p_value"]) == (6, 3, 1.0)


def test_batch_twin_counts_differences_whatever_their_side():
    t = _split_table("batch")
    t.loc[(t["model"] == "m~batch") & (t["sample"] < 3), "best_distance"] = [0.05, 0.1, 0.15]
    r = tw.judge(t).iloc[0]
    p = 1 - sum(math.comb(8, k) * 0.05 ** k * 0.95 ** (8 - k) for k in range(6))
    assert (r["kind"], r["n_differ"], r["n_twin_farther"]) == ("batch", 6, 3)
    assert r["p_value"] == pytest.approx(p)
    ev = tw.twin_findings(t, ("batch",))[0]["evidence"]
    assert ev.endswith("image 0: 0.1 in the batch vs 0.05 rearranged; image 1: 0.2 in the batch vs 0.1 rearranged; "
                       "image 2: 0.3 in the batch vs 0.15 rearranged")
    assert "null rate 5% for a deterministic attack; p = " in ev


def test_batch_twins_skip_randomised_attacks_without_a_seed_twin_but_judge_the_perm_twin():
    assert tw.judge(_split_table(rng=True), ("split",)).empty
    assert tw.judge(_split_table("batch", rng=True), ("batch",)).empty
    t = _split_table(rng=True)
    t.loc[t["model"] == "m", "rng_used"] = False      # moved on the twin only
    assert tw.judge(t, ("split",)).empty
    t = _split_table(rng=np.nan)                       # not recorded: not randomised
    assert len(tw.judge(t, ("split",))) == 1
    perm = _split_table("perm", rng=True)
    assert len(tw.judge(perm, ("perm",))) == 1
    assert len(tw.judge(_split_table("shift", rng=True), ("shift",))) == 1
    # the columns may be absent from an old table
    old = tw.judge(_split_table().drop(columns=["rng_used", "best_margin", "returned_fallback"]), ("split",))
    assert old["n"].tolist() == [8]


def test_batch_twins_leave_out_default_outputs_and_boundary_images():
    fb = ["zeros"] + [""] * 6 + [None]
    r = tw.judge(_split_table(fallback=fb), ("split",)).iloc[0]
    assert (r["n"], r["n_images"], r["n_differ"]) == (7, 8, 5)
    # the twin's fallback counts as well
    t = _split_table()
    t.loc[(t["model"] == "m~split") & (t["sample"] == 1), "returned_fallback"] = "zeros"
    assert tw.judge(t, ("split",)).iloc[0]["n"] == 7
    # not on the perm twin
    assert tw.judge(_split_table("perm", fallback=fb), ("perm",)).iloc[0]["n"] == 8
    margins = [-1e-5, 1e-6, 1.1e-5] + [np.nan] * 5
    r = tw.judge(_split_table("batch", margins=margins), ("batch",)).iloc[0]
    assert (r["n"], r["n_differ"]) == (6, 4)
    assert tw.judge(_split_table("perm", margins=margins), ("perm",)).iloc[0]["n"] == 8


def test_pairs_of_a_table_without_twins_has_the_pair_columns():
    out = tw._pairs(pd.DataFrame(_twin_rows("m", PERM_BASE)))
    assert out.empty
    assert list(out.columns) == ["base", "model", "kind", "family", "norm", "implementation", "library_version",
                                 "sample", "best_distance", "best_margin", "rng_used", "returned_fallback",
                                 "best_distance_twin", "best_margin_twin", "rng_used_twin", "returned_fallback_twin"]


def test_judge_kinds_and_unknown_twins():
    t = pd.concat([_perm_table(), pd.DataFrame(_twin_rows("m~odd", PERM_TWIN))])
    assert tw.judge(t)["kind"].tolist() == ["perm"]
    assert tw.judge(t, ("shift",)).empty
    assert tw.judge(pd.DataFrame(_twin_rows("m", PERM_BASE))).empty


def test_split_twin_against_a_seed_twin_compares_which_images_differ():
    # images 0–5 differ alone; the second seed differs on image 7 only (and 6 on neither):
    # McNemar 6 twin-only against 1 seed-only: P(X ≥ 6 | 7, ½) = 8 / 128
    base = [0.1 * (i + 1) for i in range(8)]
    twin = [b * 1.5 for b in base[:6]] + base[6:]
    seed = base[:7] + [base[7] * 2]
    kw = {"impl": "lib/ead", "family": "ead"}
    t = pd.DataFrame(_twin_rows("m", base, **kw) + _twin_rows("m~split", twin, **kw)
                     + _twin_rows("m~seed", seed, **kw))
    r = tw.judge(t, ("split",)).iloc[0]
    assert (r["n_differ"], r["n_differ_seed"]) == (6, 1)
    assert r["p_value"] == pytest.approx(8 / 128)


def test_differs_success_or_relative_gap_beyond_tolerance():
    a = np.array([1.0, 1.0, 1.0, INF, INF, 0.0, 1.0, 2.0])
    b = np.array([1.0101, 1.0105, INF, INF, 1.0, 0.0, 0.99, 1.98])
    # 1.0101 vs 1.0: gap 0.0101 ≤ 1% of 1.0101; 1.0105: gap 0.0105 > 0.010105; 0.99 vs 1: 0.01 ≤ 0.01
    assert tw.differs(a, b, 0.01).tolist() == [False, True, True, False, True, False, False, False]
    assert tw.differs(np.array([0.0, 5e-13]), np.array([1e-13, 0.0]), 0.01).tolist() == [False, False]
    assert tw.differs(np.array([0.0]), np.array([3e-12]), 0.01).tolist() == [True]


def test_twin_farther_informative_and_one_way_p():
    base = np.array([1.0, 1.0, 1.0, INF, INF, 2.0])
    twin = np.array([1.5, 0.5, INF, 1.0, INF, 2.0])
    assert tw.twin_farther(base, twin).tolist() == [True, False, True, False, False, False]
    seed = np.array([np.nan, np.nan, np.nan, np.nan, 3.0, np.nan])
    assert tw.informative(np.array([0.0, INF, 1.0, 0.0, INF, INF]), np.array([0.0, 2.0, INF, INF, INF, 0.0]),
                          np.array([np.nan, np.nan, np.nan, np.nan, 3.0, np.nan])).tolist() == [
        False, True, True, False, True, False]
    assert tw.informative(base, twin, seed)[4]
    assert tw.one_way_p(0, 0) == 1.0
    assert tw.one_way_p(6, 6) == pytest.approx(2 / 64)
    assert tw.one_way_p(0, 6) == pytest.approx(2 / 64)
    assert tw.one_way_p(1, 2) == 1.0
    assert tw.one_way_p(5, 6) == pytest.approx(14 / 64)


def test_at_boundary_and_default_output_masks():
    g = pd.DataFrame({"best_margin": [1e-5, -1e-5, 1.0001e-5, np.nan, "x", 0.5, 1.0],
                      "best_margin_twin": [np.nan, 1.0, 0.5, -2e-6, np.nan, -1e-5, "-"]})
    assert tw.at_boundary(g).tolist() == [True, True, False, True, False, True, False]
    g = pd.DataFrame({"returned_fallback": ["zeros", "", None, np.nan, "", "z"],
                      "returned_fallback_twin": ["", "", "", "", "clean", ""]})
    assert tw.with_default_output(g).tolist() == [True, False, False, False, True, True]


def test_seed_comparisons_exact_p_values():
    d = np.array([True, True, True, True, False])
    d_seed = np.array([True, False, False, False, True])
    z = np.zeros(5)
    # twin only on three, seed only on one: P(X ≥ 3 | 4, ½) = 5 / 16
    assert tw._differs_more_than_seed(z, z, z, d, d_seed) == pytest.approx(5 / 16)
    assert tw._differs_more_than_seed(z, z, z, d, np.zeros(5, bool)) == pytest.approx(1 / 16)
    assert tw._differs_more_than_seed(z, z, z, d_seed & ~d, d_seed) == 1.0
    assert tw._differs_more_than_seed(z, z, z, np.zeros(5, bool), d_seed) == 1.0
    base = np.array([1.0, 2.0, 3.0, 4.0])
    far = base * np.array([1.5, 1.2, 1.3, 1.4])
    # twin farther on every image than the seed (equal to base): one-sided p = 1 / 2⁴; the reverse 1
    assert tw._farther_than_seed(base, far, base, d[:4], d[:4]) == pytest.approx(1 / 16)
    assert tw._farther_than_seed(base, base, far, d[:4], d[:4]) == pytest.approx(1.0)
    # closer on the twin counts as far as farther (|log ratio|)
    assert tw._farther_than_seed(base, base / np.array([1.5, 1.2, 1.3, 1.4]), base, d[:4], d[:4]) == \
        pytest.approx(1 / 16)


# ---------------------------------------------------------------------------------------------
# class_failure
# ---------------------------------------------------------------------------------------------

#: B's distances on images 0–5 (classes 0, 0, 1, 1, 2, 2): class 2 is the easiest (B's ranks
#: 1/6 and 2/6 on the model), classes 0 and 1 harder
B_DIST = [0.3, 0.4, 0.5, 0.6, 0.1, 0.2]
LABELS = [0, 0, 1, 1, 2, 2]


def _cf_rows(impl, version, dists, *, model="m1", family="pgd", norm="linf", labels=LABELS, queries=(10, 10),
             budget=100, status="ok"):
    twin = parse_model_name(model)  # a table made by hand carries the twin columns, as rows do
    return [{"model": model, "base_model": twin.base_model, "twin": twin.kind, "norm": norm, "implementation": impl,
             "library_version": version, "family": family,
             "sample": s, "label": labels[s], "best_distance": d, "status": status, "forwards": queries[0],
             "backwards": queries[1], "budget": budget} for s, d in enumerate(dists)]


def _class_table(a_queries=(10, 10), budget=100, b_dist=B_DIST, models=("m1",)):
    """lib/pgd 1.0 breaks classes 0 and 1 and no image of class 2, which lib/pgd 2.0 (same family)
    broke at its smallest distances. The chance that a weak attack fails each class-2 image: the
    other classes' failure rate at least as hard, (0 + ½) / (4 + 1) = 0.1 per image, 0.01 for both;
    Holm over three classes: 0.03."""
    rows = []
    for m in models:
        rows += _cf_rows("lib/pgd", "2.0", b_dist, model=m)
        rows += _cf_rows("lib/pgd", "1.0", [0.35, 0.45, 0.55, 0.65, np.nan, np.nan], model=m, queries=a_queries,
                         budget=budget)
    return pd.DataFrame(rows)


CF_EVIDENCE = ("class-conditional failure: broke none of the 2 images of class 2 that other implementations of its "
               "family broke (over 1 model; median 20 queries, budget 100) but 4 of 4 images of the other classes; "
               "the chance that a correct attack whose failures follow difficulty fails them all: p = 0.03 "
               "(Holm over 3 classes)")


def test_class_failure_flags_an_easy_class_failed_entirely():
    out = cf.judge_table(_class_table())
    assert list(out.columns) == ["norm", "implementation", "library_version", "class", "p", "q", "flagged",
                                 "all_failed", "evidence"]
    assert len(out) == 1
    r = out.iloc[0]
    assert (r["norm"], r["implementation"], r["library_version"], r["class"]) == ("linf", "lib/pgd", "1.0", 2)
    assert r["p"] == pytest.approx(0.03) and r["q"] == pytest.approx(0.03)
    assert bool(r["flagged"]) is True and bool(r["all_failed"]) is True
    assert r["evidence"] == CF_EVIDENCE
    assert cf.class_findings(_prepared(_class_table())) == [{"model": "*", "norm": "linf", "implementation": "lib/pgd", "library_version": "1.0",
                               "flag": "label_bug", "evidence": CF_EVIDENCE}]
    assert cf.class_notes_of(_class_table()) == []


def test_class_failure_rows_come_in_norm_and_implementation_order():
    """The report lists class-conditional failures by (norm, implementation), whatever order the
    run's rows came in."""
    weak = [0.35, 0.45, 0.55, 0.65, np.nan, np.nan]
    rows = (_cf_rows("lib/zeta", "1.0", weak, norm="l2") + _cf_rows("lib/pgd", "2.0", B_DIST, norm="l2")
            + _cf_rows("lib/zeta", "1.0", weak) + _cf_rows("lib/alpha", "1.0", weak) + _cf_rows("lib/pgd", "2.0", B_DIST))
    out = cf.judge_table(pd.DataFrame(rows))
    assert list(zip(out["norm"], out["implementation"])) == [("l2", "lib/zeta"), ("linf", "lib/alpha"),
                                                            ("linf", "lib/zeta")]


def _prepared(table):
    from attackaudit.fidelity._table import prepare, with_envelope
    return with_envelope(prepare(table))


def test_class_failure_out_of_budget_is_a_note_not_a_finding():
    # median 95 queries of a budget of 100: not below 95%
    t = _class_table(a_queries=(50, 45))
    r = cf.judge_table(t).iloc[0]
    assert bool(r["flagged"]) is False and r["p"] == pytest.approx(0.03)
    assert cf.class_findings(_prepared(t)) == []
    note = ("fails every image of a class others broke, which is not label evidence here: broke none of the 2 "
            "images of class 2 that other implementations of its family broke (over 1 model; median 95 queries, "
            "budget 100) but 4 of 4 images of the other classes; the chance that a correct attack whose failures "
            "follow difficulty fails them all: p = 0.03 (Holm over 3 classes)")
    expected = [{"norm": "linf", "implementation": "lib/pgd", "library_version": "1.0", "note": note}]
    assert cf.class_notes_of(t) == expected
    assert cf.class_notes(_prepared(t)) == expected
    # just below 95%: a finding again
    assert bool(cf.judge_table(_class_table(a_queries=(50, 44.9))).iloc[0]["flagged"]) is True
    # no budget recorded (0): never out of budget
    assert bool(cf.judge_table(_class_table(a_queries=(500, 500), budget=0)).iloc[0]["flagged"]) is True


def test_class_failure_a_hard_class_is_explained_by_difficulty():
    # class 2 now holds B's largest distances: no image of the other classes is as hard, ½ / 1 each: 0.25, Holm 0.75
    t = _class_table(b_dist=[0.1, 0.2, 0.3, 0.4, 0.5, 0.6])
    r = cf.judge_table(t).iloc[0]
    assert r["p"] == pytest.approx(0.75) and bool(r["flagged"]) is False
    assert cf.class_notes_of(t)[0]["note"].endswith("p = 0.75 (Holm over 3 classes)")
    # in between: class 2 at B's ranks 3/6 and 4/6: (½ / 3) · (½ / 3) = 1/36, Holm 1/12
    t = _class_table(b_dist=[0.1, 0.2, 0.5, 0.6, 0.3, 0.4])
    assert cf.judge_table(t).iloc[0]["p"] == pytest.approx(3 / 36)


def test_class_failure_difficulty_is_averaged_over_models():
    # ranks on m1 3, 4, 5, 6, 1, 2 (sixths), on m2 2, 3, 4, 1, 5, 6: means 2.5, 3.5, 4.5, 3.5 for classes
    # 0 and 1, 3 and 4 for class 2: three others as hard as 3 (½ / 4), one as hard as 4 (½ / 2): Holm 3/32
    rows = (_cf_rows("lib/pgd", "2.0", B_DIST) + _cf_rows("lib/pgd", "2.0", [0.2, 0.3, 0.4, 0.1, 0.5, 0.6], model="m2")
            + _cf_rows("lib/pgd", "1.0", [0.35, 0.45, 0.55, 0.65, np.nan, np.nan])
            + _cf_rows("lib/pgd", "1.0", [0.35, 0.45, 0.55, 0.65, np.nan, np.nan], model="m2"))
    r = cf.judge_table(pd.DataFrame(rows)).iloc[0]
    assert r["p"] == pytest.approx(3 / 32)
    assert "(over 2 models; median 20 queries, budget 100)" in r["evidence"]


def test_class_failure_only_the_implementations_own_family_counts():
    # alone in its family (the other implementation is another family's): not judged
    t = _class_table()
    t.loc[t["library_version"] == "2.0", "family"] = "cw"
    assert cf.judge_table(t).empty
    # a third implementation of another family that broke nothing changes nothing
    t = pd.concat([_class_table(), pd.DataFrame(_cf_rows("lib/cw", "1", [np.nan] * 4 + [0.01, 0.01], family="cw"))])
    out = cf.judge_table(t)
    assert out["implementation"].tolist() == ["lib/pgd"] and out.iloc[0]["p"] == pytest.approx(0.03)


def test_class_failure_needs_two_images_per_class_and_some_breaks():
    # class 2 of one image only: not tested; nothing else fails
    labels = [0, 0, 1, 1, 2, 3]
    t = pd.DataFrame(_cf_rows("lib/pgd", "2.0", B_DIST, labels=labels)
                     + _cf_rows("lib/pgd", "1.0", [0.35, 0.45, 0.55, 0.65, np.nan, 0.25], labels=labels))
    assert cf.judge_table(t).empty
    # a seventh image of class 4 alone, broken by both: classes tested stay three
    labels = LABELS + [4]
    t = pd.DataFrame(_cf_rows("lib/pgd", "2.0", B_DIST + [0.7], labels=labels)
                     + _cf_rows("lib/pgd", "1.0", [0.35, 0.45, 0.55, 0.65, np.nan, np.nan, 0.75], labels=labels))
    r = cf.judge_table(t).iloc[0]
    assert "but 5 of 5 images of the other classes" in r["evidence"] and "(Holm over 3 classes)" in r["evidence"]
    # failing every image is weakness, not a class
    t = pd.DataFrame(_cf_rows("lib/pgd", "2.0", B_DIST) + _cf_rows("lib/pgd", "1.0", [np.nan] * 6))
    assert cf.judge_table(t).empty


def test_class_failure_reads_ok_rows_and_real_models_only():
    t = _class_table()
    # a crashed row with a distance is no break, and not counted as an image at all
    t.loc[(t["library_version"] == "1.0") & (t["sample"] == 0), "status"] = "error"
    r = cf.judge_table(t).iloc[0]
    assert "but 3 of 3 images of the other classes" in r["evidence"]
    # an implementation whose rows all crashed is not judged
    t = pd.concat([_class_table(), pd.DataFrame(_cf_rows("lib/pgd", "3.0", [np.nan] * 6, status="error"))])
    assert cf.judge_table(t)["library_version"].tolist() == ["1.0"]
    # twins are left out: a perm twin where 1.0 breaks class 2 and fails class 0
    twin = pd.DataFrame(_cf_rows("lib/pgd", "2.0", B_DIST, model="m1~perm")
                        + _cf_rows("lib/pgd", "1.0", [np.nan, np.nan, 0.55, 0.65, 0.15, 0.25], model="m1~perm"))
    out = cf.judge_table(pd.concat([_class_table(), twin]))
    assert out.iloc[0]["evidence"] == CF_EVIDENCE


def test_class_failure_without_labels_or_envelope_is_empty():
    cols = ["norm", "implementation", "library_version", "class", "p", "q", "flagged", "all_failed", "evidence"]
    out = cf.judge_table(_class_table().drop(columns="label"))
    assert out.empty and list(out.columns) == cols
    out = cf.judge(_prepared(_class_table()).drop(columns="d_star_family"))
    assert out.empty and list(out.columns) == cols
    out = cf.judge_table(pd.DataFrame(_cf_rows("lib/pgd", "2.0", B_DIST) + _cf_rows("lib/pgd", "1.0", B_DIST)))
    assert out.empty and list(out.columns) == cols


def test_class_failure_difficulty_is_a_percentile_within_each_model():
    # m1: all six images, B's ranks 1–6 of 6; m2 ran images 2, 4, 5 only, B's ranks there 3, 1, 2 of 3.
    # Mean percentiles: 1/6, 2/6, 3/4, 4/6 (classes 0, 1) and 7/12, 5/6 (class 2): two others as hard as
    # 7/12 (½ / 3), none as 5/6 (½ / 1): 1/12, Holm 1/4 (raw ranks would rank image 5 with image 3)
    rows = (_cf_rows("lib/pgd", "2.0", [0.1, 0.2, 0.3, 0.4, 0.5, 0.6])
            + _cf_rows("lib/pgd", "1.0", [0.35, 0.45, 0.55, 0.65, np.nan, np.nan]))
    rows += [r for r in _cf_rows("lib/pgd", "2.0", [0.0, 0.0, 0.9, 0.0, 0.1, 0.2], model="m2")
             if r["sample"] in (2, 4, 5)]
    rows += [r for r in _cf_rows("lib/pgd", "1.0", [0.0, 0.0, 0.95, 0.0, np.nan, np.nan], model="m2")
             if r["sample"] in (2, 4, 5)]
    r = cf.judge_table(pd.DataFrame(rows)).iloc[0]
    assert r["p"] == pytest.approx(0.25)
    assert "(over 2 models; median 20 queries, budget 100) but 4 of 4 images" in r["evidence"]


def test_class_failure_ties_in_difficulty_count_as_comparable_and_unshared_images_as_hardest():
    # B ties image 0 (class 0) with image 5 (class 2) at rank 2.5 of 6: four others as hard as either
    # class-2 image, (½ / 5)² = 0.01, Holm 0.03
    t = _class_table(b_dist=[0.3, 0.4, 0.5, 0.6, 0.1, 0.3])
    assert cf.judge_table(t).iloc[0]["p"] == pytest.approx(0.03)
    # image 6 (class 0) ran on 1.0 only, which broke it: no other's distance, so the hardest;
    # five others as hard: (½ / 6)², Holm 3 / 144
    t = pd.concat([_class_table(), pd.DataFrame(_cf_rows("lib/pgd", "1.0", [np.nan] * 6 + [0.5],
                                                         labels=LABELS + [0]))[6:]])
    r = cf.judge_table(t).iloc[0]
    assert r["p"] == pytest.approx(3 / 144)
    assert "but 5 of 5 images of the other classes" in r["evidence"]


def test_judge_one_image_twin_and_skipped_jobs_before_judged_ones():
    t = pd.DataFrame(_twin_rows("m", [1.0]) + _twin_rows("m~perm", [2.0]))
    r = tw.judge(t).iloc[0]
    assert (r["n"], r["n_differ"], r["p_value"]) == (1, 1, pytest.approx(0.05))
    # a randomised split job (base a) is skipped; base b's is still judged
    a, b = _split_table(rng=True), _split_table()
    a = with_models(a, [parse_model_name(m.replace("m", "a")) for m in a["model"]])
    b = with_models(b, [parse_model_name(m.replace("m", "b")) for m in b["model"]])
    assert tw.judge(pd.concat([a, b]), ("split",))["base"].tolist() == ["b"]


def test_a_seed_twin_that_lacks_an_image_is_read_by_sample():
    base = [0.1 * (i + 1) for i in range(8)]
    twin = [b * 1.5 for b in base[:6]] + base[6:]
    seed = base[:7] + [base[7] * 2]
    kw = {"impl": "lib/ead", "family": "ead"}
    seed_rows = [r for r in _twin_rows("m~seed", seed, **kw) if r["sample"] != 6]
    t = pd.DataFrame(_twin_rows("m", base, **kw) + _twin_rows("m~split", twin, **kw) + seed_rows)
    r = tw.judge(t, ("split",)).iloc[0]
    assert (r["n"], r["n_differ"], r["n_differ_seed"]) == (8, 6, 1)
    assert r["p_value"] == pytest.approx(8 / 128)


def test_class_failure_other_classes_failures_raise_the_chance():
    # 1.0 also fails image 0 (class 0, B's rank 3 of 6): as hard as both class-2 images, so
    # (1 + ½) / (4 + 1) = 0.3 per image, 0.09, Holm 0.27: no finding
    t = _class_table()
    t.loc[(t["library_version"] == "1.0") & (t["sample"] == 0), "best_distance"] = np.nan
    r = cf.judge_table(t).iloc[0]
    assert r["p"] == pytest.approx(0.27) and bool(r["flagged"]) is False
    assert "but 3 of 4 images of the other classes" in r["evidence"]


def test_batch_twin_still_leaves_out_images_no_one_broke():
    t = _split_table("batch")
    t.loc[t["sample"] == 7, "best_distance"] = np.inf
    r = tw.judge(t, ("batch",)).iloc[0]
    assert (r["n"], r["n_images"]) == (7, 8)
