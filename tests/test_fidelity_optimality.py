"""Envelope and optimality: closed forms, degenerate cases, status handling, twins."""
import numpy as np
import pytest

from attackaudit.fidelity import (envelope, global_optimality, local_optimality, optimality,
                                  optimality_attackbench)
from attackaudit.fidelity.synthetic import job_rows, table

INF = np.inf


def _local(t, impl, model="m", norm="l2"):
    lo = local_optimality(t)
    row = lo[(lo.implementation == impl) & (lo.model == model) & (lo.norm == norm)]
    assert len(row) == 1
    return row.iloc[0]


def test_closed_forms_envelope_never_and_twice_as_far():
    d = np.array([0.1, 0.2, 0.4])
    t = table(job_rows("m", "a/best", "l2", d), job_rows("m", "b/never", "l2", [INF] * 3),
              job_rows("m", "c/twice", "l2", 2 * d))
    assert _local(t, "a/best").optimality == 1.0
    assert _local(t, "b/never").optimality == 0.0
    # ε0 = .4: Σ(ε0 − 2d)+ / Σ(ε0 − d)+ = (.2 + 0 + 0) / (.3 + .2 + 0)
    assert _local(t, "c/twice").optimality == pytest.approx(0.4)
    assert _local(t, "a/best").eps0 == pytest.approx(0.4)


def test_hand_computed_area_ratio_with_clean_errors_and_unbroken_samples():
    # sample 0 misclassified clean, sample 4 broken by nobody
    star = np.array([0.0, 0.1, 0.2, 0.3, INF])
    other = np.array([0.0, 0.2, INF, 0.3, INF])
    t = table(job_rows("m", "a/env", "linf", star), job_rows("m", "b/mid", "linf", other))
    rho, eps0 = 0.8, 0.3
    a_star = np.mean(np.minimum(star, eps0))
    a_mid = np.mean(np.minimum(other, eps0))
    expected = (rho * eps0 - a_mid) / (rho * eps0 - a_star)  # the formula of fidelity/README.md, literally
    assert _local(t, "b/mid", norm="linf").optimality == pytest.approx(expected)
    assert expected == pytest.approx(0.1 / 0.3)


def test_ties_and_eps_max():
    d = np.array([0.1, 0.2, 0.3, 0.4])
    t = table(job_rows("m", "a/x", "l2", d), job_rows("m", "b/y", "l2", d.copy()))
    lo = local_optimality(t)
    assert lo.optimality.tolist() == [1.0, 1.0]
    t2 = table(job_rows("m", "a/x", "l2", d), job_rows("m", "b/y", "l2", d + 0.1))
    # with ε0 = 1: Σ(1 − d − .1) / Σ(1 − d) = 2.6 / 3.0
    # ε0 = .4: Σ(.4 − (d + .1))+ / Σ(.4 − d)+ = (.2 + .1) / (.3 + .2 + .1)
    assert _local(t2, "b/y").optimality == pytest.approx(0.5)
    lo = local_optimality(t2, eps_max={"l2": 1.0})
    assert lo.set_index("implementation").loc["b/y", "optimality"] == pytest.approx(2.6 / 3.0)


@pytest.mark.parametrize("distances", [
    [INF, INF, INF],          # nobody broke anything
    [0.0, 0.0, 0.0],          # everything misclassified clean
    [0.0, 3.0, INF],          # one live sample: ε0 is its own distance
    [3.0, 3.0, 3.0],          # every envelope distance tied (integer L0 distances)
])
def test_degenerate_envelopes_are_nan_not_zero(distances):
    """A zero denominator leaves ξ undefined: NaN ("n/a"), never the 0 of an attack that never
    succeeded, which a non-degenerate envelope still gives."""
    t = table(job_rows("m", "a/x", "l0", distances), job_rows("m", "b/y", "l0", distances))
    lo = local_optimality(t)
    assert lo.optimality.isna().all()
    never = table(job_rows("m", "a/x", "l0", [0.0, 3.0, 5.0]), job_rows("m", "b/never", "l0", [0.0, INF, INF]))
    assert _local(never, "b/never", norm="l0").optimality == 0.0


def test_eps_max_below_every_distance_is_degenerate():
    t = table(job_rows("m", "a/x", "l2", [0.5, 0.6]), job_rows("m", "b/y", "l2", [0.7, INF]))
    lo = local_optimality(t, eps_max={"l2": 0.1})
    assert lo.optimality.isna().all()


def test_crash_rows_keep_tracker_distances_and_failure_rows_are_not_negative():
    star = np.array([0.0, 0.1, 0.2, 0.4])
    # the tracker broke sample 1 before the crash: that counts
    crashed = job_rows("m", "b/crashed", "l2", [0.0, 0.1, INF, INF], status="crash", error="RuntimeError: x")
    # a job that died before its tracker: inf everywhere, even on the clean-misclassified sample
    dead = job_rows("m", "c/dead", "l2", [INF] * 4, status="timeout", forwards=0, backwards=0)
    t = table(job_rows("m", "a/ok", "l2", star), crashed, dead)
    # ε0 = .4: (.3 + 0 + 0) / (.3 + .2 + 0)
    assert _local(t, "b/crashed").optimality == pytest.approx(0.6)
    assert _local(t, "c/dead").optimality == 0.0  # not negative for the clean-misclassified sample
    env = envelope(t)
    assert env.d_star.tolist() == [0.0, 0.1, 0.2, 0.4]


def test_envelope_columns_and_found_by():
    t = table(job_rows("m", "a/x", "l2", [0.3, INF, 0.1]), job_rows("m", "b/y", "l2", [0.2, INF, 0.5]))
    env = envelope(t)
    assert list(env.columns) == ["model", "norm", "sample", "d_star", "found_by"]
    assert env.d_star.tolist() == [0.2, INF, 0.1]
    assert env.found_by.tolist() == ["b/y", "", "a/x"]


def test_twins_are_own_models_and_excluded_from_global():
    d = np.array([0.1, 0.2, 0.4])
    t = table(job_rows("m", "a/x", "l2", d), job_rows("m", "b/y", "l2", 2 * d),
              # on the twin, b/y is much better than a/x: must not touch m's envelope
              job_rows("m~shift", "a/x", "l2", 4 * d), job_rows("m~shift", "b/y", "l2", d / 2))
    env = envelope(t)
    assert env[env.model == "m"].d_star.tolist() == pytest.approx(d.tolist())
    assert _local(t, "b/y", model="m~shift").optimality == 1.0
    g = global_optimality(t).set_index("implementation")
    assert g.loc["a/x", "optimality"] == 1.0 and g.loc["a/x", "n_models"] == 1
    assert g.loc["b/y", "optimality"] == pytest.approx(0.4)


def test_global_is_mean_over_models():
    d = np.array([0.1, 0.2, 0.4])
    t = table(job_rows("m1", "a/x", "l2", d), job_rows("m1", "b/y", "l2", 2 * d),
              job_rows("m2", "a/x", "l2", d), job_rows("m2", "b/y", "l2", d))
    g = global_optimality(t).set_index("implementation")
    assert g.loc["b/y", "optimality"] == pytest.approx((0.4 + 1.0) / 2)
    assert g.loc["b/y", "n_models"] == 2
    assert list(global_optimality(t).columns[:8]) == ["norm", "implementation", "library", "library_version",
                                                      "attack", "family", "optimality", "optimality_attackbench"]


def test_versions_are_separate_implementations_and_last_duplicate_wins():
    d = np.array([0.1, 0.2, 0.4])
    old = job_rows("m", "a/x", "l2", 2 * d, library_version="1.0")
    new = job_rows("m", "a/x", "l2", d, library_version="2.0")
    rerun = job_rows("m", "a/x", "l2", d, library_version="1.0")  # a rerun replaces the first rows
    lo = local_optimality(table(old, new)).set_index("library_version")
    assert lo.loc["2.0", "optimality"] == 1.0 and lo.loc["1.0", "optimality"] == pytest.approx(0.4)
    lo = local_optimality(table(old, new, rerun)).set_index("library_version")
    assert lo.loc["1.0", "optimality"] == 1.0


def test_mixed_targeted_rows_are_refused():
    t = table(job_rows("m", "a/x", "l2", [0.1]), job_rows("m", "b/y", "l2", [0.1], targeted=True))
    with pytest.raises(ValueError, match="targeted"):
        local_optimality(t)


def test_array_optimality_validates_shapes():
    with pytest.raises(ValueError):
        optimality(np.ones(2), np.ones(3))


def _attackbench_reference(adv, best):
    """AttackBench's analysis/utils.py::eval_optimality, transcribed (finite envelope only)."""
    trapz = getattr(np, "trapezoid", None) or np.trapz
    distances, counts = np.unique(best, return_counts=True)
    robust_acc = 1 - counts.cumsum() / len(best)
    clean_acc = np.count_nonzero(best) / len(best)
    max_dist = np.amax(distances)
    best_area = trapz(robust_acc, distances)
    distances_clipped, counts = np.unique(adv.clip(min=None, max=max_dist), return_counts=True)
    robust_acc_clipped = 1 - counts.cumsum() / len(adv)
    area = trapz(robust_acc_clipped, distances_clipped)
    return 1 - (area - best_area) / (clean_acc * max_dist - best_area)


def test_attackbench_variant_matches_the_published_formula():
    rng = np.random.default_rng(1)
    for _ in range(10):
        best = rng.random(20)
        best[:3] = 0.0
        adv = best * rng.uniform(1, 3, 20)
        adv[rng.random(20) < 0.2] = INF
        assert optimality_attackbench(adv, best) == pytest.approx(_attackbench_reference(adv, best))
        assert optimality_attackbench(best, best) == pytest.approx(1.0)


def test_attackbench_rewards_failure():
    star = np.array([0.0, 0.1, 0.2, 0.3, INF])
    never = np.where(star > 0, INF, 0.0)
    assert optimality(never, star) == 0.0
    assert optimality_attackbench(never, star) == pytest.approx(1.2)  # README's worked example
    # with some samples misclassified clean its curve is one straight line from (0, ρ) to (ε0, 0):
    # area ρ·ε0/2 instead of ρ·ε0, so it never scores below 0.5 ...
    rng = np.random.default_rng(2)
    for _ in range(20):
        star = rng.random(50) ** rng.uniform(0.2, 5)
        star[:5] = 0.0
        never = np.where(star > 0, INF, 0.0)
        assert optimality_attackbench(never, star) >= 0.5
        assert optimality(never, star) == 0.0
    # ... about 0.5 when the envelope breaks almost everything early (one far outlier sets ε0) ...
    star = np.r_[np.zeros(10), np.full(189, 0.01), 1.0]
    assert optimality_attackbench(np.where(star > 0, INF, 0.0), star) == pytest.approx(0.5, abs=0.02)
    # ... and about 1, as good as the envelope, when the envelope's distances are spread evenly
    star = np.r_[np.zeros(10), np.linspace(0.005, 1.0, 190)]
    assert optimality_attackbench(np.where(star > 0, INF, 0.0), star) == pytest.approx(1.0, abs=0.02)
    # none misclassified clean: above 1
    star = np.linspace(0.1, 1.0, 10)
    assert optimality_attackbench(np.full(10, INF), star) > 1.0
    assert optimality(np.full(10, INF), star) == 0.0


def test_local_optimality_columns():
    t = table(job_rows("m", "a/x", "l2", [0.1, 0.2], family="fam"))
    lo = local_optimality(t)
    assert list(lo.columns[:9]) == ["model", "norm", "implementation", "library", "library_version", "attack",
                                    "family", "optimality", "optimality_attackbench"]
    assert lo.iloc[0].family == "fam" and lo.iloc[0].library == "a" and lo.iloc[0].attack == "x"


def test_report_shows_na_xi_and_dropped_bests():
    """The report writes a degenerate ξ as n/a with the reason, and counts the bests the
    end-of-job re-check dropped, per job."""
    from attackaudit.reports.markdown import render_markdown
    from attackaudit.reports.tables import build

    live = job_rows("m", "a/x", "l2", [0.0, 0.1, 0.2, 0.3]).assign(best_dropped=[0, 2, 0, 1])
    other = job_rows("m", "b/y", "l2", [0.0, 0.2, 0.2, INF])
    tied = [job_rows("m", f"{lib}/z", "l0", [0.0, 3.0, 3.0, 3.0]) for lib in ("a", "b")]
    data = build(table(live, other, *tied))
    text = render_markdown(data)
    assert "n/a" in text and "ξ is n/a for m l0" in text and "n/a is not 0" in text
    assert "Re-checked bests: 3 stored bests in 1 of 4 jobs" in text and "m a/x l2: 3" in text
    old = build(table(live.drop(columns="best_dropped"), other.drop(columns="best_dropped")))
    assert any("predate the end-of-job re-check" in note for note in old.notes)
