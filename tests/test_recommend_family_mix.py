"""An implementation whose rows carry its family on some models and "" on others (a job whose spec
could not be resolved is written with family "": harness/run/job.py ``failure_rows``) is one
implementation of one family: ``recommend`` neither crashes nor splits it, and judges it as if
every row carried the family."""
import numpy as np
import pandas as pd
import pytest

from attackaudit.fidelity import flags, recommend
from attackaudit.fidelity._table import one_family, prepare
from attackaudit.fidelity.synthetic import job_rows, table

BASE = np.random.default_rng(3).uniform(0.1, 0.5, 16)
MODELS = ("m1", "m2", "m3")


def _filled(unresolved: bool, scale: float = 1.3) -> pd.DataFrame:
    """a/x and b/y of family f on three models; with ``unresolved`` b/y's job on m2 timed out
    before its spec was resolved (nothing broken, as ``failure_rows`` writes it)."""
    jobs = []
    for m in MODELS:
        jobs.append(job_rows(m, "a/x", "l2", BASE, family="f"))
        if unresolved and m == "m2":
            jobs.append(job_rows(m, "b/y", "l2", np.full(BASE.size, np.inf), family="f", status="timeout",
                                 forwards=0, backwards=0, wall_s=0.0))
        else:
            jobs.append(job_rows(m, "b/y", "l2", BASE * scale, family="f"))
    return table(*jobs)


def _blank(t: pd.DataFrame, impl: str = "b/y", model: str = "m2") -> pd.DataFrame:
    out = t.copy()
    out.loc[(out["model"] == model) & (out["implementation"] == impl), "family"] = ""
    return out


CASES = [pytest.param(False, 1.3, id="ok-rows-clear"), pytest.param(True, 1.3, id="timed-out-job"),
         pytest.param(False, 1.001, id="ok-rows-tied")]


@pytest.mark.parametrize("unresolved,scale", CASES)
def test_a_family_missing_on_one_model_is_the_family_it_has_elsewhere(unresolved, scale):
    filled = _filled(unresolved, scale)
    mixed = _blank(filled)
    marks = flags(filled)  # the same flags for both: only the family column differs
    for f in (None, marks):
        got, want = recommend(mixed, f), recommend(filled, f)
        assert list(got["family"]) == ["f"]  # one family and norm: no trust set of family ""
        pd.testing.assert_frame_equal(got, want)
        assert got.iloc[0]["candidates"] == 2  # one board row per implementation


def test_the_family_missing_on_the_first_rows_and_on_a_twin():
    """The "" rows come first (impl_meta's first non-empty value is then another model's), and a
    twin's rows count too."""
    filled = table(*[job_rows(m, i, "l2", BASE * s, family="f") for m in ("m1", "m2", "m1~perm")
                     for i, s in (("a/x", 1.0), ("b/y", 1.3))])
    mixed = _blank(_blank(filled, "a/x", "m1"), "b/y", "m1~perm")
    pd.testing.assert_frame_equal(recommend(mixed, None), recommend(filled, None))


def test_one_family_fills_and_keeps_rows():
    t = _blank(prepare(_filled(False)))  # prepare fills it itself: blank it afterwards
    out = one_family(t)
    assert (out["family"] == "f").all() and len(out) == len(t)
    assert out.drop(columns="family").equals(t.drop(columns="family"))
    # an implementation without any family stays without one
    none = prepare(table(job_rows("m", "a/x", "l2", BASE, family="f"), job_rows("m", "b/y", "l2", BASE)))
    none.loc[none["implementation"] == "b/y", "family"] = ""
    assert list(one_family(none).groupby("implementation")["family"].first()) == ["f", ""]


def test_flags_judge_a_family_missing_on_one_model_as_the_family():
    """flags reads the same prepared table: a gradient-free family's implementation whose rows on
    one model lost their family is not judged there as a gradient attack without backwards
    (silent_failure), nor against an envelope of its own."""
    filled = table(*[job_rows(m, i, "l2", BASE * s, family="boundary", backwards=0) for m in MODELS
                     for i, s in (("a/x", 1.0), ("b/y", 1.05))])
    cols = ["model", "norm", "implementation", "flag"]
    got, want = flags(_blank(filled)), flags(filled)
    pd.testing.assert_frame_equal(got[cols].reset_index(drop=True), want[cols].reset_index(drop=True))
    assert "silent_failure" not in set(got["flag"])


def test_two_families_for_one_implementation_is_a_clear_error():
    t = _filled(False)
    t.loc[(t["model"] == "m3") & (t["implementation"] == "b/y"), "family"] = "g"
    with pytest.raises(ValueError, match=r"b/y 1\.0 has f and g") as err:
        recommend(t, None)
    assert "\n" not in str(err.value)
