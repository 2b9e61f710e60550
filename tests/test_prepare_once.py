"""fidelity's ``prepare`` runs once per report (issue 52): a table it returned is passed on as it is,
and ``prepare`` of it is a copy, not a second cleaning; a frame derived from it is cleaned again."""
import numpy as np
import pandas as pd

from attackaudit.fidelity import prepare
from attackaudit.fidelity._table import is_prepared


def _raw() -> pd.DataFrame:
    return pd.DataFrame({"model": ["m", "m", "m", "m~shift"], "norm": "l2", "sample": [0, 0, 1, 0],
                         "best_distance": [1.0, 0.5, np.nan, 2.0], "library": "lib", "attack": "a",
                         "status": ["ok", "ok", "unsupported", "ok"]})


def test_prepare_is_idempotent_and_cheap_on_its_own_output():
    once = prepare(_raw())
    assert is_prepared(once) and not is_prepared(_raw())
    again = prepare(once)
    assert again is not once and is_prepared(again)
    pd.testing.assert_frame_equal(again, once)
    pd.testing.assert_frame_equal(prepare(_raw()), once)
    assert len(once) == 2 and once["best_distance"].tolist() == [0.5, 2.0]  # last row wins, unsupported dropped


def test_the_callers_changes_stay_its_own_and_derived_frames_are_cleaned_again():
    once = prepare(_raw())
    again = prepare(once)
    again.loc[0, "best_distance"] = 9.0
    assert once.loc[0, "best_distance"] == 0.5
    derived = once.assign(best_distance=[np.nan, 2.0])
    assert not is_prepared(derived) and prepare(derived)["best_distance"].tolist() == [np.inf, 2.0]
