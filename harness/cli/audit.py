"""``attackaudit audit LIB==A [LIB==B]``: its arguments and entry point (the audit itself:
``harness/audit/command.py`` ``audit``)."""
from __future__ import annotations

import argparse
import sys

import attackaudit.audit.command as audit_command
from attackaudit.run.grid_args import add_grid_arguments, grid_flags

from .common import add_verdict_arguments


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("releases", nargs="+", metavar="LIB==V|LIB@PATH",
                   help="one or two releases, e.g. adv-lib==0.2.6 adv-lib==0.2.8 (one: against the installed); "
                        "LIB@PATH is a release candidate: a wheel, an sdist or a source tree")
    p.add_argument("--out", required=True, help="audit directory: a run per release, audit.json, audit.md|html")
    add_grid_arguments(p)
    add_verdict_arguments(p)
    p.add_argument("--eps", action="append", metavar="[NORM=]EPS", help="ε of fixed-ε robust accuracy, e.g. linf=0.03")
    p.add_argument("--strict", action="store_true", help="exit 1 when an implementation regressed")
    p.add_argument("--bisect", action="store_true",
                   help="also bisect the releases between the two on the package index: the first release at "
                        "which each changed implementation's verdict changed, with each tested release's ξ and ASR")


def main(args: argparse.Namespace) -> int:
    from attackaudit.fidelity.eps_use import parse_eps  # ValueError (one line) before anything runs
    doc = audit_command.audit(args.releases, args.out, grid_flags(args), alpha=args.alpha, min_delta=args.min_delta,
                bisect_range=args.bisect, echo=lambda line: print(line, file=sys.stdout), eps=parse_eps(args.eps))
    return 1 if args.strict and doc["counts"].get("regressed") else 0


def add_parser(sub) -> None:
    """``audit`` on ``sub`` (the subcommands of ``attackaudit``)."""
    p = sub.add_parser("audit", help="release audit: the same grid on two releases of a library, and what "
                                     "changed (--bisect: in which release)")
    add_arguments(p)
    p.set_defaults(func=main)
