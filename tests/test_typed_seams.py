"""The typed seams of issue 31: the attack kind, the criterion object, params that must bind to
their attack function when the catalogue is built, and a worker that imports only its job's spec
source (a built-in adapter module, one entry point or one ``--plugin`` file)."""
from __future__ import annotations

import functools
import json
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attackaudit.adapters import (BUILTIN_LIBRARIES, KINDS, AttackKind, AttackSpec, SpecError, SpecSource,
                                  catalogue, load_plugin_file)
from attackaudit.cli import main as cli_main
from attackaudit.measure.criterion import Targeted, Untargeted, as_criterion
from attackaudit.measure.tracker import QueryTracker
from attackaudit.results.schema import parse_model_name
from attackaudit.run.job import Job, attack_with_tracker
from attackaudit.run.worker import job_criterion, resolve_spec

from conftest import examples

ATTACK = '''
from functools import partial

import torch
from attackaudit.adapters import AttackSpec


def fgm(model, inputs, labels, *, eps, steps=1, targeted=False, targets=None):
    x = inputs.clone().requires_grad_(True)
    loss = torch.nn.functional.cross_entropy(model(x), targets if targeted else labels)
    (g,) = torch.autograd.grad(loss, x)
    return (inputs + eps * g.sign()).clamp(0, 1).detach()
'''


def plugin_file(tmp_path: Path, params: str, library: str = "mine") -> Path:
    """A plugin file whose one spec binds ``params`` (a keyword list, e.g. ``steps=1``)."""
    path = tmp_path / f"{library}.py"
    path.write_text(ATTACK + textwrap.dedent(f'''

        def specs():
            params = dict({params})
            return [AttackSpec("{library}", "fgm", "fgm", "linf", "fixed", params, partial(fgm, **params))]
        '''))
    return path


def fgm(model, inputs, labels, *, eps, steps=1, targeted=False, targets=None):
    return inputs


# -- the attack kind ------------------------------------------------------------------------------
@given(kind=st.sampled_from([*KINDS, *AttackKind]))
def test_a_kind_given_as_string_or_member_is_the_typed_kind_and_stores_as_the_string(kind):
    spec = AttackSpec("mine", "fgm", "fgm", "linf", kind, {}, functools.partial(fgm))
    assert spec.kind is AttackKind(kind) and spec.kind == str(kind.value if isinstance(kind, AttackKind) else kind)
    stored = spec.kind.value
    assert type(stored) is str and json.dumps({"kind": spec.kind}) == json.dumps({"kind": stored})
    assert f"{spec.kind}" == stored == str(spec.kind)  # tables and messages show "fixed", not AttackKind.FIXED


@given(kind=st.text(max_size=8).filter(lambda k: k not in KINDS))
def test_an_unknown_kind_is_refused_naming_it(kind):
    with pytest.raises(ValueError, match="kind"):
        AttackSpec("mine", "fgm", "fgm", "linf", kind, {}, functools.partial(fgm))


# -- params that do not bind: an error naming the spec, when the catalogue is built ----------------
def test_a_misspelt_plugin_param_is_one_line_naming_the_spec_and_exit_2(tmp_path, capsys):
    sound = plugin_file(tmp_path, "steps=1")
    assert load_plugin_file(sound)[0].specs[0].key == "mine/fgm/linf"
    typo = plugin_file(tmp_path, "stepz=1", library="typo")
    code = cli_main(["attacks", "--library", "typo", "--plugin", str(typo)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert "typo/fgm/linf" in err[0] and "stepz" in err[0] and str(typo) in err[0], err[0]


def test_a_built_in_adapter_whose_params_do_not_bind_raises_at_catalogue_time(monkeypatch):
    """Not listed as an unavailable library, nor dropped as if the release lacked the attack."""
    adapter = types.ModuleType("attackaudit.adapters.typo_lib")
    adapter.specs = lambda: [AttackSpec("typo_lib", "fgm", "fgm", "linf", "fixed", {"stepz": 3},
                                        functools.partial(fgm, stepz=3))]
    monkeypatch.setitem(sys.modules, adapter.__name__, adapter)
    monkeypatch.setitem(BUILTIN_LIBRARIES, "typo_lib", "torch")
    with pytest.raises(SpecError, match=r"typo_lib/fgm/linf.*stepz") as raised:
        catalogue(["typo_lib"])
    assert "\n" not in str(raised.value)
    adapter.specs = lambda: [AttackSpec("typo_lib", "fgm", "fgm", "linf", "fixed", {"steps": 3},
                                        functools.partial(fgm, steps=3))]
    (entry,) = catalogue(["typo_lib"])
    assert entry.available and [s.key for s in entry.specs] == ["typo_lib/fgm/linf"]


# -- the criterion ----------------------------------------------------------------------------------
@settings(max_examples=examples(50), deadline=None)
@given(targets=st.lists(st.integers(0, 9), min_size=1, max_size=12), data=st.data())
def test_a_criterion_slices_as_its_targets_do(targets, data):
    t = torch.tensor(targets)
    rows = torch.tensor(data.draw(st.lists(st.integers(0, len(targets) - 1), max_size=12)), dtype=torch.long)
    start = data.draw(st.integers(0, len(targets)))
    for part, want in ((rows, t[rows]), (slice(start, None), t[start:])):
        sub = Targeted(t).take(part)
        assert torch.equal(sub.targets, want) and sub.targeted
        assert sub.attack_kwargs().keys() == {"targeted", "targets"} and sub.attack_kwargs()["targeted"] is True
        assert list(sub.target_column(len(want))) == want.tolist()
        assert Untargeted().take(part) == Untargeted()
    assert Untargeted().attack_kwargs() == {} and list(Untargeted().target_column(3)) == [-1, -1, -1]
    assert isinstance(as_criterion(None), Untargeted) and torch.equal(as_criterion(t).targets, t)


def test_a_criterion_needs_one_target_per_sample():
    with pytest.raises(ValueError, match="1-D"):
        Targeted(torch.tensor(3))


def test_the_tracker_and_the_job_read_a_criterion_as_they_read_the_pair(cnn, subset8):
    """``criterion=Targeted(t)`` is ``targeted=True, targets=t``: the same queries, the same bests."""
    spec, _, error = resolve_spec(Job(run="r", twin=parse_model_name("digits-cnn"), spec_key="adv_lib/fmn/l2", steps_scale=0.02))
    assert spec is not None, error
    x, y = subset8.inputs[:4], subset8.labels[:4]
    targets = (y + 3) % 10
    results = []
    for kw in ({"targets": targets}, {"criterion": Targeted(targets)}):
        torch.manual_seed(0)
        tracker, returned, error = attack_with_tracker(spec, cnn, x, y, budget=300, **kw)
        assert error == "" and tracker.targeted and torch.equal(tracker.targets, targets)
        results.append((tracker.forwards, tracker.backwards, tracker.best_distance, returned))
    for a, b in zip(*results):
        assert torch.equal(a, b)
    with pytest.raises(ValueError, match="not both"):
        QueryTracker(cnn, x, y, norm="l2", criterion=Untargeted(), targets=targets)
    with pytest.raises(ValueError, match="not both"):
        attack_with_tracker(spec, cnn, x, y, budget=10, criterion=Targeted(targets), targets=targets)


def test_a_targeted_job_draws_its_targets_once_and_never_the_label(subset8):
    untargeted = Job(run="r", twin=parse_model_name("digits-cnn"), spec_key="adv_lib/fmn/l2", samples=8)
    assert isinstance(job_criterion(untargeted, subset8, 10), Untargeted)
    targeted = Job(run="r", twin=parse_model_name("digits-cnn"), spec_key="adv_lib/fmn/l2", samples=8, targeted=True)
    a, b = job_criterion(targeted, subset8, 10), job_criterion(targeted, subset8, 10)
    assert torch.equal(a.targets, b.targets) and not (a.targets == subset8.labels).any()


# -- the worker imports its job's spec source, nothing else ---------------------------------------
def _adapters_imported_by_resolving(job_args: str) -> list[str]:
    """The built-in adapter modules a fresh interpreter has imported after ``resolve_spec``."""
    code = textwrap.dedent(f"""
        import sys
        from attackaudit.results.schema import Twin
        from attackaudit.run.job import Job
        from attackaudit.run.worker import resolve_spec
        spec, version, error = resolve_spec(Job({job_args}))
        assert spec is not None, error
        print(spec.key)
        print(" ".join(sorted(m for m in sys.modules if m.startswith("attackaudit.adapters."))))
        """)
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    key, modules = res.stdout.strip().splitlines()
    return [key, *modules.split()]


def test_a_built_in_job_imports_only_its_own_adapter():
    key, *modules = _adapters_imported_by_resolving('run="r", twin=Twin("digits-mlp"), spec_key="adv_lib/fmn/l2"')
    assert key == "adv_lib/fmn/l2"
    assert {m.rsplit(".", 1)[1] for m in modules} & set(BUILTIN_LIBRARIES) == {"adv_lib"}, modules


def test_a_plugin_job_imports_its_file_and_no_built_in_adapter(tmp_path):
    ref = load_plugin_file(plugin_file(tmp_path, "steps=1"))[0].plugin.ref
    key, *modules = _adapters_imported_by_resolving(
        f'run="r", twin=Twin("digits-mlp"), spec_key="mine/fgm/linf", plugins=({ref!r},)')
    assert key == "mine/fgm/linf"
    assert not {m.rsplit(".", 1)[1] for m in modules} & set(BUILTIN_LIBRARIES), modules


def test_an_entry_point_job_loads_that_entry_point(tmp_path, monkeypatch):
    (tmp_path / "ep_seam_mod.py").write_text(plugin_file(tmp_path, "steps=2", library="epseam").read_text())
    info = tmp_path / "epseam-0.7.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: epseam\nVersion: 0.7\n")
    (info / "entry_points.txt").write_text("[attackaudit.adapters]\nepseam = ep_seam_mod:specs\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    job = Job(run="r", twin=parse_model_name("digits-mlp"), spec_key="epseam/fgm/linf")
    assert job.spec_source == SpecSource("epseam") and job.spec_source.factory == "entry point epseam"
    spec, version, error = resolve_spec(job)
    assert error == "" and spec.key == "epseam/fgm/linf" and spec.params == {"steps": 2} and version == "0.7"
    spec, _, error = resolve_spec(Job(run="r", twin=parse_model_name("digits-mlp"), spec_key="epseam/fgm/l2"))
    assert spec is None and "epseam/fgm/l2 is not in the catalogue" in error and "entry point epseam" in error
