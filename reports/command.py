"""``attackaudit report DIR [DIR ...]`` and ``attackaudit compare DIR_A DIR_B``.

Wiring for ``harness/cli.py``::

    p = sub.add_parser("report", help=...);  add_arguments(p);          p.set_defaults(func=main)
    p = sub.add_parser("compare", help=...); add_compare_arguments(p);  p.set_defaults(func=compare_main)

Both functions return an exit code and raise ValueError with a one-line message for input the
user must fix (a missing or empty run directory, several runs without ``--out``, ...).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import FORMATS, write_report
from .run_files import dump_json, load_runs, records
from attackaudit.errors import InputError


def _formats(values: list[str] | None) -> tuple[str, ...]:
    if not values:
        return FORMATS
    out = []
    for v in values:
        for f in str(v).split(","):
            f = f.strip().lower()
            if f and f not in FORMATS:
                raise InputError(f"--format {f!r}: choose from {', '.join(FORMATS)}")
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
    formats = _formats(getattr(args, "format", None))
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
    parser.add_argument("--alpha", type=float, default=0.05,
                        help="family-wise significance level of the paired tests (Holm), as in reports and flags")
    parser.add_argument("--min-delta", dest="min_delta", type=float, default=None,
                        help="materiality margin δ: the smallest per-image relative change in distance that counts "
                             "(default 0.05); inside it a change is 'equivalent', beyond it 'different'")
    parser.add_argument("--by-model", dest="by_model", action="store_true", help="one verdict per model too")
    parser.add_argument("--strict", action="store_true", help="exit 1 when any implementation regressed")
    parser.add_argument("--across-settings", dest="across_settings", action="store_true",
                        help="compare runs made with different settings (budget, samples, seed, --steps-scale, ...), "
                             "each page and the output labelled with them; refused otherwise")


def compare_main(args: argparse.Namespace) -> int:
    """Diff two runs (``fidelity.diff``): one verdict line per implementation and norm on stdout;
    ``diff.csv``, ``diff.json``, ``audit.json`` (the verdicts), ``compare.md`` and
    ``compare.html`` in ``--out`` (default DIR_B). Runs made with different settings
    (``compare_settings.setting_changes``) are refused in one line naming them, unless
    ``--across-settings``: then every output says so first."""
    from attackaudit import fidelity
    from .audit_html import render_compare_html
    from .audit_markdown import render_compare_markdown

    from .compare_settings import refusal, setting_changes, settings_label

    run_a, run_b = Path(args.run_a), Path(args.run_b)
    table_a, manifests_a, _ = load_runs([run_a])
    table_b, manifests_b, _ = load_runs([run_b])
    settings, grid = setting_changes(manifests_a[0], manifests_b[0])
    if settings and not getattr(args, "across_settings", False):
        raise InputError(refusal(str(run_a), str(run_b), settings))
    notes = ([settings_label(settings)] if settings else []) + (
        [f"The grids differ ({'; '.join(grid)}): what one run lacks is new or removed."] if grid else [])
    from attackaudit.sources.dataset_images import dataset_images
    diff = fidelity.diff(table_a, table_b, alpha=getattr(args, "alpha", 0.05),
                         min_delta=getattr(args, "min_delta", None), by_model=bool(getattr(args, "by_model", False)),
                         dataset_images=dataset_images(manifests_b))
    out = Path(args.out) if getattr(args, "out", None) else run_b
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"cannot write the comparison into {out} ({exc.strerror or exc})") from None
    from .audit_text import verdict_line

    diff.to_csv(out / "diff.csv", index=False)
    dump_json(records(diff), out / "diff.json")
    counts = {str(k): int(v) for k, v in diff["verdict"].value_counts().items()} if len(diff) else {}
    verdicts = [{"implementation": r["implementation"], "norm": r["norm"], "model": r["model"],
                 "version_a": r["version_a"], "version_b": r["version_b"], "verdict": r["verdict"],
                 "reason": r["reason"], "line": verdict_line(r)} for _, r in diff.iterrows()]
    dump_json({"run_a": str(run_a), "run_b": str(run_b), "rule": fidelity.VERDICT_RULE, "counts": counts,
               "settings_differ": settings, "grid_differs": grid, "verdicts": verdicts}, out / "audit.json")
    title = "Comparison of two runs"
    (out / "compare.md").write_text(render_compare_markdown(diff, str(run_a), str(run_b), title, notes),
                                    encoding="utf-8")
    (out / "compare.html").write_text(render_compare_html(diff, str(run_a), str(run_b), tables=(table_a, table_b),
                                                          title=title, notes=notes), encoding="utf-8")
    for note in notes:
        print(note)
    for v in verdicts:
        print(v["line"])
    print(f"{', '.join(f'{n} {k}' for k, n in counts.items()) or 'nothing to compare'}; "
          f"audit: {out / 'audit.json'}; report: {out / 'compare.html'}")
    return 1 if getattr(args, "strict", False) and counts.get("regressed", 0) else 0


def _standalone(argv: list[str] | None = None) -> int:
    """``python -m attackaudit.reports.command report|compare ...`` until the CLI is wired."""
    parser = argparse.ArgumentParser(prog="attackaudit")
    sub = parser.add_subparsers(dest="command", required=True)
    add_arguments(sub.add_parser("report"))
    add_compare_arguments(sub.add_parser("compare"))
    args = parser.parse_args(argv)
    try:
        return main(args) if args.command == "report" else compare_main(args)
    except ValueError as exc:
        print(f"attackaudit: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(_standalone())
