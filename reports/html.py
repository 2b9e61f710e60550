"""``report.html``: the run report as one self-contained page, for the person who must decide which
implementation of an attack to trust: the answer on the first screen (``answer_html.py``), the
contents in a side bar, then one section per part of the report, every verdict and flag linked to
its evidence. Inline CSS, plots as inline SVG, a few lines of inline script to sort tables, nothing
fetched from anywhere (``html_page.py``: a Content-Security-Policy forbids it, and allows only this
page's own script by its hash).

Everything that came from a library, a user or a config (names, versions, errors, params,
evidence) goes through ``esc`` (``html.escape``), attribute values included.
"""
from __future__ import annotations

import hashlib
from datetime import datetime, timezone

from . import text as T
from .answer import anchor as answer_anchor
from .answer_html import answer_section, answers, evidence_plots, evidence_section, flag_rows_html
from .audit_html import render_compare_html  # noqa: F401  (imported from here by harness/audit)
from .html_page import document
from .html_parts import Plots, esc, figure, table, ul
from .plots import curve_svg
from .tables import ReportData

#: one entry of the contents: (anchor, title, [(anchor, title) of each subsection])
Entry = tuple[str, str, list[tuple[str, str]]]


def _anchor(*parts: object) -> str:
    raw = "-".join(str(p) for p in parts)
    return "s" + hashlib.sha1(raw.encode()).hexdigest()[:10]


def render_html(data: ReportData, generated: str | None = None) -> str:
    """The whole report as one HTML document (str): the answer on the first screen, the contents
    in a side bar, every verdict and flag linked to its evidence."""
    s = data.summary
    generated = generated or datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    found = answers(data)
    sections: list[tuple[Entry, str]] = [(("answer", "Which implementation to trust", []), answer_section(data, found)),
                                         (("summary", "Summary and recommendation", []), _summary(data))]
    # one Plots for the page: the first plot inlined (an evidence plot) carries every shared definition
    plots = Plots([curve_svg(data, i) for i in range(len(data.curves))])
    for svg in evidence_plots(data, found).values():
        plots.defs.update(svg.defs)
    sections += [(("evidence", "Evidence for each answer", []), evidence_section(data, found, plots)),
                 _leaderboard(data), _curves(data, plots), _alignment(data),
                 (("flags", "Flags", []), _flags(data)),
                 (("crashes", "Crashes, timeouts and invalid output", []), _crashes(data))]
    if data.true_optimality is not None and len(data.true_optimality):
        sections.append((("exact", "Against exact distances", []),
                         f'<section id="exact"><h2>Against exact distances</h2><p class="explain">{esc(T.EXPLAIN_EXACT)}</p>'
                         + table(data.true_optimality, T.EXACT_COLS) + "</section>"))
    sections.append((("implementations", "Implementations and parameters", []),
                     '<section id="implementations"><h2>Implementations and parameters</h2>'
                     + table(data.implementations, T.IMPL_COLS, classes={"params": "params"}) + "</section>"))

    title = "attackaudit report — " + (", ".join(s["run_names"]) or "results")
    header = ('<header class="top"><h1>Attack implementation audit</h1>'
              f'<p class="ran"><strong>What ran:</strong> {esc(T.ran_line(data))}</p></header>')
    footer = (f'<p class="meta">{esc(", ".join(s["runs"]) or "result table")} · generated {esc(generated)} by '
              "attackaudit · same models, same samples, same query budget for every implementation</p>")
    body = header + "".join(part for _, part in sections) + footer
    return document(title, body, side='<aside class="side">' + _contents([entry for entry, _ in sections]) + "</aside>")


def _contents(toc: list[Entry]) -> str:
    """The side bar's contents: each section, with its subsections."""
    nav = ['<nav class="toc" aria-label="Contents"><strong>Contents</strong><ol>']
    for anchor, title, kids in toc:
        nav.append(f'<li><a href="#{anchor}">{esc(title)}</a>')
        if kids:
            nav.append("<ol>" + "".join(f'<li><a href="#{a}">{esc(t)}</a></li>' for a, t in kids) + "</ol>")
        nav.append("</li>")
    nav.append("</ol></nav>")
    return "".join(nav)


def _summary(data: ReportData) -> str:
    """What ran, the findings, skipped attacks and the recommendation table in full."""
    facts = "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in T.facts(data))
    parts = ['<section id="summary"><h2>Summary and recommendation</h2>'
             f'<p class="explain">{esc(T.EXPLAIN_SUMMARY)}</p>'
             f'<h3>What ran</h3><dl class="facts">{facts}</dl>'
             f'<h3>Findings</h3>{ul(T.findings(data), "findings")}']
    if data.summary.get("skipped"):
        parts.append("<h3>Skipped attacks</h3>" + ul(f"{x.get('attack', '?')}: {x.get('reason', '')}"
                                                      for x in data.summary["skipped"]))
    rec = T.recommendation_rows(data)
    parts.append(f'<h3 id="recommendation">Which implementation to trust, in full</h3><p class="explain">{esc(T.EXPLAIN_RECOMMEND)}</p>')
    parts.append(table(rec, T.RECOMMEND_COLS, classes={"trust": "trusted"}) if len(rec)
                 else "<p>No implementation produced results.</p>")
    parts.append("</section>")
    return "".join(parts)


def _leaderboard(data: ReportData) -> tuple[Entry, str]:
    """One sortable table per norm."""
    children, body = [], []
    for norm, g in data.leaderboard.groupby("norm", sort=True):
        anchor = _anchor("lb", norm)
        ref = g["ref_eps"].iloc[0] if "ref_eps" in g else float("nan")
        children.append((anchor, f"{norm}"))
        body.append(f'<h3 id="{anchor}">{esc(norm)} — {len(g)} implementations, reference ε = {esc(T.f_dist(ref))}</h3>')
        body.append(table(g, T.LEADERBOARD_COLS, classes={"flags": "flagged"}))
    return (("leaderboard", "Leaderboard per norm", children),
            f'<section id="leaderboard"><h2>Leaderboard per norm</h2><p class="explain">{esc(T.EXPLAIN_LEADERBOARD)}</p>'
            + "".join(body) + "</section>")


def _curves(data: ReportData, plots: Plots) -> tuple[Entry, str]:
    """One robust-accuracy plot per model and norm."""
    children, body = [], []
    for i, curve in enumerate(data.curves):
        anchor = _anchor("curve", curve.model, curve.norm)
        children.append((anchor, f"{curve.model} · {curve.norm}"))
        body.append(f'<h3 id="{anchor}">{esc(curve.model)} · {esc(curve.norm)}</h3>')
        body.append(figure(plots.inline(curve_svg(data, i)), T.curve_caption(curve),
                           f"robust accuracy against epsilon, {curve.model}, {curve.norm}"))
    return (("curves", "Robust accuracy against ε", children),
            f'<section id="curves"><h2>Robust accuracy against ε</h2><p class="explain">{esc(T.EXPLAIN_CURVES)}</p>'
            + "".join(body) + "</section>")


def _alignment(data: ReportData) -> tuple[Entry, str]:
    """Per family that several implementations ran: side by side, and the pooled paired tests."""
    children, body = [], []
    shared = [f for f in data.families if f["cross_library"]]
    variants = [f for f in data.families if not f["cross_library"]]
    if not shared:
        body.append('<p class="note">No attack family was run by two or more libraries, so there is no '
                    'cross-library alignment. The families below have several variants within one library.</p>')
    for fam in shared + variants:
        anchor = _anchor("fam", fam["family"], fam["norm"])
        kind = "" if fam["cross_library"] else " (one library)"
        children.append((anchor, f"{fam['family']} · {fam['norm']}{kind}"))
        body.append(f'<h3 id="{anchor}">{esc(fam["family"])} · {esc(fam["norm"])}{esc(kind)}</h3>'
                    f"<p>{esc(T.family_sentence(fam))}</p>")
        body.append(table(fam["side"], T.SIDE_COLS, classes={"flags": "flagged"}))
        pooled, per_model = T.split_pairs(fam["pairs"])
        if len(pooled):
            body.append("<p><strong>Paired tests</strong> (A against B on the samples that needed an attack, "
                        "all models pooled):</p>")
            body.append(table(pooled, T.PAIR_COLS))
        if len(per_model):  # in the tables, not the page: they would double its size
            body.append(f'<p class="explain">The same tests per model ({len(per_model)} rows): alignment_pairs.csv '
                        "beside this report.</p>")
        # the per-image scatter is in the answer's evidence (the comparison behind the verdict);
        # a second one per family here would add a sixth of the page
        body.append(f'<p><a href="#{answer_anchor("answer", fam["family"], fam["norm"])}">Per-image comparison and '
                    "trust set of this family and norm</a></p>")
    if not data.families:
        body.append("<p>No family has more than one implementation in this run.</p>")
    return (("alignment", "Alignment of shared families", children),
            f'<section id="alignment"><h2>Alignment of shared families</h2><p class="explain">{esc(T.EXPLAIN_ALIGNMENT)}</p>'
            + "".join(body) + "</section>")


def _flags(data: ReportData) -> str:
    """The flags with their meaning and the rows they rest on, then the seed twins' noise floor."""
    body = [f'<p class="explain">{esc(T.EXPLAIN_FLAGS)}</p>']
    if len(data.flags):
        counts = data.flags.groupby("flag").size()
        body.append(ul(T.flag_line(flag, n) for flag, n in counts.items()))
        body.append(flag_rows_html(data))
    else:
        body.append("<p>No flags: every implementation ran cleanly and none is significantly weaker than the best "
                    "of its family.</p>")
    if data.seed_twins is not None:
        from .seed_twins import seed_twin_sentence

        body.append(f'<h3 id="seed-twins">Noise floor: the seed twins</h3><p class="explain">{esc(T.EXPLAIN_SEED)}</p>'
                    f"<p>{esc(seed_twin_sentence(data.seed_twins))}</p>")
        body.append(f"<details><summary>Every seed twin ({len(data.seed_twins)})</summary>"
                    + table(data.seed_twins, T.SEED_COLS) + "</details>")
    return '<section id="flags"><h2>Flags</h2>' + "".join(body) + "</section>"


def _crashes(data: ReportData) -> str:
    body = [f'<p class="explain">{esc(T.EXPLAIN_CRASHES)}</p>']
    body.append(table(data.crashes, T.CRASH_COLS, classes={"cause": "cause"}) if len(data.crashes)
                else "<p>None: every job finished.</p>")
    return '<section id="crashes"><h2>Crashes, timeouts and invalid output</h2>' + "".join(body) + "</section>"
