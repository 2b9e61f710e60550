"""adapters/release.py: the bridges from our call to a release's API, and ``unsupported`` rows."""
from __future__ import annotations

from functools import partial

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attackaudit.adapters import AttackSpec
from attackaudit.adapters.release import Unsupported, bridge_keywords, call_accepting, per_eps_group, supports
from attackaudit.results.schema import parse_model_name
from attackaudit.run.job import Job, job_rows


def old_fab(model, norm="Linf", steps=10, targeted=False):
    """A release's signature: ``multi_targeted`` was called ``targeted``; no ``seed``."""
    return {"norm": norm, "steps": steps, "targeted": targeted}


def test_renamed_parameter_is_passed_under_its_old_name():
    kw = bridge_keywords(old_fab, {"norm": "L2", "multi_targeted": True}, what="FAB",
                         renames={"multi_targeted": ("targeted",)})
    assert kw == {"norm": "L2", "targeted": True}


def test_droppable_parameter_only_at_the_releases_own_behaviour():
    assert bridge_keywords(old_fab, {"steps": 5, "seed": 0}, what="FAB", droppable={"seed": 0}) == {"steps": 5}
    with pytest.raises(Unsupported, match=r"FAB of this release has no parameter seed=1"):
        bridge_keywords(old_fab, {"seed": 1}, what="FAB", droppable={"seed": 0})


def test_missing_parameter_is_unsupported_and_kwargs_functions_take_everything():
    with pytest.raises(Unsupported, match="loss='dlr'"):
        bridge_keywords(old_fab, {"loss": "dlr"}, what="FAB")
    assert bridge_keywords(lambda **kw: kw, {"loss": "dlr"}, what="x") == {"loss": "dlr"}


def test_call_accepting_drops_keywords_an_old_setter_lacks():
    assert call_accepting(lambda fn=None: fn, "f", quiet=True) == "f"
    assert call_accepting(lambda fn=None, quiet=False: (fn, quiet), "f", quiet=True) == ("f", True)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.sampled_from([0.1, 0.2, 0.4]), min_size=1, max_size=12))
def test_per_eps_group_equals_a_per_sample_call(eps_values):
    n = len(eps_values)
    x = torch.arange(n * 4, dtype=torch.float32).reshape(n, 1, 2, 2) / (n * 4)
    y = torch.arange(n) % 3
    eps = torch.tensor(eps_values)
    calls = []

    def scalar(xs, ys, ts, e):
        assert isinstance(e, float) and ts is None
        calls.append(e)
        return xs + e + ys.view(-1, 1, 1, 1)  # depends on the row, its label and its ε

    out = per_eps_group(scalar, x, y, None, eps)
    assert torch.allclose(out, x + eps.view(-1, 1, 1, 1) + y.view(-1, 1, 1, 1))
    # one call per distinct ε, with that ε as the float32 the minimal-ε search holds it in
    assert sorted(calls) == pytest.approx(sorted(set(eps_values)))


def test_probe_result_is_cached_and_restores_the_rngs():
    state = torch.random.get_rng_state()
    assert supports(("test", "raises"), lambda: (torch.rand(3), 1 / 0)) is False
    assert torch.equal(torch.random.get_rng_state(), state)
    assert supports(("test", "raises"), lambda: None) is False  # cached per key


def _refuses(model, inputs, labels, *, steps=3, targeted=False, targets=None):
    raise Unsupported("lib X of this release has no parameter steps=3")


def test_unsupported_spec_gives_unsupported_rows_not_crashes(cnn, subset8):
    spec = AttackSpec("adv_lib", "refuses", "fmn", "l2", "minimal", {"steps": 3}, partial(_refuses, steps=3),
                      steps_param="steps")
    job = Job(run="t", twin=parse_model_name("digits-cnn"), spec_key=spec.key, samples=8)
    rows = job_rows(job, spec, "0.0", cnn, subset8, None)
    assert set(rows["status"]) == {"unsupported"}
    assert set(rows["error"]) == {"lib X of this release has no parameter steps=3"}
