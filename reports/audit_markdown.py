"""The release audit as Markdown (``attackaudit compare``: compare.md; ``attackaudit audit``:
audit.md): the counts of each verdict, one line per implementation, and the diff's table. The
wording is ``audit_text.py``; the HTML page with its evidence ``audit_html.py``."""
from __future__ import annotations

import pandas as pd

from .audit_text import DIFF_COLS, EXPLAIN_DIFF, ordered, verdict_line
from .markdown_parts import md, table


def render_compare_markdown(diff: pd.DataFrame, run_a: str, run_b: str, title: str = "Release audit",
                            notes: list[str] = ()) -> str:
    """The release audit of two runs (``fidelity.diff``) as Markdown; ``attackaudit compare`` titles
    it "Comparison of two runs", and ``notes`` (e.g. the settings that differ) follow the runs."""
    counts = diff["verdict"].value_counts() if len(diff) else pd.Series(dtype=int)
    rows = ordered(diff)
    out = [f"# {md(title)}\n", f"A: {md(run_a)} · B: {md(run_b)}\n", *(f"**{md(n)}**\n" for n in notes),
           "## Changes from A to B\n", md(EXPLAIN_DIFF) + "\n",
           "**" + md(", ".join(f"{n} {v}" for v, n in counts.items()) or "nothing to compare") + "**\n"]
    out += [f"- {md(verdict_line(r))}" for _, r in rows.iterrows()]
    out.append("")
    out.append(table(rows, DIFF_COLS))
    return "\n".join(out).rstrip() + "\n"
