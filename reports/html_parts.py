"""The pieces every HTML page of the reports is built from: escaping, tables, lists, figures and
the page-wide sharing of inline plots' definitions (``html.py`` writes report.html with them,
``answer_html.py`` its first screen and evidence, ``audit_html.py`` the release audit's page;
``html_page.py`` the document around each).

Everything that came from a library, a user or a config goes through ``esc`` (``html.escape``),
attribute values included.
"""
from __future__ import annotations

import html
from typing import Callable, Iterable

import pandas as pd

from .formats import Col, f_text, sort_key
from .svg import Svg


def esc(value: object) -> str:
    """``value`` as text safe in HTML content and in quoted attribute values."""
    return html.escape(f_text(value), quote=True)


def _td(col: Col, value: object, extra_class: str = "", sortable: bool = True, href: str = "") -> str:
    # a plain (unsortable) table repeats often: no per-cell class, its numbers use tabular figures
    classes = [c for c in ("num" if col.numeric and sortable else "", extra_class) if c]
    cls = f' class="{" ".join(classes)}"' if classes else ""
    sort = f' data-sort="{esc(sort_key(value))}"' if col.numeric and sortable else ""
    shown = esc(col.fmt(value))
    return f"<td{cls}{sort}>{f'<a href={chr(34)}#{esc(href)}{chr(34)}>{shown}</a>' if href and shown else shown}</td>"


def table(frame: pd.DataFrame, cols: Iterable[Col], *, caption: str = "", classes: dict[str, str] | None = None,
          row_class=None, sortable: bool = True, links: dict[str, Callable[[pd.Series], str]] | None = None) -> str:
    """A table of ``frame``'s ``cols`` (absent columns are skipped); ``sortable``: a click on a
    header sorts it; ``links``: column key -> the id (without "#") a row's cell links to."""
    cols = [c for c in cols if c.key in frame.columns]
    classes, links = classes or {}, links or {}
    head = "".join(f'<th scope="col"{f" title={chr(34)}{esc(c.tip)}{chr(34)}" if c.tip else ""}>{esc(c.header)}</th>'
                   for c in cols)
    body = []
    for _, r in frame.iterrows():
        rc = row_class(r) if row_class else ""
        cells = "".join(_td(c, r[c.key], classes.get(c.key, ""), sortable, links[c.key](r) if c.key in links else "")
                        for c in cols)
        body.append(f'<tr{f" class={chr(34)}{esc(rc)}{chr(34)}" if rc else ""}>{cells}</tr>')
    cap = f"<caption>{esc(caption)}</caption>" if caption else ""
    return (f'<div class="table-wrap"><table class="{"sortable" if sortable else "plain"}">{cap}<thead><tr>{head}</tr></thead>'
            f'<tbody>{"".join(body)}</tbody></table></div>')


def ul(items: Iterable[str], cls: str = "") -> str:
    """A bulleted list of ``items`` (escaped), of class ``cls``; "" when there are none."""
    items = list(items)
    if not items:
        return ""
    return f'<ul{f" class={chr(34)}{cls}{chr(34)}" if cls else ""}>' + "".join(f"<li>{esc(i)}</li>" for i in items) + "</ul>"


def figure(svg: str, caption: str, label: str) -> str:
    """A captioned plot; ``svg`` is an inline ``<svg>`` element from reports/svg.py."""
    # the SVG comes from reports/svg.py: paths and glyph outlines only, no text, no comments
    return (f'<figure role="img" aria-label="{esc(label)}">{svg}'
            f"<figcaption>{esc(caption)}</figcaption></figure>")


class Plots:
    """The report's plots inlined: the first one placed carries the CSS and every shared
    definition (glyphs, markers) of all of them, the others refer to those (ids are document-wide
    in HTML), so a glyph's outline is in the page once, not once per plot."""

    def __init__(self, plots: list[Svg]):
        self.defs: dict[str, str] = {}
        for p in plots:
            self.defs.update(p.defs)
        self.placed = False

    def inline(self, plot: Svg) -> str:
        if self.placed:
            return plot.element()
        self.placed = True
        return plot.element(self.defs, style=True)
