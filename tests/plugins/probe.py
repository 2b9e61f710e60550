"""A plugin whose attacks make a run's behaviour observable to the tests that drive the command line.

* ``descent`` (L2, L∞): a deterministic gradient walk of ``steps`` steps, two queries per step and
  sample, targeted-aware: what ``--budget``, ``--targeted``, ``--steps-scale`` and ``--repeat`` act on.
* ``noisy``: the same walk from a random start drawn from the operating system, never seeded: two
  seeded runs of it differ (``nondeterminism``).
* ``nan`` and ``out_of_box``: invalid outputs (``invalid``, ``out_of_box``).
* ``gate_a``, ``gate_b``: a ``descent`` that first says it is running, then waits while a hold file
  exists: a kill that lands while a job runs.
* ``meet_a``, ``meet_b``: each waits until the other has started: two jobs at the same time.

Every attack that waits or reports writes into ``$ATTACKAUDIT_PROBE`` (a directory the test makes):
``<attack>.<pid>.running`` holding ``pid ppid`` (which process ran it, and its parent). Without
the variable nothing waits and nothing is written.
"""
from __future__ import annotations

import os
import time
from functools import partial
from pathlib import Path

import torch
import torch.nn.functional as F

from attackaudit.adapters import AttackSpec

__version__ = "1.0"

#: the longest an attack waits for a file before it gives up (raises: the job crashes)
WAIT_S = 60.0


def _probe() -> Path | None:
    where = os.environ.get("ATTACKAUDIT_PROBE")
    return Path(where) if where else None


def _say_running(name: str) -> Path | None:
    probe = _probe()
    if probe is not None:
        (probe / f"{name}.{os.getpid()}.running").write_text(f"{os.getpid()} {os.getppid()}")
    return probe


def _wait_for(condition, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"waited {WAIT_S:g} s for {what}")
        time.sleep(0.05)


def descent(model, inputs, labels, *, norm: str, steps: int, step: float, start: float = 0.0,
            targeted: bool = False, targets=None):
    """``steps`` normalised gradient steps on the cross-entropy (towards the target when targeted)
    from ``inputs`` plus ``start`` × OS-random noise; returns the last iterate in [0, 1]."""
    goal = targets if targeted else labels
    x = inputs.clone()
    if start:
        noise = torch.Generator().manual_seed(int.from_bytes(os.urandom(8), "little"))
        x = (x + start * torch.randn(x.shape, generator=noise)).clamp(0, 1)
    for _ in range(steps):
        x.requires_grad_(True)
        loss = F.cross_entropy(model(x), goal)
        (g,) = torch.autograd.grad(-loss if targeted else loss, x)
        unit = g.sign() if norm == "linf" else g / g.flatten(1).norm(dim=1).clamp_min(1e-12).view(-1, 1, 1, 1)
        x = (x.detach() + step * unit).clamp(0, 1)
    return x.detach()


def gate(model, inputs, labels, *, name: str, **kw):
    probe = _say_running(name)
    if probe is not None:
        _wait_for(lambda: not (probe / f"hold-{name}").exists(), f"hold-{name} to go")
    return descent(model, inputs, labels, norm="l2", steps=4, step=0.2, **kw)


def meet(model, inputs, labels, *, name: str, other: str, **kw):
    probe = _say_running(name)
    if probe is not None:
        _wait_for(lambda: any(probe.glob(f"{other}.*.running")), f"{other} to start")
    return descent(model, inputs, labels, norm="l2", steps=4, step=0.2, **kw)


def nan(model, inputs, labels, **kw):
    model(inputs)
    out = inputs.clone()
    out[0] = float("nan")
    return out


def out_of_box(model, inputs, labels, **kw):
    model(inputs)
    return inputs + 0.5


def specs() -> list[AttackSpec]:
    mk = partial(AttackSpec, "probe")
    out = []
    for norm, step in (("l2", 0.15), ("linf", 0.02)):
        params = {"norm": norm, "steps": 30, "step": step}
        out.append(mk("descent", "descent", norm, "minimal", params, partial(descent, **params), steps_param="steps"))
    noisy = {"norm": "l2", "steps": 10, "step": 0.15, "start": 0.05}
    out.append(mk("noisy", "descent", "l2", "minimal", noisy, partial(descent, **noisy), steps_param="steps"))
    out += [mk("nan", "invalid", "linf", "minimal", {}, partial(nan)),
            mk("out_of_box", "invalid", "linf", "minimal", {}, partial(out_of_box))]
    for name in ("gate_a", "gate_b"):
        out.append(mk(name, "gate", "l2", "minimal", {"name": name}, partial(gate, name=name)))
    for name, other in (("meet_a", "meet_b"), ("meet_b", "meet_a")):
        out.append(mk(name, "meet", "l2", "minimal", {"name": name, "other": other},
                      partial(meet, name=name, other=other)))
    return out
