"""What the installed release of a library supports, and the bridges from our call to its API.

The adapters run every release from the oldest that installs beside the project's torch to the
newest (``attackaudit audit``, ``benchmarks/release_history.py``), so they detect features, never
compare version numbers:

- a class or function the release lacks: the spec is absent from its catalogue (the audit reads
  that as ``new`` / ``removed``, which is the library's own history);
- a hyperparameter the release names differently: ``bridge_keywords`` renames it;
- a hyperparameter it lacks whose value is what the release always does: dropped;
- anything else we cannot express in the release's API raises :class:`Unsupported`, which the
  harness records as ``status="unsupported"`` rows: our limitation, never the library's crash;
- a per-sample ε array the release rejects: ``per_eps_group`` calls it once per group of equal ε
  with a scalar (what the minimal-ε search does for specs without per-sample ε), after a probe on a
  tiny model (``supports``) said the array does not work.
"""
from __future__ import annotations

import inspect
from typing import Any, Callable, Mapping

import torch
from torch import Tensor
from attackaudit.errors import AttackauditError


class Unsupported(AttackauditError):
    """The adapter cannot call this release of the library the way the job needs (one line).

    Raised instead of calling the library; the harness turns it into ``status="unsupported"``."""


def accepted_keywords(fn: Callable) -> frozenset[str] | None:
    """The keyword names ``fn`` (a function or a class) accepts; None when it takes ``**kwargs``
    or has no signature to read (then every keyword is passed and the call itself decides)."""
    try:
        parameters = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return None
    if any(p.kind is p.VAR_KEYWORD for p in parameters.values()):
        return None
    return frozenset(parameters)


def bridge_keywords(fn: Callable, kwargs: Mapping[str, Any], *, what: str,
                    renames: Mapping[str, tuple[str, ...]] | None = None,
                    droppable: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``kwargs`` as this release's ``fn`` accepts them.

    ``renames``: our name -> the names older releases used for it (the first accepted one is used).
    ``droppable``: our name -> the value that is the only behaviour of a release without that
    parameter (dropped only when the spec asks for exactly that value).
    Raises Unsupported naming ``what`` and the parameters this release cannot take.
    """
    accepted = accepted_keywords(fn)
    if accepted is None:
        return dict(kwargs)
    renames, droppable = renames or {}, droppable or {}
    out, missing = {}, []
    for key, value in kwargs.items():
        if key in accepted:
            out[key] = value
            continue
        alias = next((a for a in renames.get(key, ()) if a in accepted), None)
        if alias is not None:
            out[alias] = value
        elif key in droppable and _equal(droppable[key], value):
            continue
        else:
            missing.append(f"{key}={value!r}")
    if missing:
        raise Unsupported(f"{what} of this release has no parameter {', '.join(missing)}")
    return out


def call_accepting(method: Callable, *args: Any, **optional: Any) -> Any:
    """``method(*args, **optional)`` passing only the optional keywords this release accepts
    (e.g. ``quiet=True``, added to torchattacks' mode setters in 3.3)."""
    accepted = accepted_keywords(method)
    return method(*args, **{k: v for k, v in optional.items() if accepted is None or k in accepted})


def _equal(a: Any, b: Any) -> bool:
    try:
        return bool(a == b)
    except Exception:
        return a is b


_PROBES: dict[tuple, bool] = {}


def supports(key: tuple, probe: Callable[[], Any]) -> bool:
    """Whether ``probe()`` runs without raising; computed once per process and ``key``.

    Probes call the library on a tiny model of their own, never on the job's (tracked) model,
    so they cost the job no queries; the global RNGs are restored after, so a job's draws do not
    depend on whether its worker had probed before."""
    if key not in _PROBES:
        import numpy as np

        np_state, torch_state = np.random.get_state(), torch.random.get_rng_state()
        try:
            probe()
            _PROBES[key] = True
        except Exception:
            _PROBES[key] = False
        finally:
            np.random.set_state(np_state)
            torch.random.set_rng_state(torch_state)
    return _PROBES[key]


def rows_follow_eps(key: tuple, call: Callable[[torch.nn.Module, Tensor, Tensor, "float | Tensor"], Tensor]) -> bool:
    """Whether ``call(model, x, y, eps)`` given one ε per row (an (N,) tensor) gives each row what
    a scalar call at that row's ε gives: on a tiny model of its own, each call seeded alike (random
    starts draw the same numbers), cached per process and ``key`` (``supports``). A release whose
    code does not broadcast the tensor, or raises on it, answers False: the adapter then calls it
    once per distinct ε (``per_eps_group``)."""
    def probe() -> None:
        x, _ = probe_inputs()
        model = tiny_classifier()
        with torch.no_grad():
            y = model(x).argmax(1)  # rows the model classifies as labelled, as the search passes them
        eps = torch.tensor([0.1, 0.2])
        torch.manual_seed(0)
        both = call(model, x.clone(), y, eps)
        for row, value in enumerate(eps.tolist()):
            torch.manual_seed(0)
            alone = call(model, x.clone(), y, value)
            if not torch.allclose(both[row], alone[row], atol=1e-6):
                raise ValueError(f"row {row} differs from its scalar call")

    return supports(key, probe)


def per_eps_group(run_scalar: Callable[[Tensor, Tensor, Tensor | None, float], Tensor], inputs: Tensor,
                  labels: Tensor, targets: Tensor | None, eps: Tensor) -> Tensor:
    """Call ``run_scalar(inputs[i], labels[i], targets[i], ε)`` once per distinct ε of ``eps``
    (N floats) and put the outputs (each |i|×C×H×W) back in order: N×C×H×W."""
    eps = eps.detach().cpu().float()
    out = torch.empty_like(inputs)
    for value in torch.unique(eps):
        idx = torch.nonzero(eps == value).squeeze(1).to(inputs.device)
        part = run_scalar(inputs[idx], labels[idx], targets[idx] if targets is not None else None, float(value))
        out[idx] = part.to(device=out.device, dtype=out.dtype)
    return out


def tiny_classifier(n_features: int = 4, n_classes: int = 3) -> torch.nn.Module:
    """A fixed linear classifier of 1×2×2 inputs, for capability probes (never for results)."""
    torch_rng = torch.Generator().manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(n_features, n_classes))
    with torch.no_grad():
        model[1].weight.copy_(torch.randn(n_classes, n_features, generator=torch_rng))
        model[1].bias.zero_()
    return model.eval()


def probe_inputs(n: int = 2) -> tuple[Tensor, Tensor]:
    """(n×1×2×2 inputs in [0, 1], n labels) for capability probes."""
    x = torch.linspace(0.2, 0.8, n * 4).reshape(n, 1, 2, 2)
    return x, torch.arange(n) % 3
