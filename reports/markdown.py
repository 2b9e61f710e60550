"""``report.md``: the run report as GitHub-flavoured Markdown, the same content as report.html for
a reader of a repository or a pull request. It opens on the same answer table (``first_screen``);
plots are written as SVG files under ``plots/`` beside it and linked relatively.

Table cells and sentences go through ``markdown_parts.md``, so names from libraries stay text.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Callable

from . import text as T
from .answer import answers
from .audit_markdown import render_compare_markdown  # noqa: F401  (imported from here by harness/audit)
from .first_screen import SCREEN_COLUMNS, SCREEN_KEY, VERDICT_LABEL, norm_bests, ordered, screen_rows, weak_legend
from .markdown_parts import md, slug, table
from .plots import curve_svg, family_svg
from .svg import Svg
from .tables import ReportData

#: writes one plot and returns the Markdown that shows it: (draw the plot, file name, alt text) -> text
PlotWriter = Callable[[Callable[[], Svg], str, str], str]


def answer_table(data: ReportData) -> str:
    """The first screen's answer table: the rows and texts of report.html's (``first_screen``),
    the family and verdict on the first row of each family and norm."""
    rows = screen_rows(ordered(answers(data)), norm_bests(data))
    if not rows:
        return "No implementation produced results.\n"
    lines = ["| " + " | ".join(md(h) for h, _ in SCREEN_COLUMNS) + " |", "|---|---|---|---:|---|---:|"]
    for r in rows:
        family = f"{r.family_text} {r.family_flags_text}".strip() if r.span else ""
        verdict = VERDICT_LABEL.get(r.answer.verdict, r.answer.verdict) if r.span else ""
        cells = (family, verdict, r.label, r.xi_text, r.note_text, r.flags_text)
        lines.append("| " + " | ".join(md(c) for c in cells) + " |")
    legend = weak_legend(rows)
    return "\n".join(lines) + "\n" + (f"\n{md(legend)}\n" if legend else "")


def render_markdown(data: ReportData, plot_dir: Path | None = None, plot_prefix: str = "plots") -> str:
    """The report as Markdown; with ``plot_dir`` the plots are written there as SVG files and
    linked as ``plot_prefix/<name>.svg`` (without it the report refers to report.html)."""
    if plot_dir is not None:
        plot_dir.mkdir(parents=True, exist_ok=True)
    plot = _plot_writer(plot_dir, plot_prefix)
    sections: list[tuple[str, Callable[[ReportData, str], list[str]]]] = [
        ("Summary and recommendation", _summary), ("Leaderboard per norm", _leaderboard),
        ("Robust accuracy against ε", lambda d, head: _curves(d, head, plot)),
        ("Alignment of shared families", lambda d, head: _alignment(d, head, plot)),
        ("Flags", _flags), ("Crashes, timeouts and invalid output", _crashes)]
    if data.true_optimality is not None and len(data.true_optimality):
        sections.append(("Against exact distances", _exact))
    sections.append(("Implementations and parameters", _implementations))
    out = _opening(data, [title for title, _ in sections])
    for n, (title, section) in enumerate(sections, 1):
        out += section(data, f"## {n}. {title}")
    return "\n".join(out).rstrip() + "\n"


def _plot_writer(plot_dir: Path | None, plot_prefix: str) -> PlotWriter:
    def plot(svg_fn: Callable[[], Svg], name: str, alt: str) -> str:
        if plot_dir is None:
            return "_(plot in report.html)_\n"
        path = plot_dir / f"{name}.svg"
        path.write_text(svg_fn().standalone(), encoding="utf-8")
        return f"![{md(alt)}]({plot_prefix}/{path.name})\n"

    return plot


def _opening(data: ReportData, titles: list[str]) -> list[str]:
    """The title, the answer table and its key, what the report is, and the contents."""
    out = ["# Attack implementation audit\n", answer_table(data),
           f"{md(SCREEN_KEY)} The flags, with their evidence: section 5.\n",
           f"{md(', '.join(data.summary['runs']) or 'result table')}. Which implementation of each attack to trust, "
           "and where the libraries disagree: same models, same samples, same query budget for every "
           "implementation.\n",
           "## Contents\n"]
    for i, title in enumerate(titles, 1):
        anchor = re.sub(r"[^\w\- ]", "", f"{i}. {title}".lower()).replace(" ", "-")
        out.append(f"{i}. [{title}](#{anchor})")
    out.append("")
    return out


def _summary(data: ReportData, head: str) -> list[str]:
    """What ran, the findings, skipped attacks and the recommendation table."""
    s = data.summary
    out = [f"{head}\n\n{md(T.EXPLAIN_SUMMARY)}\n\n### What ran\n"]
    out += [f"- **{md(k)}**: {md(v)}" for k, v in T.facts(data)]
    out.append("\n### Findings\n")
    out += [f"- {md(f)}" for f in T.findings(data)]
    if s.get("skipped"):
        out.append("\n### Skipped attacks\n")
        out += [f"- {md(x.get('attack', '?'))}: {md(x.get('reason', ''))}" for x in s["skipped"]]
    out.append(f"\n### Which implementation to trust\n\n{md(T.EXPLAIN_RECOMMEND)}\n")
    rec = T.recommendation_rows(data)
    out.append(table(rec, T.RECOMMEND_COLS) if len(rec) else "No implementation produced results.\n")
    return out


def _leaderboard(data: ReportData, head: str) -> list[str]:
    out = [f"{head}\n\n{md(T.EXPLAIN_LEADERBOARD.replace(' Click a column header to sort.', ''))}\n"]
    for norm, g in data.leaderboard.groupby("norm", sort=True):
        ref = g["ref_eps"].iloc[0] if "ref_eps" in g else float("nan")
        out.append(f"### {md(norm)} — {len(g)} implementations, reference ε = {md(T.f_dist(ref))}\n")
        out.append(table(g, T.LEADERBOARD_COLS))
    return out


def _curves(data: ReportData, head: str, plot: PlotWriter) -> list[str]:
    out = [f"{head}\n\n{md(T.EXPLAIN_CURVES)}\n"]
    for i, curve in enumerate(data.curves):
        out.append(f"### {md(curve.model)} · {md(curve.norm)}\n")
        out.append(plot(lambda i=i: curve_svg(data, i), slug("curve", curve.model, curve.norm),
                        f"robust accuracy against ε, {curve.model}, {curve.norm}"))
        out.append(md(T.curve_caption(curve)) + "\n")
    return out


def _alignment(data: ReportData, head: str, plot: PlotWriter) -> list[str]:
    """Per family that several implementations ran: side by side, the paired tests (pooled, then
    per model) and the per-image scatter of the two that differ most."""
    out = [f"{head}\n\n{md(T.EXPLAIN_ALIGNMENT)}\n"]
    shared = [f for f in data.families if f["cross_library"]]
    variants = [f for f in data.families if not f["cross_library"]]
    if not shared:
        out.append("> No attack family was run by two or more libraries, so there is no cross-library alignment. "
                   "The families below have several variants within one library.\n")
    for fam in shared + variants:
        kind = "" if fam["cross_library"] else " (one library)"
        out.append(f"### {md(fam['family'])} · {md(fam['norm'])}{kind}\n\n{md(T.family_sentence(fam))}\n")
        out.append(table(fam["side"], T.SIDE_COLS))
        pooled, per_model = T.split_pairs(fam["pairs"])
        if len(pooled):
            out.append("**Paired tests** (A against B on the samples that needed an attack, all models pooled):\n")
            out.append(table(pooled, T.PAIR_COLS))
        if len(per_model):
            out.append("The same tests per model:\n")
            out.append(table(per_model, T.PAIR_COLS))
        w = fam["widest"]
        if w is not None and len(w.dist_a):
            out.append(plot(lambda fam=fam: family_svg(data, fam["index"]), slug("pair", fam["family"], fam["norm"]),
                            f"per-sample distances, {fam['family']}, {fam['norm']}"))
            out.append(md(T.pair_sentence(w)) + "\n")
    if not data.families:
        out.append("No family has more than one implementation in this run.\n")
    return out


def _flags(data: ReportData, head: str) -> list[str]:
    """The flags with their meaning and findings, then the seed twins' noise floor."""
    out = [f"{head}\n\n{md(T.EXPLAIN_FLAGS)}\n"]
    if len(data.flags):
        out += [f"- {md(T.flag_line(flag, k))}" for flag, k in data.flags.groupby("flag").size().items()]
        out.append("")
        out.append(table(T.flag_rows(data.flags), T.FLAG_COLS))
    else:
        out.append("No flags: every implementation ran cleanly and none is significantly weaker than the best of its "
                   "family.\n")
    if data.seed_twins is not None:
        from .seed_twins import seed_twin_sentence

        out.append(f"### Noise floor: the seed twins\n\n{md(T.EXPLAIN_SEED)}\n\n{md(seed_twin_sentence(data.seed_twins))}\n")
        out.append(table(data.seed_twins, T.SEED_COLS))
    return out


def _crashes(data: ReportData, head: str) -> list[str]:
    return [f"{head}\n\n{md(T.EXPLAIN_CRASHES)}\n",
            table(data.crashes, T.CRASH_COLS) if len(data.crashes) else "None: every job finished.\n"]


def _exact(data: ReportData, head: str) -> list[str]:
    return [f"{head}\n\n{md(T.EXPLAIN_EXACT)}\n", table(data.true_optimality, T.EXACT_COLS)]


def _implementations(data: ReportData, head: str) -> list[str]:
    return [f"{head}\n", table(data.implementations, T.IMPL_COLS)]
