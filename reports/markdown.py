"""``report.md``: the same content as the HTML report as GitHub-flavoured Markdown. Plots are
written as SVG files under ``plots/`` beside it and linked relatively.

Table cells and sentences go through ``md``: ``<``, ``>`` and ``&`` become entities (Markdown
renderers pass raw HTML through) and ``|`` is escaped, so names from libraries stay text.
"""
from __future__ import annotations

import hashlib
import html
import re
from pathlib import Path
from typing import Iterable

import pandas as pd

from . import text as T
from .answer import answers
from .first_screen import SCREEN_COLUMNS, SCREEN_KEY, VERDICT_LABEL, norm_bests, screen_rows
from .plots import curve_svg, family_svg
from .tables import ReportData


def md(value: object) -> str:
    s = " ".join(T.f_text(value).split())
    s = html.escape(s, quote=False)
    s = re.sub(r"([|\\`*\[\]])", r"\\\1", s)
    # "_" only where it could start or end emphasis (adv_lib stays readable)
    return re.sub(r"(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])", r"\\_", s)


def table(frame: pd.DataFrame, cols: Iterable[T.Col]) -> str:
    cols = [c for c in cols if c.key in frame.columns]
    lines = ["| " + " | ".join(md(c.header) for c in cols) + " |",
             "|" + "|".join("---:" if c.numeric else "---" for c in cols) + "|"]
    for _, r in frame.iterrows():
        lines.append("| " + " | ".join(md(c.fmt(r[c.key])) for c in cols) + " |")
    return "\n".join(lines) + "\n"


def _slug(*parts: object) -> str:
    raw = "-".join(str(p) for p in parts)
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "-", raw).strip("-")[:60]
    return f"{safe}-{hashlib.sha1(raw.encode()).hexdigest()[:6]}"


def answer_table(data: ReportData) -> str:
    """The first screen's answer table: the rows and texts of report.html's (``first_screen``),
    the family and verdict on the first row of each family and norm."""
    rows = screen_rows(answers(data), norm_bests(data))
    if not rows:
        return "No implementation produced results.\n"
    lines = ["| " + " | ".join(md(h) for h, _ in SCREEN_COLUMNS) + " |", "|---|---|---|---:|---|---:|"]
    for r in rows:
        family = f"{r.family_text} {r.family_flags_text}".strip() if r.span else ""
        verdict = VERDICT_LABEL.get(r.answer.verdict, r.answer.verdict) if r.span else ""
        cells = (family, verdict, r.label, r.xi_text, r.note_text, r.flags_text)
        lines.append("| " + " | ".join(md(c) for c in cells) + " |")
    return "\n".join(lines) + "\n"


def render_markdown(data: ReportData, plot_dir: Path | None = None, plot_prefix: str = "plots") -> str:
    """The report as Markdown; with ``plot_dir`` the plots are written there as SVG files and
    linked as ``plot_prefix/<name>.svg`` (without it the report refers to report.html)."""
    out: list[str] = []
    s = data.summary
    if plot_dir is not None:
        plot_dir.mkdir(parents=True, exist_ok=True)

    def plot(svg_fn, name: str, alt: str) -> str:
        if plot_dir is None:
            return "_(plot in report.html)_\n"
        path = plot_dir / f"{name}.svg"
        path.write_text(svg_fn().standalone(), encoding="utf-8")
        return f"![{md(alt)}]({plot_prefix}/{path.name})\n"

    out.append("# Attack implementation audit\n")
    out.append(answer_table(data))
    out.append(f"{md(SCREEN_KEY)} The flags, with their evidence: section 5.\n")
    out.append(f"{md(', '.join(s['runs']) or 'result table')}. Which implementation of each attack to trust, and "
               "where the libraries disagree: same models, same samples, same query budget for every "
               "implementation.\n")
    out.append("## Contents\n")
    toc = ["Summary and recommendation", "Leaderboard per norm", "Robust accuracy against ε",
           "Alignment of shared families", "Flags", "Crashes, timeouts and invalid output"]
    if data.true_optimality is not None and len(data.true_optimality):
        toc.append("Against exact distances")
    toc.append("Implementations and parameters")
    for i, title in enumerate(toc, 1):
        anchor = re.sub(r"[^\w\- ]", "", f"{i}. {title}".lower()).replace(" ", "-")
        out.append(f"{i}. [{title}](#{anchor})")
    out.append("")

    n = 1
    out.append(f"## {n}. Summary and recommendation\n\n{md(T.EXPLAIN_SUMMARY)}\n\n### What ran\n")
    out += [f"- **{md(k)}**: {md(v)}" for k, v in T.facts(data)]
    out.append("\n### Findings\n")
    out += [f"- {md(f)}" for f in T.findings(data)]
    if s.get("skipped"):
        out.append("\n### Skipped attacks\n")
        out += [f"- {md(x.get('attack', '?'))}: {md(x.get('reason', ''))}" for x in s["skipped"]]
    out.append(f"\n### Which implementation to trust\n\n{md(T.EXPLAIN_RECOMMEND)}\n")
    rec = T.recommendation_rows(data)
    out.append(table(rec, T.RECOMMEND_COLS) if len(rec) else "No implementation produced results.\n")

    n += 1
    out.append(f"## {n}. Leaderboard per norm\n\n{md(T.EXPLAIN_LEADERBOARD.replace(' Click a column header to sort.', ''))}\n")
    for norm, g in data.leaderboard.groupby("norm", sort=True):
        ref = g["ref_eps"].iloc[0] if "ref_eps" in g else float("nan")
        out.append(f"### {md(norm)} — {len(g)} implementations, reference ε = {md(T.f_dist(ref))}\n")
        out.append(table(g, T.LEADERBOARD_COLS))

    n += 1
    out.append(f"## {n}. Robust accuracy against ε\n\n{md(T.EXPLAIN_CURVES)}\n")
    for i, curve in enumerate(data.curves):
        out.append(f"### {md(curve.model)} · {md(curve.norm)}\n")
        out.append(plot(lambda i=i: curve_svg(data, i), _slug("curve", curve.model, curve.norm),
                        f"robust accuracy against ε, {curve.model}, {curve.norm}"))
        out.append(md(T.curve_caption(curve)) + "\n")

    n += 1
    out.append(f"## {n}. Alignment of shared families\n\n{md(T.EXPLAIN_ALIGNMENT)}\n")
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
            out.append(plot(lambda fam=fam: family_svg(data, fam["index"]), _slug("pair", fam["family"], fam["norm"]),
                            f"per-sample distances, {fam['family']}, {fam['norm']}"))
            out.append(md(T.pair_sentence(w)) + "\n")
    if not data.families:
        out.append("No family has more than one implementation in this run.\n")

    n += 1
    out.append(f"## {n}. Flags\n\n{md(T.EXPLAIN_FLAGS)}\n")
    if len(data.flags):
        out += [f"- **{md(flag)}** ({k}): {md(T.flag_meaning(flag))}" for flag, k in data.flags.groupby("flag").size().items()]
        out.append("")
        out.append(table(T.flag_rows(data.flags), T.FLAG_COLS))
    else:
        out.append("No flags: every implementation ran cleanly and none is significantly weaker than the best of its "
                   "family.\n")

    if data.seed_twins is not None:
        from .seed_twins import seed_twin_sentence

        out.append(f"### Noise floor: the seed twins\n\n{md(T.EXPLAIN_SEED)}\n\n{md(seed_twin_sentence(data.seed_twins))}\n")
        out.append(table(data.seed_twins, T.SEED_COLS))

    n += 1
    out.append(f"## {n}. Crashes, timeouts and invalid output\n\n{md(T.EXPLAIN_CRASHES)}\n")
    out.append(table(data.crashes, T.CRASH_COLS) if len(data.crashes) else "None: every job finished.\n")

    if data.true_optimality is not None and len(data.true_optimality):
        n += 1
        out.append(f"## {n}. Against exact distances\n\n{md(T.EXPLAIN_EXACT)}\n")
        out.append(table(data.true_optimality, T.EXACT_COLS))

    n += 1
    out.append(f"## {n}. Implementations and parameters\n")
    out.append(table(data.implementations, T.IMPL_COLS))
    return "\n".join(out).rstrip() + "\n"


def render_compare_markdown(diff: pd.DataFrame, run_a: str, run_b: str) -> str:
    """The release audit of two runs (``fidelity.diff``) as Markdown."""
    counts = diff["verdict"].value_counts() if len(diff) else pd.Series(dtype=int)
    order = {"regressed": 0, "improved": 1, "new": 2, "removed": 3, "unchanged": 4}
    rows = diff.assign(_o=diff["verdict"].map(order).fillna(9)).sort_values(["_o", "implementation", "norm"]) \
        if len(diff) else diff
    out = ["# Release audit\n", f"A: {md(run_a)} · B: {md(run_b)}\n", "## Changes from A to B\n", md(T.EXPLAIN_DIFF) + "\n",
           "**" + md(", ".join(f"{n} {v}" for v, n in counts.items()) or "nothing to compare") + "**\n"]
    out += [f"- {md(T.verdict_line(r))}" for _, r in rows.iterrows()]
    out.append("")
    out.append(table(rows, T.DIFF_COLS))
    return "\n".join(out).rstrip() + "\n"
