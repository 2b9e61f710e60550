"""The grid's command-line flags, defined once: `attackaudit run` and `attackaudit audit` both take
them, and both turn them into the flag mapping that ``config.resolve`` reads."""
from __future__ import annotations

import argparse

from attackaudit.run.config import RunConfig

#: flags whose value is passed through as given (None when absent)
GRID_VALUES = ["models", "families", "norms", "attacks", "samples", "budget", "seed", "steps_scale", "device",
               "workers", "timeout_s"]
#: on/off flags: True when given, None (the config's or preset's value) when absent
GRID_SWITCHES = ["targeted", "quiet"]


def add_grid_arguments(p: argparse.ArgumentParser) -> None:
    """The flags that choose and size a grid of models × attacks × norms."""
    p.add_argument("--models", nargs="+")
    p.add_argument("--families", nargs="+")
    p.add_argument("--norms", nargs="+")
    p.add_argument("--attacks", nargs="+", help="spec keys or implementations, e.g. adv_lib/fmn")
    p.add_argument("--samples", type=int)
    p.add_argument("--budget", type=int, help=f"forwards + backwards per sample (default {RunConfig.budget})")
    p.add_argument("--seed", type=int)
    p.add_argument("--steps-scale", dest="steps_scale", type=float, help="scale every attack's iterations")
    p.add_argument("--targeted", action="store_true")
    p.add_argument("--device", help="cpu, cuda, cuda:N or auto (cuda when available)")
    p.add_argument("--workers", type=int)
    p.add_argument("--timeout", dest="timeout_s", type=float, help="seconds per job before it is killed")
    p.add_argument("--quiet", action="store_true", help="no progress bars")


def grid_flags(args: argparse.Namespace, values: list[str] = GRID_VALUES,
               switches: list[str] = GRID_SWITCHES) -> dict:
    """The parsed flags as the mapping ``config.resolve`` takes: absent flags are None, so the
    config file's or preset's value stands."""
    flags = {k: getattr(args, k) for k in values}
    flags.update({k: True if getattr(args, k) else None for k in switches})
    return flags
