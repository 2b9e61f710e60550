"""Trust sets and the one significance rule, against simple references (hypothesis)."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats as sps

from attackaudit.fidelity import flags, optimality, recommend
from attackaudit.fidelity.recommend import _xi
from attackaudit.fidelity.stats import ALPHA, holm, samples_to_separate, wilcoxon_batch
from attackaudit.fidelity.synthetic import job_rows, table

INF = np.inf
p_values = st.lists(st.floats(0, 1, allow_nan=False), min_size=1, max_size=12)


def holm_reference(p):
    """Holm step-down, written from its definition: the i-th smallest p times (k − i + 1), made
    monotone by a running maximum, capped at 1."""
    k = len(p)
    order = sorted(range(k), key=lambda i: (p[i], i))
    out, running = [0.0] * k, 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (k - rank) * p[i]))
        out[i] = running
    return out


@given(p_values)
def test_holm_matches_its_definition(p):
    assert np.allclose(holm(p), holm_reference(p))
    assert (holm(p) >= np.asarray(p) - 1e-15).all()


diffs = st.lists(st.sampled_from([-3.0, -2.0, -1.5, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0, 2.5]), min_size=1, max_size=30)


@given(st.lists(diffs, min_size=1, max_size=4))
@settings(max_examples=60, deadline=None)
def test_batched_wilcoxon_matches_scipy_normal_approximation(rows):
    n = max(len(r) for r in rows)
    d = np.array([r + [0.0] * (n - len(r)) for r in rows])  # zero padding: ties, dropped
    p, effect = wilcoxon_batch(d)
    for row, pb, eb in zip(d, p, effect):
        nz = row[row != 0]
        if nz.size == 0:
            assert pb == 1.0 and eb == 0.0
            continue
        ref = sps.wilcoxon(nz, zero_method="wilcox", correction=True, method="approx")
        assert pb == pytest.approx(ref.pvalue, abs=1e-9)
        ranks = sps.rankdata(np.abs(nz))
        assert eb == pytest.approx((ranks[nz < 0].sum() - ranks[nz > 0].sum()) / ranks.sum())


distances = st.lists(st.one_of(st.floats(0.01, 3.0), st.just(INF), st.just(0.0)), min_size=1, max_size=20)


@given(distances, st.lists(st.floats(1.0, 3.0), min_size=20, max_size=20), st.booleans())
@settings(max_examples=80, deadline=None)
def test_vectorised_xi_matches_optimality(ref, factors, given_eps):
    ref = np.asarray(ref)
    d = np.where(np.isfinite(ref), ref * np.asarray(factors[: ref.size]), INF)
    eps = 1.5 if given_eps else None
    got = _xi(d[None, :], ref, eps)[0]
    want = optimality(d, ref, eps)
    # the vectorised ξ says NaN where the envelope breaks nothing inside (0, ε₀)
    finite = ref[np.isfinite(ref)]
    eps0 = eps if eps is not None else (finite.max() if finite.size else 0.0)
    degenerate = not (np.clip(eps0 - ref[ref > 0], 0, None).sum() > 0)
    assert np.isnan(got) if degenerate else got == pytest.approx(want, abs=1e-12)


@given(st.floats(0.05, 1.0), st.floats(0.05, 1.0), st.integers(5, 200), st.integers(1, 6))
def test_samples_to_separate_falls_with_the_effect_and_reaches_significance(r1, r2, n, k):
    small, large = sorted((r1, r2))
    assert samples_to_separate(large, n, n, k) <= samples_to_separate(small, n, n, k)
    need = samples_to_separate(large, n, n, k)
    z = large * np.sqrt(0.75 * need)
    assert 2 * sps.norm.sf(z) <= ALPHA / k + 1e-12
    assert samples_to_separate(0.0, n, n, k) == INF
    # ties dilute: with half the pairs tied, twice the samples
    assert samples_to_separate(large, n // 2 or 1, 2 * (n // 2 or 1), k) >= need - 1


def _run(scale_b: float, n: int = 16, models=("m1", "m2", "m3"), seed: int = 3):
    rng = np.random.default_rng(seed)
    base = rng.uniform(0.1, 0.5, n)
    jobs = []
    for m in models:
        jitter = rng.uniform(0.995, 1.005, n)
        jobs += [job_rows(m, "a/x", "l2", base, family="f"),
                 job_rows(m, "b/y", "l2", base * scale_b * jitter, family="f")]
    return table(*jobs)


def test_tied_and_clear_in_words():
    tied = _run(1.0)
    rec = recommend(tied, flags(tied)).iloc[0]
    assert rec.verdict == "tied" and rec.summary.startswith("tied: ")
    assert {m["implementation"] for m in rec.trust_set} == {"a/x", "b/y"}
    assert "samples per model" in rec.summary or "no number of samples" in rec.summary
    assert 0 <= rec.top_share <= 1 and 0 <= rec.top_in_set <= 1
    clear = _run(1.3)
    rec = recommend(clear, flags(clear)).iloc[0]
    assert rec.verdict == "clear" and [m["implementation"] for m in rec.trust_set] == ["a/x"]
    assert rec.top_share == 1.0 and rec.summary.startswith("clear: a/x")


@pytest.mark.parametrize("scale", [1.0, 1.02, 1.3])
def test_bootstrap_interval_holds_the_estimate_and_resamples_are_reproducible(scale):
    t = _run(scale)
    a = recommend(t, None)
    b = recommend(t, None)
    for member in a.iloc[0].trust_set:
        lo, hi = member["optimality_ci"]
        assert 0 <= lo <= member["optimality"] + 1e-9 and member["optimality"] - 1e-9 <= hi <= 1
    assert a.iloc[0].trust_set == b.iloc[0].trust_set  # fixed seed
