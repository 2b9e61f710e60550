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

This module loads a source; the parts it uses: ``model_source`` (the syntax above, parsed),
``normalization`` (``Normalized`` and the NORM options), ``robustbench_models`` (the RobustBench
layout, registry and built-in architectures), ``checkpoints`` (the trust policy).
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
from pathlib import Path

import torch
from torch import nn

from attackaudit.sources.architectures import CifarResNet50, DMWideResNet, PreActResNet18, WideResNet
from attackaudit.sources.checkpoints import (ModelSourceError, classifier_classes, load_checkpoint, load_weights,
                                             one_line, state_dict_of, strip_prefix)
from attackaudit.sources.model_source import (KINDS, LoadOptions, ModelSource, normalize_threat_model,
                                              parse_model_source)
from attackaudit.sources.normalization import IMAGENET_MEAN, IMAGENET_STD, NORM_PRESETS, Normalized, norm_values
from attackaudit.sources.robustbench_models import (BUILTIN_ROBUSTBENCH, DEFAULT_MODEL_DIR, load_robustbench,
                                                    robustbench_path)
from attackaudit.results.schema import PERM, SHIFT, Twin
from attackaudit.sources.zoo import ZOO, LogitPermutation, LogitShift


def load_model_source(source: Twin | str, *, model_dir: str = "", dataset: str = "digits", threat_model: str = "",
                      allow_download: bool = False, trust_checkpoint: bool = False,
                      device: str | torch.device = "cpu") -> nn.Module:
    """The model a source names (a ``Twin`` of ``RunConfig.twins``, or a model's own source
    string), in eval mode on ``device``; raises ModelSourceError."""
    src = parse_model_source(source)
    opts = LoadOptions(model_dir, dataset, threat_model, allow_download, trust_checkpoint)
    if src.kind == "zoo":
        from attackaudit.sources.zoo import load_model

        twin = Twin(src.name, SHIFT if src.shift else PERM if src.perm else "")
        if src.name not in ZOO:
            raise ModelSourceError(f"unknown model {src.name!r}; the zoo has {', '.join(ZOO)}")
        try:
            return load_model(twin, device)
        except (FileNotFoundError, RuntimeError, pickle.UnpicklingError) as exc:
            raise ModelSourceError(f"zoo model {src.name}: {one_line(exc)}") from None
    loader = {"robustbench": load_robustbench, "torchvision": _load_torchvision, "timm": _load_timm,
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
    norm = norm_values(src.norm, default_norm, src.text)
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
    norm = norm_values(src.norm, default, src.text)
    return Normalized(model, *norm) if norm else model


__all__ = ["ModelSourceError", "ModelSource", "LoadOptions", "KINDS", "Normalized", "NORM_PRESETS", "IMAGENET_MEAN",
           "IMAGENET_STD", "parse_model_source", "load_model_source", "load_checkpoint", "state_dict_of",
           "load_weights", "robustbench_path", "DEFAULT_MODEL_DIR", "BUILTIN_ROBUSTBENCH", "WideResNet",
           "CifarResNet50", "PreActResNet18", "DMWideResNet", "normalize_threat_model"]
