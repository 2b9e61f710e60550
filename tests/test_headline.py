"""The one headline of a comparison, on the robustness curve (fidelity/headline.py; issue 48): the
constructed cases the statistician re-ran, on real distances of the noise corpus where the case
needs real attack noise, through ``equivalence.pair_test``, ``recommend`` and ``diff``."""
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings, strategies as st

from attackaudit.fidelity import diff, recommend
from attackaudit.fidelity.equivalence import pair_test, pair_values, swapped
from attackaudit.fidelity.headline import SHARE_DELTA, worse_beyond
from attackaudit.fidelity.synthetic import job_rows, table

CORPUS = Path(__file__).resolve().parents[1] / "benchmarks" / "noise" / "corpus.parquet"
MIRROR = {"better": "worse", "worse": "better", "equivalent": "equivalent", "mixed": "mixed",
          "inconclusive": "inconclusive"}


@pytest.fixture(scope="module")
def seed_pair() -> tuple[np.ndarray, np.ndarray]:
    """Real distances of a sound randomised attack (adv_lib APGD L∞ on digits-mlp) and of its seed
    twin on the 63 corpus images both could be attacked on."""
    c = pd.read_parquet(CORPUS, columns=["model", "implementation", "norm", "sample", "best_distance", "status"])
    c = c[(c["implementation"] == "adv_lib/apgd") & (c["norm"] == "linf") & (c["status"] == "ok")]
    j = c[c["model"] == "digits-mlp"].merge(c[c["model"] == "digits-mlp~seed"], on="sample")
    a, b = j["best_distance_x"].to_numpy(float), j["best_distance_y"].to_numpy(float)
    keep = ~((a == 0) & (b == 0))
    assert keep.sum() >= 60
    return a[keep], b[keep]


def _diff_verdict(old: np.ndarray, new: np.ndarray) -> pd.Series:
    before = table(job_rows("m", "lib/apgd", "linf", old, family="apgd", library_version="1.0"))
    after = table(job_rows("m", "lib/apgd", "linf", new, family="apgd", library_version="2.0"))
    return diff(before, after).set_index("implementation").loc["lib/apgd"]


def test_a_minority_twice_as_far_is_worse_where_the_typical_difference_is_nil(seed_pair):
    base, twin = seed_pair
    copy = twin.copy()
    copy[: int(0.2 * copy.size)] *= 2                    # 20% of the images 2× farther, the rest seed noise
    res = pair_test(pair_values(copy[None], base[None]))
    assert abs(np.expm1(res["estimate"])) < 0.05        # the pseudo-median sees nothing
    assert res["headline"] == "worse" and res["direction"] == 1
    row = _diff_verdict(base, copy)
    assert row.verdict == "regressed" and "new worse on the robustness curve" in row.reason
    # the seed twin itself: no direction
    assert pair_test(pair_values(twin[None], base[None]))["headline"] not in ("better", "worse", "mixed")


def test_a_failure_excess_with_a_closer_remainder_is_worse_not_mixed(seed_pair):
    """ART 1.17.1 → 1.18.0 PGD L1 in shape: 56% of the images no longer broken, the rest closer."""
    base, _ = seed_pair
    new = base * 0.8
    new[: int(0.56 * new.size)] = np.inf
    res = pair_test(pair_values(new[None], base[None]))
    assert res["p_failure_different"] < 0.05 and res["p_distance_different"] < 0.05   # opposite endpoints
    assert res["lead_a"] < 0.05 and not res["mixed"] and res["headline"] == "worse"
    assert _diff_verdict(base, new).verdict == "regressed"


def test_a_copy_that_fails_more_is_never_clear_because_it_is_closer_on_the_rest(seed_pair):
    """Fails 6 of 63 images the original broke, 5% closer on the rest: the failure rate leans the
    other way unresolved, so no 'clear: copy'; the original is never called worse."""
    base, _ = seed_pair
    copy = base * 0.95
    copy[:6] = np.inf
    res = pair_test(pair_values(copy[None], base[None]))
    assert res["headline"] == "inconclusive" and res["lean"]
    t = table(job_rows("m", "a/orig", "linf", base, family="f"), job_rows("m", "b/copy", "linf", copy, family="f"))
    r = recommend(t, None, n_boot=50).iloc[0]
    assert r.verdict != "clear"
    assert [m["implementation"] for m in r.trust_set] != ["b/copy"]


def test_identical_copies_in_a_family_of_four_are_tied_at_64_images(seed_pair):
    base, _ = seed_pair
    d = np.r_[base, base[:1]]                            # 64 images
    assert d.size == 64
    t = table(*(job_rows("m", f"{lib}/apgd", "linf", d, family="apgd") for lib in "abcd"))
    r = recommend(t, None, n_boot=50).iloc[0]
    assert r.verdict == "tied" and len(r.trust_set) == 4
    assert all(m["answer"] == "equivalent" for m in r.trust_set[1:])


def test_an_l0_attack_one_pixel_worse_on_a_quarter_of_the_images_is_worse():
    rng = np.random.default_rng(0)
    old = np.round(rng.uniform(3, 30, 64))
    new = old.copy()
    new[:16] += 1
    res = pair_test(pair_values(new[None], old[None]))
    assert res["integer"] and res["worse_a"] == 0.25 and res["worse_b"] == 0.0
    assert res["headline"] == "worse"
    assert "by a unit or more" in _diff_verdict(old, new).reason


def test_mixed_only_where_the_curves_cross_and_the_words_say_where():
    rng = np.random.default_rng(1)
    old = rng.uniform(0.2, 1.0, 64)
    new = old * 0.5
    new[old > 0.75] = np.inf                             # breaks the easy ones closer, fails the hard ones
    res = pair_test(pair_values(new[None], old[None]))
    assert res["mixed"] and res["headline"] == "mixed" and 0.2 < res["crossing"] < 1.0
    row = _diff_verdict(old, new)
    assert row.verdict == "mixed" and "the robustness curves cross at distance" in row.reason


def _plain_worse(a: float, b: float, integer: bool) -> bool:
    """The share endpoint's per-image rule, written plainly."""
    if np.isinf(b):
        return False
    if np.isinf(a):
        return True
    if b == 0:
        return a > 0
    if a == 0:
        return False
    return a - b >= 1 - 1e-6 if integer else np.log(a / b) > SHARE_DELTA


distance = st.one_of(st.just(np.inf), st.just(0.0), st.floats(0.01, 10.0), st.integers(1, 40).map(float))


@settings(max_examples=150, deadline=None)
@given(a=st.lists(distance, min_size=1, max_size=30), b=st.lists(distance, min_size=1, max_size=30))
def test_share_rows_follow_the_plain_rule_and_swapping_mirrors_the_headline(a, b):
    n = min(len(a), len(b))
    a, b = np.array(a[:n]), np.array(b[:n])
    positive = np.r_[a, b][np.isfinite(np.r_[a, b]) & (np.r_[a, b] > 0)]
    integer = bool(positive.size) and bool(np.all(positive == np.round(positive)))
    got = worse_beyond(a, b, SHARE_DELTA, integer)
    assert list(got) == [_plain_worse(x, y, integer) for x, y in zip(a, b)]
    x = pair_values(a[None], b[None])
    res, mirror = pair_test(x), pair_test(swapped(x))
    assert mirror["headline"] == MIRROR[res["headline"]]
    assert mirror["p_different"] == pytest.approx(res["p_different"])
    assert mirror["p_equivalent"] == pytest.approx(res["p_equivalent"])


def test_trust_set_members_after_the_top_pick_are_listed_by_the_xi_every_view_shows(seed_pair):
    """Issue 51: the first screen listed pgd·linf's members out of ξ order (cost broke ξ-tier ties);
    the top pick stays first, the others follow by ξ."""
    base, _ = seed_pair
    jobs = [job_rows("m", f"{lib}/pgd", "linf", base * f, family="pgd", forwards=q)
            for lib, f, q in (("a", 1.0, 900), ("b", 1.004, 100), ("c", 1.001, 500), ("d", 1.002, 50))]
    r = recommend(table(*jobs), None, n_boot=20).iloc[0]
    xi = [m["optimality"] for m in r.trust_set[1:]]
    assert len(r.trust_set) == 4 and xi == sorted(xi, reverse=True)
