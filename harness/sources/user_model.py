"""A user's in-memory model and tensors, handed to an ordinary run (``attackaudit.compare``).

The runner's jobs name their model and data by source strings, so that a job is a pure function
of its ``Job`` and a run directory can be resumed and reported by the command line. Here a model
object and two tensors become such sources, inside the run directory:

- the data: ``<run>/data/<hash>.pt`` (``{"inputs", "labels"}``), the dataset source
  ``tensors:<path>``; the file name carries the data's SHA-256, so other data is another config;
- the model: ``<run>/models/<Class>-<fingerprint>.py``, a three-line module whose ``load()``
  returns the model, and the model source ``module:<that file>:load``. The fingerprint covers the
  weights and buffers, the architecture (``repr``) and the source of the model's own classes, so a
  retrained or edited model is another config and its results are never reused.

Where the model pickles (``torch.save`` with cloudpickle, which also carries classes defined in a
notebook by value), it is saved beside the module as ``<Class>-<fingerprint>.pt`` and each worker
process loads its own copy: jobs keep their isolation. Otherwise the model stays registered in
this process (``registered``), the jobs run in-process, and ``load()`` anywhere else fails with
one line saying so.
"""
from __future__ import annotations

import hashlib
import inspect
import io
import re
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import torch
from torch import Tensor, nn

from attackaudit.sources.subset import subset_hash
from attackaudit.results.store import atomic_write_bytes
from attackaudit.results.schema import error_line

#: models kept in this process for in-process runs, by fingerprint
_IN_PROCESS: dict[str, nn.Module] = {}

MODULE_TEMPLATE = '''"""Written by attackaudit.compare: the model {cls} (fingerprint {fingerprint}) of this run."""
from attackaudit.sources.user_model import load_saved


def load():
    return load_saved(__file__)
'''


@dataclass(frozen=True)
class Handoff:
    """How a model reaches the run's jobs: its model ``source``, and whether the jobs run in
    worker processes (``isolated``) or in this one, with the ``reason``."""

    source: str
    fingerprint: str
    isolated: bool
    reason: str = ""


def model_fingerprint(model: nn.Module) -> str:
    """16 hex digits over the state dict's names, shapes, dtypes and bytes, ``repr(model)``, and
    the source of every class of the model defined outside torch (where ``inspect`` finds it)."""
    h = hashlib.sha256(repr(model).encode())
    for name, value in model.state_dict().items():
        h.update(name.encode())
        if isinstance(value, Tensor):
            t = value.detach().cpu().contiguous()
            h.update(f"{tuple(t.shape)} {t.dtype}".encode())
            h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
        else:
            h.update(repr(value).encode())
    classes = {type(m) for m in model.modules() if not type(m).__module__.startswith("torch.")}
    for cls in sorted(classes, key=lambda c: (c.__module__, c.__qualname__)):
        try:
            h.update(inspect.getsource(cls).encode())
        except (OSError, TypeError):  # defined where no source is kept: its name stands in
            h.update(f"{cls.__module__}.{cls.__qualname__}".encode())
    return h.hexdigest()[:16]


def model_name(model: object, name: object) -> str:
    """``compare(name=...)``: ``name`` (None: the model's class name), or ValueError naming it."""
    label = type(model).__name__ if name is None else name
    if not isinstance(label, str) or not re.fullmatch(r"[A-Za-z0-9_.-]+", label):
        raise ValueError(f"name must be letters, digits, '_', '.' or '-' (it names the model in the rows, bars and "
                         f"reports), got {name!r}")
    return label


def save_data(run_dir: Path, inputs: Tensor, labels: Tensor) -> str:
    """Write the data once into ``run_dir/data``; returns its dataset source ``tensors:<path>``.

    ``inputs``: N×C×H×W float32 in [0, 1]; ``labels``: N int64 (both on the CPU)."""
    digest = subset_hash(inputs, labels)[:16]
    path = (Path(run_dir) / "data" / f"{digest}.pt").resolve()
    if not path.exists():
        buffer = io.BytesIO()
        torch.save({"inputs": inputs, "labels": labels}, buffer)
        atomic_write_bytes(path, buffer.getvalue())
    return f"tensors:{path}"


def hand_over(model: nn.Module, run_dir: Path, *, isolate: bool = True) -> Handoff:
    """Make ``model`` a model source of ``run_dir`` (module docstring). ``isolate=False`` keeps it
    in this process even when it pickles. Register-and-release of an in-process model is the
    caller's (``registered``)."""
    fingerprint = model_fingerprint(model)
    stem = f"{re.sub(r'[^A-Za-z0-9_]', '_', type(model).__name__)}-{fingerprint}"
    module = (Path(run_dir) / "models" / f"{stem}.py").resolve()
    reason = "" if isolate else "workers=0 asks for it"
    saved = module.with_suffix(".pt")
    if isolate and not saved.exists():
        data, reason = _pickled(model)
        if data:
            atomic_write_bytes(saved, data)
    if not module.exists():
        atomic_write_bytes(module, MODULE_TEMPLATE.format(cls=type(model).__qualname__,
                                                          fingerprint=fingerprint).encode())
    return Handoff(f"module:{module}:load", fingerprint, isolated=not reason, reason=reason)


def _pickled(model: nn.Module) -> tuple[bytes, str]:
    """(``model`` pickled for worker processes, "") or (b"", why it cannot be)."""
    try:
        import cloudpickle  # carries a notebook's classes by value (plain pickle names them)
    except ImportError:
        return b"", "cloudpickle is not installed (pip install cloudpickle), so the model cannot reach worker processes"
    buffer = io.BytesIO()
    try:
        torch.save(model, buffer, pickle_module=cloudpickle)
    except Exception as exc:  # a lock, an open file, a C handle: not sendable to a worker
        return b"", f"the model cannot be pickled ({error_line(exc)})"
    return buffer.getvalue(), ""


def load_saved(module_file: str | Path) -> nn.Module:
    """The model behind a module written by ``hand_over``: this process's registered object, else
    the pickle beside the module (a copy, on the CPU)."""
    path = Path(module_file)
    fingerprint = path.stem.rpartition("-")[2]
    if fingerprint in _IN_PROCESS:
        return _IN_PROCESS[fingerprint]
    saved = path.with_suffix(".pt")
    if not saved.exists():
        raise RuntimeError(f"model {path.stem} did not pickle, so it lived only in the Python process that ran "
                           "attackaudit.compare(); call compare() again with the model to run or resume it")
    # the user's own model, pickled by the compare() call that wrote this run directory
    return torch.load(saved, map_location="cpu", weights_only=False)


#: layers whose output differs between training and eval mode, named in the training-mode note
TRAINING_LAYERS = (nn.modules.dropout._DropoutNd, nn.modules.batchnorm._NormBase, nn.modules.instancenorm._InstanceNorm)


def checked_inputs(model: object, inputs: object, labels: object) -> tuple[Tensor, Tensor, list[str]]:
    """(inputs as N×C×H×W float32, labels as N int64, both on the CPU, notes for the caller) or
    ValueError naming the argument, the first bad index and the fix. float64/float16 inputs are
    cast to the model's float32 (a note says so); a model left in training mode is noted (the
    attacks run it in eval mode). One forward of one sample (no gradient, eval mode, uncounted)
    gives the class count; the model's modes are restored after it."""
    if not isinstance(model, nn.Module):
        raise ValueError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    _check_weights(model)
    notes: list[str] = []
    x = _as_tensor("inputs", inputs)
    y = _as_tensor("labels", labels)
    if x.dim() != 4 or len(x) == 0:
        hint = (" (one channel: pass inputs[:, None])" if x.dim() == 3 else "")
        raise ValueError(f"inputs must be N×C×H×W with N ≥ 1, got shape {tuple(x.shape)}{hint}; reshape inside the "
                         "model if it wants another layout")
    if not x.dtype.is_floating_point:
        raise ValueError(f"inputs must be floating point in [0, 1], got {x.dtype} (divide uint8 images by 255)")
    _check_values(x)
    if x.dtype != torch.float32:  # what `digits.images / 16` gives is float64
        notes.append(f"inputs: {x.dtype} cast to the model's dtype, torch.float32")
    if y.dim() != 1 or len(y) != len(x) or y.dtype.is_floating_point or y.dtype == torch.bool:
        raise ValueError(f"labels must be {len(x)} integers (one per input), got {y.dtype} of shape {tuple(y.shape)}")
    x = x.detach().cpu().to(torch.float32).contiguous()
    classes = _class_count(model, x[:1])
    bad = ((y < 0) | (y >= classes)).nonzero()
    if len(bad):
        i = int(bad[0, 0])
        raise ValueError(f"labels must lie in [0, {classes}) (the model has {classes} outputs), got "
                         f"[{int(y.min())}, {int(y.max())}] (first: labels[{i}] = {int(y[i])})")
    training = sorted({type(m).__name__ for m in model.modules() if m.training and isinstance(m, TRAINING_LAYERS)})
    if training:  # a new nn.Module is in training mode: only layers that act differently make it matter
        notes.append(f"model: it is in training mode ({', '.join(training)} act differently in eval mode); it is "
                     "attacked in eval mode, as after model.eval(); your model is left as it is")
    return x, y.detach().cpu().to(torch.int64).contiguous(), notes


def _check_weights(model: nn.Module) -> None:
    """ValueError naming the first parameter or buffer that has no values (the meta device) or is
    not float32 (the harness attacks float32 models on float32 inputs)."""
    tensors = list(model.named_parameters()) + list(model.named_buffers())
    meta = next((name for name, t in tensors if t.is_meta), None)
    if meta is not None:
        raise ValueError(f"model: {meta} is on the meta device (it has no values); load the weights first, e.g. "
                         "model.to_empty(device='cpu') then model.load_state_dict(state)")
    other = next(((name, t.dtype) for name, t in tensors if t.is_floating_point() and t.dtype != torch.float32), None)
    if other is not None:
        raise ValueError(f"model: {other[0]} is {other[1]}; attackaudit attacks float32 models: pass model.float()")


def _check_values(x: Tensor) -> None:
    """ValueError naming the first input value that is not finite or outside [0, 1]."""
    bad = ~torch.isfinite(x) | (x < 0) | (x > 1)
    if bool(bad.any()):
        where = tuple(int(i) for i in bad.nonzero()[0])
        value = float(x[where])
        index = ", ".join(str(i) for i in where)
        fix = "" if not torch.isfinite(x[where]) else " (divide 0–255 images by 255)" if float(x.max()) > 1 else ""
        raise ValueError(f"inputs must be finite and in [0, 1]: inputs[{index}] = {value:.4g}, the first of "
                         f"{int(bad.sum())} such values{fix}")


def _class_count(model: nn.Module, x1: Tensor) -> int:
    """The class count the model's logits give for one input (1×C×H×W), in eval mode, the model's
    modes restored; ValueError when it fails or does not return 1×K logits."""
    device = next((p.device for p in model.parameters()), torch.device("cpu"))
    modes = {m: m.training for m in model.modules()}
    try:
        with torch.no_grad():
            logits = model.eval()(x1.to(device))
    except Exception as exc:
        raise ValueError(f"model failed on inputs[:1] of shape {tuple(x1.shape)}: {type(exc).__name__}: {exc}")
    finally:
        for m, mode in modes.items():
            m.training = mode
    if not isinstance(logits, torch.Tensor) or logits.dim() != 2 or logits.shape[1] < 2:
        shape = tuple(logits.shape) if isinstance(logits, torch.Tensor) else type(logits).__name__
        raise ValueError(f"model must return 1×K logits (K ≥ 2 classes) for one input, got {shape}")
    return int(logits.shape[1])


def _as_tensor(name: str, value: object) -> Tensor:
    import numpy as np

    if isinstance(value, np.ndarray):
        if value.dtype == object:
            raise ValueError(f"{name} must be a numeric array, got dtype object")
        return torch.from_numpy(np.ascontiguousarray(value))
    if not isinstance(value, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor or numpy array, got {type(value).__name__}")
    return value


@contextmanager
def registered(model: nn.Module, handoff: Handoff) -> Iterator[None]:
    """Keep ``model`` loadable in this process for an in-process run, and give it back as it was:
    the run puts it in eval mode, turns off its parameters' gradients and moves it to the run's
    device; its training flags, ``requires_grad`` and device are restored afterwards."""
    if handoff.isolated:
        yield
        return
    training = {m: m.training for m in model.modules()}
    grads = {p: p.requires_grad for p in model.parameters()}
    device = next((p.device for p in model.parameters()), None)
    _IN_PROCESS[handoff.fingerprint] = model
    try:
        yield
    finally:
        _IN_PROCESS.pop(handoff.fingerprint, None)
        if device is not None:
            model.to(device)
        for m, flag in training.items():
            m.training = flag
        for p, flag in grads.items():
            p.requires_grad_(flag)
