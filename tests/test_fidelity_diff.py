"""Run diff (release audit): verdicts from paired changes, optimality and flags."""
import numpy as np
import pandas as pd
import pytest

from attackaudit.fidelity import diff
from attackaudit.fidelity.diff import DIFF_COLUMNS
from attackaudit.fidelity.synthetic import job_rows, table

INF = np.inf
D = np.random.default_rng(11).uniform(0.1, 0.5, 40)
D[:4] = 0.0


def run(version, scale_apgd=1.0, extra=(), models=("m1", "m2"), **kw):
    jobs = []
    for m in models:
        jobs += [job_rows(m, "art/APGD", "linf", D * scale_apgd, family="apgd", library_version=version, **kw),
                 job_rows(m, "adv_lib/apgd", "linf", D, family="apgd", library_version="0.2.8")]
    return table(*jobs, *extra)


def verdicts(d):
    return dict(zip(d.implementation, d.verdict))


def test_identical_runs_are_unchanged():
    d = diff(run("1.17"), run("1.17"))
    assert list(d.columns) == DIFF_COLUMNS
    assert verdicts(d) == {"art/APGD": "unchanged", "adv_lib/apgd": "unchanged"}
    assert (d.p_value == 1.0).all() and (d.delta_optimality == 0).all()


def test_regression_and_improvement_are_mirror_images():
    before, after = run("1.17"), run("1.18", scale_apgd=1.8)
    d = diff(before, after).set_index("implementation")
    row = d.loc["art/APGD"]
    assert row.verdict == "regressed"
    assert (row.version_a, row.version_b) == ("1.17", "1.18")
    # 40 images, one block each over the two models; the 4 misclassified clean tie at 0
    assert row.n_worse == 36 and row.n_better == 0 and row.n_samples == 40 and row.ties == 4
    assert row.delta_optimality < -0.02 and row.p_value < 0.01 and row.effect_size == -1.0
    assert d.loc["adv_lib/apgd", "verdict"] == "unchanged"
    back = diff(after, before).set_index("implementation")
    assert back.loc["art/APGD", "verdict"] == "improved"
    assert back.loc["art/APGD", "delta_optimality"] == pytest.approx(-row.delta_optimality)


def test_joint_envelope_keeps_the_yardstick():
    # the new release of one attack beats everything: the other implementation's ξ must not move
    d = diff(run("1.17"), run("1.18", scale_apgd=0.5)).set_index("implementation")
    assert d.loc["art/APGD", "verdict"] == "improved"
    assert d.loc["adv_lib/apgd", "delta_optimality"] == 0.0


def test_small_systematic_change_is_unchanged():
    d = diff(run("1.17"), run("1.18", scale_apgd=1.005)).set_index("implementation")
    assert d.loc["art/APGD", "p_value"] < 0.01  # significant ...
    assert d.loc["art/APGD", "verdict"] == "unchanged"  # ... but immaterial


def test_new_removed_and_flags():
    extra = [job_rows(m, "torchattacks/APGD", "linf", D, family="apgd") for m in ("m1", "m2")]
    d = verdicts(diff(run("1.17"), run("1.18", extra=extra)))
    assert d["torchattacks/APGD"] == "new"
    d2 = diff(run("1.18", extra=extra), run("1.17"))
    row = d2[d2.implementation == "torchattacks/APGD"].iloc[0]
    assert row.verdict == "removed" and np.isnan(row.optimality_b) and row.optimality_a == 1.0
    # the same distances but the new release crashes after the tracker found them
    crashed = run("1.18", status="crash", error="ValueError: boom")
    row = diff(run("1.17"), crashed).set_index("implementation").loc["art/APGD"]
    assert row.verdict == "regressed" and row.flags_appeared == "crash"
    row = diff(crashed, run("1.17")).set_index("implementation").loc["art/APGD"]
    assert row.verdict == "improved" and row.flags_disappeared == "crash"


def test_by_model():
    after = table(job_rows("m1", "art/APGD", "linf", D * 2, family="apgd", library_version="1.18"),
                  job_rows("m2", "art/APGD", "linf", D, family="apgd", library_version="1.18"),
                  *[job_rows(m, "adv_lib/apgd", "linf", D, family="apgd") for m in ("m1", "m2")])
    d = diff(run("1.17"), after, by_model=True)
    d = d[d.implementation == "art/APGD"].set_index("model")
    assert d.loc["m1", "verdict"] == "regressed" and d.loc["m2", "verdict"] == "unchanged"


def _flags(impl_flags: dict[str, list[str]]) -> pd.DataFrame:
    from attackaudit.fidelity import FLAG_COLUMNS
    rows = [{"model": "m1", "library": "art", "library_version": "", "attack": "APGD", "implementation": impl,
             "family": "apgd", "norm": "linf", "flag": f, "evidence": ""} for impl, fs in impl_flags.items() for f in fs]
    return pd.DataFrame(rows, columns=FLAG_COLUMNS)


def test_verdict_weighs_flags_by_severity_and_shows_every_part():
    same = run("1.17", status=["ok"] * 39 + ["timeout"])
    # a crash that disappears outweighs a new last_not_best
    d = diff(same, run("1.18"), flags_a=_flags({"art/APGD": ["crash"]}),
             flags_b=_flags({"art/APGD": ["last_not_best"]})).set_index("implementation").loc["art/APGD"]
    assert d.verdict == "improved" and d.score == 2
    assert d.reason == ("crash gone, ξ 1.00 → 1.00 on the 78 of 80 (model, image) rows that ran in both, 0 better / "
                        "0 worse images (equivalent within ±5%, p = 1); new: last_not_best")
    # and the other way round it is a regression
    d = diff(same, run("1.18"), flags_a=_flags({"art/APGD": ["last_not_best"]}),
             flags_b=_flags({"art/APGD": ["crash"]})).set_index("implementation").loc["art/APGD"]
    assert d.verdict == "regressed" and d.score == -2
    # equal weights both ways cancel: mixed, not unchanged
    d = diff(same, run("1.18"), flags_a=_flags({"art/APGD": ["budget_overrun"]}),
             flags_b=_flags({"art/APGD": ["last_not_best"]})).set_index("implementation").loc["art/APGD"]
    assert d.verdict == "mixed" and d.score == 0


def test_a_large_significant_improvement_outweighs_a_new_inefficiency():
    d = diff(run("1.17", scale_apgd=1.8), run("1.18"), flags_a=_flags({}),
             flags_b=_flags({"art/APGD": ["last_not_best"]}))
    row = d.set_index("implementation").loc["art/APGD"]
    assert row.verdict == "improved" and row.score == 3 - 1
    assert "36 better / 0 worse images (different beyond ±5%" in row.reason and "new: last_not_best" in row.reason


def test_a_finding_about_all_models_counts_on_each_model():
    every = _flags({"art/APGD": ["silent_failure"]}).assign(model="*")
    d = diff(run("1.17", status=["ok"] * 39 + ["crash"]), run("1.18"), flags_a=every, flags_b=_flags({}), by_model=True)
    d = d[d.implementation == "art/APGD"].set_index("model")
    assert (d.verdict == "improved").all() and set(d.index) == {"m1", "m2"}
    assert all("silent_failure gone" in r for r in d.reason)


def test_identical_rows_keep_their_verdict_whatever_the_siblings_and_the_audit_size_do():
    """A sibling's change (and the flags it moves) never changes the verdict of identical rows;
    the verdict of a changed implementation does not depend on how many unchanged ones there are."""
    flags_moved = diff(run("1.17"), run("1.17"), flags_a=_flags({"art/APGD": ["optimality_gap", "crash"]}),
                       flags_b=_flags({})).set_index("implementation").loc["art/APGD"]
    assert flags_moved.verdict == "unchanged" and "identical results" in flags_moved.reason
    small = run("1.18", scale_apgd=1.08)
    base = diff(run("1.17"), small).set_index("implementation").loc["art/APGD"]
    extra = [job_rows(m, f"lib{i}/same", "linf", D * 1.5, family="apgd") for m in ("m1", "m2") for i in range(8)]
    many = diff(run("1.17", extra=extra), run("1.18", scale_apgd=1.08, extra=extra)).set_index("implementation")
    assert many.loc["art/APGD", "verdict"] == base.verdict == "regressed"
    assert many.loc["art/APGD", "p_adjusted"] == pytest.approx(base.p_adjusted)
    assert (many.drop(index=["art/APGD"]).verdict == "unchanged").all()


def test_a_crash_fix_that_worsens_the_rest_says_both():
    crashed = run("1.17", status=["crash"] * 10 + ["ok"] * 30, error="boom")
    crashed.loc[(crashed.implementation == "art/APGD") & (crashed["sample"] < 10), "best_distance"] = INF
    fixed = run("1.18", scale_apgd=1.3)
    row = diff(crashed, fixed).set_index("implementation").loc["art/APGD"]
    assert row.verdict == "mixed" and row.reason.startswith("mixed: crash gone, ξ 1.00 → ")
    assert "rows that ran in both" in row.reason and "worse images (different" in row.reason


def test_unsupported_rows_are_absent_and_could_not_run():
    unsupported = run("1.18", status="unsupported", error="this release takes no eps tensor")
    row = diff(run("1.17"), unsupported).set_index("implementation").loc["art/APGD"]
    assert row.verdict == "could not run" and "crash" not in row.flags_appeared
