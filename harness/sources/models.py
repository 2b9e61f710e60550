"""Model sources: the embedded zoo, RobustBench checkpoints, torchvision/timm weights, any callable.

A model *source* is one string (``--models`` or ``models = [...]`` in a CONFIG.toml):

==========================================  =====================================================
``NAME`` or ``zoo:NAME``                    a model of the embedded digits zoo
``robustbench:NAME``                        a RobustBench model id, read from
``robustbench:THREAT/NAME``                 ``<model_dir>/<dataset>/<threat_model>/<NAME>.pt``
``robustbench:DATASET/THREAT/NAME``         (RobustBench's own layout). ``model_dir`` is
                                            ``--model-dir`` (default ``./models``); the dataset
                                            and threat model come from the source when given,
                                            else from ``--dataset`` (cifar10 / cifar100 /
                                            imagenet) and ``--threat-model`` (default Linf)
``torchvision:ARCH:WEIGHTS[:NORM]``         ``torchvision.models.get_model(ARCH)`` with a local
                                            state-dict file (or a weights name such as
                                            ``IMAGENET1K_V1`` already in the torch hub cache)
``timm:ARCH:WEIGHTS[:NORM]``                ``timm.create_model(ARCH)`` with a local state dict
``module:pkg.mod:CALLABLE``                 ``CALLABLE()`` must return an ``nn.Module`` taking
``module:path/to/file.py:CALLABLE``         [0, 1] inputs; it is used as it is
==========================================  =====================================================

Any source may end in ``~shift`` (the metamorphic log-softmax twin, as in the zoo), ``~perm``
(the class-permutation twin; its labels and targets are mapped in ``job.py``), ``~seed`` or
``~split`` (the model itself: those twins change how ``job.py`` runs the attack). ``NORM`` is
``imagenet`` (torchvision's default), ``cifar10``, ``cifar100``, ``none``, or ``M,M,M/S,S,S``;
timm's default is the architecture's own pretrained mean/std. The number of classes is read from
the weights.

Normalisation is part of the model (``Normalized``), so attacks always see [0, 1] inputs.
Checkpoints load with ``torch.load(..., weights_only=True)``; one that needs more is refused
unless ``trust_checkpoint`` (``--trust-checkpoint``). Nothing is downloaded unless
``allow_download`` (``--allow-download``). Every failure is a ``ModelSourceError`` with one line.

RobustBench models are built from RobustBench's own model registry when the ``robustbench``
package imports; without it, ``BUILTIN_ROBUSTBENCH`` lists the ids attackaudit can build itself.
"""
from __future__ import annotations

import difflib
import hashlib
import importlib
import importlib.util
import os
import pickle
import re
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Callable, Mapping

import torch
from torch import Tensor, nn

from attackaudit.sources.architectures import CifarResNet50, DMWideResNet, PreActResNet18, WideResNet
from attackaudit.sources.checkpoints import (ModelSourceError, classifier_classes, load_checkpoint, load_weights, one_line,
                          state_dict_of, strip_prefix, torch_load_policy)
from attackaudit.sources.zoo import PERM_SUFFIX, RUN_TWIN_SUFFIXES, SHIFT_SUFFIX, ZOO, LogitPermutation, LogitShift

KINDS = ("zoo", "robustbench", "torchvision", "timm", "module")
IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
CIFAR10_MEAN, CIFAR10_STD = (0.4914, 0.4822, 0.4465), (0.2471, 0.2435, 0.2616)
CIFAR100_MEAN, CIFAR100_STD = (0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762)
NORM_PRESETS = {"imagenet": (IMAGENET_MEAN, IMAGENET_STD), "cifar10": (CIFAR10_MEAN, CIFAR10_STD),
                "cifar100": (CIFAR100_MEAN, CIFAR100_STD), "none": None}
RB_DATASETS = ("cifar10", "cifar100", "imagenet")
RB_THREATS = {"linf": "Linf", "l2": "L2", "corruptions": "corruptions"}
DEFAULT_MODEL_DIR = "models"


# -- modules -------------------------------------------------------------------------------------
class Normalized(nn.Module):
    """``model((x - mean) / std)``: a model that takes [0, 1] inputs.

    ``mean`` and ``std`` are per-channel; they are buffers that are not saved in the state dict.
    """

    def __init__(self, model: nn.Module, mean, std) -> None:
        super().__init__()
        self.model = model
        mean_t, std_t = torch.as_tensor(mean, dtype=torch.float32), torch.as_tensor(std, dtype=torch.float32)
        if mean_t.shape != std_t.shape or mean_t.dim() != 1 or (std_t <= 0).any():
            raise ModelSourceError(f"normalisation needs per-channel mean and positive std of one length, "
                                   f"got {tuple(mean_t.tolist())} / {tuple(std_t.tolist())}")
        self.register_buffer("mean", mean_t.view(1, -1, 1, 1), persistent=False)
        self.register_buffer("std", std_t.view(1, -1, 1, 1), persistent=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.model((x - self.mean) / self.std)


class _PerSampleStandardized(nn.Module):
    """Ding et al. (MMA): each input standardised by its own mean and std (std ≥ 1/√dim)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: Tensor) -> Tensor:
        mu = x.mean(dim=(1, 2, 3), keepdim=True)
        std = x.std(dim=(1, 2, 3), keepdim=True)
        std_min = torch.ones_like(std) / (x.shape[1] * x.shape[2] * x.shape[3]) ** 0.5
        return self.model((x - mu) / torch.max(std, std_min))


# -- parsing -------------------------------------------------------------------------------------
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


def parse_model_source(text: str) -> ModelSource:
    """Parse a model source string (see the module docstring); raises ModelSourceError."""
    if not isinstance(text, str) or not text.strip():
        raise ModelSourceError("empty model source; use a zoo name, robustbench:ID, torchvision:ARCH:WEIGHTS, "
                               "timm:ARCH:WEIGHTS or module:MOD:CALLABLE")
    full = text.strip()
    run_twin = next((sfx for sfx in RUN_TWIN_SUFFIXES if full.endswith(sfx)), "")
    if run_twin:  # the seed and batch-split twins load the model itself
        import dataclasses
        return dataclasses.replace(parse_model_source(full.removesuffix(run_twin)), text=full)
    shift = full.endswith(SHIFT_SUFFIX)
    if full.endswith(PERM_SUFFIX):  # a twin of its own kind: same fields, perm set instead
        import dataclasses
        return dataclasses.replace(parse_model_source(full.removesuffix(PERM_SUFFIX)), text=full, perm=True)
    body = full[: -len(SHIFT_SUFFIX)] if shift else full
    kind, sep, rest = body.partition(":")
    if not sep:
        return ModelSource(full, "zoo", body, shift=shift)
    if kind not in KINDS:
        raise ModelSourceError(f"unknown model source kind {kind!r} in {full!r}; use zoo:, robustbench:, "
                               "torchvision:, timm: or module:")
    if kind == "zoo":
        if not rest or ":" in rest:
            raise ModelSourceError(f"model source {full!r}: expected zoo:NAME")
        return ModelSource(full, "zoo", rest, shift=shift)
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
        return ModelSource(full, kind, parts[-1], dataset=dataset, threat_model=threat, shift=shift)
    if kind == "module":
        mod, sep2, fn = rest.rpartition(":")
        if not sep2 or not mod or not fn or not fn.replace(".", "_").isidentifier():
            raise ModelSourceError(f"model source {full!r}: expected module:pkg.mod:CALLABLE or "
                                   "module:path/to/file.py:CALLABLE")
        return ModelSource(full, kind, fn, mod, shift=shift)
    # torchvision / timm
    parts = rest.split(":")
    norm = ""
    if len(parts) >= 3 and _is_norm(parts[-1]):
        norm = parts.pop()
    if len(parts) < 2 or not parts[0] or not all(parts[1:]):
        raise ModelSourceError(f"model source {full!r}: expected {kind}:ARCH:WEIGHTS[:NORM] with a local "
                               "weights file")
    return ModelSource(full, kind, parts[0], ":".join(parts[1:]), norm, shift=shift)


def _is_norm(text: str) -> bool:
    return text in NORM_PRESETS or bool(re.fullmatch(r"[\d.,eE+-]+/[\d.,eE+-]+", text))


def _norm_values(option: str, default, where: str):
    """(mean, std) or None for a NORM option."""
    if not option:
        return default
    if option in NORM_PRESETS:
        return NORM_PRESETS[option]
    try:
        mean, std = ([float(v) for v in half.split(",")] for half in option.split("/"))
    except ValueError:
        raise ModelSourceError(f"{where}: normalisation {option!r} is not MEAN,../STD,..") from None
    return tuple(mean), tuple(std)


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


# -- loaders -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class LoadOptions:
    model_dir: str = ""
    dataset: str = "digits"       # the run's dataset source: gives RobustBench its dataset
    threat_model: str = ""        # "" = Linf
    allow_download: bool = False
    trust_checkpoint: bool = False


def load_model_source(source: str, *, model_dir: str = "", dataset: str = "digits", threat_model: str = "",
                      allow_download: bool = False, trust_checkpoint: bool = False,
                      device: str | torch.device = "cpu") -> nn.Module:
    """The model a source names, in eval mode on ``device``; raises ModelSourceError."""
    src = parse_model_source(source)
    opts = LoadOptions(model_dir, dataset, threat_model, allow_download, trust_checkpoint)
    if src.kind == "zoo":
        from attackaudit.sources.zoo import load_model

        name = src.name + (SHIFT_SUFFIX if src.shift else PERM_SUFFIX if src.perm else "")
        if src.name not in ZOO:
            raise ModelSourceError(f"unknown model {src.name!r}; the zoo has {', '.join(ZOO)}")
        try:
            return load_model(name, device)
        except (FileNotFoundError, RuntimeError, pickle.UnpicklingError) as exc:
            raise ModelSourceError(f"zoo model {src.name}: {one_line(exc)}") from None
    loader = {"robustbench": _load_robustbench, "torchvision": _load_torchvision, "timm": _load_timm,
              "module": _load_module}[src.kind]
    model = loader(src, opts)
    if not isinstance(model, nn.Module):
        raise ModelSourceError(f"model source {src.text!r} gave a {type(model).__name__}, not an nn.Module")
    model = model.eval()
    model.requires_grad_(False)  # attacks need input gradients only
    if src.shift:
        model = LogitShift(model)
    elif src.perm:
        model = LogitPermutation(model)
    try:
        return model.to(device).eval()
    except (RuntimeError, AssertionError) as exc:
        raise ModelSourceError(f"model {src.text!r} cannot move to device {device}: {one_line(exc)}") from None


def _load_module(src: ModelSource, opts: LoadOptions) -> nn.Module:
    target = src.target
    try:
        if target.endswith(".py") or "/" in target or os.sep in target:
            path = Path(target).expanduser()
            if not path.is_file():
                raise ModelSourceError(f"module file {path} of {src.text!r} does not exist")
            digest = hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:12]
            mod_name = f"attackaudit_model_{path.stem}_{digest}"
            spec = importlib.util.spec_from_file_location(mod_name, path)
            module = importlib.util.module_from_spec(spec)
            sys.modules[mod_name] = module
            spec.loader.exec_module(module)
        else:
            module = importlib.import_module(target)
    except ModelSourceError:
        raise
    except Exception as exc:
        raise ModelSourceError(f"cannot import {target!r} for {src.text!r}: {type(exc).__name__}: {one_line(exc)}") from None
    obj = module
    for part in src.name.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            raise ModelSourceError(f"{target!r} has no callable {src.name!r} (from {src.text!r})")
    if not callable(obj):
        raise ModelSourceError(f"{target}:{src.name} is a {type(obj).__name__}, not a callable returning an nn.Module")
    try:
        model = obj()
    except Exception as exc:
        raise ModelSourceError(f"{target}:{src.name}() raised {type(exc).__name__}: {one_line(exc)}") from None
    if not isinstance(model, nn.Module):
        raise ModelSourceError(f"{target}:{src.name}() returned a {type(model).__name__}, not an nn.Module")
    return model


def _weights_state(path: str, opts: LoadOptions, what: str):
    obj = load_checkpoint(path, opts.trust_checkpoint, what)
    state = state_dict_of(obj, f"{what} {path}")
    if isinstance(state, nn.Module):
        return state
    return strip_prefix(state, "module.")


def _load_torchvision(src: ModelSource, opts: LoadOptions) -> nn.Module:
    try:
        import torchvision.models as tvm
    except ImportError:
        raise ModelSourceError(f"{src.text!r} needs torchvision; pip install torchvision") from None
    available = tvm.list_models()
    if src.name not in available:
        close = difflib.get_close_matches(src.name, available, n=3)
        raise ModelSourceError(f"torchvision has no architecture {src.name!r}"
                               + (f"; did you mean {', '.join(close)}?" if close else ""))
    default_norm = (IMAGENET_MEAN, IMAGENET_STD)
    path = Path(src.target).expanduser()
    if not path.exists() and re.fullmatch(r"[A-Z0-9_]+", src.target):  # a torchvision weights name
        state, default_norm = _torchvision_named_weights(tvm, src, opts)
    else:
        state = _weights_state(src.target, opts, "weights file")
    if isinstance(state, nn.Module):
        model = state
    else:
        k = classifier_classes(state)
        try:
            model = tvm.get_model(src.name, weights=None, **({"num_classes": k} if k else {}))
        except Exception as exc:
            raise ModelSourceError(f"torchvision {src.name}(num_classes={k}) failed: {one_line(exc)}") from None
        load_weights(model, state, f"weights file {src.target}")
    norm = _norm_values(src.norm, default_norm, src.text)
    return Normalized(model, *norm) if norm else model


def _torchvision_named_weights(tvm, src: ModelSource, opts: LoadOptions):
    from urllib.parse import urlparse

    try:
        weights = tvm.get_model_weights(src.name)[src.target]
    except (KeyError, ValueError):
        raise ModelSourceError(f"{src.target!r} is neither a file nor a weights name of torchvision {src.name}") from None
    cached = Path(torch.hub.get_dir()) / "checkpoints" / os.path.basename(urlparse(weights.url).path)
    tf = weights.transforms()
    norm = (tuple(tf.mean), tuple(tf.std)) if hasattr(tf, "mean") else (IMAGENET_MEAN, IMAGENET_STD)
    if cached.is_file():
        return _weights_state(str(cached), opts, "cached weights"), norm
    if not opts.allow_download:
        raise ModelSourceError(f"torchvision weights {src.name}:{src.target} are not in the cache ({cached}); "
                               "give a local weights file or pass --allow-download")
    try:
        return weights.get_state_dict(progress=False), norm
    except Exception as exc:
        raise ModelSourceError(f"downloading torchvision weights {src.name}:{src.target} failed: {one_line(exc)}") from None


def _load_timm(src: ModelSource, opts: LoadOptions) -> nn.Module:
    try:
        import timm
    except ImportError:
        raise ModelSourceError(f"{src.text!r} needs timm; pip install timm") from None
    if not timm.is_model(src.name):
        close = difflib.get_close_matches(src.name, timm.list_models(), n=3)
        raise ModelSourceError(f"timm has no architecture {src.name!r}"
                               + (f"; did you mean {', '.join(close)}?" if close else ""))
    state = _weights_state(src.target, opts, "weights file")
    if isinstance(state, nn.Module):
        model = state
    else:
        k = classifier_classes(state)
        try:  # pretrained=False: timm downloads nothing
            model = timm.create_model(src.name, pretrained=False, **({"num_classes": k} if k else {}))
        except Exception as exc:
            raise ModelSourceError(f"timm {src.name}(num_classes={k}) failed: {one_line(exc)}") from None
        load_weights(model, state, f"weights file {src.target}")
    cfg = getattr(model, "pretrained_cfg", None) or getattr(model, "default_cfg", None) or {}
    default = (tuple(cfg["mean"]), tuple(cfg["std"])) if "mean" in cfg and "std" in cfg else (IMAGENET_MEAN, IMAGENET_STD)
    norm = _norm_values(src.norm, default, src.text)
    return Normalized(model, *norm) if norm else model


# -- RobustBench ---------------------------------------------------------------------------------
def robustbench_path(model_dir: str, dataset: str, threat_model: str, name: str) -> Path:
    """RobustBench's layout: ``<model_dir>/<dataset>/<threat_model>/<name>.pt``."""
    return Path(model_dir or DEFAULT_MODEL_DIR).expanduser() / dataset / threat_model / f"{name}.pt"


def _robustbench_target(src: ModelSource, opts: LoadOptions) -> tuple[str, str]:
    from attackaudit.sources.datasets import family

    dataset = src.dataset or family(opts.dataset) or "cifar10"
    threat = src.threat_model or normalize_threat_model(opts.threat_model) or "Linf"
    return dataset, threat


@lru_cache(maxsize=1)
def _robustbench_registry():
    """RobustBench's model registry ``{dataset: {threat: {name: entry}}}``, or None without it."""
    try:
        from robustbench.model_zoo.models import model_dicts
    except Exception:  # not installed, or installed without its dependencies
        return None
    return {ds.value: {tm.value: models for tm, models in threats.items()} for ds, threats in model_dicts.items()}


def _load_robustbench(src: ModelSource, opts: LoadOptions) -> nn.Module:
    dataset, threat = _robustbench_target(src, opts)
    name = src.name
    path = robustbench_path(opts.model_dir, dataset, threat, name)
    where = f"RobustBench model {dataset}/{threat}/{name}"
    registry = _robustbench_registry()
    builtin = BUILTIN_ROBUSTBENCH.get((dataset, threat, name))
    if registry is not None:
        models = registry.get(dataset, {}).get(threat, {})
        if name not in models:
            close = difflib.get_close_matches(name, list(models), n=3)
            raise ModelSourceError(f"{where} is not in RobustBench's model zoo"
                                   + (f"; did you mean {', '.join(close)}?" if close else ""))
        entry = models[name]
        gdrive = entry.get("gdrive_id")
        if isinstance(gdrive, list):  # an ensemble: one file per member, loaded by RobustBench itself
            files = [Path(f"{path}_m{i}.pt") for i in range(len(gdrive))]
            missing = [f for f in files if not f.is_file()]
            if missing and not opts.allow_download:
                raise ModelSourceError(f"{where} (an ensemble) needs {len(files)} files; {missing[0]} not found "
                                       "(RobustBench layout <model_dir>/<dataset>/<threat_model>/<name>.pt_m<i>.pt); "
                                       "put them there or pass --allow-download")
            return _robustbench_load_model(name, opts, dataset, threat, where)
        # RobustBench's constructor for ImageNet "Standard" models downloads torchvision weights
        downloads_on_build = dataset == "imagenet" and "Standard" in name
        if gdrive is None or (downloads_on_build and builtin is None):
            if not opts.allow_download:
                raise ModelSourceError(f"{where} has no checkpoint file RobustBench can read locally (its "
                                       "weights come from a hub); pass --allow-download")
            return _robustbench_load_model(name, opts, dataset, threat, where)
        build = builtin if downloads_on_build else entry["model"]
    elif builtin is not None:
        build = builtin
    else:
        known = sorted(n for (d, t, n) in BUILTIN_ROBUSTBENCH if (d, t) == (dataset, threat))
        raise ModelSourceError(f"{where}: without the robustbench package attackaudit builds only "
                               f"{', '.join(known) or 'none'} for {dataset}/{threat}; pip install robustbench "
                               "for every RobustBench id")
    if not path.is_file():
        if opts.allow_download:
            return _robustbench_load_model(name, opts, dataset, threat, where)
        raise ModelSourceError(f"{where}: checkpoint {path} not found; put it there (RobustBench layout "
                               "<model_dir>/<dataset>/<threat_model>/<name>.pt, --model-dir sets model_dir) "
                               "or pass --allow-download")
    obj = load_checkpoint(path, opts.trust_checkpoint, "RobustBench checkpoint")
    if isinstance(obj, Mapping) and ("Kireev2021Effectiveness" in name or name == "Andriushchenko2020Understanding") \
            and "last" in obj:
        obj = obj["last"]
    state = state_dict_of(obj, f"RobustBench checkpoint {path}")
    if isinstance(state, nn.Module):
        return state
    state = strip_prefix(strip_prefix(state, "module."), "model.")
    try:
        model = build()
    except Exception as exc:
        raise ModelSourceError(f"{where}: building the architecture failed: {one_line(exc)}") from None
    return load_weights(model, state, f"RobustBench checkpoint {path}")


def _robustbench_load_model(name: str, opts: LoadOptions, dataset: str, threat: str, where: str) -> nn.Module:
    """RobustBench's own ``load_model`` (it downloads what is missing: only with allow_download)."""
    try:
        from robustbench.utils import load_model
    except Exception as exc:
        raise ModelSourceError(f"{where} needs the robustbench package ({one_line(exc)}); pip install robustbench") from None
    try:
        with torch_load_policy(opts.trust_checkpoint):
            return load_model(name, model_dir=opts.model_dir or DEFAULT_MODEL_DIR, dataset=dataset,
                              threat_model=threat)
    except pickle.UnpicklingError as exc:
        raise ModelSourceError(f"{where}: a checkpoint is not a plain weights file ({one_line(exc)}); if you trust "
                               "it, pass --trust-checkpoint") from None
    except Exception as exc:
        raise ModelSourceError(f"{where}: robustbench.load_model failed: {type(exc).__name__}: {one_line(exc)}") from None


class _Built:
    """A RobustBench architecture: a bare network, wrapped in its input normalisation."""

    def __init__(self, net: Callable[[], nn.Module], mean=None, std=None, standardize: bool = False) -> None:
        self.net, self.mean, self.std, self.standardize = net, mean, std, standardize

    def __call__(self) -> nn.Module:
        net = self.net()
        if self.standardize:
            return _PerSampleStandardized(net)
        return Normalized(net, self.mean, self.std) if self.mean is not None else net


def _tv(arch: str) -> Callable[[], nn.Module]:
    def build() -> nn.Module:
        try:
            import torchvision.models as tvm
        except ImportError:
            raise ModelSourceError("RobustBench ImageNet models need torchvision; pip install torchvision") from None
        return getattr(tvm, arch)(weights=None)
    return build


def _wrn(depth: int, width: int, sub: bool = False) -> Callable[[], nn.Module]:
    return lambda: WideResNet(depth, width, sub_block1=sub)


def _dm(depth: int, width: int) -> Callable[[], nn.Module]:
    return lambda: DMWideResNet(depth, width)


_ENGSTROM = ((0.4914, 0.4822, 0.4465), (0.2023, 0.1994, 0.2010))
_AUGUSTIN = ((0.4913997551666284, 0.48215855929893703, 0.4465309133731618),
             (0.24703225141799082, 0.24348516474564, 0.26158783926049628))
_RONY = ((0.491, 0.482, 0.447), (0.247, 0.243, 0.262))
_C10 = (CIFAR10_MEAN, CIFAR10_STD)
_IN = (IMAGENET_MEAN, IMAGENET_STD)

#: (dataset, threat model, RobustBench id) -> architecture, for use without the robustbench package
BUILTIN_ROBUSTBENCH: dict[tuple[str, str, str], _Built] = {
    ("cifar10", "Linf", "Standard"): _Built(_wrn(28, 10)),
    ("cifar10", "Linf", "Carmon2019Unlabeled"): _Built(_wrn(28, 10, True)),
    ("cifar10", "Linf", "Sehwag2020Hydra"): _Built(_wrn(28, 10, True)),
    ("cifar10", "Linf", "Wang2020Improving"): _Built(_wrn(28, 10, True)),
    ("cifar10", "Linf", "Zhang2019Theoretically"): _Built(_wrn(34, 10, True)),
    ("cifar10", "Linf", "Huang2020Self"): _Built(_wrn(34, 10, True)),
    ("cifar10", "Linf", "Rice2020Overfitting"): _Built(_wrn(34, 20), *_C10),
    ("cifar10", "Linf", "Engstrom2019Robustness"): _Built(CifarResNet50, *_ENGSTROM),
    ("cifar10", "Linf", "Wong2020Fast"): _Built(PreActResNet18, *_C10),
    ("cifar10", "Linf", "Ding2020MMA"): _Built(_wrn(28, 4), standardize=True),
    ("cifar10", "Linf", "Gowal2020Uncovering_70_16"): _Built(_dm(70, 16), *_C10),
    ("cifar10", "Linf", "Gowal2020Uncovering_70_16_extra"): _Built(_dm(70, 16), *_C10),
    ("cifar10", "Linf", "Gowal2020Uncovering_34_20"): _Built(_dm(34, 20), *_C10),
    ("cifar10", "Linf", "Gowal2020Uncovering_28_10_extra"): _Built(_dm(28, 10), *_C10),
    ("cifar10", "Linf", "Gowal2021Improving_70_16_ddpm_100m"): _Built(_dm(70, 16), *_C10),
    ("cifar10", "Linf", "Gowal2021Improving_28_10_ddpm_100m"): _Built(_dm(28, 10), *_C10),
    ("cifar10", "L2", "Standard"): _Built(_wrn(28, 10)),
    ("cifar10", "L2", "Augustin2020Adversarial"): _Built(CifarResNet50, *_AUGUSTIN),
    ("cifar10", "L2", "Engstrom2019Robustness"): _Built(CifarResNet50, *_ENGSTROM),
    ("cifar10", "L2", "Rice2020Overfitting"): _Built(lambda: PreActResNet18(v2=True), *_C10),
    ("cifar10", "L2", "Rony2019Decoupling"): _Built(_wrn(28, 10), *_RONY),
    ("cifar10", "L2", "Ding2020MMA"): _Built(_wrn(28, 4), standardize=True),
    ("cifar10", "L2", "Gowal2020Uncovering"): _Built(_dm(70, 16), *_C10),
    ("cifar10", "L2", "Gowal2020Uncovering_extra"): _Built(_dm(70, 16), *_C10),
    ("imagenet", "Linf", "Standard_R50"): _Built(_tv("resnet50"), *_IN),
    ("imagenet", "Linf", "Wong2020Fast"): _Built(_tv("resnet50"), *_IN),
    ("imagenet", "Linf", "Engstrom2019Robustness"): _Built(_tv("resnet50"), *_IN),
    ("imagenet", "Linf", "Salman2020Do_R50"): _Built(_tv("resnet50"), *_IN),
    ("imagenet", "Linf", "Salman2020Do_R18"): _Built(_tv("resnet18"), *_IN),
    ("imagenet", "Linf", "Salman2020Do_50_2"): _Built(_tv("wide_resnet50_2"), *_IN),
}


__all__ = ["ModelSourceError", "ModelSource", "Normalized", "parse_model_source", "load_model_source",
           "load_checkpoint", "state_dict_of", "load_weights", "robustbench_path", "BUILTIN_ROBUSTBENCH",
           "WideResNet", "CifarResNet50", "PreActResNet18", "DMWideResNet", "normalize_threat_model"]
