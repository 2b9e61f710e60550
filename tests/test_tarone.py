"""Tarone's modified Bonferroni in the headline of ``equivalence.pair_test`` (``headline.decide``):
of the share, failure and distance endpoints, one that cannot reach α from its ancillary counts is
not charged, one that can is."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from attackaudit.fidelity.equivalence import pair_test, reachable_endpoints
from attackaudit.fidelity.stats import ALPHA


def values(n: int, only_a_failed: int, r: float, seed: int = 0) -> np.ndarray:
    """(3, n): ``a`` fails the first ``only_a_failed`` images, both broke the rest at log ratio ≈ ``r``."""
    rng = np.random.default_rng(seed)
    fa = np.zeros(n)
    fa[:only_a_failed] = 1.0
    ratio = r + rng.normal(0, 0.01, n)
    ratio[:only_a_failed] = np.nan
    return np.vstack([fa, np.zeros(n), ratio])


def _charged(c: dict) -> list[float]:
    """The weighted p-values (p over its share of α) of the endpoints the headline charges, by
    their ancillary counts: the share endpoint when its discordant images could pass its margin; the failure endpoint when all its discordant images
    on one side could pass the margin; the distance endpoint when its images both broke could give
    an exact signed-rank p below α."""
    from attackaudit.fidelity.paired_binary import smallest_beyond_p
    k = c["broke_only_a"] + c["broke_only_b"]
    fail_ok = smallest_beyond_p(k, c["n_images"]) < ALPHA
    dist_ok = 2 * 0.5 ** c["n_both"] < ALPHA
    weights = {"share": 0.6, "failure rate": 0.1, "distance": 0.3}     # headline.WEIGHTS, written out
    ps = {"share": c["p_share_different"], "failure rate": c["p_failure_different"],
          "distance": c["p_distance_different"]}
    k_share, n_inf = c["share_discordant"], c["n_informative"]
    share_ok = k_share > 0 and max(smallest_beyond_p(k_share, n_inf, 0.05), 2 * 0.5 ** k_share) < ALPHA
    charged = (["share"] if share_ok else []) + (["failure rate"] if fail_ok else []) + (
        ["distance"] if dist_ok else [])
    charged = charged or ["share"]
    total = sum(weights[k] for k in charged)
    return [ps[k] * total / weights[k] for k in charged]


def test_no_discordant_image_charges_the_distance_endpoint_alone():
    # 8% farther on 24 images: no image beyond the share's 25%, no failure: only the distance
    # endpoint can show anything, and it is charged alone (the planted halved PGD step's case)
    c = pair_test(values(24, 0, 0.08))
    assert reachable_endpoints(np.zeros(24), np.zeros(24), 24) == (False, True) and c["share_discordant"] == 0
    assert c["p_different"] == c["p_distance_different"] < ALPHA
    assert c["headline"] == "worse"


def test_a_failure_endpoint_that_could_reach_alpha_is_charged():
    fa = np.r_[np.ones(12), np.zeros(28)]
    assert reachable_endpoints(fa, np.zeros(40), 28) == (True, True)
    c = pair_test(values(40, 12, 0.08))
    assert c["p_different"] == pytest.approx(min(1.0, min(_charged(c)))) and c["p_different"] < ALPHA
    assert len(_charged(c)) == 3
    assert c["headline"] == "worse"


def test_too_few_images_both_broke_cannot_show_a_distance_difference():
    # the exact signed rank's smallest two-sided p with 5 images is 2/32 > α, and so is the share
    # endpoint's exact floor on 5 discordant images: nothing is reachable, the share's p stands
    assert reachable_endpoints(np.zeros(5), np.zeros(5), 5) == (False, False)
    c = pair_test(values(5, 0, 0.5))
    assert c["p_different"] == pytest.approx(min(1.0, c["p_share_different"]))


@settings(max_examples=60, deadline=None)
@given(n=st.integers(8, 60), share=st.floats(0, 0.6), r=st.floats(-0.3, 0.3), seed=st.integers(0, 99))
def test_p_different_is_weighted_bonferroni_over_the_charged_endpoints(n, share, r, seed):
    c = pair_test(values(n, int(share * n), r, seed))
    charged = _charged(c)
    if c["mixed"] or c["lean"]:   # a crossing or a contrary lean: its own p (headline.decide)
        assert c["headline"] in ("mixed", "inconclusive")
        return
    assert c["p_different"] == pytest.approx(min(1.0, min(charged)))
    if c["p_different"] < ALPHA:
        assert c["headline"] in ("better", "worse")
        assert (c["headline"] == "worse") == (c["direction"] > 0)
