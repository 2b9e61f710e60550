"""What mutation testing asks of the fidelity plumbing and the strength / true-optimality rules
(docs/testing.md, issue 40): the robust-accuracy step curves (``curves``), the cleaned result table
and its long form (``_table``), the hand-built result rows tests rely on (``synthetic``), the
``below_expected_strength`` flag and the family-shortfall note (``strength``), and optimality
against exact minimal distances with the ``below_exact`` flag (``true_optimality``).

Every expected value is computed by hand in the test (or by a plain formula written out here), on
small constructed tables, with the thresholds probed on both sides where a verdict flips.
"""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from attackaudit.fidelity import curves, strength, synthetic, true_optimality
from attackaudit.fidelity import _table as tbl
from attackaudit.fidelity.synthetic import job_rows

INF = np.inf


# ------------------------------------------------------------------------------------ curves
def test_as_distances_flattens_to_float_and_reads_nan_as_never_broken():
    d = curves.as_distances([[1, np.nan], [0, 2]])
    assert d.dtype == float and d.shape == (4,)
    assert d.tolist() == [1.0, INF, 0.0, 2.0]
    assert curves.as_distances(["1.5", "0"]).tolist() == [1.5, 0.0]
    assert curves.as_distances(0.5).tolist() == [0.5]   # a scalar is one sample; 0 < d < 1 is allowed


def test_as_distances_rejects_negative_with_message():
    with pytest.raises(ValueError, match=r"^distances must be >= 0$"):
        curves.as_distances([1.0, -0.001])


def test_robustness_curve_is_the_exact_step_function():
    eps, acc = curves.robustness_curve([0.0, 1.0, 1.0, 2.0, INF])
    assert eps.tolist() == [0.0, 1.0, 2.0]
    assert acc.tolist() == pytest.approx([0.8, 0.4, 0.2])
    eps, acc = curves.robustness_curve([3.0])
    assert eps.tolist() == [0.0, 3.0] and acc.tolist() == [1.0, 0.0]
    eps, acc = curves.robustness_curve([])
    assert eps.tolist() == [0.0] and acc.tolist() == [0.0]


def test_robust_accuracy_counts_strictly_greater():
    d = [0.0, 1.0, 2.0, INF]
    assert curves.robust_accuracy(d, 1.0) == 0.5
    assert curves.robust_accuracy(d, 0.0) == 0.75
    assert curves.robust_accuracy([], 1.0) == 0.0


def test_attack_success_rate_counts_at_or_below():
    d = [0.0, 1.0, 2.0, INF]
    assert curves.attack_success_rate(d, 1.0) == 0.5
    assert curves.attack_success_rate(d, 0.5) == 0.25
    assert curves.attack_success_rate([], 1.0) == 0.0


def test_curve_area_is_mean_of_clipped_distances():
    assert curves.curve_area([0.0, 0.5, 2.0, INF], 1.0) == pytest.approx(0.625)
    assert curves.curve_area([0.25], 1.0) == pytest.approx(0.25)
    assert curves.curve_area([0.25, 2.0], 0.5) == pytest.approx(0.375)
    assert curves.curve_area([1.0, 2.0], 0.0) == 0.0
    assert curves.curve_area([1.0, 2.0], -1.0) == 0.0
    assert curves.curve_area([], 1.0) == 0.0


# ------------------------------------------------------------------------------------ _table
def _raw(**cols):
    base = {"model": ["m", "m"], "norm": ["l2", "l2"], "sample": [0, 1], "best_distance": [1.0, 2.0]}
    base.update(cols)
    return pd.DataFrame(base)


def test_prepare_names_every_missing_required_column():
    with pytest.raises(ValueError, match=r"^result table lacks column\(s\) norm, best_distance$"):
        tbl.prepare(pd.DataFrame({"model": ["m"], "sample": [0]}))


def test_prepare_fills_defaults_of_a_minimal_table():
    t = tbl.prepare(_raw(library=["lib", "lib"], attack=["a", "a"]))
    row = t.iloc[0]
    assert row["implementation"] == "lib/a"
    assert (row["library_version"], row["family"], row["kind"], row["status"], row["error"]) == ("", "", "", "ok", "")
    for col in ("forwards", "backwards", "refused", "budget", "wall_s"):
        assert row[col] == 0.0 and t[col].dtype == float
    assert row["returned_distance"] == INF and not row["returned_adversarial"]
    assert not row["targeted"] and row["target"] == -1
    assert t["best_distance"].tolist() == [1.0, 2.0]
    assert "index" not in t.columns and t.index.tolist() == [0, 1]


def test_prepare_keeps_a_given_implementation_name():
    t = tbl.prepare(_raw(implementation=["x/y", "x/y"], library=["lib", "lib"], attack=["a", "a"]))
    assert t["implementation"].tolist() == ["x/y", "x/y"]


def test_prepare_cleans_missing_and_malformed_values():
    t = tbl.prepare(pd.DataFrame({
        "model": ["m", None], "norm": ["l2", None], "sample": [0, 1], "best_distance": [np.nan, "bad"],
        "implementation": [None, "i"], "library_version": [None, "1"], "library": [None, "l"], "attack": [None, "a"],
        "family": [None, "f"], "kind": [None, "k"], "status": [None, "ok"], "error": [None, "e"],
        "returned_distance": ["x", 0.5], "forwards": [None, "many"], "backwards": [None, 2], "refused": [None, 1],
        "budget": [None, 3], "wall_s": [None, 4.5], "returned_adversarial": [None, True],
        "targeted": [None, False]}))
    first, second = t.iloc[0], t.iloc[1]
    for col in ("implementation", "library_version", "library", "attack", "family", "kind", "status", "error"):
        assert first[col] == "", col
    assert (first["model"], first["norm"], second["model"], second["norm"]) == ("m", "l2", "", "")
    assert t["best_distance"].tolist() == [INF, INF] and t["best_distance"].dtype == float
    assert t["returned_distance"].tolist() == [INF, 0.5]
    assert [first[c] for c in ("forwards", "backwards", "refused", "budget", "wall_s")] == [0.0] * 5
    assert [second[c] for c in ("forwards", "backwards", "refused", "budget", "wall_s")] == [0.0, 2.0, 1.0, 3.0, 4.5]
    assert t["returned_adversarial"].tolist() == [False, True] and t["returned_adversarial"].dtype == bool
    assert t["targeted"].tolist() == [False, False] and t["targeted"].dtype == bool
    assert (second["error"], second["library"], second["implementation"], second["status"]) == ("e", "l", "i", "ok")


def test_prepare_unknown_flags_are_false():
    t = tbl.prepare(_raw(returned_adversarial=[np.nan, 1.0], targeted=[np.nan, np.nan]))
    assert t["returned_adversarial"].tolist() == [False, True]
    assert t["targeted"].tolist() == [False, False]


def test_prepare_string_columns_are_str():
    t = tbl.prepare(_raw(model=[1, 1], norm=[2, 2], library_version=[3, 3], error=[7, 7]))
    assert t["model"].tolist() == ["1", "1"] and t["norm"].tolist() == ["2", "2"]
    assert t["library_version"].tolist() == ["3", "3"] and t["error"].tolist() == ["7", "7"]


def test_prepare_drops_rows_without_a_result_only():
    t = tbl.prepare(pd.DataFrame({
        "model": ["m"] * 4, "norm": ["l2"] * 4, "sample": [0, 1, 2, 3], "best_distance": [1.0, 2.0, 3.0, 4.0],
        "status": ["ok", "unsupported", "harness_error", "error"]}))
    assert t["sample"].tolist() == [0, 3] and t["status"].tolist() == ["ok", "error"]
    assert t.index.tolist() == [0, 1]


def test_prepare_keeps_the_last_row_of_a_rerun():
    t = tbl.prepare(pd.DataFrame({
        "model": ["m", "m", "m"], "norm": ["l2"] * 3, "sample": [0, 0, 1], "best_distance": [5.0, 1.0, 2.0],
        "implementation": ["i", "i", "i"]}))
    assert t["best_distance"].tolist() == [1.0, 2.0] and t.index.tolist() == [0, 1]
    # another version is another implementation: not a duplicate
    t = tbl.prepare(pd.DataFrame({
        "model": ["m", "m"], "norm": ["l2"] * 2, "sample": [0, 0], "best_distance": [5.0, 1.0],
        "implementation": ["i", "i"], "library_version": ["1", "2"]}))
    assert len(t) == 2


def test_prepare_refuses_mixed_targeted_rows():
    with pytest.raises(ValueError, match=r"^the table mixes targeted and untargeted rows; split it by `targeted` "
                                         r"first$"):
        tbl.prepare(_raw(targeted=[True, False]))
    assert tbl.prepare(_raw(targeted=[True, True]))["targeted"].tolist() == [True, True]


def test_twin_names():
    from attackaudit.results.schema import Twin, parse_model_name

    assert parse_model_name("m~shift") == Twin("m", "shift") and parse_model_name("m") == Twin("m")
    assert parse_model_name("m~x~perm") == Twin("m~x", "perm") and Twin("m", "seed").name == "m~seed"
    # a "~" that does not end the name in a twin kind is part of it (a path: torchvision:r:~/w.pt)
    assert parse_model_name("m~a~b") == Twin("m~a~b") and parse_model_name("t:~/w.pt") == Twin("t:~/w.pt")
    prepared = tbl.prepare(synthetic.table(job_rows("m~perm", "lib/a", "l2", [1.0]),
                                           job_rows("m", "lib/a", "l2", [1.0])))
    assert tbl.is_twin(prepared).tolist() == [True, False] and tbl.twins_of(prepared) == {
        "m~perm": ("m", "perm"), "m": ("m", "")}
    t = pd.DataFrame({"model": ["a", "a~shift", "b"], "v": [1, 2, 3]})
    assert tbl.without_twins(t)["v"].tolist() == [1, 3]
    empty = pd.DataFrame(columns=["model"])
    assert tbl.without_twins(empty).empty and list(tbl.without_twins(empty).columns) == ["model"]


def test_long_distances_fills_missing_with_inf_and_zeroes_dead_samples():
    raw = pd.concat([
        job_rows("m", "la/x", "l2", [0.0, 2.0, 3.0]),
        job_rows("m", "lb/y", "l2", [1.0, 1.0], samples=[0, 1], library_version="2"),
    ], ignore_index=True)
    long = tbl.long_distances(tbl.prepare(raw))
    assert list(long.columns) == ["model", "norm", "sample", "implementation", "library_version", "distance",
                                  "d_star", "live"]
    assert long["implementation"].tolist() == ["la/x"] * 3 + ["lb/y"] * 3
    assert long["library_version"].tolist() == ["1.0"] * 3 + ["2"] * 3
    assert long["sample"].tolist() == [0, 1, 2] * 2
    assert long["distance"].tolist() == [0.0, 2.0, 3.0, 0.0, 1.0, INF]
    assert long["d_star"].tolist() == [0.0, 1.0, 3.0] * 2
    assert long["live"].tolist() == [False, True, True] * 2
    assert long.index.tolist() == list(range(6))


def test_long_distances_by_other_keys_and_empty():
    raw = pd.concat([job_rows("m", "la/x", "l2", [2.0, 4.0], family="f1"),
                     job_rows("m", "lb/y", "l2", [3.0, 1.0], family="f0")], ignore_index=True)
    long = tbl.long_distances(tbl.prepare(raw), ["family"])
    assert list(long.columns) == ["model", "norm", "sample", "family", "distance", "d_star", "live"]
    assert long["family"].tolist() == ["f0", "f0", "f1", "f1"]
    assert long["distance"].tolist() == [3.0, 1.0, 2.0, 4.0]
    empty = tbl.long_distances(tbl.prepare(raw).iloc[:0])
    assert empty.empty and list(empty.columns) == ["model", "norm", "sample", "implementation", "library_version",
                                                   "distance", "d_star", "live"]


def test_long_distances_last_duplicate_wins_and_models_stay_apart():
    t = pd.DataFrame({"model": ["m", "m", "n"], "norm": ["l2"] * 3, "sample": [0, 0, 0],
                      "implementation": ["i", "i", "i"], "library_version": ["1"] * 3,
                      "best_distance": [5.0, 1.0, 7.0]})
    long = tbl.long_distances(t)
    assert long["model"].tolist() == ["m", "n"]
    assert long["distance"].tolist() == [1.0, 7.0] and long["d_star"].tolist() == [1.0, 7.0]


def test_group_rows_matches_groupby_order_and_skips_nan_keys():
    frame = pd.DataFrame({"a": ["y", "x", "y", None, "x", "y"], "b": [1, 1, 1, 1, 2, 1]})
    groups = tbl.group_rows(frame, ["a", "b"])
    assert [k for k, _ in groups] == [("x", 1), ("x", 2), ("y", 1)]
    assert [rows.tolist() for _, rows in groups] == [[1], [4], [0, 2, 5]]
    assert tbl.group_rows(frame.iloc[:0], ["a", "b"]) == []
    one = tbl.group_rows(pd.DataFrame({"a": ["p", "p"], "b": [0, 0]}), ["a", "b"])
    assert [(k, r.tolist()) for k, r in one] == [(("p", 0), [0, 1])]


def test_group_rows_keeps_frame_order_inside_large_groups():
    frame = pd.DataFrame({"a": np.tile(["p", "q"], 500), "b": 0})
    groups = tbl.group_rows(frame, ["a", "b"])
    assert [k for k, _ in groups] == [("p", 0), ("q", 0)]
    assert groups[0][1].tolist() == list(range(0, 1000, 2)) and groups[1][1].tolist() == list(range(1, 1000, 2))


def test_impl_meta_takes_the_first_nonempty_value():
    t = pd.DataFrame({"implementation": ["b/x", "a/y", "a/y", "a/y"], "library_version": ["1"] * 4,
                      "library": ["b", "", "a", "z"], "attack": ["x", "y", "y", "y"], "family": ["", "", "", ""],
                      "kind": ["minimal", "", "bounded", ""]})
    meta = tbl.impl_meta(t)
    assert list(meta.columns) == ["implementation", "library_version", "library", "attack", "family", "kind"]
    assert meta["implementation"].tolist() == ["a/y", "b/x"]
    assert meta["library"].tolist() == ["a", "b"] and meta["kind"].tolist() == ["bounded", "minimal"]
    assert meta["family"].tolist() == ["", ""]
    empty = tbl.impl_meta(t.iloc[:0])
    assert empty.empty and list(empty.columns) == list(meta.columns)


def test_job_costs_means_per_job():
    t = tbl.prepare(pd.concat([
        job_rows("m", "lb/x", "l2", [1.0, 2.0], forwards=[10, 30], backwards=[1, 3], refused=[0, 4], wall_s=2.5),
        job_rows("m", "la/y", "l2", [1.0, 2.0, 3.0], forwards=6, backwards=0, refused=1, wall_s=1.0),
    ], ignore_index=True))
    c = tbl.job_costs(t)
    assert list(c.columns) == ["model", "norm", "implementation", "library_version", "forwards", "backwards",
                               "refused", "wall_s", "n_samples"]
    assert c["implementation"].tolist() == ["la/y", "lb/x"]
    assert c["forwards"].tolist() == [6.0, 20.0] and c["backwards"].tolist() == [0.0, 2.0]
    assert c["refused"].tolist() == [1.0, 2.0] and c["wall_s"].tolist() == [1.0, 2.5]
    assert c["n_samples"].tolist() == [3, 2]
    empty = tbl.job_costs(t.iloc[:0])
    assert empty.empty and list(empty.columns) == list(c.columns)


def test_sample_list_text():
    assert tbl.sample_list([3, 7.0, np.int64(12), "a", 2.5]) == "3, 7, 12, a, 2.5"
    assert tbl.sample_list(range(6)) == "0, 1, 2, 3, 4, 5"
    assert tbl.sample_list(range(10)) == "0, 1, 2, 3, 4, 5, … (+4)"
    assert tbl.sample_list(range(4), limit=2) == "0, 1, … (+2)"
    assert tbl.sample_list([np.float32(4.0)]) == "4"


def test_with_envelope_gives_both_envelopes():
    t = tbl.prepare(pd.concat([
        job_rows("m", "la/x", "l2", [1.0, 4.0, 0.0], family="f"),
        job_rows("m", "lb/y", "l2", [2.0, 3.0, 5.0], family="f", status=["ok", "error", "ok"], error=["", "boom", ""]),
        job_rows("m", "lc/z", "l2", [0.5, 9.0, 9.0], family="g"),
    ], ignore_index=True))
    rows = tbl.with_envelope(t)
    assert list(rows.columns) == [*tbl.ROW_COLUMNS, "d_star", "live", "d_star_family"]
    assert len(rows) == 9
    assert rows["d_star"].tolist() == [0.5, 3.0, 0.0] * 3
    assert rows["live"].tolist() == [True, True, False] * 3
    assert rows["d_star_family"].tolist() == [1.0, 3.0, 0.0, 1.0, 3.0, 0.0, 0.5, 9.0, 9.0]
    for c in ("status", "error", "family", "kind"):
        assert rows[c].dtype == object
    assert rows["error"].tolist()[3:6] == ["", "boom", ""]
    assert rows["implementation"].tolist() == ["la/x"] * 3 + ["lb/y"] * 3 + ["lc/z"] * 3


def test_with_envelope_of_an_empty_table():
    rows = tbl.with_envelope(tbl.prepare(job_rows("m", "la/x", "l2", [1.0]).iloc[:0]))
    assert rows.empty
    assert list(rows.columns) == [*tbl.ROW_COLUMNS, "d_star", "live", "d_star_family"]


def test_with_envelope_slim_columns_only_those_present():
    t = tbl.prepare(job_rows("m", "la/x", "l2", [1.0, 2.0])).drop(columns=["label"])
    rows = tbl.with_envelope(t)
    assert "label" not in rows.columns and "budget" in rows.columns
    assert rows["d_star_family"].tolist() == [1.0, 2.0]


# --------------------------------------------------------------------------------- synthetic
def test_job_rows_defaults_describe_a_healthy_minimal_job():
    t = job_rows("m", "lib/name:variant", "l2", [0.0, 2.0, INF])
    assert list(t.columns) == list(synthetic.ROW_COLUMNS)
    row = t.iloc[1].to_dict()
    expected = {"run": "test", "job_id": "m__lib/name:variant__l2", "model": "m", "dataset": "digits",
                "subset_hash": "h", "sample": 1, "label": 1, "clean_correct": True, "library": "lib",
                "library_version": "1.0", "attack": "name", "implementation": "lib/name:variant", "family": "name",
                "norm": "l2", "kind": "minimal", "params_hash": "p", "params": "{}", "targeted": False, "target": -1,
                "budget": 2000, "forwards": 500, "backwards": 500, "refused": 0, "best_dropped": 0,
                "best_distance": 2.0, "best_l0": 2.0, "best_l1": 2.0, "best_l2": 2.0, "best_linf": 2.0,
                "returned_distance": 2.0, "returned_adversarial": True, "status": "ok", "error": "", "wall_s": 1.0}
    assert {k: row[k] for k in expected} == expected
    assert t["clean_correct"].tolist() == [False, True, True]
    assert t["returned_adversarial"].tolist() == [True, True, False]
    assert t["sample"].tolist() == [0, 1, 2]
    assert t["forwards"].dtype.kind == "i" and t["backwards"].dtype.kind == "i" and t["refused"].dtype.kind == "i"
    assert job_rows("m", "l/x", "l2", [0.5, 2.0])["clean_correct"].tolist() == [True, True]


def test_job_rows_takes_every_argument():
    t = job_rows("n", "a/b/c", "linf", [0.5, 1.0], family="fam", library_version="2.3", kind="bounded",
                 returned=[INF, 0.7], status=["ok", "error"], error=["", "boom"], forwards=[3.7, 4],
                 backwards=[5, 6], refused=[1, 2], budget=99, wall_s=3.5, samples=[10, 21], labels=[7, 8],
                 run="r1", targeted=True)
    assert t["library"].tolist() == ["a", "a"] and t["attack"].tolist() == ["b/c", "b/c"]
    assert t["family"].tolist() == ["fam"] * 2 and t["library_version"].tolist() == ["2.3"] * 2
    assert t["kind"].tolist() == ["bounded"] * 2 and t["norm"].tolist() == ["linf"] * 2
    assert t["returned_distance"].tolist() == [INF, 0.7] and t["returned_adversarial"].tolist() == [False, True]
    assert t["status"].tolist() == ["ok", "error"] and t["error"].tolist() == ["", "boom"]
    assert t["forwards"].tolist() == [3, 4] and t["backwards"].tolist() == [5, 6] and t["refused"].tolist() == [1, 2]
    assert t["budget"].tolist() == [99, 99] and t["wall_s"].tolist() == [3.5, 3.5]
    assert t["sample"].tolist() == [10, 21] and t["label"].tolist() == [7, 8]
    assert t["run"].tolist() == ["r1"] * 2 and t["targeted"].tolist() == [True, True]
    assert t["job_id"].tolist() == ["n__a/b/c__linf"] * 2
    assert t["best_distance"].tolist() == [0.5, 1.0] and t["best_distance"].dtype == float


def test_job_rows_scalars_broadcast_and_labels_wrap_at_ten():
    t = job_rows("m", "l/x", "l2", [1] * 12, returned=0.25, status="error", error="e", forwards=7, backwards=8,
                 refused=9)
    assert t["best_distance"].dtype == float
    assert t["label"].tolist() == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1]
    assert t["returned_distance"].tolist() == [0.25] * 12 and t["status"].tolist() == ["error"] * 12
    assert t["error"].tolist() == ["e"] * 12
    assert (t["forwards"].tolist(), t["backwards"].tolist(), t["refused"].tolist()) == ([7] * 12, [8] * 12, [9] * 12)
    assert t["attack"].iloc[0] == "x" and t["family"].iloc[0] == "x"


def test_job_rows_per_sample_values_become_one_column():
    t = job_rows("m", "l/x", "l2", [1, 2], returned=[1, 3], forwards=np.array([[3], [4]]))
    assert t["returned_distance"].dtype == float and t["returned_distance"].tolist() == [1.0, 3.0]
    assert t["forwards"].tolist() == [3, 4]


def test_table_concatenates_with_a_fresh_index():
    t = synthetic.table(job_rows("m", "l/x", "l2", [1.0]), job_rows("m", "l/y", "l2", [2.0, 3.0]))
    assert t.index.tolist() == [0, 1, 2] and t["implementation"].tolist() == ["l/x", "l/y", "l/y"]


def test_table_from_arrays_lays_out_models_and_samples():
    d = {"la/x": np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]), "lb/y": np.array([[7.0, 8.0, 9.0], [1.5, 2.5, 3.5]])}
    t = synthetic.table_from_arrays(d, ["m1", "m2~shift"])
    assert len(t) == 12
    assert t["model"].tolist() == ["m1"] * 3 + ["m2~shift"] * 3 + ["m1"] * 3 + ["m2~shift"] * 3
    assert t["sample"].tolist() == [0, 1, 2] * 4
    assert t["best_distance"].tolist() == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 1.5, 2.5, 3.5]
    assert t["job_id"].tolist()[2:4] == ["m1__la/x__l2", "m2~shift__la/x__l2"]
    assert set(t["norm"]) == {"l2"} and set(t["family"]) == {"f"} and set(t["library_version"]) == {"1.0"}
    assert t["label"].tolist() == [0, 1, 2] * 4
    t = synthetic.table_from_arrays({"la/x": np.array([0.5, 0.0])}, ["m"], family="g", norm="linf",
                                    labels=np.array([4, 5]), version="9")
    assert t["model"].tolist() == ["m", "m"] and t["label"].tolist() == [4, 5]
    assert set(t["norm"]) == {"linf"} and set(t["family"]) == {"g"} and set(t["library_version"]) == {"9"}
    assert t["job_id"].tolist() == ["m__la/x__linf"] * 2


def test_true_distances_shape_zero_share_shared_difficulty_and_scale():
    rng = np.random.default_rng(0)
    d = synthetic.true_distances(rng, 400, 100)
    assert d.shape == (100, 400)
    zero = d == 0
    assert 0.08 < zero.mean() < 0.12
    assert np.all(d[~zero] > 0)
    # one difficulty per image shared by every model: log distances of two models correlate
    # (var 0.25 shared vs 0.0225 own noise: r ≈ 0.92)
    both = ~zero[0] & ~zero[1]
    r = np.corrcoef(np.log(d[0, both]), np.log(d[1, both]))[0, 1]
    assert 0.85 < r < 0.97
    # the spread of one model's log distance: sqrt(0.5² + 0.15²) ≈ 0.52
    spread = np.std(np.log(d[0, ~zero[0]]))
    assert 0.45 < spread < 0.6
    # per-model scale uniform on [0.5, 2]: the medians span it
    med = np.array([np.median(row[row > 0]) for row in d])
    assert 0.4 < med.min() < 0.65 and 1.75 < med.max() < 2.3


def test_attack_distances_default_is_the_truth():
    truth = np.array([[0.0, 0.5, 2.0], [1.0, 0.0, 0.25]])
    out = synthetic.attack_distances(np.random.default_rng(1), truth)
    assert out.tolist() == truth.tolist()


def test_attack_distances_farther_and_fail_images():
    truth = np.array([[0.0, 0.5, 2.0, 0.1], [1.0, 0.0, 0.25, 0.3]])
    out = synthetic.attack_distances(np.random.default_rng(1), truth, farther=2.0, fail_images=np.array([1, 3]))
    assert out.tolist() == [[0.0, INF, 4.0, INF], [2.0, 0.0, 0.5, INF]]


def test_attack_distances_seed_noise_only_lengthens():
    truth = np.full((50, 200), 0.5)
    out = synthetic.attack_distances(np.random.default_rng(2), truth, farther=1.5, seed_noise=0.1)
    ratio = np.log(out / 0.75)
    assert ratio.min() >= 0.0
    # E|N(0, σ)| = σ √(2/π)
    assert ratio.mean() == pytest.approx(0.1 * np.sqrt(2 / np.pi), rel=0.05)


def test_attack_distances_fail_on_the_hardest_cases():
    ladder = np.exp(-1.5 * np.arange(1, 8))[::-1]            # 7 distances below 1, increasing
    row = np.concatenate([[0.0, 0.0, 0.0], ladder])
    truth = np.vstack([row] * 20 + [row * 1e4] * 20)
    out = synthetic.attack_distances(np.random.default_rng(3), truth, fail_rate=0.3)
    assert np.all(out[:, :3] == 0.0)
    assert np.all(np.isinf(out[:, -3:]))
    assert out[:, 3:7].tolist() == truth[:, 3:7].tolist()


def test_attack_distances_fail_share_on_an_integer_quantile():
    truth = np.vstack([np.arange(1.0, 12.0) * 10.0 ** k for k in range(3)])  # 11 images: quantile 0.5 hits one
    out = synthetic.attack_distances(np.random.default_rng(4), truth, fail_rate=0.5)
    assert np.isinf(out).sum(axis=1).tolist() == [6, 6, 6]   # the case at the cut fails too


def test_attack_distances_equal_difficulty_fails_by_chance():
    # equally hard cases: the per-case noise of the difficulty picks which fail, a fail_rate share of them
    out = synthetic.attack_distances(np.random.default_rng(6), np.ones((20, 50)), fail_rate=0.2)
    assert np.isinf(out).sum(axis=1).tolist() == [10] * 20
    assert len({tuple(np.flatnonzero(np.isinf(row))) for row in out}) == 20


def test_attack_distances_fail_at_random_uses_the_generator_for_failures():
    truth = np.full((100, 100), 2.0)
    out = synthetic.attack_distances(np.random.default_rng(5), truth, fail_rate=0.3, fail_by_difficulty=False)
    fails = np.random.default_rng(5).random((100, 100)) < 0.3
    assert np.isinf(out).tolist() == fails.tolist()
    assert np.all(out[~fails] == 2.0)


# ---------------------------------------------------------------------------------- strength
def test_expected_reads_the_published_optimality():
    assert strength.expected("fmn", "l2") == 0.9755
    assert strength.expected("deepfool", "linf") == 0.6697
    assert strength.expected("fmn", "l3") is None
    assert strength.expected("nosuchfamily", "l2") is None


def test_is_strong_against_the_threshold():
    assert strength.is_strong("fmn", "l2") and strength.is_strong("apgd", "linf")
    assert not strength.is_strong("deepfool", "l2")          # 0.6722
    assert not strength.is_strong("fab", "l1")               # 0.8342
    assert not strength.is_strong("nosuchfamily", "l2") and not strength.is_strong("fmn", "l3")


def test_is_strong_includes_the_threshold_itself(tmp_path, monkeypatch):
    f = tmp_path / "expectations.json"
    f.write_text(json.dumps({"strong_threshold": 0.9, "families": {
        "at": {"l2": {"optimality": 0.9}}, "under": {"l2": {"optimality": 0.8999}}}}), encoding="utf-8")
    monkeypatch.setattr(strength, "EXPECTATIONS_FILE", f)
    strength.expectations.cache_clear()
    try:
        assert strength.is_strong("at", "l2") and not strength.is_strong("under", "l2")
    finally:
        monkeypatch.undo()
        strength.expectations.cache_clear()


def _glob(rows):  # global_optimality's rows: the library column beside the implementation
    return pd.DataFrame([dict(zip(["norm", "implementation", "library_version", "family", "optimality"], r),
                              library=r[1].partition("/")[0]) for r in rows])


def test_strength_findings_columns_siblings_and_verdicts():
    g = strength.strength_findings(_glob([
        ("l2", "liba/fmn", "1", "fmn", 0.9),
        ("l2", "liba/fmn:fast", "1", "fmn", 0.85),
        ("l2", "libb/fmn", "1", "fmn", 0.3),
        ("l2", "liba/alma", "1", "alma", 0.9),
        ("l2", "libc/deepfool", "1", "deepfool", 0.1),
        ("l2", "libd/ddn", "1", "ddn", np.nan),
        ("linf", "liba/fmn", "1", "fmn", 0.2),
        ("linf", "libb/fmn", "1", "fmn", 0.2),
        ("linf", "libe/apgd", "1", "apgd", 0.8),
    ]))
    assert list(g.columns) == ["norm", "implementation", "library_version", "family", "optimality", "library",
                               "expected", "best_in_norm", "best_in_norm_impl", "sibling_best", "sibling_best_impl",
                               "below_expected", "family_shortfall"]
    assert g["expected"].tolist()[:5] == [0.9755, 0.9755, 0.9755, 0.9887, 0.6722]
    assert g["expected"].iloc[5] == 0.9802 and g["expected"].iloc[8] == 0.99
    assert g["best_in_norm"].tolist() == [0.9] * 6 + [0.8] * 3
    # a tie is broken by the implementation's name; a NaN ξ never tops a norm
    assert g["best_in_norm_impl"].tolist() == ["liba/alma"] * 6 + ["libe/apgd"] * 3
    sib = g["sibling_best"].tolist()
    assert sib[:3] == [0.3, 0.3, 0.9] and np.isnan(sib[3]) and np.isnan(sib[4]) and np.isnan(sib[5])
    assert sib[6:8] == [0.2, 0.2] and np.isnan(sib[8])
    assert g["sibling_best_impl"].tolist() == ["libb/fmn", "libb/fmn", "liba/fmn", "", "", "", "libb/fmn",
                                               "liba/fmn", ""]
    assert g["below_expected"].tolist() == [False, False, True, False, False, False, False, False, False]
    assert g["below_expected"].dtype == bool and g["family_shortfall"].dtype == bool
    assert g["family_shortfall"].tolist() == [False] * 6 + [True, True, False]


def test_strength_findings_edges_are_strict():
    # exactly half of the sibling is not below it
    g = strength.strength_findings(_glob([("l2", "liba/fmn", "1", "fmn", 0.8), ("l2", "libb/fmn", "1", "fmn", 0.4)]))
    assert g["below_expected"].tolist() == [False, False]
    g = strength.strength_findings(_glob([("l2", "liba/fmn", "1", "fmn", 0.8), ("l2", "libb/fmn", "1", "fmn", 0.39)]))
    assert g["below_expected"].tolist() == [False, True]
    # far below: under half the published ξ AND under half the norm's best
    half = 0.5 * 0.9755
    rows = [("l2", "liba/fmn", "1", "fmn", half), ("l2", "libb/fmn", "1", "fmn", 0.1),
            ("l2", "libc/ddn", "1", "ddn", 1.0)]
    assert strength.strength_findings(_glob(rows))["family_shortfall"].tolist() == [False, False, False]
    rows[0] = ("l2", "liba/fmn", "1", "fmn", half - 1e-9)
    assert strength.strength_findings(_glob(rows))["family_shortfall"].tolist() == [True, True, False]
    rows[2] = ("l2", "libc/ddn", "1", "ddn", 2 * (half - 1e-9))   # now exactly half of the norm's best
    assert strength.strength_findings(_glob(rows))["family_shortfall"].tolist() == [False, False, False]
    # a weak family is never far below, however low
    rows = [("l2", "liba/deepfool", "1", "deepfool", 0.01), ("l2", "libb/deepfool", "1", "deepfool", 0.01),
            ("l2", "libc/ddn", "1", "ddn", 1.0)]
    g = strength.strength_findings(_glob(rows))
    assert g["family_shortfall"].tolist() == [False] * 3 and g["below_expected"].tolist() == [False] * 3
    # a family alone in its norm: its sole library is never flagged or noted
    rows = [("l2", "liba/fmn", "1", "fmn", 0.01), ("l2", "liba/fmn:v", "1", "fmn", 0.01), ("l2", "libc/ddn", "1", "ddn", 1.0)]
    g = strength.strength_findings(_glob(rows))
    assert g["family_shortfall"].tolist() == [False] * 3 and g["below_expected"].tolist() == [False] * 3


def test_strength_findings_judges_on_the_family_envelope_when_given():
    g = _glob([("l2", "liba/fmn", "1", "fmn", 0.9), ("l2", "libb/fmn", "1", "fmn", 0.8)])
    g = g.assign(family_optimality=[0.9, 0.2], family_sibling_best=[0.2, 0.9])
    assert strength.strength_findings(g)["below_expected"].tolist() == [False, True]
    g = g.assign(family_optimality=[0.9, 0.6])
    assert strength.strength_findings(g)["below_expected"].tolist() == [False, False]
    g = _glob([("l2", "liba/fmn", "1", "fmn", 0.9), ("l2", "libb/fmn", "1", "fmn", 0.2)])
    g = g.assign(family_optimality=[0.9, 0.8])                  # ξ against its family only, sibling from ξ
    assert strength.strength_findings(g)["below_expected"].tolist() == [False, False]
    g = g.assign(family_optimality=[0.9, 0.8], family_sibling_best=[0.8, 1.0])
    assert strength.strength_findings(g)["below_expected"].tolist() == [False, False]
    g = g.assign(family_optimality=[0.9, 0.4], family_sibling_best=[0.4, 0.81])
    assert strength.strength_findings(g)["below_expected"].tolist() == [False, True]


def test_strength_findings_of_nothing():
    g = strength.strength_findings(pd.DataFrame(columns=["norm", "implementation", "library_version", "family",
                                                         "optimality"]))
    assert g.empty
    assert list(g.columns) == ["norm", "implementation", "library_version", "family", "optimality", "expected",
                               "best_in_norm", "best_in_norm_impl", "sibling_best", "sibling_best_impl",
                               "below_expected", "family_shortfall"]


def _strength_table(libb, models=("m1", "m2")):
    """Two libraries of the strong fmn family and a ddn that is best of l2, on the same 4 images.

    fmn envelope (liba) [1, 2, 3, 4]: ε₀ 4, Σ(ε₀ − d*) = 6; norm envelope (ddn) [0.5, 1, 1.5, 2]:
    ε₀ 2, Σ = 3."""
    jobs = []
    for m in models:
        jobs += [job_rows(m, "liba/fmn", "l2", [1.0, 2.0, 3.0, 4.0]),
                 job_rows(m, "libb/fmn", "l2", libb, library_version="2.0"),
                 job_rows(m, "libc/ddn", "l2", [0.5, 1.0, 1.5, 2.0])]
    return tbl.prepare(synthetic.table(*jobs))


def test_family_optimality_per_family_envelope():
    fam = strength.family_optimality(_strength_table([1.5, 4.0, 4.0, 4.0]), None)
    assert list(fam.columns) == ["norm", "implementation", "library_version", "family_optimality",
                                 "family_sibling_best"]
    got = {r.implementation: (r.family_optimality, r.family_sibling_best) for r in fam.itertuples()}
    assert got["liba/fmn"] == (1.0, pytest.approx(2.5 / 6))
    assert got["libb/fmn"] == (pytest.approx(2.5 / 6), 1.0)
    assert got["libc/ddn"][0] == 1.0 and np.isnan(got["libc/ddn"][1])
    fam = strength.family_optimality(_strength_table([1.5, 4.0, 4.0, 4.0]), {"l2": 3.5})
    got = {r.implementation: r.family_optimality for r in fam.itertuples()}
    assert got["libb/fmn"] == pytest.approx(2.0 / 4.5)
    empty = strength.family_optimality(_strength_table([1.5, 4.0, 4.0, 4.0]).iloc[:0], None)
    assert empty.empty and list(empty.columns) == ["norm", "implementation", "library_version",
                                                   "family_optimality", "family_sibling_best"]


def test_below_expected_strength_evidence():
    out = strength.below_expected_strength(_strength_table([1.5, 4.0, 4.0, 4.0]))
    assert out == [{"model": "*", "norm": "l2", "implementation": "libb/fmn", "library_version": "2.0",
                    "flag": "below_expected_strength", "evidence": (
                        "ξ 0.417 against its family's envelope over 2 models, below half of the strongest fmn of "
                        "another library here (liba/fmn, 1.000), in a family AttackBench publishes as strong under "
                        "l2 (0.976); against the norm's envelope ξ 0.167 (best of l2 here: libc/ddn, ξ 1.000): a "
                        "strong family implemented far from its strength")}]
    assert strength.below_expected_strength(_strength_table([1.5, 4.0, 4.0, 4.0]).iloc[:0]) == []
    assert strength.below_expected_strength(_strength_table([1.0, 2.5, 3.0, 4.0])) == []


def test_below_expected_strength_with_eps_max():
    # ε₀ 3.5: family Σ 4.5, libb gains 2 (ξ 0.444); norm Σ 9, libb 2 (ξ 0.222); ddn still best
    out = strength.below_expected_strength(_strength_table([1.5, 4.0, 4.0, 4.0]), {"l2": 3.5})
    assert len(out) == 1
    assert out[0]["evidence"].startswith("ξ 0.444 against its family's envelope over 2 models")
    assert "against the norm's envelope ξ 0.222 (best of l2 here: libc/ddn, ξ 1.000)" in out[0]["evidence"]


def test_below_expected_strength_says_why_xi_is_zero():
    out = strength.below_expected_strength(_strength_table([4.0, 4.0, 4.0, INF]))
    assert out[0]["evidence"].startswith(
        "ξ 0.000 against its family's envelope (it broke 6 (model, image) cases, every one beyond ε₀, where ξ gives "
        "no credit) over 2 models, below half")
    out = strength.below_expected_strength(_strength_table([INF] * 4, models=("m1",)))
    assert out[0]["evidence"].startswith("ξ 0.000 against its family's envelope (it broke no image) over 1 model,")


def _failing(model, k_fail, n, **kw):
    return job_rows(model, kw.pop("impl", "libb/fmn"), kw.pop("norm", "l2"), [INF] * k_fail + [1.0] * (n - k_fail),
                    **kw)


def test_minimal_failure_findings_names_the_models_shown():
    t = tbl.prepare(synthetic.table(_failing("m1", 10, 10), _failing("m2", 5, 10)))
    assert strength.minimal_failure_findings(t) == [{
        "model": "*", "norm": "l2", "implementation": "libb/fmn", "library_version": "1.0",
        "flag": "below_expected_strength", "evidence": (
            "a minimal attack of a family AttackBench publishes as strong under l2 (0.976) failed to break 10 of 10 "
            "on m1 images (BH q 0.002 against 50%, above what sound ones fail: at most 43% of one model's images on "
            "the real noise corpus): a defect, or settings far too small for it (its steps and the budget are in the "
            "run's config)")}]


def test_minimal_failure_findings_edges():
    # 5 of 5 on each of two models: p = 1/32 on both, BH q 1/32 < 0.05
    t = tbl.prepare(synthetic.table(_failing("m2", 5, 5), _failing("m1", 5, 5)))
    (f,) = strength.minimal_failure_findings(t)
    assert "failed to break 5 of 5 on m1, 5 of 5 on m2 images (BH q 0.031 " in f["evidence"]
    # 4 of 4: p = 1/16, not shown; 3 of 10: the other tail
    assert strength.minimal_failure_findings(tbl.prepare(_failing("m1", 4, 4))) == []
    assert strength.minimal_failure_findings(tbl.prepare(_failing("m1", 0, 10))) == []
    # images misclassified clean (distance 0) and rows that raised are not failures of the search
    t = tbl.prepare(synthetic.table(_failing("m1", 5, 5), job_rows("m1", "libb/fmn", "l2", [0.0] * 5, samples=range(5, 10)),
                                    job_rows("m1", "libb/fmn", "l2", [INF] * 3, samples=range(10, 13), status="error")))
    (f,) = strength.minimal_failure_findings(t)
    assert "failed to break 5 of 5 on m1 images" in f["evidence"]
    # not minimal, or not a strong family: never judged here
    assert strength.minimal_failure_findings(tbl.prepare(_failing("m1", 10, 10, kind="bounded"))) == []
    assert strength.minimal_failure_findings(tbl.prepare(_failing("m1", 10, 10, impl="libb/deepfool"))) == []
    # each implementation, version and norm on its own
    t = tbl.prepare(synthetic.table(_failing("m1", 10, 10), _failing("m1", 10, 10, impl="libb/fmn", norm="linf"),
                                    _failing("m1", 10, 10, library_version="2"), _failing("m1", 1, 10, impl="liba/fmn")))
    got = [(f["norm"], f["implementation"], f["library_version"]) for f in strength.minimal_failure_findings(t)]
    assert got == [("l2", "libb/fmn", "1.0"), ("l2", "libb/fmn", "2"), ("linf", "libb/fmn", "1.0")]
    linf = strength.minimal_failure_findings(t)[2]["evidence"]
    assert "strong under linf (0.970) failed to break 10 of 10 on m1 images" in linf


def test_strength_flags_merges_both_arms_into_one_finding():
    t = tbl.prepare(synthetic.table(
        job_rows("m1", "liba/fmn", "l2", [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]),
        job_rows("m1", "libc/ddn", "l2", [0.5, 1.0, 1.5, 2.0, 2.5, 3.0]),
        job_rows("m1", "libb/fmn", "l2", [INF] * 6, library_version="2.0"),
        job_rows("m1", "libd/fmn", "linf", [INF] * 6)))
    below = strength.below_expected_strength(t)
    failing = strength.minimal_failure_findings(t)
    assert [f["implementation"] for f in below] == ["libb/fmn"]
    assert [f["implementation"] for f in failing] == ["libb/fmn", "libd/fmn"]
    flags = strength.strength_flags(t)
    assert len(flags) == 2
    assert flags[0] == dict(below[0], evidence=below[0]["evidence"] + "; and " + failing[0]["evidence"])
    assert flags[1] == failing[1]
    assert below[0]["evidence"] == dict(below[0])["evidence"]   # the arm's own finding is left as it was
    assert strength.strength_flags(t, {"l2": 0.1}) != flags


BEST = pd.Series({"best_in_norm_impl": "adv_lib/ddn", "best_in_norm": 0.99})


def _shortfall(rows, shortfall=True):
    return pd.DataFrame([{"family": "fmn", "norm": "l2", "implementation": i, "library_version": v,
                          "optimality": xi, "expected": 0.9755, "family_shortfall": shortfall} for i, v, xi in rows])


def test_shortfall_note_when_the_corpus_explains_every_implementation():
    s = _shortfall([("adv_lib/fmn", "0.2.8", 0.12), ("foolbox/L2FMNAttack", "3.3.4", 0.05)])
    assert strength.shortfall_note("fmn", "l2", s, BEST) == (
        "every implementation of fmn under l2 here (ξ 0.050–0.120) is below half of the optimality AttackBench "
        "publishes (0.976) and of the best attack of l2 here (adv_lib/ddn, ξ 0.990): not the run's settings: every "
        "implementation of fmn under l2 here has a defect known from attackaudit's defect corpus "
        "(adv-lib-fmn-l2-blocked-gradient; foolbox-fmn-l2-no-projection: fidelity/known_defects.json); for l2, use "
        "adv_lib/ddn")


def test_shortfall_note_when_one_is_untraced():
    s = _shortfall([("adv_lib/fmn", "0.2.8", 0.12), ("foolbox/L2FMNAttack", "9.9.9", 0.05)])
    assert strength.shortfall_note("fmn", "l2", s, BEST) == (
        "every implementation of fmn under l2 here (ξ 0.050–0.120) is below half of the optimality AttackBench "
        "publishes (0.976) and of the best attack of l2 here (adv_lib/ddn, ξ 0.990): the run's settings (steps, "
        "budget) or a flaw they share, not one implementation; for l2, use adv_lib/ddn")


def test_shortfall_note_only_for_a_shortfall_of_that_family_and_norm():
    s = _shortfall([("adv_lib/fmn", "0.2.8", 0.12), ("foolbox/L2FMNAttack", "3.3.4", 0.05)])
    assert strength.shortfall_note("fmn", "linf", s, BEST) == ""
    assert strength.shortfall_note("ddn", "l2", s, BEST) == ""
    assert strength.shortfall_note("fmn", "l2", s.assign(family_shortfall=[True, False]), BEST) == ""
    other = s.assign(family="pgd", family_shortfall=False)
    both = pd.concat([s, other], ignore_index=True)
    assert strength.shortfall_note("fmn", "l2", both, BEST).startswith("every implementation of fmn under l2 here (ξ "
                                                                        "0.050–0.120)")


# --------------------------------------------------------------------------- true_optimality
def _exact(rows, model="m"):
    return pd.DataFrame([{"model": model, "dataset": "digits", "norm": "l2", "sample": s, "status": st,
                          "exact_distance": e, "lower_bound": lb} for s, st, e, lb in rows])


#: s0, s1, s4 solved; s2 timed out (its lower bound 2.5 stands in); s3 misclassified clean; s5 errored
EXACT_ROWS = [(0, "optimal", 1.0, 1.0), (1, "optimal", 1.8, 1.8), (2, "time_limit", np.nan, 2.5),
              (3, "clean_misclassified", np.nan, 0.0), (4, "optimal", 4.0, 4.0), (5, "error", np.nan, np.nan)]


def _attacks():
    return synthetic.table(job_rows("m", "lib/a", "l2", [1.0, 1.79995, 3.0, 0.0, 5.0]),
                           job_rows("m", "lib/b", "l2", [1.5, 2.0, INF, 0.0, 4.0], returned=[0.9, 2.0, INF, 0.0, 3.0]),
                           job_rows("m", "lib/c", "l2", [0.5, 3.0], library_version="2"))


def test_exact_reference_per_status():
    stale = _exact([(0, "optimal", 7.0, 7.0)])
    other = _exact([(0, "optimal", 0.25, 0.25)]).assign(dataset="cifar")
    ref = true_optimality.exact_reference(pd.concat([stale, _exact(EXACT_ROWS), other], ignore_index=True))
    assert list(ref.columns) == ["model", "dataset", "norm", "sample", "reference", "unsolved", "lower_bound"]
    assert ref["sample"].tolist() == [0, 1, 2, 3, 4, 0]
    assert ref["dataset"].tolist() == ["digits"] * 5 + ["cifar"]
    assert ref["reference"].tolist() == [1.0, 1.8, 2.5, 0.0, 4.0, 0.25] and ref["reference"].dtype == float
    assert ref["unsolved"].tolist() == [False, False, True, False, False, False]
    assert ref["lower_bound"].tolist() == [1.0, 1.8, 2.5, 0.0, 4.0, 0.25]


def test_exact_reference_keys_are_the_columns_present():
    ref = true_optimality.exact_reference(_exact(EXACT_ROWS).drop(columns=["dataset"]))
    assert list(ref.columns) == ["model", "norm", "sample", "reference", "unsolved", "lower_bound"]


def _by_impl(out):
    return {r["implementation"]: r for r in out.to_dict("records")}


def test_true_optimality_against_the_exact_curve_and_the_envelope():
    # reference [1, 1.8, 2.5, 0, 4]: ε₀ 4, Σ(ε₀ − ref) over live samples = 3 + 2.2 + 1.5 + 0 = 6.7;
    # envelope [0.5, 1.79995, 3, 0, 4]: ε₀ 4, Σ = 3.5 + 2.20005 + 1 + 0 = 6.70005
    exact = pd.concat([_exact(EXACT_ROWS), _exact([(0, "optimal", 0.25, 0.25)]).assign(dataset="cifar")],
                      ignore_index=True)
    out = true_optimality.true_optimality(_attacks(), exact)
    assert list(out.columns) == ["model", "library", "library_version", "attack", "implementation", "family", "norm",
                                 "samples", "exact_unsolved", "eps0_exact", "true_optimality", "eps0_envelope",
                                 "empirical_optimality"]
    assert out["implementation"].tolist() == ["lib/a", "lib/b", "lib/c", "envelope"]
    env = out.iloc[3].to_dict()
    assert {k: env[k] for k in ("model", "library", "library_version", "attack", "family", "norm")} == {
        "model": "m", "library": "envelope", "library_version": "", "attack": "envelope", "family": "envelope",
        "norm": "l2"}
    a = out.iloc[0].to_dict()
    assert (a["model"], a["library"], a["library_version"], a["attack"], a["family"], a["norm"]) == (
        "m", "lib", "1.0", "a", "a", "l2")
    assert out["samples"].tolist() == [5] * 4 and out["exact_unsolved"].tolist() == [1] * 4
    assert out["eps0_exact"].tolist() == [4.0] * 4 and out["eps0_envelope"].tolist() == [4.0] * 4
    assert out["true_optimality"].tolist() == pytest.approx([6.20005 / 6.7, 4.5 / 6.7, 4.5 / 6.7, 1.0])
    assert out["empirical_optimality"].tolist() == pytest.approx([6.20005 / 6.70005, 4.5 / 6.70005, 4.5 / 6.70005,
                                                                  1.0])


def test_true_optimality_with_eps_max():
    # ε₀ 3: reference Σ = 2 + 1.2 + 0.5 = 3.7, lib/a gains 2 + 1.20005
    out = _by_impl(true_optimality.true_optimality(_attacks(), _exact(EXACT_ROWS), {"l2": 3.0, "linf": 9.0}))
    assert out["lib/a"]["eps0_exact"] == 3.0 and out["lib/a"]["eps0_envelope"] == 3.0
    assert out["lib/a"]["true_optimality"] == pytest.approx(3.20005 / 3.7)
    # envelope [0.5, 1.79995, 3, 0, 4] at ε₀ 3: Σ = 2.5 + 1.20005
    assert out["lib/a"]["empirical_optimality"] == pytest.approx(3.20005 / 3.70005)


def test_true_optimality_leaves_out_targeted_rows():
    targeted = job_rows("m", "lib/t", "l2", [0.1] * 5, targeted=True)
    out = true_optimality.true_optimality(synthetic.table(_attacks(), targeted), _exact(EXACT_ROWS))
    assert out["implementation"].tolist() == ["lib/a", "lib/b", "lib/c", "envelope"]
    # an unknown targeted flag counts as untargeted; a table without the column is untargeted
    t = _attacks()
    t["targeted"] = t["targeted"].astype(object).where(t["implementation"] != "lib/b", None)
    assert true_optimality.true_optimality(t, _exact(EXACT_ROWS))["implementation"].tolist() == [
        "lib/a", "lib/b", "lib/c", "envelope"]
    out = true_optimality.true_optimality(_attacks().drop(columns=["targeted"]), _exact(EXACT_ROWS))
    assert out["implementation"].tolist() == ["lib/a", "lib/b", "lib/c", "envelope"]


def test_true_optimality_twins_use_their_base_models_exact_rows():
    t = synthetic.table(job_rows("m~shift", "lib/a", "l2", [1.0, 1.79995, 3.0, 0.0, 5.0]),
                        job_rows("m~split", "lib/a", "l2", [1.0, 1.79995, 3.0, 0.0, 5.0]),
                        job_rows("m~perm", "lib/a", "l2", [1.0, 1.79995, 3.0, 0.0, 5.0]),
                        job_rows("q", "lib/a", "l2", [1.0] * 5))
    perm = _exact([(0, "optimal", 2.0, 2.0), (1, "optimal", 4.0, 4.0)], model="m~perm")
    out = true_optimality.true_optimality(t, pd.concat([_exact(EXACT_ROWS), perm], ignore_index=True))
    rows = out[out["implementation"] == "lib/a"].set_index("model")
    assert sorted(rows.index) == ["m~perm", "m~shift", "m~split"]
    assert rows.loc["m~shift", "true_optimality"] == pytest.approx(6.20005 / 6.7)
    assert rows.loc["m~split", "samples"] == 5
    # m~perm has exact rows of its own: ε₀ 4, Σ = 2 + 0; it gains 3 + 2.20005 → clipped at 1
    assert rows.loc["m~perm", "samples"] == 2 and rows.loc["m~perm", "eps0_exact"] == 4.0
    assert rows.loc["m~perm", "true_optimality"] == 1.0


def test_true_optimality_without_overlap_is_empty():
    out = true_optimality.true_optimality(_attacks(), _exact(EXACT_ROWS, model="other"))
    assert out.empty and list(out.columns) == ["model", "library", "library_version", "attack", "implementation",
                                               "family", "norm", "samples", "exact_unsolved", "eps0_exact",
                                               "true_optimality", "eps0_envelope", "empirical_optimality"]


def test_below_exact_flags_names_the_worst_samples():
    t = _attacks()
    t.loc[(t["implementation"] == "lib/b") & (t["sample"] == 0), "returned_adversarial"] = False
    flags = true_optimality.below_exact_flags(t, _exact(EXACT_ROWS))
    assert list(flags.columns) == ["model", "library", "library_version", "attack", "implementation", "family",
                                   "norm", "flag", "evidence"]
    assert flags["implementation"].tolist() == ["lib/b", "lib/c"]
    assert flags["flag"].tolist() == ["below_exact"] * 2
    assert flags["library_version"].tolist() == ["1.0", "2"] and flags["model"].tolist() == ["m", "m"]
    assert flags["evidence"].tolist() == [
        "1 of 5 samples below the exact lower bound by more than 0.0001 (attack, tracker or encoding bug): "
        "sample 4: returned distance 3 < proven lower bound 4",
        "1 of 2 samples below the exact lower bound by more than 0.0001 (attack, tracker or encoding bug): "
        "sample 0: best distance 0.5 < proven lower bound 1"]
    # lib/a's 1.79995 is within the tolerance of 1.8, not within a tighter one
    tight = true_optimality.below_exact_flags(t, _exact(EXACT_ROWS), tol=1e-5)
    assert tight["implementation"].tolist() == ["lib/a", "lib/b", "lib/c"]
    assert tight["evidence"].iloc[0] == ("1 of 5 samples below the exact lower bound by more than 1e-05 (attack, "
                                         "tracker or encoding bug): sample 1: best distance 1.79995 < proven lower "
                                         "bound 1.8")


def test_below_exact_flags_sorts_by_gap_and_keeps_three():
    exact = _exact([(0, "optimal", 1.0, 1.0), (1, "optimal", 2.0, 2.0), (2, "time_limit", np.nan, INF),
                    (3, "optimal", 3.0, 3.0), (4, "optimal", np.nan, np.nan)])
    t = job_rows("m", "lib/d", "l2", [0.9, 1.0, 5.0, 2.5, 0.1], returned=[INF, INF, INF, INF, INF])
    flags = true_optimality.below_exact_flags(t, exact)
    assert flags["evidence"].tolist() == [
        "4 of 4 samples below the exact lower bound by more than 0.0001 (attack, tracker or encoding bug): "
        "sample 2: best distance 5 < proven lower bound inf; sample 1: best distance 1 < proven lower bound 2; "
        "sample 3: best distance 2.5 < proven lower bound 3"]
    # a returned adversarial below its best counts, one returned as failed does not
    t = job_rows("m", "lib/d", "l2", [1.0, 2.0], returned=[0.5, 2.0])
    t2 = t.assign(returned_adversarial=[False, True])
    assert true_optimality.below_exact_flags(t2, exact).empty
    assert true_optimality.below_exact_flags(t, exact)["evidence"].iloc[0].endswith(
        "sample 0: returned distance 0.5 < proven lower bound 1")
    # without returned columns only the best distance is judged
    bare = t.drop(columns=["returned_distance", "returned_adversarial"]).assign(best_distance=[0.5, 2.0])
    assert true_optimality.below_exact_flags(bare, exact)["evidence"].iloc[0].endswith(
        "sample 0: best distance 0.5 < proven lower bound 1")
    empty = true_optimality.below_exact_flags(t, _exact(EXACT_ROWS, model="other"))
    assert empty.empty and list(empty.columns) == ["model", "library", "library_version", "attack", "implementation",
                                                   "family", "norm", "flag", "evidence"]


def test_minimal_failure_findings_a_bh_q_of_exactly_alpha_is_not_shown():
    # 8 models: five fail 5 of 5 (p = 1/32 each), three fail none (p = 1). BH q of the five is
    # min over ranks ≥ 5 of p·8/rank = (1/32)·8/5 = 1/20, α itself (also in float); shown means q < α
    assert (1 / 32) * 8 / 5 == strength.ALPHA
    fail = [_failing(f"m{i}", 5, 5) for i in range(5)]
    sound = [_failing(f"m{i}", 0, 5) for i in range(5, 8)]
    assert strength.minimal_failure_findings(tbl.prepare(synthetic.table(*fail, *sound))) == []
    # a sixth model failing too: q = (1/32)·8/6 ≈ 0.042 < α, the six are shown
    t = tbl.prepare(synthetic.table(*fail, _failing("m5", 5, 5), *sound[1:]))
    (f,) = strength.minimal_failure_findings(t)
    assert ("failed to break 5 of 5 on m0, 5 of 5 on m1, 5 of 5 on m2, 5 of 5 on m3, 5 of 5 on m4, 5 of 5 on m5 "
            "images (BH q 0.042 ") in f["evidence"]
