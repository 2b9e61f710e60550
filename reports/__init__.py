"""Reports: the fidelity tables of one or several runs rendered for a person who must decide which
implementation of an attack to trust.

``write_report(run_dirs, out, formats)`` writes, into ``out`` (default: the single run
directory):

- ``leaderboard.csv``, ``alignment.csv`` (+ ``alignment_pairs.csv``: the paired tests),
  ``flags.csv`` and, when exact distances exist, ``exact_optimality.csv`` — always;
- ``"json"``: the same tables as strict JSON (``alignment.json`` holds both the side-by-side
  rows and the pairs; inf is the string "inf", NaN null) and ``report.json`` (summary, and the
  recommendation per family and norm with its ``trust_set`` and ``optimality_ci``);
- ``"md"``: ``report.md`` with its plots as ``plots/*.svg``;
- ``"html"``: ``report.html``, one self-contained file (inline SVG, CSS and a sorting script).
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterable

from attackaudit.fidelity.recommend import expectation_source
from attackaudit.fidelity.yardstick_verdicts import ADVICE
from .run_files import dump_json, load_repeats, load_runs, records, write_tables
from .tables import ReportData, build
from attackaudit.errors import InputError

FORMATS = ("md", "html", "json")

__all__ = ["FORMATS", "ReportData", "build", "load_runs", "write_report", "write_report_data"]


def _atomic_text(path: Path, text: str) -> Path:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
    return path


def write_report_data(data: ReportData, out: Path, formats: Iterable[str] = FORMATS) -> dict[str, Path]:
    """Write the tables and the chosen report formats of ``data`` into ``out``."""
    formats = tuple(dict.fromkeys(formats))
    unknown = [f for f in formats if f not in FORMATS]
    if unknown:
        raise InputError(f"unknown report format {unknown[0]!r}; choose from {', '.join(FORMATS)}")
    out = Path(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"cannot write the report into {out} ({exc.strerror or exc})") from None
    written = write_tables(data, out, json_too="json" in formats)
    if "json" in formats:
        written["report.json"] = dump_json({
            "summary": data.summary, "notes": data.notes, "recommendation": records(
                # the advice values stay in memory for each view's words; report.json has the sentences
                data.recommend.drop(columns=[ADVICE], errors="ignore")),
            "expected_strength_source": expectation_source(), "crashes": records(data.crashes)},
            out / "report.json")
    if "md" in formats:
        from .markdown import render_markdown
        written["report.md"] = _atomic_text(out / "report.md", render_markdown(data, out / "plots"))
    if "html" in formats:
        from .html import render_html
        written["report.html"] = _atomic_text(out / "report.html", render_html(data))
    return written


def write_report(run_dirs: Iterable[Path | str] | Path | str, out: Path | str | None = None,
                 formats: Iterable[str] = FORMATS) -> dict[str, Path]:
    """Load one or several run directories (merged), compute the fidelity tables and write the
    report; returns ``{file name: path}``.

    ``out`` defaults to the run directory; with several runs it is required. Raises ValueError
    with a one-line message for a missing or empty run directory, several runs without ``out``,
    or an unknown format.
    """
    formats = tuple(formats)
    unknown = [f for f in formats if f not in FORMATS]
    if unknown:
        raise InputError(f"unknown report format {unknown[0]!r}; choose from {', '.join(FORMATS)}")
    if isinstance(run_dirs, (str, Path)):
        run_dirs = [run_dirs]
    dirs = [Path(d) for d in run_dirs]
    if out is None:
        if len(dirs) != 1:
            raise InputError(f"{len(dirs)} run directories given: name the merged report's directory with --out DIR"
                             if dirs else "no run directory given")
        out = dirs[0]
    table, manifests, exact = load_runs(dirs)
    data = build(table, manifests, dirs, exact, repeats=load_repeats(dirs))
    return write_report_data(data, Path(out), formats)
