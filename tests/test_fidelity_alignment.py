"""Paired comparison and the cross-library alignment tables."""
import numpy as np
import pytest

from attackaudit.fidelity import POOLED, align, paired_comparison
from attackaudit.fidelity.synthetic import job_rows, table

INF = np.inf


def test_failure_where_other_succeeded_is_a_loss_and_double_failure_a_tie():
    a = np.array([0.1, 0.2, INF, INF])
    b = np.array([0.2, INF, 0.3, INF])
    r = paired_comparison(a, b)
    assert (r["wins_a"], r["wins_b"], r["ties"], r["n_samples"]) == (2, 1, 1, 4)
    # inf -> 1.6 (> every finite distance); |differences| .1 (a), 1.4 (a), 1.3 (b) -> ranks 1, 3, 2
    assert r["effect_size"] == pytest.approx((1 + 3 - 2) / 6)
    assert r["median_difference"] == pytest.approx(-0.1)  # over samples both broke
    # two wins against one on three samples: the exact two-sided signed-rank p over 2³ sign flips
    assert r["p_value"] == pytest.approx(0.75)


def test_all_ties_and_empty_give_p_one_without_nan():
    for a, b in [(np.array([0.1, INF]), np.array([0.1, INF])), (np.array([]), np.array([]))]:
        r = paired_comparison(a, b)
        assert r["p_value"] == 1.0 and r["effect_size"] == 0.0 and r["statistic"] == 0.0
        assert not any(isinstance(v, float) and np.isnan(v) for v in r.values())


def test_float_noise_is_a_tie():
    a = np.array([0.1, 0.2, 0.3])
    r = paired_comparison(a, a * (1 + 1e-12))
    assert r["ties"] == 3 and r["p_value"] == 1.0


def test_consistent_winner_is_significant_and_symmetric():
    rng = np.random.default_rng(0)
    a = rng.uniform(0.1, 1.0, 40)
    b = a * rng.uniform(1.1, 1.5, 40)
    r, s = paired_comparison(a, b), paired_comparison(b, a)
    assert r["p_value"] < 1e-6 and r["effect_size"] == 1.0 and r["wins_a"] == 40
    assert s["effect_size"] == -1.0 and s["p_value"] == pytest.approx(r["p_value"])
    with pytest.raises(ValueError):
        paired_comparison(a, b[:-1])


def _grid():
    rng = np.random.default_rng(3)
    jobs = []
    for model in ("m1", "m2"):
        d = rng.uniform(0.05, 0.5, 30)
        d[:3] = 0.0  # misclassified clean
        jobs += [job_rows(model, "adv_lib/apgd", "linf", d, family="apgd", forwards=200, backwards=200),
                 job_rows(model, "torchattacks/APGD", "linf", d * 1.3, family="apgd", forwards=400, backwards=200),
                 job_rows(model, "art/AutoProjectedGradientDescent", "linf", np.where(d > 0.3, INF, d),
                          family="apgd", wall_s=5.0),
                 job_rows(model, "adv_lib/fmn", "linf", d * 0.9, family="fmn"),
                 job_rows(model + "~shift", "adv_lib/apgd", "linf", d * 3, family="apgd")]
    return table(*jobs)


def test_side_by_side_table():
    side, _ = align(_grid(), ref_eps={"linf": 0.2})
    apgd = side[side.family == "apgd"].set_index("implementation")
    assert apgd.index[0] == "adv_lib/apgd"  # sorted by optimality within the family
    assert apgd["optimality"].is_monotonic_decreasing
    for col in ("library", "library_version", "optimality", "optimality_attackbench", "asr_at_ref",
                "median_distance", "forwards", "backwards", "wall_s", "opt_m1", "opt_m2", "n_models"):
        assert col in side.columns
    assert "opt_m1~shift" not in side.columns  # twins stay out
    assert apgd.loc["torchattacks/APGD", "forwards"] == 400
    assert apgd.loc["art/AutoProjectedGradientDescent", "wall_s"] == 5.0
    assert (side.ref_eps == 0.2).all()
    assert not side[["optimality", "optimality_attackbench", "asr_at_ref"]].isna().any().any()


def test_envelope_spans_families():
    # fmn is 10% closer everywhere: apgd implementations are measured against it too
    side, _ = align(_grid())
    s = side.set_index("implementation")
    assert s.loc["adv_lib/fmn", "optimality"] == 1.0
    assert s.loc["adv_lib/apgd", "optimality"] < 1.0


def test_asr_at_reference_eps_counts_clean_errors():
    t = table(job_rows("m", "a/x", "l2", [0.0, 0.5, 1.0, INF]))
    side, _ = align(t)  # default l2 reference 0.75
    assert side.iloc[0].asr_at_ref == 0.5
    side, _ = align(t, ref_eps={"l2": 2.0})
    assert side.iloc[0].asr_at_ref == 0.75
    assert side.iloc[0].median_distance == 1.0  # over the 3 samples not broken at ε = 0


def test_pairs_per_model_and_pooled():
    _, pairs = align(_grid())
    apgd = pairs[pairs.family == "apgd"]
    assert set(apgd.model) == {"m1", "m2", POOLED}
    assert len(apgd) == 3 * 3  # 3 pairs × (2 models + pooled)
    row = apgd[(apgd.model == POOLED) & (apgd.implementation_a == "adv_lib/apgd")
               & (apgd.implementation_b == "torchattacks/APGD")].iloc[0]
    assert row.n_samples == 27  # 27 live images, each one block over the two models
    assert row.wins_a == 27 and row.p_value < 1e-6 and row.better == "adv_lib/apgd"
    assert row.answer == "different" and row.estimate == pytest.approx(-np.log(1.3))
    assert row.effect_size == 1.0 and row.median_difference < 0
    # a copy and its copy 1% off are equivalent within the 5% margin, not "no difference found"
    # (80 images: equal failure rates within 5 points need 52 to be shown)
    d = np.linspace(0.1, 1, 80)
    t = table(job_rows("m", "a/x", "l2", d, family="f"), job_rows("m", "b/y", "l2", d * 1.01, family="f"))
    pair = align(t)[1].iloc[0]
    assert pair.answer == "equivalent" and pair.better == "" and pair.p_equivalent < 0.05
    assert pair.share_beyond == 0.0 and pair.fail_a == pair.fail_b == 0.0
    assert pairs[pairs.family == "fmn"].empty  # one implementation, nothing to pair
    assert not pairs[["p_value", "effect_size", "p_different", "p_equivalent"]].isna().any().any()


def test_no_pooled_rows_when_disabled():
    _, pairs = align(_grid(), pooled=False)
    assert POOLED not in set(pairs.model)


def test_empty_table():
    side, pairs = align(table(job_rows("m~shift", "a/x", "l2", [0.1])))
    assert side.empty and pairs.empty
