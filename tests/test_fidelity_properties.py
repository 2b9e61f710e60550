"""Property-style checks over random tables: bounds, no NaN, monotonicity, invariances."""
import numpy as np
import pytest

from attackaudit.fidelity import (align, curve_area, diff, flags, global_optimality, leaderboard, local_optimality,
                                  optimality, optimality_attackbench, paired_comparison, robustness_curve)
from attackaudit.fidelity.synthetic import job_rows, table

INF = np.inf


def random_distances(rng, n):
    d = rng.exponential(rng.uniform(0.05, 2.0), n)
    d[rng.random(n) < rng.uniform(0, 0.5)] = INF
    d[rng.random(n) < rng.uniform(0, 0.3)] = 0.0
    return d


def random_table(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 15))
    jobs = []
    for model in ["m1", "m2", "m1~shift"][: int(rng.integers(1, 4))]:
        clean_mis = rng.random(n) < 0.2
        for impl in ["a/x", "b/y", "c/z", "d/w"][: int(rng.integers(1, 5))]:
            d = random_distances(rng, n)
            d[clean_mis] = 0.0
            status = rng.choice(["ok", "ok", "ok", "crash", "timeout", "invalid"], n)
            jobs.append(job_rows(model, impl, "l2" if rng.random() < 0.7 else "linf", d, family="f",
                                 status=status, returned=np.where(rng.random(n) < 0.3, INF, d * 1.2),
                                 refused=rng.integers(0, 2, n), backwards=rng.integers(0, 3, n) * 100))
    return table(*jobs)


@pytest.mark.parametrize("seed", range(20))
def test_random_tables_have_bounded_scores_and_no_nan(seed):
    t = random_table(seed)
    lo = local_optimality(t)
    # NaN (ξ undefined) only where the envelope is degenerate: then for every implementation alike
    undefined = lo.groupby(["model", "norm"])["optimality"].agg(lambda x: x.isna().all() or x.notna().all())
    assert undefined.all()
    assert lo.optimality.dropna().between(0.0, 1.0).all() and not lo["eps0"].isna().any()
    g = global_optimality(t)
    assert g.optimality.dropna().between(0.0, 1.0).all()
    # a global ξ is NaN only when every model it ran on was degenerate
    real = lo[~lo.model.str.contains("~")]
    all_nan = real.groupby(["norm", "implementation"])["optimality"].agg(lambda x: x.isna().all())
    assert (g.set_index(["norm", "implementation"]).optimality.isna() == all_nan.reindex(
        g.set_index(["norm", "implementation"]).index)).all()
    side, pairs = align(t)
    assert not side["asr_at_ref"].isna().any()
    assert pairs.p_value.between(0.0, 1.0).all() and pairs.effect_size.between(-1.0, 1.0).all()


@pytest.mark.parametrize("seed", range(4))
def test_random_tables_flags_leaderboard_and_diff(seed):
    t = random_table(100 + seed)
    board = leaderboard(t)
    assert board.optimality.dropna().between(0.0, 1.0).all()
    assert (board.optimality.isna() == board.optimality_attackbench.isna()).all()
    f = flags(t)
    assert not f.evidence.isna().any() and (f.evidence.str.len() > 0).all()
    d = diff(t, t, flags_a=f, flags_b=f)
    # a table against itself: every implementation present, identical, unchanged
    keys = t.drop_duplicates(["norm", "implementation"])
    assert len(d) == len(keys[~keys.model.str.contains("~")].drop_duplicates(["norm", "implementation"])) > 0
    assert (d.verdict == "unchanged").all() and (d.answer == "identical").all() and d.identical.all()
    # one changed sample makes a changed implementation, never "identical"
    t2 = t.copy()
    i = t2.index[~t2.model.str.contains("~") & np.isfinite(t2.best_distance) & (t2.best_distance > 0)][0]
    t2.loc[i, "best_distance"] *= 3
    d2 = diff(t, t2, flags_a=f, flags_b=f).set_index(["norm", "implementation"])
    assert not d2.loc[(t2.loc[i, "norm"], t2.loc[i, "implementation"]), "identical"]


def test_empty_diff_is_empty_not_unchanged():
    from attackaudit.fidelity.synthetic import job_rows as rows
    assert diff(table(rows("m~shift", "a/x", "l2", [0.1])), table(rows("m~shift", "a/x", "l2", [0.1]))).empty


@pytest.mark.parametrize("seed", range(100))
def test_optimality_bounds_and_monotonicity(seed):
    rng = np.random.default_rng(1000 + seed)
    n = int(rng.integers(1, 30))
    ref = random_distances(rng, n)
    d = np.where(rng.random(n) < 0.5, ref, ref * rng.uniform(1, 3, n))
    d[rng.random(n) < 0.2] = INF
    xi = optimality(d, ref)
    # a degenerate reference (zero denominator) leaves ξ undefined for every attack: NaN, never 0
    assert np.isfinite(optimality_attackbench(d, ref)) or np.isnan(optimality_attackbench(ref, ref))
    if np.isnan(optimality(ref, ref)):
        assert np.isnan(xi)
        return
    assert 0.0 <= xi <= 1.0
    assert optimality(ref, ref) == 1.0
    assert optimality(np.where(ref > 0, INF, 0.0), ref) == 0.0
    # moving any sample farther never helps
    worse = d * rng.uniform(1, 2, n)
    assert optimality(worse, ref) <= xi + 1e-12
    # scale invariance: the same problem in other units scores the same
    assert optimality(d * 7.0, ref * 7.0) == pytest.approx(xi)


@pytest.mark.parametrize("seed", range(30))
def test_curve_area_monotone_in_eps_and_distances(seed):
    rng = np.random.default_rng(2000 + seed)
    d = random_distances(rng, 20)
    eps, acc = robustness_curve(d)
    assert np.all(np.diff(eps) > 0) and np.all(np.diff(acc) <= 0)
    e1, e2 = sorted(rng.uniform(0, 3, 2))
    assert curve_area(d, e1) <= curve_area(d, e2) + 1e-12
    assert curve_area(d, e2) <= curve_area(d * 1.5, e2) + 1e-12


@pytest.mark.parametrize("seed", range(30))
def test_paired_comparison_is_antisymmetric(seed):
    rng = np.random.default_rng(3000 + seed)
    a, b = random_distances(rng, 25), random_distances(rng, 25)
    r, s = paired_comparison(a, b), paired_comparison(b, a)
    assert (r["wins_a"], r["wins_b"], r["ties"]) == (s["wins_b"], s["wins_a"], s["ties"])
    assert r["effect_size"] == pytest.approx(-s["effect_size"])
    assert r["p_value"] == pytest.approx(s["p_value"])
    assert 0.0 <= r["p_value"] <= 1.0


@pytest.mark.parametrize("seed", range(16))
def test_signed_rank_exact_p_matches_scipys_permutation_test(seed):
    """The vectorised exact test gives scipy's own p-value (method "auto" runs a permutation test
    for n ≤ 13 tied differences) on every sample, integer and half-integer mid-ranks alike."""
    import warnings

    from scipy import stats as sps

    from attackaudit.fidelity.stats import EXACT_TIES_MAX_N, signed_rank_exact_p

    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, EXACT_TIES_MAX_N + 1))
    # few distinct magnitudes, so ties are the rule; no zeros (paired_comparison drops them)
    nz = rng.choice([-1.0, 1.0], n) * rng.integers(1, int(rng.integers(2, 6)), n) * 0.1
    ranks = sps.rankdata(np.abs(nz))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = sps.wilcoxon(nz, zero_method="wilcox").pvalue
    assert signed_rank_exact_p(ranks, ranks[nz > 0].sum()) == pytest.approx(expected, rel=1e-12, abs=1e-15)


def test_paired_comparison_exact_path_matches_scipy():
    """Through paired_comparison: tied differences at n = 12 take the vectorised path."""
    from scipy import stats as sps

    a = np.array([1.0, 2.0, 2.0, 3.0, 1.5, 1.5, 4.0, 0.5, 2.5, 2.5, 3.5, 1.0])
    # dyadic offsets: a − b is exact, so the tied magnitudes really tie
    b = a + np.array([0.25, -0.125, 0.25, 0.25, 0.125, 0.25, 0.375, -0.25, 0.25, 0.125, 0.375, 0.25])
    res = paired_comparison(a, b)
    assert np.unique(np.abs(a - b)).size < a.size
    assert res["p_value"] == pytest.approx(sps.wilcoxon(a - b).pvalue, rel=1e-12)
    assert res["wins_a"] == 10 and res["wins_b"] == 2
