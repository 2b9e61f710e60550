"""The pieces every Markdown page of the reports is built from (``markdown.py``: report.md;
``audit_markdown.py``: the release audit's compare.md / audit.md): escaping, tables, file names.

Table cells and sentences go through ``md``: ``<``, ``>`` and ``&`` become entities (Markdown
renderers pass raw HTML through) and ``|`` is escaped, so names from libraries stay text.
"""
from __future__ import annotations

import hashlib
import html
import re
from typing import Iterable

import pandas as pd

from .formats import Col, f_text


def md(value: object) -> str:
    """``value`` as Markdown text that renders as itself, on one line."""
    s = " ".join(f_text(value).split())
    # an arrow "->" stays one: with every "<" escaped no ">" can close a tag, and "-&gt;" is what a
    # reader of the raw file met in compare.md ("xi 1.00 -&gt; 0.12")
    s = html.escape(s, quote=False).replace("-&gt;", "->")
    s = re.sub(r"([|\\`*\[\]])", r"\\\1", s)
    # "_" only where it could start or end emphasis (adv_lib stays readable)
    return re.sub(r"(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])", r"\\_", s)


def table(frame: pd.DataFrame, cols: Iterable[Col]) -> str:
    """A GitHub-flavoured table of ``frame``'s ``cols`` (absent columns are skipped)."""
    cols = [c for c in cols if c.key in frame.columns]
    lines = ["| " + " | ".join(md(c.header) for c in cols) + " |",
             "|" + "|".join("---:" if c.numeric else "---" for c in cols) + "|"]
    for _, r in frame.iterrows():
        lines.append("| " + " | ".join(md(c.fmt(r[c.key])) for c in cols) + " |")
    return "\n".join(lines) + "\n"


def slug(*parts: object) -> str:
    """A file name made of ``parts``: readable, safe, and unique by a short hash of them."""
    raw = "-".join(str(p) for p in parts)
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "-", raw).strip("-")[:60]
    return f"{safe}-{hashlib.sha1(raw.encode()).hexdigest()[:6]}"
