"""Every argument of ``attackaudit.compare`` and every flag of ``attackaudit run`` and ``attackaudit
audit`` reaches what it is for: changing it alone changes the run's config, its plan (the jobs,
the attacked subset, the models) or how the jobs are executed, as a user would see in the rows.

Nothing is attacked: ``compare`` is stopped where it hands its flags to the runner
(``api._run_grid``, which resolves them and runs the plan), the command line where it calls
``sequential.run_grid`` (``runner.run``, or the looks of ``--until-decided``) or ``audit``; the
config is then planned as the runner would plan it. Each table
must name every argument or flag there is, so a new one cannot go untested.
"""
from __future__ import annotations

import argparse
import types
from dataclasses import asdict
from pathlib import Path

import pytest
import torch

import attackaudit.api as api
import attackaudit.audit.command as audit_command
import attackaudit.run.sequential as sequential
from attackaudit.api import compare
from attackaudit.cli import build_parser, main
from attackaudit.run.config import ConfigError, RunConfig, resolve
from attackaudit.run.runner import plan
from attackaudit.sources.subset import load_subset
from attackaudit.sources.zoo import load_model

PLUGINS = Path(__file__).parent / "plugins"
PROBE, DEFECTIVE = str(PLUGINS / "probe.py"), str(PLUGINS / "defective.py")
#: a grid that plans in a second: the probe plugin's attacks only (no library is imported)
BASE = {"libraries": ["probe"], "plugins": [PROBE]}
CUDA = torch.cuda.is_available()


@pytest.fixture(scope="module")
def digits():
    sub = load_subset("digits", 12, 0)
    return load_model("digits-mlp"), sub.inputs, sub.labels


class Seen(types.SimpleNamespace):
    """What one ``compare`` call hands to the runner: the resolved config, its plan, the handoff."""

    def jobs(self) -> set[tuple]:
        # a job's fields hold values (its twin, its attack's identity): compared by their repr
        return {tuple(sorted((k, repr(v)) for k, v in asdict(j).items())) for j in self.plan.jobs}


def call_compare(monkeypatch, out: Path, model, inputs, labels, **kwargs) -> Seen:
    seen = {}

    def hand_to_runner(model, handoff, flags, run_dir, notes):  # api._run_grid, stopped before run()
        seen.update(handoff=handoff, flags=flags)

    monkeypatch.setattr(api, "_run_grid", hand_to_runner)
    compare(model, inputs, labels, **{"out": out, **BASE, **kwargs})
    config = resolve(None, seen["flags"])  # as _run_grid resolves them
    return Seen(config=config, plan=plan(config), **seen)


def changed_inputs(x):
    x = x.clone()
    x[0, 0, 0, 0] = 1 - x[0, 0, 0, 0]
    return x


def changed_labels(y):
    y = y.clone()
    y[0] = (y[0] + 1) % 10
    return y


def differs(base: Seen, seen: Seen, *names: str) -> None:
    """The config fields ``names`` differ, and no other result field does unexpectedly."""
    for name in names:
        assert getattr(seen.config, name) != getattr(base.config, name), name


#: compare() argument → (value(model, x, y), what must change)
COMPARE = {
    "model": (lambda m, x, y: load_model("digits-cnn"), "models"),
    "inputs": (lambda m, x, y: changed_inputs(x), "subset"),
    "labels": (lambda m, x, y: changed_labels(y), "subset"),
    "families": (lambda m, x, y: "invalid", "jobs"),
    "norms": (lambda m, x, y: "linf", "jobs"),
    "libraries": (lambda m, x, y: ["probe", "adv_lib"], "jobs"),
    "attacks": (lambda m, x, y: "probe/descent/l2", "jobs"),
    "plugins": (lambda m, x, y: [PROBE, DEFECTIVE], "jobs"),
    "budget": (lambda m, x, y: 100, "jobs"),
    "samples": (lambda m, x, y: 4, "subset"),
    "seed": (lambda m, x, y: 1, "jobs"),
    "targeted": (lambda m, x, y: True, "jobs"),
    "metamorphic": (lambda m, x, y: True, "models"),
    "steps_scale": (lambda m, x, y: 0.5, "jobs"),
    "batch_size": (lambda m, x, y: 4, "jobs"),
    "device": (lambda m, x, y: "cpu" if CUDA else "cuda", "device"),
    "workers": (lambda m, x, y: 0, "in-process"),
    "timeout_s": (lambda m, x, y: 10.0, "config"),
    "out": (lambda m, x, y: "other", "config"),
    "progress": (lambda m, x, y: False, "config"),
    "retry": (lambda m, x, y: "crashed", "config"),
    "name": (lambda m, x, y: "mynet", "config"),
    "until_decided": (lambda m, x, y: 24, "config"),
}
#: the config field each config-level argument sets
CONFIG_FIELD = {"timeout_s": "timeout_s", "out": "out", "progress": "quiet", "retry": "retry", "name": "model_names",
                "until_decided": "until_decided"}


def test_the_table_names_every_argument_of_compare():
    import inspect

    assert set(COMPARE) == set(inspect.signature(compare).parameters)


@pytest.mark.parametrize("name", sorted(COMPARE))
def test_each_argument_of_compare_changes_the_run(name, digits, monkeypatch, tmp_path):
    make, effect = COMPARE[name]
    model, x, y = digits
    args = {"model": model, "inputs": x, "labels": y}
    value = make(model, x, y)
    if name == "out":
        value = tmp_path / value
    out = tmp_path / "run"
    baseline = call_compare(monkeypatch, out, model, x, y)
    kwargs = {} if name in args or name == "out" else {name: value}
    if name in args:
        args[name] = value
    if name == "out":
        out = value
    if effect == "device" and not CUDA:  # the argument reaches the config: it asks for what is not there
        with pytest.raises(ValueError, match="cuda"):
            call_compare(monkeypatch, out, args["model"], args["inputs"], args["labels"], **kwargs)
        return
    seen = call_compare(monkeypatch, out, args["model"], args["inputs"], args["labels"], **kwargs)
    if effect == "models":
        assert {j.model for j in seen.plan.jobs} != {j.model for j in baseline.plan.jobs}
    elif effect == "subset":
        assert seen.plan.subset_hash != baseline.plan.subset_hash
    elif effect == "jobs":
        assert seen.jobs() != baseline.jobs()
    elif effect == "device":
        assert {j.device for j in seen.plan.jobs} != {j.device for j in baseline.plan.jobs}
    elif effect == "in-process":
        assert baseline.handoff.isolated and not seen.handoff.isolated
    else:
        differs(baseline, seen, CONFIG_FIELD[name])
    if effect != "config":  # the same change seen in the config the rows are written from
        assert seen.config.result_config() != baseline.config.result_config() or effect == "in-process"


# ------------------------------------------------------------------------- run and audit flags
def option_strings(command: str) -> set[str]:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    parser = sub.choices[command]
    return {a.option_strings[0] if a.option_strings else a.dest for a in parser._actions if a.dest != "help"}


#: `run` flag → (its arguments, the RunConfig fields it changes)
RUN_FLAGS = {
    "config": (["{toml}"], {"samples"}),
    "--out": (["{other}"], {"out"}),
    "--preset": (["quick"], {"preset", "samples", "norms", "steps_scale", "workers"}),
    "--models": (["digits-mlp"], {"models"}),
    "--families": (["apgd"], {"families"}),
    "--norms": (["l2"], {"norms"}),
    "--attacks": (["adv_lib/fmn"], {"attacks"}),
    "--samples": (["8"], {"samples"}),
    "--budget": (["100"], {"budget"}),
    "--seed": (["1"], {"seed"}),
    "--steps-scale": (["0.5"], {"steps_scale"}),
    "--targeted": ([], {"targeted"}),
    "--device": (["cpu" if CUDA else "cuda"], {"device"}),
    "--workers": (["3"], {"workers"}),
    "--timeout": (["10"], {"timeout_s"}),
    "--quiet": ([], {"quiet"}),
    "--libraries": (["adv_lib"], {"libraries"}),
    "--metamorphic": ([], {"metamorphic"}),
    "--repeat": (["2"], {"repeat"}),
    "--executor": (["dask"], {"executor"}),
    "--scheduler": (["tcp://127.0.0.1:1"], {"scheduler"}),
    "--batch-size": (["4"], {"batch_size"}),
    "--dataset": (["tensors:{other}/x.pt"], {"dataset"}),
    "--model-dir": (["{other}"], {"model_dir"}),
    "--threat-model": (["L2"], {"threat_model"}),
    "--allow-download": ([], {"allow_download"}),
    "--trust-checkpoint": ([], {"trust_checkpoint"}),
    "--memory-limit-mb": (["100"], {"memory_limit_mb"}),
    "--plugin": ([PROBE], {"plugins"}),
    "--force": ([], {"force"}),
    "--retry": (["crashed"], {"retry"}),
    "--strict": ([], {"strict"}),
    "--until-decided": (["64"], {"until_decided"}),
    "--no-exact": ([], {"exact"}),
}


def run_config(monkeypatch, argv: list[str]) -> tuple[RunConfig | None, int]:
    """The RunConfig ``attackaudit run ARGV`` would run (None: refused), and the exit code."""
    seen = {}

    def fake_run(config, executor=None, say=None):
        seen["config"] = config
        return types.SimpleNamespace(line=lambda: "1 job", run_dir=Path(config.out), counts={"crash": 1})

    monkeypatch.setattr(sequential, "run_grid", fake_run)
    code = main(["run", *argv])
    return seen.get("config"), code


def test_the_table_names_every_flag_of_run():
    assert set(RUN_FLAGS) == option_strings("run")


@pytest.mark.parametrize("flag", sorted(RUN_FLAGS))
def test_each_flag_of_run_changes_the_config(flag, monkeypatch, tmp_path, capsys):
    args, fields_changed = RUN_FLAGS[flag]
    toml = tmp_path / "run.toml"
    toml.write_text("[run]\nsamples = 5\n")
    args = [a.format(toml=toml, other=tmp_path / "other") for a in args]
    base, base_code = run_config(monkeypatch, ["--out", str(tmp_path / "out")])
    argv = ["--out", str(tmp_path / "out")] + (args if flag == "config" else [flag, *args])
    config, code = run_config(monkeypatch, argv)
    if flag == "--device" and not CUDA:
        assert config is None and code == 2 and "--device cuda" in capsys.readouterr().err
        return
    changed = {k for k, v in asdict(config).items() if asdict(base)[k] != v}
    assert changed == fields_changed
    if flag == "--strict":  # and it is what the exit code reads: a crashed job fails a strict run
        assert (base_code, code) == (0, 1)


#: `audit` flag → its arguments; the grid flags are checked through the config they resolve to
AUDIT_ONLY = {
    "releases": ["adv-lib==0.2.7", "adv-lib==0.2.8"],
    "--out": ["{other}"],
    "--alpha": ["0.01"],
    "--min-delta": ["0.1"],
    "--eps": ["linf=0.03"],
    "--strict": [],
    "--bisect": [],
}


def audit_call(monkeypatch, argv: list[str]) -> tuple[dict, int]:
    """What ``attackaudit audit ARGV`` passes to ``audit`` (releases, out, flags, options), and its
    exit code when the audit found one regression."""
    seen = {}

    def fake_audit(releases, out, flags, **options):
        seen.update(releases=releases, out=out, flags=flags, **options)
        return {"counts": {"regressed": 1}}

    monkeypatch.setattr(audit_command, "audit", fake_audit)
    code = main(["audit", *argv])
    assert code in (0, 1), code
    return seen, code


def test_each_flag_of_audit_changes_the_audit(monkeypatch, tmp_path):
    grid = {k: v for k, v in RUN_FLAGS.items() if k in option_strings("audit") and k not in AUDIT_ONLY}
    assert set(grid) | set(AUDIT_ONLY) == option_strings("audit")
    releases = ["adv-lib==0.2.6", "adv-lib==0.2.8"]
    out = str(tmp_path / "audit")
    base, base_code = audit_call(monkeypatch, [*releases, "--out", out])
    base_config = resolve(None, {**base["flags"], "out": out})
    for flag, (args, fields_changed) in grid.items():
        seen, _ = audit_call(monkeypatch, [*releases, "--out", out, flag, *args])
        if flag == "--device" and not CUDA:  # refused when the config resolves, as `run` refuses it
            with pytest.raises(ConfigError, match="--device cuda"):
                resolve(None, {**seen["flags"], "out": out})
            continue
        config = resolve(None, {**seen["flags"], "out": out})
        changed = {k for k, v in asdict(config).items() if asdict(base_config)[k] != v}
        assert changed == fields_changed, flag
    for flag, args in AUDIT_ONLY.items():
        args = [a.format(other=tmp_path / "other") for a in args]
        argv = [*args, "--out", out] if flag == "releases" else [*releases, "--out", out, flag, *args]
        if flag == "--out":
            argv = [*releases, *[flag, *args]]
        seen, code = audit_call(monkeypatch, argv)
        assert seen != base or code != base_code, flag
