"""The plugin contract: validation when loaded, explicit plugins never dropped, results that
cannot go stale, and the example plugin end to end through ``attackaudit run --plugin``."""
import functools
import importlib.metadata
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import attackaudit
from attackaudit.adapters import (AttackSpec, PluginError, PluginSource, catalogue, load_plugin_file,
                                  spec_problem)
from attackaudit.cli import main as cli_main
from attackaudit.results.schema import parse_model_name

EXAMPLE = Path(__file__).parents[1] / "examples" / "plugin_example.py"

SOUND_ATTACK = '''
from functools import partial

import torch
from attackaudit.adapters import AttackSpec

__version__ = "0.3"


def fgm(model, inputs, labels, *, eps, steps=1, targeted=False, targets=None):
    x = inputs.clone().requires_grad_(True)
    loss = torch.nn.functional.cross_entropy(model(x), targets if targeted else labels)
    (g,) = torch.autograd.grad(loss, x)
    return (inputs + eps * g.sign()).clamp(0, 1).detach()


def untargeted_only(model, inputs, labels):
    return inputs.clone()
'''


def write_plugin(tmp_path: Path, specs_body: str, prelude: str = "", name: str = "plug.py") -> Path:
    path = tmp_path / name
    path.write_text(SOUND_ATTACK + prelude + "\n\ndef specs():\n" + textwrap.indent(textwrap.dedent(specs_body), "    "))
    return path


def attacks_cli(capsys, *args, libraries=("mine", "example")) -> tuple[int, str, str]:
    """``attackaudit attacks`` in this process (no built-in library is loaded: they are slow)."""
    code = cli_main(["attacks", *(a for lib in libraries for a in ("--library", lib)), *args])
    out, err = capsys.readouterr()
    return code, out, err


def run_cli(*args, timeout=600):
    return subprocess.run([sys.executable, "-m", "attackaudit", *args], capture_output=True, text=True,
                          timeout=timeout)


# -- validation when loaded ----------------------------------------------------------------------
GOOD = 'return [AttackSpec("mine", "fgm", "fgm", "linf", "fixed", {"steps": 1}, partial(fgm, steps=1), steps_param="steps")]'

BROKEN = {
    "unknown norm": ('return [AttackSpec("mine", "fgm", "fgm", "L2", "fixed", {}, partial(fgm))]', "'L2'"),
    "unknown kind": ('return [AttackSpec("mine", "fgm", "fgm", "l2", "fixd", {}, partial(fgm))]', "'fixd'"),
    "steps_param not in params": (
        'return [AttackSpec("mine", "fgm", "fgm", "linf", "fixed", {"steps": 1}, partial(fgm, steps=1), '
        'steps_param="iterations")]', "steps_param 'iterations'"),
    "run not a partial": (
        'return [AttackSpec("mine", "fgm", "fgm", "linf", "fixed", {"steps": 1}, fgm, steps_param="steps")]',
        "not a functools.partial"),
    "partial without the params": (
        'return [AttackSpec("mine", "fgm", "fgm", "linf", "fixed", {"steps": 5}, partial(fgm), steps_param="steps")]',
        "params['steps'] is not a keyword"),
    "params recorded differ from run": (
        'return [AttackSpec("mine", "fgm", "fgm", "linf", "fixed", {"steps": 5}, partial(fgm, steps=2), '
        'steps_param="steps")]', "run passes 2"),
    "fixed run without eps": (
        'return [AttackSpec("mine", "clean", "fgm", "linf", "fixed", {}, partial(untargeted_only), '
        'targeted_support=False)]', "eps="),
    "no targets keyword": (
        'return [AttackSpec("mine", "clean", "fgm", "linf", "minimal", {}, partial(untargeted_only))]', "targets="),
    "duplicate keys": (
        'return [AttackSpec("mine", "fgm", "fgm", "linf", "fixed", {}, partial(fgm))] * 2', "mine/fgm/linf"),
    "built-in library name": (
        'return [AttackSpec("adv_lib", "fgm", "fgm", "linf", "fixed", {}, partial(fgm))]', "'adv_lib'"),
    "ImportError in specs()": ("import secml_torch_not_installed\nreturn []", "secml_torch_not_installed"),
    "specs() returns no spec": ("return []", "no AttackSpec"),
    "not an AttackSpec": ('return [{"library": "mine"}]', "dict"),
}


@pytest.mark.parametrize("case", list(BROKEN))
def test_a_broken_plugin_is_one_line_naming_it_and_exit_2(tmp_path, capsys, case):
    body, culprit = BROKEN[case]
    path = write_plugin(tmp_path, body)
    code, out, err = attacks_cli(capsys, "--plugin", str(path))
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, err
    assert str(path) in lines[0] and culprit in lines[0], lines[0]


def test_a_sound_plugin_loads_and_a_distribution_it_names_must_be_installed(tmp_path, capsys):
    path = write_plugin(tmp_path, GOOD)
    code, out, err = attacks_cli(capsys, "--plugin", str(path))
    assert code == 0 and "mine/fgm/linf" in out and not err
    wraps_torch = write_plugin(tmp_path, GOOD, '__distribution__ = "torch"', name="wraps.py")
    (entry,) = load_plugin_file(wraps_torch)
    assert entry.version == importlib.metadata.version("torch") and entry.plugin.plugin_version == "0.3"
    missing = write_plugin(tmp_path, GOOD, '__distribution__ = "no-such-distribution"', name="missing.py")
    code, _, err = attacks_cli(capsys, "--plugin", str(missing))
    assert code == 2 and "no-such-distribution" in err and len(err.strip().splitlines()) == 1


def test_two_plugins_may_not_share_a_library_name(tmp_path, capsys):
    a = write_plugin(tmp_path, GOOD, name="a.py")
    b = write_plugin(tmp_path, GOOD.replace('"fgm", "fgm"', '"other", "fgm"'), name="b.py")
    code, _, err = attacks_cli(capsys, "--plugin", str(a), "--plugin", str(b))
    assert code == 2 and str(b) in err and "'mine'" in err and len(err.strip().splitlines()) == 1


def test_a_broken_plugin_stops_run_with_one_line_not_a_traceback(tmp_path):
    path = write_plugin(tmp_path, BROKEN["ImportError in specs()"][0])
    res = run_cli("run", "--plugin", str(path), "--samples", "2", "--out", str(tmp_path / "r"))
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert "secml_torch_not_installed" in res.stderr and "Traceback" not in res.stderr


def test_every_built_in_spec_passes_the_plugin_checks():
    """The checks are the built-ins' own conventions: they must not reject a sound adapter."""
    specs = [s for e in catalogue() if e.plugin is None for s in e.specs]
    assert len(specs) > 50
    assert [(s.key, spec_problem(s)) for s in specs if spec_problem(s)] == []


# the property behind "steps_param not in params" and "run cannot be overridden": a spec passes
# exactly when --steps-scale reaches the function with the scaled count, and params are what it ran with
def _record(model, inputs, labels, *, targeted=False, targets=None, **kw):
    return kw


KEYS = ["steps", "lr", "alpha"]
values = st.one_of(st.integers(-2, 40), st.booleans(), st.floats(0.1, 5.0))


@settings(max_examples=200, deadline=None)
@given(params=st.dictionaries(st.sampled_from(KEYS), values, max_size=3),
       steps_param=st.sampled_from(["", "absent", *KEYS]),
       form=st.sampled_from(["exact", "plain", "drop_one", "change_one"]),
       factor=st.floats(0.01, 3.0))
def test_a_spec_passes_exactly_when_its_params_reach_the_attack(params, steps_param, form, factor):
    keywords = dict(params)
    if form == "drop_one" and keywords:
        keywords.pop(next(iter(keywords)))
    if form == "change_one" and keywords:
        key = next(iter(keywords))
        keywords[key] = ("changed", keywords[key])
    run = _record if form == "plain" else functools.partial(_record, **keywords)
    spec = AttackSpec("mine", "rec", "pgd", "l2", "minimal", params, run, steps_param=steps_param)

    overridable = not params or (form != "plain" and keywords == params)
    steps = params.get(steps_param)
    steps_ok = not steps_param or (type(steps) is int and steps >= 1)
    assert (spec_problem(spec) == "") == (overridable and steps_ok), spec_problem(spec)
    if spec_problem(spec) == "":
        received = spec.scaled(factor).run(None, None, None)
        expected = dict(params)
        if steps_param:
            expected[steps_param] = max(1, int(round(steps * factor)))
            assert spec.steps_at(factor) == expected[steps_param]
        assert received == expected


def test_the_contract_is_public_and_import_attackaudit_stays_torch_free():
    res = subprocess.run([sys.executable, "-c", (
        "import sys, attackaudit\n"
        "assert 'torch' not in sys.modules, 'import attackaudit loaded torch'\n"
        "from attackaudit import AttackSpec, FixedEpsAttack, MinimalAttack\n"
        "import attackaudit.adapters as a\n"
        "assert (AttackSpec, FixedEpsAttack, MinimalAttack) == (a.AttackSpec, a.FixedEpsAttack, a.MinimalAttack)\n"
        "assert {'AttackSpec', 'FixedEpsAttack', 'MinimalAttack'} <= set(a.__all__) & set(attackaudit.__all__)\n")],
        capture_output=True, text=True)
    assert res.returncode == 0, res.stderr


# -- what the harness really passes is what the Protocols' docstrings say ------------------------
CALLS: list[dict] = []


def _probe(model, inputs, labels, **kw):
    """Records one call; returns the inputs unchanged (a failed attack, so the search goes on)."""
    CALLS.append({"inputs": inputs, "labels": labels, **kw})
    return inputs.clone()


@pytest.mark.parametrize("kind, per_sample_eps, targeted", [
    ("minimal", False, False), ("minimal", False, True), ("fixed", False, False), ("fixed", True, True)])
def test_run_is_called_as_the_protocols_say(kind, per_sample_eps, targeted):
    from attackaudit.sources.subset import random_targets
    from attackaudit.run.job import attack_with_tracker

    subset, model = tiny_problem()
    x, y = subset.inputs, subset.labels
    targets = random_targets(y, 10, 0) if targeted else None
    spec = AttackSpec("probe", "probe", "pgd", "l2", kind, {}, functools.partial(_probe), per_sample_eps=per_sample_eps)
    CALLS.clear()
    _, returned, error = attack_with_tracker(spec, model, x, y, budget=200, targets=targets)
    assert error == "" and CALLS
    for call in CALLS:
        n = len(call["inputs"])
        assert call["inputs"].dtype == torch.float32 and call["inputs"].shape[1:] == x.shape[1:]
        assert call["labels"].dtype == torch.int64 and call["labels"].shape == (n,)
        assert 0 <= float(call["inputs"].min()) and float(call["inputs"].max()) <= 1
        expected = {"eps"} if kind == "fixed" else set()
        assert set(call) - {"inputs", "labels"} == expected | ({"targeted", "targets"} if targeted else set())
        if targeted:
            assert call["targeted"] is True and call["targets"].dtype == torch.int64
            assert call["targets"].shape == (n,) and (call["targets"] != call["labels"]).all()
        if kind == "fixed" and per_sample_eps:
            eps = call["eps"]
            assert isinstance(eps, torch.Tensor) and eps.dtype == torch.float32 and eps.shape == (n,)
            assert eps.device.type == "cpu"
        elif kind == "fixed":
            assert type(call["eps"]) is float
    if kind == "fixed":  # the failing probe is called again at every doubled ε
        assert len(CALLS) > 1


# -- identity ------------------------------------------------------------------------------------
def test_the_fingerprint_follows_the_file_and_the_recorded_version(tmp_path):
    path = write_plugin(tmp_path, GOOD)
    (entry,) = load_plugin_file(path)
    same = PluginSource(entry.plugin.path, entry.plugin.sha256, entry.plugin.version, entry.plugin.plugin_version)
    assert same.fingerprint == entry.plugin.fingerprint
    upgraded = PluginSource(entry.plugin.path, entry.plugin.sha256, "0.4", entry.plugin.plugin_version)
    assert upgraded.fingerprint != entry.plugin.fingerprint
    pinned = entry.plugin.ref
    (again,) = load_plugin_file(pinned)
    assert again.available and again.plugin.fingerprint == entry.plugin.fingerprint
    path.write_text(path.read_text().replace("steps=1", "steps=1 ").replace("0.3", "0.3.1"))
    (stale,) = load_plugin_file(pinned)  # a worker loading the file after it was edited mid-run
    assert not stale.available and "changed since the run was planned" in stale.reason
    from attackaudit.run.job import Job
    from attackaudit.run.worker import resolve_spec

    spec, version, error = resolve_spec(Job(run="r", twin=parse_model_name("digits-mlp"), spec_key="mine/fgm/linf", plugins=(pinned,)))
    assert spec is None and "changed since the run was planned" in error  # the job's rows: harness_error, this error


# -- entry points: a real installed distribution on sys.path, validated as plugin files ----------
def _install_entry_point(site: Path, dist: str, module: str, source: str) -> None:
    (site / f"{module}.py").write_text(source)
    info = site / f"{dist}-0.7.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.7\n")
    (info / "entry_points.txt").write_text(f"[attackaudit.adapters]\n{dist} = {module}:specs\n")


def test_entry_point_plugins_are_validated_and_a_broken_one_is_listed_unavailable(tmp_path, monkeypatch):
    good = SOUND_ATTACK + "\n\ndef specs():\n    " + GOOD.replace('"mine"', '"epgood"') + "\n"
    bad = SOUND_ATTACK + "\n\ndef specs():\n    " + BROKEN["steps_param not in params"][0].replace('"mine"', '"epbad"') + "\n"
    _install_entry_point(tmp_path, "epgood", "epgood_mod", good)
    _install_entry_point(tmp_path, "epbad", "epbad_mod", bad)
    monkeypatch.syspath_prepend(str(tmp_path))
    entries = {e.library: e for e in catalogue(["epgood", "epbad"])}
    assert entries["epgood"].available and entries["epgood"].version == "0.7"
    assert [s.key for s in entries["epgood"].specs] == ["epgood/fgm/linf"]
    assert not entries["epbad"].available and "steps_param 'iterations'" in entries["epbad"].reason


# -- the catalogue shows what --steps-scale does --------------------------------------------------
def test_attacks_shows_each_plugin_specs_params_and_steps_scaling(tmp_path, capsys):
    path = write_plugin(tmp_path, GOOD[:-1] + ', AttackSpec("mine", "clean", "fgm", "linf", "minimal", {}, '
                                              'partial(untargeted_only), targeted_support=False)]')
    code, out, _ = attacks_cli(capsys, "--plugin", str(EXAMPLE), "--plugin", str(path))
    assert code == 0
    assert 'example/pgd/linf  {"norm": "linf", "steps": 20, "step_ratio": 2.5}' in out
    assert "steps=20 × s, rounded, at least 1 (quick ×0.1: 2, demo ×0.5: 10)" in out
    assert "steps=1 × s, rounded, at least 1 (quick ×0.1: 1, demo ×0.5: 1)" in out
    clean_line = next(line for line in out.splitlines() if line.startswith("mine/clean/linf") and "{}" in line)
    assert "none: no steps_param" in clean_line
    code, out, _ = attacks_cli(capsys, "--plugin", str(EXAMPLE), "--format", "json", libraries=("cleverhans",))
    rows = {r["key"]: r for r in json.loads(out)}  # --library names a built-in: the plugin stays
    assert "cleverhans/carlini_wagner_l2/l2" in rows and "steps_param" in rows["cleverhans/carlini_wagner_l2/l2"]
    assert rows["example/pgd/l2"]["steps_param"] == "steps" and rows["example/pgd/l2"]["plugin"] == str(EXAMPLE.resolve())


# -- explicit plugins are never dropped in silence -----------------------------------------------
def test_plan_keeps_explicit_plugins_and_names_the_ones_filters_leave_out(tmp_path):
    from attackaudit.run.config import resolve
    from attackaudit.run.runner import plan

    path = write_plugin(tmp_path, GOOD[:-1] + (
        ', AttackSpec("mine", "clean", "fgm", "linf", "minimal", {}, partial(untargeted_only), targeted_support=False)'
        ', AttackSpec("mine", "fgm", "pgd", "l2", "fixed", {}, partial(fgm))]'))
    base = {"out": str(tmp_path / "r"), "libraries": ["adv_lib"], "plugins": [str(path)], "samples": 2}
    everything = plan(resolve(None, base))
    assert {"mine/fgm/linf", "mine/clean/linf", "mine/fgm/l2"} <= {j.spec_key for j in everything.jobs}
    assert everything.notes == []  # nothing left out, nothing said
    assert all(j.plugins == () for j in everything.jobs if j.spec_key.startswith("adv_lib/"))
    filtered = plan(resolve(None, {**base, "families": ["fgm"], "targeted": True}))
    assert {j.spec_key for j in filtered.jobs} == {"mine/fgm/linf"}
    where = f"--plugin {path.resolve()}: 1 attack"
    assert filtered.notes == [f"{where} skipped by --targeted (targeted_support=False): mine/clean/linf",
                              f"{where} left out by --families: mine/fgm/l2"]


# -- the example plugin, end to end: never dropped, never stale -----------------------------------
def test_example_plugin_runs_beside_libraries_and_an_edit_is_never_reused(tmp_path, capsys):
    plugin = tmp_path / "plugin_example.py"
    plugin.write_text(EXAMPLE.read_text())
    out = tmp_path / "run"
    # --libraries names only a built-in library: the explicit plugin still runs; --norms leaves
    # out its l2 spec, and the run says so
    args = ["run", "--models", "digits-mlp", "--libraries", "adv_lib", "--attacks", "adv_lib/ddn",
            "example/pgd", "--norms", "linf", "--plugin", str(plugin), "--samples", "6", "--steps-scale", "0.25",
            "--quiet", "--out", str(out)]
    first = run_cli(*args)
    assert first.returncode == 0, first.stderr
    assert f"--plugin {plugin.resolve()}: 1 attack left out by --norms: example/pgd/l2" in first.stderr
    df = attackaudit.load_run(out)
    assert set(df["implementation"]) == {"example/pgd"} and set(df["status"]) == {"ok"}
    assert set(df["library_version"]) == {"1.0.0"}
    assert (df["best_distance"] < 0.5).mean() >= 0.8  # a real attack: it breaks the MLP
    manifest = json.loads((out / "manifest.json").read_text())
    assert list(manifest["config"]["plugin_fingerprints"]) == [str(plugin.resolve())]

    # the reruns in this process (a fresh interpreter per command costs more than the job)
    assert cli_main(args) == 0 and "0 run now" in capsys.readouterr().err  # unchanged: nothing rerun
    plugin.write_text(plugin.read_text().replace('"step_ratio": 2.5', '"step_ratio": 1.5'))
    assert cli_main(args) == 2
    edited = capsys.readouterr().err.strip().splitlines()
    assert len(edited) == 1 and "plugin_fingerprints" in edited[0] and "--force" in edited[0], edited
    assert cli_main([*args, "--force"]) == 0 and "1 run now" in capsys.readouterr().err
    # the old rows are set aside, not read beside the new ones
    params = set(attackaudit.load_run(out)["params"])
    assert len(params) == 1 and '"step_ratio": 1.5' in params.pop()
    assert len(list((out / "superseded").glob("*.parquet"))) == 1


def test_the_docs_plugin_loads_and_attacks_within_its_ball(tmp_path):
    """The plugin page's minimal plugin (docs/plugins.md) is code a user copies: it must pass the
    checks and be a sound attack."""
    from attackaudit.measure.distance import lp_norm

    page = (Path(__file__).parents[1] / "docs" / "plugins.md").read_text()
    code = page.split("```python\n# my_attacks.py\n", 1)[1].split("```", 1)[0]
    path = tmp_path / "my_attacks.py"
    path.write_text(code)
    (entry,) = load_plugin_file(path)
    assert entry.version == "0.1.0" and [s.key for s in entry.specs] == ["mylib/pgd/linf"]
    subset, model = tiny_problem()
    eps = torch.full((len(subset.labels),), 0.3)
    adv = entry.specs[0].run(model, subset.inputs, subset.labels, eps=eps)
    assert (lp_norm(adv - subset.inputs, "linf") <= 0.3 + 1e-6).all() and adv.min() >= 0 and adv.max() <= 1
    assert (model(adv).argmax(1) != subset.labels).any()  # ε = 0.3 breaks the tiny MLP somewhere


@functools.lru_cache(maxsize=1)
def tiny_problem():
    from attackaudit.sources.subset import load_subset
    from attackaudit.sources.zoo import load_model

    return load_subset("digits", 4, 0), load_model("digits-mlp-tiny")


EXAMPLE_SPECS = load_plugin_file(EXAMPLE)[0].specs


@settings(max_examples=25, deadline=None)
@given(norm=st.sampled_from(["linf", "l2"]), eps=st.lists(st.floats(0.0, 3.0), min_size=4, max_size=4),
       steps=st.integers(1, 6))
def test_example_attack_stays_in_its_ball_and_box(norm, eps, steps):
    from attackaudit.measure.distance import lp_norm

    spec = next(s for s in EXAMPLE_SPECS if s.norm == norm).with_params(steps=steps)
    subset, model = tiny_problem()
    radius = torch.tensor(eps)
    adv = spec.run(model, subset.inputs, subset.labels, eps=radius)
    assert adv.shape == subset.inputs.shape and adv.min() >= 0 and adv.max() <= 1
    assert (lp_norm(adv - subset.inputs, norm) <= radius * (1 + 1e-5) + 1e-6).all()


# -- the contract's gaps: class count, targeted-only specs, the plugin's own specs first -----------
CLASSES: list[int] = []


def _reads_classes(model, inputs, labels, *, targeted=False, targets=None):
    CLASSES.append(model.num_classes)
    return inputs.clone()


def test_the_class_count_reaches_the_attack_without_a_query():
    from attackaudit.run.job import attack_with_tracker

    subset, model = tiny_problem()
    spec = AttackSpec("probe", "classes", "deepfool", "l2", "minimal", {}, functools.partial(_reads_classes))
    CLASSES.clear()
    tracker, _, error = attack_with_tracker(spec, model, subset.inputs, subset.labels, budget=100)
    assert error == "" and CLASSES == [10]
    assert int(tracker.queries.sum()) == 0  # reading it costs the attack nothing


NEEDS_TARGETS = '''
def needs_targets(model, inputs, labels, *, targeted, targets):
    assert targeted and targets is not None
    return inputs.clone()
'''
TARGETED_ONLY = ('return [AttackSpec("mine", "fgm", "fgm", "linf", "fixed", {}, partial(fgm)), '
                 'AttackSpec("mine", "tgt", "fgm", "linf", "minimal", {}, partial(needs_targets), targeted_only=True)]')


def test_a_targeted_only_spec_loads_runs_only_targeted_and_says_so(tmp_path, capsys):
    from attackaudit.run.config import resolve
    from attackaudit.run.runner import plan

    path = write_plugin(tmp_path, TARGETED_ONLY, NEEDS_TARGETS)
    (entry,) = load_plugin_file(path)
    assert [s.targeted_only for s in entry.specs] == [False, True]
    # without the declaration, the untargeted call it cannot take is a load error
    undeclared = write_plugin(tmp_path, TARGETED_ONLY.replace(", targeted_only=True", ""), NEEDS_TARGETS, name="u.py")
    with pytest.raises(PluginError, match=r"mine/tgt/linf: run cannot be called as run\(model, inputs, labels\)"):
        load_plugin_file(undeclared)
    with pytest.raises(ValueError, match="would never run"):
        AttackSpec("mine", "x", "fgm", "linf", "minimal", {}, _reads_classes, targeted_only=True,
                   targeted_support=False)

    base = {"out": str(tmp_path / "r"), "libraries": ["mine"], "plugins": [str(path)], "samples": 2}
    untargeted = plan(resolve(None, base))
    assert {j.spec_key for j in untargeted.jobs} == {"mine/fgm/linf"}
    assert untargeted.skipped == [{"attack": "mine/tgt/linf", "reason": "targeted only: runs with --targeted"}]
    assert untargeted.notes == [f"--plugin {path.resolve()}: 1 attack skipped: targeted only (targeted_only=True), "
                                "run with --targeted: mine/tgt/linf"]
    targeted = plan(resolve(None, {**base, "targeted": True}))
    assert {j.spec_key for j in targeted.jobs} == {"mine/fgm/linf", "mine/tgt/linf"} and targeted.notes == []
    code, out, _ = attacks_cli(capsys, "--plugin", str(path))
    assert code == 0 and "targeted only" in next(line for line in out.splitlines() if line.startswith("mine/tgt"))


def test_attacks_lists_the_plugin_specs_first_or_alone(tmp_path, capsys):
    path = write_plugin(tmp_path, GOOD)
    code, out, _ = attacks_cli(capsys, "--plugin", str(path), libraries=("cleverhans",))
    assert code == 0 and out.startswith(f"plugin {path.resolve()}")
    assert out.index("mine/fgm/linf") < out.index("cleverhans/")
    code, out, _ = attacks_cli(capsys, "--plugin", str(path), "--plugin-only", libraries=())
    assert code == 0 and "mine/fgm/linf" in out and "cleverhans" not in out and "adv_lib" not in out
    code, out, _ = attacks_cli(capsys, "--plugin", str(path), "--plugin-only", "--format", "json", libraries=())
    assert [r["key"] for r in json.loads(out)] == ["mine/fgm/linf"]
    code, _, err = attacks_cli(capsys, "--plugin-only", libraries=())
    assert code == 2 and "--plugin-only needs --plugin" in err and len(err.strip().splitlines()) == 1


def _unclamped_step(model, inputs, labels, *, targeted=False, targets=None):
    """A sign-gradient step without the clamp (a few forwards and backwards per sample): its output
    leaves [0, 1] on the even digits; on the odd ones it gives the input back, unbroken."""
    x = inputs.clone().requires_grad_(True)
    for _ in range(3):
        (g,) = torch.autograd.grad(torch.nn.functional.cross_entropy(model(x), labels), x)
    step = inputs + 0.5 * g.sign()
    return torch.where((labels % 2 == 0).view(-1, 1, 1, 1), step, inputs).detach()


def test_an_attack_whose_outputs_leave_the_box_is_named_for_that_never_silent_failure():
    import pandas as pd

    from attackaudit import fidelity
    from attackaudit.sources.subset import load_subset
    from attackaudit.run.job import Job, job_rows

    subset, (_, model) = load_subset("digits", 12, 0), tiny_problem()
    sound = next(s for s in EXAMPLE_SPECS if s.norm == "l2").with_params(steps=5)
    boxless = AttackSpec("boxless", "step", "fgm", "l2", "minimal", {}, functools.partial(_unclamped_step))
    tables = []
    for spec in (sound, boxless):  # one sample per batch: each batch of boxless is ok or out of the box
        job = Job(run="t", twin=parse_model_name("digits-mlp-tiny"), spec_key=spec.key, samples=12, budget=400, batch_size=1)
        tables.append(job_rows(job, spec, "1", model, subset, None))
    table = pd.concat(tables, ignore_index=True)
    mine = table[table["library"] == "boxless"]
    odd_broken_by_others = tables[0][(tables[0]["label"] % 2 == 1) & tables[0]["best_distance"].between(0, 1e9,
                                                                                                        inclusive="neither")]
    assert set(mine["status"]) == {"ok", "invalid"} and len(odd_broken_by_others) >= 3  # the evidence is there
    found = fidelity.flags(table)
    names = set(found.loc[found["library"] == "boxless", "flag"])
    assert "out_of_box" in names and "silent_failure" not in names, found
