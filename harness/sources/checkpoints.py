"""Checkpoint trust policy and weight loading, for every model source (harness/sources/model_loader.py).

Files load with ``torch.load(weights_only=True)`` unless the user passes ``--trust-checkpoint``;
a refusal is one line that says how to opt in. Third-party loaders (RobustBench) follow the same
policy through ``torch_load_policy``.
"""
from __future__ import annotations

import os
import pickle
import re
import zipfile
from collections import OrderedDict
from contextlib import contextmanager
from pathlib import Path
from typing import Mapping

import torch
from torch import Tensor, nn
from attackaudit.errors import InputError


class ModelSourceError(InputError):
    """A model source is malformed or cannot be loaded; the message is one line."""


def one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else type(exc).__name__



def load_checkpoint(path: str | Path, trust: bool = False, what: str = "checkpoint") -> object:
    """``torch.load(path, weights_only=not trust)`` with one-line errors that say how to opt in."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise ModelSourceError(f"{what} {path} does not exist")
    try:
        return torch.load(path, map_location="cpu", weights_only=not trust)
    except pickle.UnpicklingError as exc:
        if trust:
            raise ModelSourceError(f"{what} {path} cannot be unpickled: {one_line(exc)}") from None
        found = re.search(r"Unsupported global: GLOBAL ([\w.]+)", str(exc))
        if found:
            raise ModelSourceError(
                f"{what} {path} is not a plain weights file (torch.load(weights_only=True) refused it: it pickles "
                f"{found.group(1)}); if you trust where it came from, pass --trust-checkpoint to unpickle it in "
                "full") from None
        detail = re.search(r"WeightsUnpickler error:\s*(.+?)(?:\n\n|$)", str(exc), re.S)
        reason = detail.group(1).strip().splitlines()[0] if detail else one_line(exc)
        raise ModelSourceError(
            f"{what} {path} is not a readable PyTorch checkpoint (weights-only unpickler: {reason}); if it is "
            "a full pickle from a source you trust, pass --trust-checkpoint") from None
    except (RuntimeError, EOFError, OSError, ValueError, zipfile.BadZipFile, AttributeError,
            ModuleNotFoundError) as exc:
        raise ModelSourceError(f"{what} {path} is not a readable PyTorch checkpoint: {one_line(exc)}") from None


def state_dict_of(obj: object, what: str) -> Mapping[str, Tensor] | nn.Module:
    """The state dict inside a loaded checkpoint (or the module itself, for a trusted full pickle)."""
    if isinstance(obj, nn.Module):
        return obj
    if isinstance(obj, Mapping):
        for key in ("state_dict", "model_state_dict", "model", "net", "state"):
            inner = obj.get(key)
            if isinstance(inner, nn.Module):
                return inner
            if isinstance(inner, Mapping) and inner and all(isinstance(v, Tensor) for v in inner.values()):
                return inner
        tensors = {k: v for k, v in obj.items() if isinstance(v, Tensor)}
        if tensors and len(tensors) == len(obj):
            return obj
    raise ModelSourceError(f"{what} holds a {type(obj).__name__} without a state dict (looked for a dict of "
                           "tensors, or one under 'state_dict' / 'model')")


def strip_prefix(state: Mapping[str, Tensor], prefix: str) -> "OrderedDict[str, Tensor]":
    """Drop ``prefix`` from every key that starts with it (``module.`` from DataParallel)."""
    return OrderedDict((k[len(prefix):] if k.startswith(prefix) else k, v) for k, v in state.items())


NORM_KEYS = re.compile(r"(^|\.)(mu|sigma|mean|std)$|(^|\.)normalize\.")


def load_weights(model: nn.Module, state: Mapping[str, Tensor], what: str) -> nn.Module:
    """Load ``state`` into ``model`` strictly; normalisation buffers may be missing or extra.

    A model wrapping its network as ``.model`` (``Normalized``, RobustBench's ``normalize_model``)
    also takes a state dict of the bare network.
    """
    targets = [model] + ([model.model] if isinstance(getattr(model, "model", None), nn.Module) else [])
    first_error = ""
    for target in targets:
        expected = target.state_dict()
        missing = [k for k in expected if k not in state and not NORM_KEYS.search(k)]
        unexpected = [k for k in state if k not in expected and not NORM_KEYS.search(k)]
        if missing or unexpected:
            if not first_error:
                first_error = (f"{len(missing)} missing key(s) (e.g. {missing[:2]}), {len(unexpected)} unexpected "
                               f"(e.g. {unexpected[:2]})")
            continue
        wrong = [k for k in state if k in expected and tuple(state[k].shape) != tuple(expected[k].shape)]
        if wrong:
            k = wrong[0]
            raise ModelSourceError(f"{what} does not fit the architecture: {k} has shape {tuple(state[k].shape)}, "
                                   f"the model expects {tuple(expected[k].shape)}")
        target.load_state_dict({k: v for k, v in state.items() if k in expected}, strict=False)
        return model
    raise ModelSourceError(f"{what} does not fit the architecture: {first_error}")


def classifier_classes(state: Mapping[str, Tensor]) -> int | None:
    """Rows of the last 2-D weight in the state dict: the classifier's class count."""
    last = None
    for k, v in state.items():
        if k.endswith("weight") and isinstance(v, Tensor) and v.dim() == 2:
            last = v
    return int(last.shape[0]) if last is not None else None


@contextmanager
def torch_load_policy(trust: bool):
    """Make third-party ``torch.load`` calls without ``weights_only`` follow our trust policy."""
    key = "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"
    old = os.environ.get(key)
    if trust:
        os.environ[key] = "1"
    else:
        os.environ.pop(key, None)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = old
