"""A model source string parsed (syntax only: nothing is read), and the options it loads under.

The syntax is the table in ``attackaudit.sources.model_loader``; every error is a one-line
``ModelSourceError``.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from attackaudit.sources.checkpoints import ModelSourceError
from attackaudit.sources.normalization import is_norm_option
from attackaudit.results.schema import PERM, SHIFT, Twin

KINDS = ("zoo", "robustbench", "torchvision", "timm", "module")
RB_DATASETS = ("cifar10", "cifar100", "imagenet")
RB_THREATS = {"linf": "Linf", "l2": "L2", "corruptions": "corruptions"}


@dataclass(frozen=True)
class ModelSource:
    """A parsed model source (syntax only: nothing is read)."""

    text: str
    kind: str
    name: str = ""          # zoo name, RobustBench id, architecture, or callable
    target: str = ""        # weights path / weights name, or the module
    norm: str = ""          # normalisation option ("" = the kind's default)
    dataset: str = ""       # RobustBench dataset given in the source
    threat_model: str = ""  # RobustBench threat model given in the source
    shift: bool = False     # the log-softmax twin
    perm: bool = False      # the class-permutation twin


def parse_model_source(source: Twin | str) -> ModelSource:
    """Parse a model source (see the module docstring): a ``Twin`` (its base model the source
    string, as ``RunConfig.twins`` reads ``--models``) or a source string of a model itself (a
    ``~KIND`` in it is not read here); raises ModelSourceError."""
    if isinstance(source, Twin):
        base = parse_model_source(source.base_model)
        if not source.is_twin:
            return base
        # the base model's source; the run twins load the model itself
        return dataclasses.replace(base, text=source.name, shift=base.shift or source.kind == SHIFT,
                                   perm=base.perm or source.kind == PERM)
    text = source
    if not isinstance(text, str) or not text.strip():
        raise ModelSourceError("empty model source; use a zoo name, robustbench:ID, torchvision:ARCH:WEIGHTS, "
                               "timm:ARCH:WEIGHTS or module:MOD:CALLABLE")
    full = text.strip()
    kind, sep, rest = full.partition(":")
    if not sep:
        return ModelSource(full, "zoo", full)
    if kind not in KINDS:
        raise ModelSourceError(f"unknown model source kind {kind!r} in {full!r}; use zoo:, robustbench:, "
                               "torchvision:, timm: or module:")
    if kind == "zoo":
        if not rest or ":" in rest:
            raise ModelSourceError(f"model source {full!r}: expected zoo:NAME")
        return ModelSource(full, "zoo", rest)
    if kind == "robustbench":
        parts = rest.split("/")
        if not rest or ":" in rest or len(parts) > 3 or any(not p for p in parts):
            raise ModelSourceError(f"model source {full!r}: expected robustbench:NAME, robustbench:THREAT/NAME "
                                   "or robustbench:DATASET/THREAT/NAME")
        dataset, threat = "", ""
        if len(parts) == 3:
            dataset = _rb_dataset(parts[0], full)
        if len(parts) >= 2:
            threat = _rb_threat(parts[-2], full)
        return ModelSource(full, kind, parts[-1], dataset=dataset, threat_model=threat)
    if kind == "module":
        mod, sep2, fn = rest.rpartition(":")
        if not sep2 or not mod or not fn or not fn.replace(".", "_").isidentifier():
            raise ModelSourceError(f"model source {full!r}: expected module:pkg.mod:CALLABLE or "
                                   "module:path/to/file.py:CALLABLE")
        return ModelSource(full, kind, fn, mod)
    # torchvision / timm
    parts = rest.split(":")
    norm = ""
    if len(parts) >= 3 and is_norm_option(parts[-1]):
        norm = parts.pop()
    if len(parts) < 2 or not parts[0] or not all(parts[1:]):
        raise ModelSourceError(f"model source {full!r}: expected {kind}:ARCH:WEIGHTS[:NORM] with a local "
                               "weights file")
    return ModelSource(full, kind, parts[0], ":".join(parts[1:]), norm)



def _rb_dataset(text: str, where: str) -> str:
    d = text.lower().replace("-", "").replace("_", "")
    if d not in RB_DATASETS:
        raise ModelSourceError(f"{where}: RobustBench dataset {text!r} is not one of {', '.join(RB_DATASETS)}")
    return d


def _rb_threat(text: str, where: str) -> str:
    t = RB_THREATS.get(text.lower())
    if t is None:
        raise ModelSourceError(f"{where}: RobustBench threat model {text!r} is not one of Linf, L2, corruptions")
    return t


def normalize_threat_model(text: str) -> str:
    """``Linf`` / ``L2`` / ``corruptions`` from any case; '' stays ''."""
    return _rb_threat(text, "--threat-model") if text else ""


@dataclass(frozen=True)
class LoadOptions:
    """How a parsed source is loaded: ``load_model_source``'s keyword options."""

    model_dir: str = ""
    dataset: str = "digits"       # the run's dataset source: gives RobustBench its dataset
    threat_model: str = ""        # "" = Linf
    allow_download: bool = False
    trust_checkpoint: bool = False
