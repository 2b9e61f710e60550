"""fidelity/_table.py computes ``long_distances`` and ``one_family`` on integer codes of the key
columns (issue 49 item 5: the merges were the suite's hot path). The merge versions stay as the
deliberately simple reference and as the path for keys the codes do not handle; these properties
hold the fast path to them on random tables: repeated rows (the last counts), images some jobs
did not run, failures (inf), NaN distances, clean misclassifications (0) and unnamed families."""
from __future__ import annotations

import os

import numpy as np
import pandas as pd
from hypothesis import given, settings, strategies as st

from attackaudit.fidelity._table import (_long_by_codes, _long_by_merges, _one_family_by_merge, long_distances,
                                         one_family)

EXAMPLES = 60 if os.environ.get("ATTACKAUDIT_HYPOTHESIS", "dev") == "ci" else 150

row = st.fixed_dictionaries({
    "model": st.sampled_from(["m", "m~shift", "k"]), "norm": st.sampled_from(["l2", "linf"]),
    "implementation": st.sampled_from(["a/x", "b/y", "c/z"]), "library_version": st.sampled_from(["1.0", "2.0"]),
    "sample": st.integers(0, 5),
    "best_distance": st.one_of(st.floats(0.0, 3.0), st.just(np.inf), st.just(np.nan), st.just(0.0))})


@settings(max_examples=EXAMPLES, deadline=None)
@given(st.lists(row, min_size=1, max_size=40), st.sampled_from([None, ["implementation"], ["library_version",
                                                                                           "implementation"]]))
def test_long_distances_on_codes_is_the_merges(rows, keys):
    t = pd.DataFrame(rows)
    keys = keys or ["implementation", "library_version"]
    fast = _long_by_codes(t, keys)
    assert fast is not None  # these keys are the codes' case: the merges are only the reference here
    pd.testing.assert_frame_equal(fast, _long_by_merges(t, keys))
    pd.testing.assert_frame_equal(long_distances(t, keys), _long_by_merges(t, keys))


@settings(max_examples=EXAMPLES, deadline=None)
@given(st.lists(st.fixed_dictionaries({"implementation": st.sampled_from(["a/x", "b/y", "c/z"]),
                                       "library_version": st.sampled_from(["1.0", "2.0"]),
                                       "family": st.sampled_from(["", "", "pgd"])}), min_size=1, max_size=30),
       st.dictionaries(st.sampled_from(["a/x", "b/y", "c/z"]), st.sampled_from(["cw", "ead"])))
def test_one_family_on_codes_is_the_merge(rows, other):
    # each implementation names at most one family (``other`` moves some from pgd to another one)
    t = pd.DataFrame(rows)
    t["family"] = [other.get(i, f) if f else f for i, f in zip(t["implementation"], t["family"])]
    pd.testing.assert_frame_equal(one_family(t), _one_family_by_merge(t))
