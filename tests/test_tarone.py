"""Tarone's modified Bonferroni in ``equivalence.compare``: an endpoint that cannot reach α from
its ancillary counts is not charged, one that can is."""
import numpy as np
from hypothesis import given, settings, strategies as st

from attackaudit.fidelity.equivalence import compare, reachable_endpoints
from attackaudit.fidelity.stats import ALPHA


def values(n: int, only_a_failed: int, r: float, seed: int = 0) -> np.ndarray:
    """(3, n): ``a`` fails the first ``only_a_failed`` images, both broke the rest at log ratio ≈ ``r``."""
    rng = np.random.default_rng(seed)
    fa = np.zeros(n)
    fa[:only_a_failed] = 1.0
    ratio = r + rng.normal(0, 0.01, n)
    ratio[:only_a_failed] = np.nan
    return np.vstack([fa, np.zeros(n), ratio])


def test_no_discordant_image_charges_only_the_distance_endpoint():
    c = compare(values(24, 0, 0.08))
    assert reachable_endpoints(np.zeros(24), np.zeros(24), 24) == (False, True)
    assert c["p_different"] == c["p_distance_different"] < ALPHA


def test_a_failure_endpoint_that_could_reach_alpha_is_charged():
    fa = np.r_[np.ones(12), np.zeros(28)]
    assert reachable_endpoints(fa, np.zeros(40), 28) == (True, True)
    c = compare(values(40, 12, 0.08))
    assert c["p_different"] == min(1.0, 2 * min(c["p_failure_different"], c["p_distance_different"]))


def test_too_few_images_both_broke_cannot_show_a_distance_difference():
    # the exact signed rank's smallest two-sided p with 5 images is 2/32 > α
    assert reachable_endpoints(np.zeros(5), np.zeros(5), 5) == (False, False)
    assert compare(values(5, 0, 0.5))["p_different"] == 1.0


@settings(max_examples=60, deadline=None)
@given(n=st.integers(8, 60), share=st.floats(0, 0.6), r=st.floats(-0.3, 0.3), seed=st.integers(0, 99))
def test_p_different_lies_between_the_smaller_endpoint_p_and_twice_it(n, share, r, seed):
    c = compare(values(n, int(share * n), r, seed))
    smaller = min(c["p_failure_different"], c["p_distance_different"])
    assert smaller - 1e-12 <= c["p_different"]
    if smaller < ALPHA:  # an endpoint that reached α was reachable: charged at most Bonferroni's 2
        assert c["p_different"] <= 2 * smaller + 1e-12
    else:                # nothing below α: the combined p can never be
        assert c["p_different"] >= ALPHA
