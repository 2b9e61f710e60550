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
    # 40 images, one block each over the two models; the 4 misclassified clean needed no attack and
    # carry no evidence: 36 images compared, all worse
    assert row.n_worse == 36 and row.n_better == 0 and row.n_samples == 36 and row.ties == 0
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
    # ... but immaterial in distance; on 36 images a failure rate within 5 points cannot be shown
    # (no discordant image needs 52), so the two-endpoint verdict is honest about it
    assert d.loc["art/APGD", "verdict"] == "inconclusive"
    assert "rerun with --samples" in d.loc["art/APGD", "reason"]
    big = np.random.default_rng(3).uniform(0.1, 0.5, 160)
    runs = [table(job_rows("m1", "art/APGD", "linf", big * s, family="apgd", library_version=v))
            for s, v in ((1.0, "1.17"), (1.005, "1.18"))]
    assert diff(*runs).set_index("implementation").loc["art/APGD", "verdict"] == "unchanged"


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
    assert d.reason.startswith("crash gone, ξ 1.00 → 1.00 on the 78 of 80 (model, image) rows that ran in both, "
                               "0 better / 0 worse images (neither shown different nor equivalent")
    # both endpoints are named: failure rates side by side, the distance on the images both broke
    assert "failure rates 0% (new) vs 0% (old) over 35 images" in d.reason and "35 images both broke" in d.reason
    assert d.reason.endswith("; new: last_not_best")
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
    assert "36 better / 0 worse images (new better on the robustness curve" in row.reason
    assert "44% closer per image (pseudo-median)" in row.reason and "new: last_not_best" in row.reason


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
    assert "rows that ran in both" in row.reason and "30 worse images (new worse on the robustness curve" in row.reason


def test_unsupported_rows_are_absent_and_could_not_run():
    unsupported = run("1.18", status="unsupported", error="this release takes no eps tensor")
    row = diff(run("1.17"), unsupported).set_index("implementation").loc["art/APGD"]
    assert row.verdict == "could not run" and "crash" not in row.flags_appeared


# ---------------------------------------------------------------- the defect flags weigh (defects.py)
N_DEF = 16
D_DEF = np.random.default_rng(5).uniform(0.05, 0.3, N_DEF)
FAILED = np.isin(np.arange(N_DEF), [0, 2, 3, 5, 8, 9])


def _defect_release(version: str, defect: str | None) -> pd.DataFrame:
    """One model: a fixed-ε ``lib/pgd`` with the columns the minimal-ε search records, its
    batch-split twin, and a sound sibling; ``defect`` plants one defect rule's evidence in this
    release while every best distance and status stays the same as without it."""
    best = np.where(FAILED, INF, D_DEF)
    out = np.zeros(N_DEF, dtype=int)
    ratio = np.where(FAILED, 0.9, np.nan)
    split = best.copy()
    if defect == "out_of_ball":
        out[[1, 4, 7]] = 4
    elif defect == "eps_unused":
        ratio = np.where(FAILED, 0.05, np.nan)
    elif defect == "batch_dependence":
        # 8 broken images farther alone: a deterministic attack's split twin must differ one way
        split = np.where(~FAILED & (np.cumsum(~FAILED) <= 8), best * 1.5, best)
    rows = [job_rows(m, "lib/pgd", "linf", d, family="pgd", kind="fixed", library_version=version)
            .assign(ball_calls=9, ball_out=out if m == "m" else 0, ball_worst_ratio=np.where(out > 0, 1.8, 1.0),
                    ball_worst_eps=0.06, eps_fail_max=np.where(FAILED, 1.0, np.nan), eps_fail_ratio=ratio,
                    returned_class=-1, returned_adversarial=~FAILED, returned_distance=best)
            for m, d in (("m", best), ("m~split", split))]
    return table(*rows, job_rows("m", "lib2/pgd", "linf", D_DEF, family="pgd", kind="fixed"))


@pytest.mark.parametrize("flag, weight", [("out_of_ball", 3), ("eps_unused", 2), ("batch_dependence", 2)])
def test_a_defect_flag_that_appears_regresses_and_one_that_disappears_improves(flag, weight):
    """Same best distances and statuses in both releases: only the defect's own evidence (rows
    outside the ball, failed rows far inside it, a split twin that differs) changes, and the
    flags computed from the rows weigh by their severity."""
    sound, defective = _defect_release("1.0", None), _defect_release("2.0", flag)
    worse = diff(sound, defective).set_index("implementation")
    assert worse.loc["lib/pgd", "flags_appeared"] == flag
    assert worse.loc["lib/pgd", "verdict"] == "regressed" and worse.loc["lib/pgd", "score"] == -weight
    assert f"new: {flag}" in worse.loc["lib/pgd", "reason"]
    assert worse.loc["lib2/pgd", "verdict"] == "unchanged"
    better = diff(defective, sound).set_index("implementation").loc["lib/pgd"]
    assert better.flags_disappeared == flag and better.verdict == "improved" and better.score == weight
    assert better.reason.startswith(f"{flag} gone")
    assert diff(defective, defective).set_index("implementation").loc["lib/pgd", "verdict"] == "unchanged"


def test_two_empty_tables_give_an_empty_diff_not_a_crash():
    """A run whose jobs were all skipped has no rows: its diff and flags are empty tables with
    their columns (the class-conditional rule once raised on the empty table's object columns)."""
    from attackaudit.fidelity import flags as compute_flags
    from attackaudit.fidelity.diff import DIFF_COLUMNS
    from attackaudit.fidelity.flags import FLAG_COLUMNS
    from attackaudit.results.schema import ROW_COLUMNS

    empty = pd.DataFrame(columns=list(ROW_COLUMNS))
    out = diff(empty, empty)
    assert out.empty and list(out.columns) == list(DIFF_COLUMNS)
    found = compute_flags(empty)
    assert found.empty and list(found.columns) == list(FLAG_COLUMNS)
