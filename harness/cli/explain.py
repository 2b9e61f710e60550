"""``attackaudit explain RUN IMPLEMENTATION [--norm N]``: its arguments and entry point (the story
itself: ``reports/explain.py`` ``explain``)."""
from __future__ import annotations

import argparse
from pathlib import Path

from attackaudit.errors import InputError
from attackaudit.reports.explain import WORST_IMAGES, explain


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``attackaudit explain``."""
    parser.add_argument("run", metavar="RUN", help="a run directory")
    parser.add_argument("implementation", metavar="IMPLEMENTATION",
                        help="library/name[:variant] as the report names it (a unique part of it is enough)")
    parser.add_argument("--norm", help="only this norm (l0, l1, l2, linf)")
    parser.add_argument("--images", type=int, default=WORST_IMAGES,
                        help=f"images listed per model as furthest behind the envelope (default {WORST_IMAGES})")


def main(args: argparse.Namespace) -> int:
    """Print the story of one implementation of a run."""
    images = int(getattr(args, "images", WORST_IMAGES))
    if images < 0:
        raise InputError(f"--images {images}: give 0 or more", "images")
    for line in explain(Path(args.run), args.implementation, getattr(args, "norm", None), images):
        print(line)
    return 0


def add_parser(sub) -> None:
    """``explain`` on ``sub`` (the subcommands of ``attackaudit``)."""
    p = sub.add_parser("explain", help="one implementation's story: flags, trust and why, ξ per model, "
                                       "the images where it falls furthest behind the envelope")
    add_arguments(p)
    p.set_defaults(func=main)
