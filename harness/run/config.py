"""One resolved RunConfig from a TOML file, a preset and command-line flags (flags win)."""
from __future__ import annotations

import difflib
import os
import tomllib
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any
from attackaudit.errors import InputError
from attackaudit.results.schema import DEFAULT_BUDGET

PRESETS: dict[str, dict[str, Any]] = {
    # a smoke run: one model, two norms, few samples, a fifth of every attack's steps
    "quick": {"models": ["digits-cnn"], "norms": ["l2", "linf"], "samples": 8, "steps_scale": 0.1, "workers": 2},
    # what `make demo` runs: every library's every spec on two zoo models (the standard CNN and
    # the MLP) and on the MLP's metamorphic twins (logits shifted; classes permuted; randomised
    # attacks with another seed; every attack one image per call). The MLP is the cheapest model
    # for the twins (half the CNN's job time); the adversarially trained CNNs (1.5x the CNN) and
    # digits-mlp-tiny are opt-in with --models. The batch-split twin runs on the first 4 images
    # only: one image per call costs ~6x the batched job's CPU per image (README "The demo"); the
    # batch-composition twin (reversed, with companions: one call) on every image: one job per spec
    "demo": {"models": ["digits-cnn", "digits-mlp", "digits-mlp~shift", "digits-mlp~perm", "digits-mlp~seed",
                        "digits-mlp~split", "digits-mlp~batch"],
             "samples": 16, "split_samples": 4, "steps_scale": 0.5, "workers": 2},
}

#: fields that do not change results: they may differ between a run and its resumption
NON_RESULT_FIELDS = {"out", "quiet", "executor", "scheduler", "workers", "force", "timeout_s",
                     "memory_limit_mb", "preset", "strict", "allow_download", "trust_checkpoint",
                     "repeat",  # the repeat is a second run beside the first: adding it resumes the first
                     "retry",
                     "exact",  # exact minima beside the jobs (exact/defaults.py), not what a job computes
                     # how many looks judge the jobs, not what a job computes: a plain run of the
                     # first look's size resumes as the first look (run/sequential.py)
                     "until_decided",
                     "model_names"}  # how a model is shown, not what runs: renaming one resumes its run


class ConfigError(InputError):
    """A config value is wrong; the message is one line naming the culprit and the fix."""


@dataclass
class RunConfig:
    out: str = ""
    preset: str = ""
    models: list[str] = field(default_factory=lambda: ["digits-cnn"])
    dataset: str = "digits"
    libraries: list[str] | None = None
    families: list[str] | None = None
    norms: list[str] | None = None
    attacks: list[str] | None = None  # spec keys or implementations, e.g. "adv_lib/fmn"
    samples: int = 32
    budget: int = DEFAULT_BUDGET
    seed: int = 0
    targeted: bool = False
    metamorphic: bool = False
    # images of the batch-split twin M~split (the first ones of the subset; 0 = all of --samples):
    # its one-image calls cost ~6x a batched job's CPU on the digits MLP
    split_samples: int = 0
    repeat: int = 1  # 2: every job on the first model runs twice with the same seed (nondeterminism)
    steps_scale: float = 1.0
    device: str = "cpu"  # cpu | cuda | cuda:N | auto (cuda when available)
    batch_size: int = 0
    model_dir: str = ""  # RobustBench checkpoints: <model_dir>/<dataset>/<threat_model>/<name>.pt
    threat_model: str = ""  # RobustBench threat model of robustbench: models that name none ("" = Linf)
    allow_download: bool = False  # let model sources download weights (never otherwise)
    trust_checkpoint: bool = False  # unpickle checkpoints in full (weights_only=False)
    plugins: list[str] = field(default_factory=list)
    # interpreter of the whole run, e.g. a release environment of `attackaudit audit` ("" = this
    # one). A result field: its environment pins the library release, so results differ.
    python: str = ""
    executor: str = "local"
    scheduler: str | None = None
    workers: int = 1
    timeout_s: float = 900.0
    memory_limit_mb: int = 8192
    quiet: bool = False
    force: bool = False
    strict: bool = False
    retry: str = ""  # "crashed": finished jobs that crashed run again (runner.RETRY_STATUSES)
    # exact minimal distances of the models that admit them (digits-mlp, digits-mlp-tiny and their
    # twins) written beside the run's jobs (exact/defaults.py); False (--no-exact) skips them
    exact: bool = True
    # a cap > samples: judge at samples, then extend the undecided family × norm rows along the
    # nested subsets (doubling) up to the cap or the dataset's size (run/sequential.py); 0: one look
    until_decided: int = 0
    # model source -> the name rows, bars and pages show (attackaudit.compare's name=; store.model_label)
    model_names: dict[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return Path(self.out).name

    def result_config(self) -> dict:
        """The part of the config that determines results (compared on resume)."""
        return {k: v for k, v in asdict(self).items() if k not in NON_RESULT_FIELDS}


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
    from attackaudit.results.schema import parse_model_name
    from attackaudit.sources.zoo import ZOO

    if not config.out:
        raise ConfigError("--out DIR is required: the directory the run's results go to")
    from attackaudit.sources.dataset_sources import DataSourceError, parse_source
    from attackaudit.sources.model_loader import ModelSourceError, normalize_threat_model, parse_model_source

    for model in config.models:
        base = parse_model_name(model).base_model
        if base not in ZOO and ":" not in model:
            near = difflib.get_close_matches(base.lower(), sorted(ZOO), n=3, cutoff=0.6)
            raise ConfigError(f"unknown model {model!r}" + (f" (nearest: {', '.join(near)})" if near else "")
                              + "; `attackaudit models` lists the zoo")
        try:
            parsed = parse_model_source(model)
        except ModelSourceError as exc:
            raise ConfigError(str(exc)) from None
        if parsed.kind == "zoo" and parsed.name not in ZOO:
            raise ConfigError(f"unknown model {model!r}; `attackaudit models` lists the zoo")
    try:
        parse_source(config.dataset)
        normalize_threat_model(config.threat_model)
    except (DataSourceError, ModelSourceError) as exc:
        raise ConfigError(str(exc)) from None
    device = str(config.device)
    if device != "cpu" and not (device == "cuda" or device.startswith("cuda:")):
        raise ConfigError(f"--device {device!r} is not one of cpu, cuda, cuda:N, auto")
    if device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise ConfigError(f"--device {device} but torch sees no CUDA device; use --device cpu or auto")
    if config.norms:
        bad = [n for n in config.norms if n not in ("l0", "l1", "l2", "linf")]
        if bad:
            raise ConfigError(f"unknown norm {bad[0]!r}; use l0, l1, l2 or linf")
    if config.samples <= 0:
        raise ConfigError(f"--samples must be a positive integer, got {config.samples}")
    if config.split_samples < 0:
        raise ConfigError(f"split_samples must be 0 (all samples) or positive, got {config.split_samples}")
    if config.budget <= 0:
        raise ConfigError(f"--budget must be a positive integer, got {config.budget}")
    if config.executor not in ("local", "dask"):
        raise ConfigError(f"--executor {config.executor!r} is not one of local, dask")
    if config.workers <= 0:
        raise ConfigError(f"--workers must be positive, got {config.workers}")
    if config.repeat not in (1, 2):
        raise ConfigError(f"--repeat must be 1 or 2 (a second seeded run to compare with), got {config.repeat}")
    if config.retry not in ("", "crashed"):
        raise ConfigError(f"--retry {config.retry!r} is not one of: crashed")
    if config.until_decided < 0:
        raise ConfigError(f"--until-decided must be a positive number of images (the cap), got {config.until_decided}")
    if config.until_decided and config.until_decided <= config.samples:
        raise ConfigError(f"--until-decided {config.until_decided} must be larger than --samples {config.samples} "
                          "(the first look's images), or 0 for one look")
    if config.steps_scale <= 0:
        raise ConfigError(f"steps_scale must be positive, got {config.steps_scale}")
    for plugin in config.plugins:
        if not Path(plugin).is_file():
            raise ConfigError(f"--plugin {plugin} does not exist; pass a .py file defining specs()")
    if config.python and not (Path(config.python).is_file() and os.access(config.python, os.X_OK)):
        raise ConfigError(f"python {config.python} is not an executable interpreter")
