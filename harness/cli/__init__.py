"""``attackaudit`` command line: attacks, models, run, report, compare, explain, audit, exact.

One module of this package per command holds its arguments and its entry point (``attacks``,
``models``, ``run``, ``report`` with ``compare``, ``explain``, ``exact``, ``audit``); the work
itself stays where it lives (the runner, ``reports/``, ``harness/exact/``, ``harness/audit/``).

Usage and input errors (``AttackauditError``) print one line on stderr and exit with code 2; any
other exception is attackaudit's own bug: one line saying so and where its traceback was written,
exit code 70.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import traceback
from typing import Sequence

from attackaudit.errors import AttackauditError

from . import attacks, audit, exact, explain, models, report, run
from .attacks import cmd_attacks  # noqa: F401  (attackaudit.cli.cmd_attacks, as before)
from .common import Parser, UsageError
from .models import cmd_models  # noqa: F401
from .run import cmd_run  # noqa: F401
from .run import run_flags as _run_flags  # noqa: F401  (tests read the run flags through it)

EXIT_USAGE = 2
EXIT_INTERNAL = 70  # sysexits' EX_SOFTWARE: an internal software error
#: the commands in the order ``attackaudit --help`` lists them
COMMANDS = (attacks, models, run, report, explain, exact, audit)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="attackaudit", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    for command in COMMANDS:
        command.add_parser(sub)
    for action in sub.choices.values():  # every entry point behind the one usage/internal error rule
        action.set_defaults(func=_guarded(action.get_default("func")))
    return parser


def _guarded(fn):
    """Turn a subcommand's ``AttackauditError`` (the user's input) into a one-line usage error;
    anything else, and an error attackaudit raises on its own mistake (``ours``), goes on to
    ``main`` as an internal error."""
    def call(args: argparse.Namespace) -> int:
        try:
            return fn(args)
        except AttackauditError as exc:
            if exc.ours or isinstance(exc, UsageError):
                raise
            raise UsageError(str(exc).strip("'\"")) from None
    return call


def internal_error_line(exc: BaseException) -> str:
    """Write ``exc``'s traceback to a file and say, in one line, that the error is attackaudit's,
    where the traceback is and how to report it."""
    with tempfile.NamedTemporaryFile("w", prefix="attackaudit-internal-error-", suffix=".log",
                                     delete=False) as log:
        log.write("".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))
    first = (str(exc).strip().splitlines() or [""])[0]
    return (f"internal error, attackaudit's fault, not your input: {type(exc).__name__}: {first}; "
            f"the traceback is in {log.name}: please report it to attackaudit's maintainers with that "
            "file and the command you ran")


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        return args.func(args)
    except UsageError as exc:
        print(f"attackaudit: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("attackaudit: interrupted; rerun the same command to resume", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 - anything else is our bug, never the user's mistake
        print(f"attackaudit: {internal_error_line(exc)}", file=sys.stderr)
        return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(main())
