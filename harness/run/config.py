"""One resolved RunConfig from a TOML file, a preset and command-line flags (flags win)."""
from __future__ import annotations

import difflib
import os
import tomllib
from dataclasses import asdict, field, fields, make_dataclass
from pathlib import Path
from typing import Any

from attackaudit.errors import InputError
from attackaudit.results.parameters import NON_RESULT_FIELDS, PARAMETERS

PRESETS: dict[str, dict[str, Any]] = {
    # a smoke run: one model, two norms, few samples, a fifth of every attack's steps
    "quick": {"models": ["digits-cnn"], "norms": ["l2", "linf"], "samples": 8, "steps_scale": 0.1, "workers": 2},
    # what `make demo` runs: every library's every spec on the tiny MLP, whose exact minima in all
    # four norms ship for seed 0's first 128 digits (the absolute yardstick of every verdict), with
    # all five twins (logits shifted; classes permuted; randomised attacks with another seed; every
    # attack one image per call, on the first 4 images only: one image per call costs ~6x the
    # batched job's CPU per image; the batch in another arrangement), on 16 digits first and then,
    # for the family x norm rows still undecided, on 32, 64 and 128 (run/sequential.py: later looks
    # run the base model only, the twins' findings carried). The CNNs and digits-mlp are opt-in
    # with --models
    "demo": {"models": ["digits-mlp-tiny", "digits-mlp-tiny~shift", "digits-mlp-tiny~perm", "digits-mlp-tiny~seed",
                        "digits-mlp-tiny~split", "digits-mlp-tiny~batch"],
             "samples": 16, "split_samples": 4, "steps_scale": 0.5, "workers": 2, "until_decided": 128},
}


class ConfigError(InputError):
    """A config value is wrong; the message is one line naming the culprit and the fix."""


class _RunConfigMethods:
    """What a RunConfig does besides holding its fields (harness/results/parameters.py's table)."""

    @property
    def name(self) -> str:
        return Path(self.out).name  # type: ignore[attr-defined]

    @property
    def twins(self) -> tuple:
        """``models`` read, each a ``Twin`` (its base model and twin kind): the one place a model
        name's ``~KIND`` is read, for the command line, a TOML file and ``attackaudit.compare``
        alike; every later layer (the plan, jobs, workers, model sources, exact minima) takes these."""
        from attackaudit.results.schema import parse_model_name

        return tuple(parse_model_name(m) for m in self.models)  # type: ignore[attr-defined]

    def result_config(self) -> dict:
        """The part of the config that determines results (compared on resume)."""
        return {k: v for k, v in asdict(self).items() if k not in NON_RESULT_FIELDS}  # type: ignore[call-overload]


#: one run's parameters: a field per row of ``PARAMETERS``, its default the row's (what each
#: means: the table's comments and help texts)
RunConfig = make_dataclass("RunConfig", [(p.name, p.annotation, field(default_factory=p.fresh_default)
                                          if isinstance(p.default, (list, dict)) else field(default=p.default))
                                         for p in PARAMETERS], bases=(_RunConfigMethods,))
RunConfig.__module__ = __name__  # make_dataclass's class is pickled (to the workers) by this name
RunConfig.__doc__ = "One run's parameters (harness/results/parameters.py): defaults < preset < TOML < flags."


def load_toml(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file {path} does not exist")
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None
    return data.get("run", data)


def resolve(toml: dict[str, Any] | None = None, flags: dict[str, Any] | None = None) -> RunConfig:
    """Defaults < preset < TOML < flags; then validate. ``None`` flags mean "not given"."""
    known = {f.name for f in fields(RunConfig)}
    merged: dict[str, Any] = {}
    layers = [toml or {}, {k: v for k, v in (flags or {}).items() if v is not None}]
    preset = next((layer["preset"] for layer in reversed(layers) if layer.get("preset")), "")
    if preset:
        if preset not in PRESETS:
            raise ConfigError(f"unknown preset {preset!r}; use one of {', '.join(PRESETS)}")
        merged.update(PRESETS[preset])
    for layer in layers:
        unknown = set(layer) - known
        if unknown:
            raise ConfigError(f"unknown config key(s) {', '.join(sorted(unknown))}; known keys: {', '.join(sorted(known))}")
        merged.update(layer)
    config = RunConfig(**merged)
    if config.norms:  # norm names in any case: Linf is linf
        config.norms = [n.lower() if isinstance(n, str) else n for n in config.norms]
    if config.device == "auto":
        import torch

        config.device = "cuda" if torch.cuda.is_available() else "cpu"
    validate(config)
    from attackaudit.sources.model_loader import normalize_threat_model

    config.threat_model = normalize_threat_model(config.threat_model)
    return config


def validate(config: RunConfig) -> None:
    # imported here: the zoo imports torch, and RunConfig's defaults are read by `--help`, which
    # stays torch-free
    from attackaudit.sources.zoo import ZOO

    if not config.out:
        raise ConfigError("--out DIR is required: the directory the run's results go to", "out")
    from attackaudit.sources.dataset_sources import DataSourceError, parse_source
    from attackaudit.sources.model_loader import ModelSourceError, normalize_threat_model, parse_model_source

    for twin in config.twins:
        model, base = twin.name, twin.base_model
        if base not in ZOO and ":" not in model:
            near = difflib.get_close_matches(base.lower(), sorted(ZOO), n=3, cutoff=0.6)
            raise ConfigError(f"unknown model {model!r}" + (f" (nearest: {', '.join(near)})" if near else "")
                              + "; `attackaudit models` lists the zoo", "models")
        try:
            parsed = parse_model_source(twin)
        except ModelSourceError as exc:
            raise ConfigError(str(exc), "models") from None
        if parsed.kind == "zoo" and parsed.name not in ZOO:
            raise ConfigError(f"unknown model {model!r}; `attackaudit models` lists the zoo", "models")
    try:
        parse_source(config.dataset)
        normalize_threat_model(config.threat_model)
    except (DataSourceError, ModelSourceError) as exc:
        raise ConfigError(str(exc)) from None
    for p in PARAMETERS:  # types, bounds and choices, each in the table's one message form
        problem = p.problem(getattr(config, p.name))
        if problem:
            raise ConfigError(problem, p.name)
    device = str(config.device)
    if device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise ConfigError(f"--device {device} but torch sees no CUDA device; use --device cpu or auto", "device")
    if config.until_decided and config.until_decided <= config.samples:
        raise ConfigError(f"--until-decided {config.until_decided} must be larger than --samples {config.samples} "
                          "(the first look's images), or 0 for one look", "until_decided")
    for plugin in config.plugins:
        if not Path(plugin).is_file():
            raise ConfigError(f"--plugin {plugin} does not exist; pass a .py file defining specs()", "plugins")
    if config.python and not (Path(config.python).is_file() and os.access(config.python, os.X_OK)):
        raise ConfigError(f"python {config.python} is not an executable interpreter", "python")
