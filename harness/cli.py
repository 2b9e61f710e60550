"""``attackaudit`` command line: attacks, models, run, report, compare, explain, audit, exact.

Usage and input errors (``AttackauditError``) print one line on stderr and exit with code 2; any
other exception is attackaudit's own bug: one line saying so and where its traceback was written,
exit code 70.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import traceback
from typing import Sequence

from attackaudit.errors import AttackauditError
from attackaudit.run.grid_args import GRID_SWITCHES, GRID_VALUES, add_grid_arguments, grid_flags

EXIT_USAGE = 2
EXIT_INTERNAL = 70  # sysexits' EX_SOFTWARE: an internal software error


class UsageError(AttackauditError):
    """Bad input from the user: printed as one line, exit code 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, not a usage dump
        raise UsageError(f"{message} (see `{self.prog} --help`)")


def _print_table(rows: list[dict], columns: list[str]) -> None:
    widths = {c: max(len(c), *(len(str(r.get(c, ""))) for r in rows)) if rows else len(c) for c in columns}
    print("  ".join(c.ljust(widths[c]) for c in columns))
    for r in rows:
        print("  ".join(str(r.get(c, "")).ljust(widths[c]) for c in columns))


# -- attacks -------------------------------------------------------------------------------
def cmd_attacks(args: argparse.Namespace) -> int:
    from attackaudit.adapters import catalogue

    plugins = args.plugin or []
    if args.plugin_only and not plugins:
        raise UsageError("--plugin-only needs --plugin FILE")
    # --plugin-only: no built-in library is imported (seconds each), only the files are loaded
    entries = catalogue([] if args.plugin_only else args.library, plugins=plugins)
    if args.library and not entries:
        raise UsageError(f"unknown library {args.library[0]!r}; run `attackaudit attacks` for the list")
    # a plugin author's own specs first: the built-in catalogue would push them off the screen
    entries = sorted(entries, key=lambda e: e.plugin is None)
    rows = []
    for e in entries:
        if not e.available:
            rows.append({"library": e.library, "library_version": e.version, "available": False,
                         "reason": e.reason})
        for s in e.specs:
            rows.append({"library": s.library, "library_version": e.version, "name": s.name,
                         "key": s.key, "implementation": s.implementation, "family": s.family,
                         "norm": s.norm, "kind": s.kind, "params": dict(s.params),
                         "targeted_support": s.targeted_support, "targeted_only": s.targeted_only,
                         "available": True, "steps_param": s.steps_param, "steps_scale": _steps_scale_effect(s),
                         **({"plugin": e.plugin.path, "fingerprint": e.plugin.fingerprint} if e.plugin else {}),
                         **({"note": s.note} if s.note else {})})
    if args.format == "json":
        print(json.dumps(rows, indent=2, default=str))
        return 0
    for e in entries:
        if e.plugin is not None:  # what a plugin author needs to check: params as recorded, steps scaling
            print(f"plugin {e.plugin.path}: library {e.library}, version {e.version}, "
                  f"fingerprint {e.plugin.fingerprint}")
            _print_table([{**r, "params": json.dumps(r.get("params", {}), default=str),
                           "--steps-scale": r.get("steps_scale", ""), "targeted": _targeted_mode(r)}
                          for r in rows if r.get("plugin") == e.plugin.path and r["library"] == e.library],
                         ["key", "params", "--steps-scale", "targeted", "family", "kind"])
            print()
    if not args.plugin_only:
        _print_table([r for r in rows if "plugin" not in r], ["key", "family", "kind", "library_version", "available"])
    return 0


def _targeted_mode(row: dict) -> str:
    """Which runs a spec takes part in: ``both``, ``untargeted only`` or ``targeted only``."""
    if row.get("targeted_only"):
        return "targeted only"
    return "both" if row.get("targeted_support") else "untargeted only"


def _steps_scale_effect(spec) -> str:
    """What ``--steps-scale s`` does to ``spec``, with the presets' factors as examples."""
    from attackaudit.run.config import PRESETS

    if spec.steps_at(1.0) is None:
        return "none: no steps_param, same iterations at any scale"
    examples = ", ".join(f"{name} ×{preset['steps_scale']:g}: {spec.steps_at(preset['steps_scale'])}"
                         for name, preset in PRESETS.items() if "steps_scale" in preset)
    return f"{spec.steps_param}={spec.steps_at(1.0)} × s, rounded, at least 1 ({examples})"


# -- models --------------------------------------------------------------------------------
def cmd_models(args: argparse.Namespace) -> int:
    import torch

    from attackaudit.sources.subset import digits
    from attackaudit.sources.zoo import ZOO, load_model

    x, y = digits("test")
    rows = []
    for name, entry in ZOO.items():
        with torch.no_grad():
            acc = (load_model(name)(x).argmax(1) == y).float().mean().item()
        rows.append({"name": name, "dataset": entry.dataset, "architecture": entry.architecture,
                     "training": entry.training, "epsilon": entry.epsilon,
                     "clean_accuracy": round(acc, 4), "description": entry.description})
    if args.format == "json":
        print(json.dumps(rows, indent=2))
    else:
        _print_table(rows, ["name", "training", "epsilon", "clean_accuracy", "description"])
    return 0


# -- run -----------------------------------------------------------------------------------
def _run_flags(args: argparse.Namespace) -> dict:
    flags = grid_flags(args, GRID_VALUES + ["out", "preset", "libraries", "executor", "scheduler", "batch_size",
                                            "memory_limit_mb", "dataset", "model_dir", "threat_model", "repeat",
                                            "retry", "until_decided", "exact"],
                       GRID_SWITCHES + ["metamorphic", "force", "strict", "allow_download", "trust_checkpoint"])
    flags["plugins"] = args.plugin
    return flags


def cmd_run(args: argparse.Namespace) -> int:
    from attackaudit.run.config import load_toml, resolve
    from attackaudit.run.sequential import run_grid

    toml = load_toml(args.config) if args.config else None
    config = resolve(toml, _run_flags(args))
    summary = run_grid(config)
    print(summary.line(), file=sys.stderr if config.quiet else sys.stdout)
    print(f"results: {summary.run_dir} (attackaudit.load_run({str(summary.run_dir)!r}))")
    failed = summary.counts.get("crash", 0) + summary.counts.get("timeout", 0) + summary.counts.get("invalid", 0)
    return 1 if config.strict and failed else 0


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="attackaudit", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    p = sub.add_parser("attacks", help="the catalogue of attack implementations, with availability")
    p.add_argument("--library", action="append", help="only this library (repeatable)")
    p.add_argument("--plugin", action="append", help="a .py file defining specs(); its specs are listed first")
    p.add_argument("--plugin-only", dest="plugin_only", action="store_true",
                   help="list only the --plugin files' specs (no built-in library is imported)")
    p.add_argument("--format", choices=["table", "json"], default="table")
    p.set_defaults(func=_guarded(cmd_attacks))

    p = sub.add_parser("models", help="the embedded model zoo, with clean accuracy")
    p.add_argument("--format", choices=["table", "json"], default="table")
    p.set_defaults(func=_guarded(cmd_models))

    p = sub.add_parser("run", help="run the grid of models × attacks × norms")
    p.add_argument("config", nargs="?", help="a CONFIG.toml; flags override it")
    p.add_argument("--out", help="run directory (created; rerunning resumes)")
    p.add_argument("--preset", choices=["quick", "demo"])
    add_grid_arguments(p)
    p.add_argument("--libraries", nargs="+")
    p.add_argument("--metamorphic", action="store_true", help="also run every model's metamorphic twins (~shift: logits shifted; ~perm: classes permuted) "
                        "and, on the first model, the run twins (~seed: randomised attacks with another seed, "
                        "the noise floor; ~split: every attack on one sample per call; ~batch: every attack on "
                        "the images reversed, with companions, in one call)")
    p.add_argument("--repeat", type=int, help="2: run every job on the first model a second time with the same "
                                              "seed (in OUT/repeat); reports flag results that differ (nondeterminism)")
    p.add_argument("--executor", choices=["local", "dask"])
    p.add_argument("--scheduler", help="address of an existing Dask scheduler")
    p.add_argument("--batch-size", dest="batch_size", type=int, help="samples per attack call (0: all at once)")
    p.add_argument("--dataset", help="digits, cifar10:DIR, cifar100:DIR, imagenet:ROOT:LIST[:CROP[:RESIZE]], "
                                     "tensors:FILE or tensors:INPUTS:LABELS")
    p.add_argument("--model-dir", dest="model_dir",
                   help="RobustBench checkpoints, laid out as DIR/<dataset>/<threat_model>/<name>.pt")
    p.add_argument("--threat-model", dest="threat_model",
                   help="RobustBench threat model (Linf, L2, corruptions) for robustbench: models naming none")
    p.add_argument("--allow-download", dest="allow_download", action="store_true",
                   help="let model sources download missing weights (never done otherwise)")
    p.add_argument("--trust-checkpoint", dest="trust_checkpoint", action="store_true",
                   help="unpickle checkpoints in full (torch.load weights_only=False): only for trusted files")
    p.add_argument("--memory-limit-mb", dest="memory_limit_mb", type=int)
    p.add_argument("--plugin", action="append", help="a .py file defining specs() (repeatable)")
    p.add_argument("--force", action="store_true", help="run a changed config in an existing run directory")
    p.add_argument("--retry", choices=["crashed"], help="crashed: also run again the finished jobs that crashed "
                                                         "(jobs whose worker failed before the attack always run again)")
    p.add_argument("--strict", action="store_true", help="exit 1 when any job crashed, timed out or was invalid")
    p.add_argument("--no-exact", dest="exact", action="store_false", default=None,
                   help="skip the exact minimal distances a run of digits-mlp or digits-mlp-tiny writes to OUT/exact/")
    p.add_argument("--until-decided", dest="until_decided", type=int, metavar="CAP",
                   help="judge at --samples, then run only the undecided family x norm rows again on doubling "
                        "nested subsets up to CAP images (or the dataset's size), the error rate spent across "
                        "the looks; the looks go to OUT/looks/ and OUT/manifest.json")
    p.set_defaults(func=_guarded(cmd_run))

    from attackaudit.reports import command as report_command

    from attackaudit.exact import command as exact_command

    p = sub.add_parser("report", help="report.md, report.html and tables of one or more runs (several merge)")
    report_command.add_arguments(p)
    p.set_defaults(func=_guarded(report_command.main))

    p = sub.add_parser("compare", help="diff of two runs: per-implementation verdicts")
    report_command.add_compare_arguments(p)
    p.set_defaults(func=_guarded(report_command.compare_main))

    from attackaudit.reports import explain as explain_command

    p = sub.add_parser("explain", help="one implementation's story: flags, trust and why, ξ per model, "
                                       "the images where it falls furthest behind the envelope")
    explain_command.add_arguments(p)
    p.set_defaults(func=_guarded(explain_command.main))

    p = sub.add_parser("exact", help="exact minimal L∞/L1/L0/L2 distances of a small ReLU net by MILP (L2: MIQP)")
    exact_command.add_arguments(p)
    p.set_defaults(func=_guarded(exact_command.main))

    import attackaudit.audit.command as audit_command

    p = sub.add_parser("audit", help="release audit: the same grid on two releases of a library, and what "
                                       "changed (--bisect: in which release)")
    audit_command.add_arguments(p)
    p.set_defaults(func=_guarded(audit_command.main))
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
