"""What every command of the command line shares: the one-line usage error and its parser, and
the plain tables ``attacks`` and ``models`` print."""
from __future__ import annotations

import argparse

from attackaudit.errors import AttackauditError


class UsageError(AttackauditError):
    """Bad input from the user: printed as one line, exit code 2."""


class Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line, not a usage dump."""

    def error(self, message: str) -> None:
        raise UsageError(f"{message} (see `{self.prog} --help`)")


def add_verdict_arguments(parser: argparse.ArgumentParser, min_delta_more: str = "") -> None:
    """``--alpha`` and ``--min-delta``, the verdict rule's two settings (``compare`` and ``audit``)."""
    parser.add_argument("--alpha", type=float, default=0.05,
                        help="family-wise significance level of the paired tests (Holm), as in reports and flags")
    parser.add_argument("--min-delta", dest="min_delta", type=float, default=None,
                        help="materiality margin δ: the smallest per-image relative change in distance that counts "
                             "(default 0.05)" + min_delta_more)


def print_table(rows: list[dict], columns: list[str]) -> None:
    widths = {c: max(len(c), *(len(str(r.get(c, ""))) for r in rows)) if rows else len(c) for c in columns}
    print("  ".join(c.ljust(widths[c]) for c in columns))
    for r in rows:
        print("  ".join(str(r.get(c, "")).ljust(widths[c]) for c in columns))
