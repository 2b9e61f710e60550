"""``attackaudit report DIR [DIR ...]`` and ``attackaudit compare DIR_A DIR_B``: their arguments and
entry points (the report itself: ``reports/__init__.py`` ``write_report``; the comparison:
``reports/command.py`` ``compare_main``).

Each entry point returns an exit code and raises ``InputError`` with a one-line message for input
the user must fix (a missing or empty run directory, several runs without ``--out``, ...).
"""
from __future__ import annotations

import argparse
from pathlib import Path

from attackaudit.errors import InputError
from attackaudit.reports import FORMATS, write_report
from attackaudit.reports.command import compare_main  # noqa: F401  (the comparison, wired below)

from .common import add_verdict_arguments


def report_formats(values: list[str] | None) -> tuple[str, ...]:
    if not values:
        return FORMATS
    out = []
    for v in values:
        for f in str(v).split(","):
            f = f.strip().lower()
            if f and f not in FORMATS:
                raise InputError(f"--format {f!r}: choose from {', '.join(FORMATS)}", "format")
            if f:
                out.append(f)
    return tuple(dict.fromkeys(out)) or FORMATS


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``attackaudit report``."""
    parser.add_argument("dirs", nargs="+", metavar="DIR", help="run directories (several are merged)")
    parser.add_argument("--out", help="where to write the report and tables (default: the run directory; "
                                      "required with several runs)")
    parser.add_argument("--format", action="append", metavar="md|html|json",
                        help="report formats to write (repeatable or comma-separated; default all three). "
                             "CSV tables are always written.")


def main(args: argparse.Namespace) -> int:
    """Write the report; prints the files written, the HTML report's path last."""
    formats = report_formats(getattr(args, "format", None))
    written = write_report([Path(d) for d in args.dirs], Path(args.out) if args.out else None, formats)
    tables = [p for name, p in written.items() if not name.startswith("report.")]
    if tables:
        print(f"tables: {', '.join(p.name for p in tables)} in {tables[0].parent}")
    for name in ("report.json", "report.md", "report.html"):
        if name in written:
            print(f"{name.split('.')[1]} report: {written[name]}")
    return 0


def add_compare_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``attackaudit compare``."""
    parser.add_argument("run_a", metavar="DIR_A", help="the run before (e.g. the old library release)")
    parser.add_argument("run_b", metavar="DIR_B", help="the run after")
    parser.add_argument("--out", help="where to write diff.csv|json, audit.json, compare.md|html (default: DIR_B)")
    add_verdict_arguments(parser, "; inside it a change is 'equivalent', beyond it 'different'")
    parser.add_argument("--by-model", dest="by_model", action="store_true", help="one verdict per model too")
    parser.add_argument("--strict", action="store_true", help="exit 1 when any implementation regressed")
    parser.add_argument("--across-settings", dest="across_settings", action="store_true",
                        help="compare runs made with different settings (budget, samples, seed, --steps-scale, ...), "
                             "each page and the output labelled with them; refused otherwise")


def add_parser(sub) -> None:
    """``report`` and ``compare`` on ``sub`` (the subcommands of ``attackaudit``)."""
    p = sub.add_parser("report", help="report.md, report.html and tables of one or more runs (several merge)")
    add_arguments(p)
    p.set_defaults(func=main)
    p = sub.add_parser("compare", help="diff of two runs: per-implementation verdicts")
    add_compare_arguments(p)
    p.set_defaults(func=compare_main)
