"""The defaults that `--help`, the README and docs/ state are the ones the code uses.

One place holds each default: ``RunConfig``'s field defaults (harness/run/config.py) for a run, which
the ``--budget`` help text reads and ``attackaudit.compare``'s signature repeats as values (the API
reference is read from the source: a name there would show as a name); the fidelity constants
(``ALPHA``, ``equivalence.DELTA``) for the statistics. A flag of ``run`` or ``audit`` that feeds the
config has no default of its own (argparse's is None, so the config's stands). These tests read
the help text and the documentation as a user does and check each stated default against that
one place.
"""
from __future__ import annotations

import argparse
import ast
import inspect
import math
import re
from dataclasses import fields
from pathlib import Path

import pytest

from attackaudit.api import compare
from attackaudit.cli import build_parser
from attackaudit.fidelity.equivalence import DELTA
from attackaudit.fidelity.stats import ALPHA
from attackaudit.run.config import PRESETS, RunConfig
from attackaudit.run.job import Job

ROOT = Path(__file__).resolve().parents[1]
DEFAULTS = {f.name: getattr(RunConfig, f.name) for f in fields(RunConfig) if hasattr(RunConfig, f.name)}
#: compare()'s arguments whose default is the run's (the others: None means "all" or "up to 2", and
#: device "auto" picks CUDA when there is one, where a run from the command line stays on the CPU)
SHARED_WITH_RUN = ["budget", "seed", "targeted", "metamorphic", "steps_scale", "batch_size", "timeout_s"]


def documents() -> dict[str, str]:
    """README.md and docs/*.md by name, each with its lines joined (a statement may wrap)."""
    paths = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    return {p.relative_to(ROOT).as_posix(): " ".join(p.read_text().split()) for p in paths}


def stated(pattern: str) -> list[tuple[str, str]]:
    """Every (document, captured value) where the docs match ``pattern``; at least one."""
    found = [(name, m.group(1)) for name, text in documents().items() for m in re.finditer(pattern, text)]
    assert found, f"no document states {pattern!r}"
    return found


def subcommand(name: str) -> argparse.ArgumentParser:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[name]


def help_defaults(name: str) -> dict[str, str]:
    """``--help`` of a subcommand: dest → the value its help says is the default ("(default X)")."""
    parser = subcommand(name)
    shown = " ".join(parser.format_help().split())
    out = {}
    for action in parser._actions:
        m = re.search(r"\(default:? ([^)]+)\)", action.help or "")
        if m:
            text = " ".join(action.help.split())
            assert text in shown, f"{name} --help does not show {text!r}"
            out[action.dest] = m.group(1).strip()
    return out


def test_run_help_states_the_budget_of_run_config():
    stated_defaults = help_defaults("run")
    assert ast.literal_eval(stated_defaults.pop("budget")) == RunConfig.budget
    for dest, value in stated_defaults.items():  # any further "(default X)" must be the config's
        assert dest in DEFAULTS, f"run --{dest} states a default that RunConfig does not hold"
        assert ast.literal_eval(value) == DEFAULTS[dest], f"run --{dest}: help says {value}"


def test_audit_help_states_the_budget_and_the_fidelity_margins():
    stated_defaults = help_defaults("audit")
    assert ast.literal_eval(stated_defaults["budget"]) == RunConfig.budget
    # --min-delta: a relative change in distance; the equivalence margin DELTA is its log
    assert math.isclose(ast.literal_eval(stated_defaults["min_delta"]), math.expm1(DELTA))
    assert subcommand("audit").get_default("alpha") == ALPHA


@pytest.mark.parametrize("command", ["run", "audit"])
def test_flags_that_feed_the_config_have_no_default_of_their_own(command):
    """An absent flag must leave the TOML's, the preset's or RunConfig's value standing."""
    own = {a.dest: a.default for a in subcommand(command)._actions
           if a.dest in DEFAULTS and a.dest != "out" and a.default not in (None, False)}
    assert own == {}, f"{command}: these flags carry a default besides RunConfig's: {own}"


def test_compare_defaults_are_the_run_defaults():
    params = inspect.signature(compare).parameters
    for name in SHARED_WITH_RUN:
        assert params[name].default == DEFAULTS[name], name
    assert params["device"].default == "auto" and DEFAULTS["device"] == "cpu"


def test_a_job_defaults_to_what_a_run_config_defaults_to():
    for f in fields(Job):
        if f.name in DEFAULTS and f.name not in ("model_dir", "threat_model") and hasattr(Job, f.name):
            assert getattr(Job, f.name) == DEFAULTS[f.name], f.name


def test_the_documented_compare_signature_is_compare_s():
    params = inspect.signature(compare).parameters
    for doc, signature in stated(r"`attackaudit\.compare\((model, inputs, labels, \*,[^`]*)\)`"):
        documented = dict(re.findall(r"(\w+)=([^,]+)", signature))
        assert documented, f"{doc}: no defaults in {signature!r}"
        for name, value in documented.items():
            assert name in params, f"{doc} documents compare({name}=...), which compare does not take"
            assert ast.literal_eval(value) == params[name].default, f"{doc}: {name}={value}"
        # and every argument compare takes is there (progress and retry were not: issue 51, item 11)
        named = set(re.findall(r"(\w+)(?=[,=]|$)", signature))
        assert set(params) <= named, f"{doc} omits {sorted(set(params) - named)}"


def test_the_documented_budget_is_run_config_s():
    for doc, value in stated(r"backwards per sample \(default (\d+)"):
        assert int(value) == RunConfig.budget, doc
    for doc, value in stated(r"`RunConfig\.budget`, (\d+)"):
        assert int(value) == RunConfig.budget, doc


def test_the_documented_demo_is_the_demo_preset():
    demo = {**DEFAULTS, **PRESETS["demo"]}
    for doc, value in stated(r"on \**(\d+) test digits\**"):
        assert int(value) == demo["samples"], doc
    for doc, value in stated(r"test digits\**,? \(seed (\d+)\)"):
        assert int(value) == demo["seed"], doc
    for doc, value in stated(r"budget of (\d+) forwards \+ backwards per sample"):
        assert int(value) == demo["budget"], doc
    for doc, value in stated(r"`steps_scale = ([\d.]+)`"):
        assert float(value) == demo["steps_scale"], doc
    for doc, value in stated(r"`split_samples = (\d+)`"):
        assert int(value) == demo["split_samples"], doc
    words = {"one": 1, "two": 2, "three": 3, "four": 4}
    for doc, value in stated(r"jobs? on (\w+) worker processes"):
        assert words.get(value, value) == demo["workers"], doc


def test_the_documented_executor_and_dataset_are_run_config_s():
    for doc, value in stated(r"`--executor (\w+) --workers K` \(default\)"):
        assert value == RunConfig.executor, doc
    for doc, value in stated(r"\| `(\w+)` \| [^|]*\(default\) \|"):
        assert value == RunConfig.dataset, doc


def test_the_documented_model_dir_and_threat_model_are_where_a_default_run_looks(tmp_path):
    from attackaudit.sources.model_loader import ModelSourceError, load_model_source

    threat = {value for _, value in stated(r"`--threat-model` \(default `(\w+)`\)")}
    model_dir = {value for _, value in stated(r"`--model-dir` \(default `([^`]+)`\)")}
    assert len(threat) == len(model_dir) == 1
    with pytest.raises(ModelSourceError) as exc:  # a default run: no --model-dir, no --threat-model
        load_model_source("robustbench:Standard", model_dir=RunConfig.model_dir, dataset=f"cifar10:{tmp_path}",
                          threat_model=RunConfig.threat_model)
    where = f"{Path(model_dir.pop()).as_posix().removeprefix('./')}/cifar10/{threat.pop()}/Standard.pt"
    assert f" {where} not found" in str(exc.value)


def test_the_api_reference_shows_compare_s_defaults_as_values_and_each_argument_its_own_text():
    """The API reference is griffe's reading of harness/api.py's source (mkdocstrings imports
    nothing): a default written ``RunConfig.budget`` showed as ``budget``, and a numpy docstring
    entry ``targeted, metamorphic : bool`` gave metamorphic targeted's text (issue 51, item 4)."""
    griffe = pytest.importorskip("griffe", reason="the docs tools are not installed")
    module = griffe.visit("api", filepath=ROOT / "harness" / "api.py", code=(ROOT / "harness" / "api.py").read_text())
    function = module["compare"]
    for p in function.parameters:
        if p.default is not None:
            assert ast.literal_eval(str(p.default)) == inspect.signature(compare).parameters[p.name].default, p.name
    sections = function.docstring.parse("numpy")
    described = {item.name: item.description for s in sections if s.kind.value == "parameters" for item in s.value}
    assert set(described) == {p.name for p in function.parameters}
    texts = list(described.values())
    assert len(set(texts)) == len(texts), "two arguments share one description"
