"""``attackaudit run``: the grid of models × attacks × norms into a run directory."""
from __future__ import annotations

import argparse
import sys

from attackaudit.run.grid_args import RUN, add_argument, grid_flags


def run_flags(args: argparse.Namespace) -> dict:
    """Every flag of the parameter table as ``config.resolve`` takes them (None: not given)."""
    return grid_flags(args, RUN)


def cmd_run(args: argparse.Namespace) -> int:
    from attackaudit.run.config import load_toml, resolve
    from attackaudit.run.sequential import run_grid

    toml = load_toml(args.config) if args.config else None
    config = resolve(toml, run_flags(args))
    summary = run_grid(config)
    print(summary.line(), file=sys.stderr if config.quiet else sys.stdout)
    print(f"results: {summary.run_dir} (attackaudit.load_run({str(summary.run_dir)!r}))")
    failed = summary.counts.get("crash", 0) + summary.counts.get("timeout", 0) + summary.counts.get("invalid", 0)
    return 1 if config.strict and failed else 0


def add_parser(sub) -> argparse.ArgumentParser:
    """The command's arguments on ``sub`` (the subcommands of ``attackaudit``); its entry point is
    ``cmd_run``."""
    p = sub.add_parser("run", help="run the grid of models × attacks × norms")
    p.add_argument("config", nargs="?", help="a CONFIG.toml; flags override it")
    for param in RUN:  # --out, --preset, the grid's flags, then the run's own (harness/results/parameters.py)
        add_argument(p, param)
    p.set_defaults(func=cmd_run)
    return p
