"""The command-line flags of a run, made from the parameter table (harness/results/parameters.py):
`attackaudit run` takes every flag of the table, `attackaudit audit` the grid's, and both turn
them into the flag mapping that ``config.resolve`` reads."""
from __future__ import annotations

import argparse
from typing import Iterable

from attackaudit.results.parameters import PARAMETERS, Parameter

#: the flags of ``attackaudit audit`` (and of ``attackaudit run``) that choose and size the grid
GRID: tuple[Parameter, ...] = tuple(p for p in PARAMETERS if p.grid and p.flag)
#: every flag of ``attackaudit run``, in the order --help lists them
RUN: tuple[Parameter, ...] = tuple(p for p in PARAMETERS if p.flag)


def add_argument(p: argparse.ArgumentParser, param: Parameter) -> None:
    """``param``'s flag on ``p``. Its argparse default is None (False for a switch): an absent flag
    leaves the config file's, the preset's or RunConfig's value standing."""
    kwargs: dict = {"dest": param.name, "help": param.help}
    if param.action == "store_false":  # --no-X: False when given, None when absent
        kwargs.update(action="store_false", default=None)
    elif param.action:
        kwargs["action"] = param.action
    elif param.type is list:
        kwargs["nargs"] = "+"
    elif param.type in (int, float):
        kwargs["type"] = param.type
    if param.cli_choices:
        kwargs["choices"] = list(param.choices or ())
    if param.metavar:
        kwargs["metavar"] = param.metavar
    p.add_argument(param.flag, **kwargs)


def add_grid_arguments(p: argparse.ArgumentParser) -> None:
    """The flags that choose and size a grid of models × attacks × norms."""
    for param in GRID:
        add_argument(p, param)


def grid_flags(args: argparse.Namespace, params: Iterable[Parameter] = GRID) -> dict:
    """The parsed flags as the mapping ``config.resolve`` takes: absent flags are None, so the
    config file's or preset's value stands (a switch not given is None, not False)."""
    return {p.name: (True if getattr(args, p.name) else None) if p.action == "store_true" else getattr(args, p.name)
            for p in params}
