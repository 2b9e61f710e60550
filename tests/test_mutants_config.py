"""``attackaudit.run.config``: what mutation testing found the suite left unchecked (docs/testing.md).

The config is what a user's TOML file, preset and flags become; a wrong value must stop the run
with one line that names it (``ConfigError``), and every valid value must pass. Each test below
resolves real configs (no source is mocked), in well under a second.
"""
from __future__ import annotations

import os
import sys

import pytest
import torch

from attackaudit.run.config import PRESETS, ConfigError, RunConfig, load_toml, resolve


def config(**flags) -> RunConfig:
    return resolve(None, {"out": "runs/x", **flags})


def error(**flags) -> str:
    with pytest.raises(ConfigError) as caught:
        config(**flags)
    return str(caught.value)


# -- the TOML file ----------------------------------------------------------------------------------
def test_a_toml_file_with_or_without_a_run_table(tmp_path):
    flat = tmp_path / "flat.toml"
    flat.write_text('out = "runs/flat"\nsamples = 4\n')
    assert load_toml(flat) == {"out": "runs/flat", "samples": 4}
    table = tmp_path / "table.toml"
    table.write_text('[run]\nout = "runs/t"\nbudget = 50\n')
    assert load_toml(table) == {"out": "runs/t", "budget": 50}
    assert resolve(load_toml(flat), {}).samples == 4


def test_a_missing_or_broken_toml_file_is_named(tmp_path):
    with pytest.raises(ConfigError, match=r"^config file .*nope\.toml does not exist$"):
        load_toml(tmp_path / "nope.toml")
    broken = tmp_path / "broken.toml"
    broken.write_text("out = \n")
    with pytest.raises(ConfigError, match=r"^config file .*broken\.toml is not valid TOML: "):
        load_toml(broken)


# -- layers: presets and unknown keys ---------------------------------------------------------------
def test_an_unknown_preset_lists_the_presets():
    assert error(preset="huge") == f"unknown preset 'huge'; use one of {', '.join(PRESETS)}"
    assert error(preset="huge") == "unknown preset 'huge'; use one of quick, demo"


def test_an_unknown_key_is_named_with_the_known_ones():
    message = error(sampels=3, zz=1)
    known = ", ".join(sorted(f.name for f in __import__("dataclasses").fields(RunConfig)))
    assert message == f"unknown config key(s) sampels, zz; known keys: {known}"
    with pytest.raises(ConfigError, match=r"^unknown config key\(s\) colour; "):
        resolve({"out": "runs/x", "colour": "red"}, {})


def test_device_auto_takes_cuda_exactly_when_torch_sees_it(monkeypatch):
    assert config(device="auto").device == ("cuda" if torch.cuda.is_available() else "cpu")
    # the answer torch gives on a CUDA machine, on any machine: auto must then be "cuda"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert config(device="auto").device == "cuda"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert config(device="auto").device == "cpu"


# -- validate: each bad value is one line naming it; each good one passes ------------------------
def test_out_is_required():
    with pytest.raises(ConfigError) as caught:
        resolve(None, {})
    assert str(caught.value) == "--out DIR is required: the directory the run's results go to"


def test_models_twins_and_sources():
    twins = ["digits-mlp~shift", "digits-cnn~perm", "digits-mlp~seed", "digits-mlp~split", "digits-mlp~batch"]
    assert config(models=twins).models == twins
    assert error(models=["digits-rnn"]) == ("unknown model 'digits-rnn' (nearest: digits-cnn, digits-mlp, "
                                            "digits-cnn-at-l2); `attackaudit models` lists the zoo")
    assert error(models=["zoo:digits-rnn"]) == "unknown model 'zoo:digits-rnn'; `attackaudit models` lists the zoo"
    assert error(models=["zoo:digits-mlp:extra"]) == "model source 'zoo:digits-mlp:extra': expected zoo:NAME"
    assert config(models=["zoo:digits-mlp"]).models == ["zoo:digits-mlp"]


def test_dataset_and_threat_model_errors_are_config_errors():
    assert error(dataset="mnist").startswith("unknown dataset source 'mnist'; use digits, cifar10:DIR")
    message = error(threat_model="l3")
    assert message == "--threat-model: RobustBench threat model 'l3' is not one of Linf, L2, corruptions"
    assert config(threat_model="l2").threat_model == "L2"


def test_devices():
    assert config(device="cpu").device == "cpu"
    assert error(device="gpu") == "--device must be auto, cpu, cuda or cuda:N, got 'gpu'"
    assert error(device="CUDA:0") == "--device must be auto, cpu, cuda or cuda:N, got 'CUDA:0'"
    if not torch.cuda.is_available():  # a well-formed CUDA device on a machine without one
        for device in ("cuda", "cuda:0", "cuda:1"):
            assert error(device=device) == (f"--device {device} but torch sees no CUDA device; "
                                            "use --device cpu or auto")
    else:
        assert config(device="cuda:0").device == "cuda:0"


def test_norms():
    assert config(norms=["l0", "l1", "l2", "linf"]).norms == ["l0", "l1", "l2", "linf"]
    assert error(norms=["l2", "l3"]) == "--norms must be l0, l1, l2 or linf (any case), got 'l3'"
    assert error(norms=["L2", "l5"]) == "--norms must be l0, l1, l2 or linf (any case), got 'l5'"  # L2 is l2
    assert config(norms=["L2", "Linf"]).norms == ["l2", "linf"]


@pytest.mark.parametrize("name, bad, message", [
    # one form (harness/results/parameters.py): the flag (a TOML key without one), what it must be, the value
    ("samples", 0, "--samples must be an integer ≥ 1, got 0"),
    ("samples", -1, "--samples must be an integer ≥ 1, got -1"),
    ("samples", "4", "--samples must be an integer ≥ 1, got '4'"),  # a TOML string: named, not a crash
    ("split_samples", -1, "split_samples must be an integer ≥ 0 (0: all samples), got -1"),
    ("budget", 0, "--budget must be an integer ≥ 1, got 0"),
    ("seed", -1, "--seed must be an integer ≥ 0, got -1"),
    ("batch_size", -1, "--batch-size must be an integer ≥ 0, got -1"),
    ("executor", "ray", "--executor must be local or dask, got 'ray'"),
    ("workers", 0, "--workers must be an integer ≥ 1, got 0"),
    ("repeat", 3, "--repeat must be 1 or 2 (a second seeded run to compare with), got 3"),
    ("retry", "all", "--retry must be crashed, got 'all'"),
    ("steps_scale", 0.0, "--steps-scale must be a positive number, got 0.0"),
    ("timeout_s", 0, "--timeout must be a positive number, got 0"),
    ("targeted", "yes", "targeted must be True or False, got 'yes'"),
])
def test_a_bad_scalar_is_one_line_naming_it(name, bad, message):
    assert error(**{name: bad}) == message
    with pytest.raises(ConfigError) as caught:
        config(**{name: bad})
    assert caught.value.parameter == name


@pytest.mark.parametrize("name, smallest", [("samples", 1), ("budget", 1), ("workers", 1), ("split_samples", 0),
                                            ("steps_scale", 0.01), ("repeat", 2), ("executor", "dask"),
                                            ("retry", "crashed"), ("seed", 0), ("batch_size", 0),
                                            ("timeout_s", 0.01)])
def test_the_smallest_good_value_passes(name, smallest):
    assert getattr(config(**{name: smallest}), name) == smallest


def test_plugins_must_exist(tmp_path):
    missing = tmp_path / "mine.py"
    assert error(plugins=[str(missing)]) == f"--plugin {missing} does not exist; pass a .py file defining specs()"
    missing.write_text("def specs():\n    return []\n")
    assert config(plugins=[str(missing)]).plugins == [str(missing)]


def test_python_must_be_an_executable_file(tmp_path):
    assert config(python=sys.executable).python == sys.executable
    script = tmp_path / "python"
    script.write_text("#!/bin/sh\n")
    os.chmod(script, 0o644)  # a file, not executable
    assert error(python=str(script)) == f"python {script} is not an executable interpreter"
    assert error(python=str(tmp_path)) == f"python {tmp_path} is not an executable interpreter"  # a directory
