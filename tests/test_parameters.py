"""The parameter table (harness/results/parameters.py, issue 52 item 4): one row per parameter of a
run, from which RunConfig, the flags of ``run`` and ``audit``, ``compare()``'s checks, the ``Job``
fields copied from a config and the flag → keyword wording are made. Each test reads one of those
surfaces as it is and checks it against the table, so a parameter added, renamed or re-bounded in
one place only fails here."""
from __future__ import annotations

import argparse
import inspect
import re
from dataclasses import fields
from pathlib import Path

import pytest
from hypothesis import given, strategies as st

from attackaudit.api import compare
from attackaudit.cli import build_parser
from attackaudit.errors import InputError
from attackaudit.results.parameters import API_SWITCHES, BY_API, BY_NAME, CLI_TO_API, NON_RESULT_FIELDS, PARAMETERS
from attackaudit.run.config import PRESETS, ConfigError, RunConfig, resolve
from attackaudit.run.grid_args import GRID
from attackaudit.run.job import Job
from attackaudit.sources.user_args import check

PLUGINS = Path(__file__).parent / "plugins"
#: compare()'s arguments that are no run parameter: the model and its data, the progress bar (the
#: config's quiet, the other way round) and the model's name (the config's model_names)
COMPARE_ONLY = {"model", "inputs", "labels", "progress", "name"}
#: compare()'s defaults that are not the run's: None is "all N" / "up to 2 workers" / "a new
#: temporary directory" / "no retry" / "one look"; "auto" picks CUDA where there is one
COMPARE_OWN_DEFAULTS = {"samples": None, "workers": None, "out": None, "retry": None, "until_decided": None,
                        "device": "auto"}
#: one message form: the culprit, what it must be, the value given
FORM = re.compile(r"^(--[a-z][a-z-]*|[a-z_]+) must be [^\n]+, got [^\n]+$")


def subcommand(name: str) -> argparse.ArgumentParser:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[name]


def test_run_config_is_the_table():
    assert [f.name for f in fields(RunConfig)] == [p.name for p in PARAMETERS]
    config = RunConfig()
    for p in PARAMETERS:
        assert getattr(config, p.name) == p.default, p.name
    assert RunConfig().models is not RunConfig().models  # a list default is each config's own
    assert NON_RESULT_FIELDS.isdisjoint(RunConfig(out="r").result_config())
    assert "budget" in RunConfig(out="r").result_config()


def test_compare_s_signature_agrees_with_the_table():
    """compare() keeps its written signature (for users, IDEs and the API reference): each of its
    keywords is a row's ``api`` name with the row's default, or one of its own."""
    params = inspect.signature(compare).parameters
    keywords = {name for name, p in params.items() if p.kind is inspect.Parameter.KEYWORD_ONLY}
    assert keywords - COMPARE_ONLY == set(BY_API)
    for name, row in BY_API.items():
        default = params[name].default
        expected = COMPARE_OWN_DEFAULTS.get(name, row.default)
        assert (list(default) if isinstance(default, tuple) else default) == expected, name
        if row.type in (int, float, bool):
            assert row.type.__name__ in str(params[name].annotation), name


@pytest.mark.parametrize("command, rows", [("run", [p for p in PARAMETERS if p.flag]), ("audit", list(GRID))])
def test_the_flags_are_the_table_s(command, rows):
    actions = {a.dest: a for a in subcommand(command)._actions if a.option_strings}
    for p in rows:
        action = actions[p.name]
        assert action.option_strings == [p.flag] and action.help == p.help, p.name
        assert action.default in (None, False), p.name  # an absent flag leaves the config's value
    table = {p.name for p in PARAMETERS}
    made = {dest for dest in actions if dest in table} - {"out", "strict"}  # audit's own --out, --strict
    assert made == {p.name for p in rows} - {"out", "strict"}


def test_the_preset_flag_offers_the_presets():
    assert tuple(PRESETS) == BY_NAME["preset"].choices


def test_the_wording_maps_every_flag_to_its_keyword():
    from attackaudit.reports.wording import CLI_TO_API as WORDING, SWITCHES, speak

    assert WORDING is CLI_TO_API and SWITCHES == API_SWITCHES
    assert set(CLI_TO_API.values()) | {s.split("=")[0] for s in API_SWITCHES.values()} == set(BY_API)
    assert speak("rerun with --samples 12 or --until-decided 64 --targeted", "api") == (
        "rerun with samples=12 or until_decided=64 targeted=True")


def test_a_job_holds_the_config_s_values_of_the_job_rows(tmp_path):
    from attackaudit.run.runner import plan

    job_fields = {f.name: f for f in fields(Job)}
    # a Job holds model_dir resolved and its plugin's pinned reference: the rest it copies as they are
    copied = set(job_fields) & set(BY_NAME) - {"model_dir", "plugins"}
    assert copied == {p.name for p in PARAMETERS if p.job}
    for name in copied:
        assert job_fields[name].default == BY_NAME[name].default, name
    config = resolve(None, {"out": str(tmp_path / "r"), "libraries": ["probe"], "plugins": [str(PLUGINS / "probe.py")],
                            "seed": 3, "budget": 77, "steps_scale": 0.5, "batch_size": 2, "samples": 5,
                            "allow_download": True, "trust_checkpoint": True})
    jobs = plan(config).jobs
    assert jobs
    for job in jobs:
        for name in copied:
            assert getattr(job, name) == getattr(config, name), name


def _bad_config(name: str, value: object) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        resolve(None, {"out": "runs/x", name: value})
    return caught.value


BOUNDED = [p for p in PARAMETERS if p.type in (int, float) and p.low is not None]


@pytest.mark.parametrize("row", BOUNDED, ids=lambda p: p.name)
def test_each_bound_holds_on_both_surfaces(row):
    """The lowest good value passes and the one below it is one line naming the flag (the config)
    or the keyword (compare()), with what it must be."""
    step = 1 if row.type is int else 0
    for style in ("cli", "api"):
        low = row.lowest(style)
        assert row.problem(row.type(low + (0 if row.type is int else 0.5)), style) is None
        message = row.problem(row.type(low - step), style)
        assert message and FORM.match(message) and message.startswith(row.culprit(style) + " must be "), message
    if row.name != "until_decided":  # 0 is a good cap (one look); the rest stop the config
        error = _bad_config(row.name, row.type(row.low - step))
        assert error.parameter == row.name and str(error) == row.problem(row.type(row.low - step))


@given(value=st.one_of(st.integers(-3, 3), st.floats(-2, 2, allow_nan=False), st.booleans(), st.text(max_size=2),
                       st.none()))
def test_the_config_and_compare_judge_a_value_alike(value):
    """Where the two bounds are the same, a value is good for the config exactly when it is good
    for compare(); a bad one is one line of the one form on both, naming its own surface's word."""
    for row in BY_API.values():
        if row.api_low is not None or row.type is list or row.optional:
            continue
        if value is None and row.type is not bool:
            continue  # compare() fills its own None in before checking
        cli, api = row.problem(value, "cli"), row.problem(value, "api")
        assert (cli is None) == (api is None), (row.name, value)
        if api is not None:
            assert FORM.match(cli) and FORM.match(api), (cli, api)
            with pytest.raises(InputError) as caught:
                check(row.api, value)
            assert str(caught.value) == api and caught.value.parameter == row.api


def test_compare_s_own_defaults_are_good_values_of_the_table():
    for name, row in BY_API.items():
        default = inspect.signature(compare).parameters[name].default
        if default is not None and default != () and row.type is not list:
            assert row.problem(default, "api") is None, name
    assert [p.name for p in PARAMETERS if p.problem(p.fresh_default())] == []  # the run's defaults too
