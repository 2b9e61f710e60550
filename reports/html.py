"""One self-contained ``report.html``: inline CSS, plots as inline SVG, a few lines of inline script
to sort tables, nothing fetched from anywhere (a Content-Security-Policy forbids it, and allows
only this page's own script by its hash).

Everything that came from a library, a user or a config (names, versions, errors, params,
evidence) goes through ``esc`` (``html.escape``), attribute values included.
"""
from __future__ import annotations

import base64
import hashlib
from datetime import datetime, timezone
from typing import Iterable

import pandas as pd

from . import text as T
from .answer import anchor as answer_anchor
from .html_parts import Plots, esc, figure, table
from .plots import curve_svg
from .tables import ReportData


SORT_SCRIPT = """(function(){
function key(c){var v=c.getAttribute('data-sort');if(v===null){return c.textContent.trim().toLowerCase();}var n=parseFloat(v);return isNaN(n)?-Infinity:n;}
document.querySelectorAll('table.sortable th').forEach(function(th){th.addEventListener('click',function(){
var tr=th.parentNode,t=th.closest('table'),b=t.tBodies[0],i=Array.prototype.indexOf.call(tr.children,th);
var asc=th.getAttribute('aria-sort')!=='ascending';
Array.prototype.forEach.call(tr.children,function(h){h.removeAttribute('aria-sort');});
th.setAttribute('aria-sort',asc?'ascending':'descending');
var rows=Array.prototype.slice.call(b.rows);
rows.sort(function(r,s){var x=key(r.cells[i]),y=key(s.cells[i]);return (x<y?-1:x>y?1:0)*(asc?1:-1);});
rows.forEach(function(r){b.appendChild(r);});});});
})();"""

STYLE = """
:root{--ink:#1d2430;--muted:#5b6472;--line:#d9dee6;--bg:#ffffff;--soft:#f5f7fa;--accent:#1f5fa8;--bad:#b42318;--good:#1a7f37}
*{box-sizing:border-box}
body{margin:0;background:var(--bg);color:var(--ink);font:15px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif}
main{max-width:1320px;margin:0 auto;padding:24px 24px 64px}
h1{font-size:1.7em;margin:0 0 4px}
h2{font-size:1.35em;margin:40px 0 8px;padding-top:8px;border-top:2px solid var(--line)}
h3{font-size:1.1em;margin:28px 0 6px}
p.lead,p.explain{color:var(--muted);max-width:900px}
p.meta{color:var(--muted);margin:0 0 16px;font-size:.9em}
nav.toc{background:var(--soft);border:1px solid var(--line);border-radius:6px;padding:10px 18px;margin:16px 0}
nav.toc ol{margin:4px 0;padding-left:22px}
nav.toc ol ol{font-size:.92em}
dl.facts{display:grid;grid-template-columns:max-content 1fr;gap:2px 18px;margin:8px 0 16px}
dl.facts dt{font-weight:600;color:var(--muted)}
dl.facts dd{margin:0;word-break:break-word}
ul.findings li{margin:4px 0}
.table-wrap{overflow-x:auto;margin:8px 0 16px}
table{border-collapse:collapse;font-size:.84em;min-width:50%}
th,td{border-bottom:1px solid var(--line);padding:4px 7px;text-align:left;vertical-align:top}
th{background:var(--soft);position:sticky;top:0;font-weight:600}
td{max-width:320px;overflow-wrap:break-word}
details{margin:0 0 14px}
summary{cursor:pointer;color:var(--accent)}
table.sortable th{cursor:pointer;user-select:none}
table.sortable th::after{content:"\\00a0\\2195";color:#a0a8b4;font-size:.8em}
table.sortable th[aria-sort=ascending]::after{content:"\\00a0\\25B2";color:var(--accent)}
table.sortable th[aria-sort=descending]::after{content:"\\00a0\\25BC";color:var(--accent)}
td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
td.evidence,td.cause,td.params{max-width:560px;word-break:break-word}
tbody tr:nth-child(even){background:#fafbfc}
.flagged{color:var(--bad);font-weight:600}
.trusted{color:var(--good);font-weight:600}
figure{margin:12px 0 24px}
figure svg{max-width:100%;height:auto;display:block}
figcaption{color:var(--muted);font-size:.88em;max-width:900px;margin-top:4px}
.note{background:#fff8e6;border-left:4px solid #e0a800;padding:6px 12px;margin:8px 0}
code{background:var(--soft);padding:0 3px;border-radius:3px}
"""


def _anchor(*parts: object) -> str:
    raw = "-".join(str(p) for p in parts)
    return "s" + hashlib.sha1(raw.encode()).hexdigest()[:10]


def _ul(items: Iterable[str], cls: str = "") -> str:
    items = list(items)
    if not items:
        return ""
    return f'<ul{f" class={chr(34)}{cls}{chr(34)}" if cls else ""}>' + "".join(f"<li>{esc(i)}</li>" for i in items) + "</ul>"


def render_html(data: ReportData, generated: str | None = None) -> str:
    """The whole report as one HTML document (str): the answer on the first screen, the contents
    in a side bar, every verdict and flag linked to its evidence."""
    from .answer_html import answer_section, answers, evidence_plots, evidence_section, flag_rows_html

    s = data.summary
    generated = generated or datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    toc: list[tuple[str, str, list[tuple[str, str]]]] = [("answer", "Which implementation to trust", [])]
    found = answers(data)
    parts: list[str] = [answer_section(data, found)]

    # -- summary ------------------------------------------------------------------------
    toc.append(("summary", "Summary and recommendation", []))
    facts = "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in T.facts(data))
    parts.append('<section id="summary"><h2>Summary and recommendation</h2>'
                 f'<p class="explain">{esc(T.EXPLAIN_SUMMARY)}</p>'
                 f'<h3>What ran</h3><dl class="facts">{facts}</dl>'
                 f'<h3>Findings</h3>{_ul(T.findings(data), "findings")}')
    if s.get("skipped"):
        parts.append("<h3>Skipped attacks</h3>" + _ul(f"{x.get('attack', '?')}: {x.get('reason', '')}"
                                                       for x in s["skipped"]))
    rec = T.recommendation_rows(data)
    parts.append(f'<h3 id="recommendation">Which implementation to trust, in full</h3><p class="explain">{esc(T.EXPLAIN_RECOMMEND)}</p>')
    parts.append(table(rec, T.RECOMMEND_COLS, classes={"trust": "trusted"}) if len(rec)
                 else "<p>No implementation produced results.</p>")
    parts.append("</section>")

    plots = Plots([curve_svg(data, i) for i in range(len(data.curves))])
    for svg in evidence_plots(data, found).values():
        plots.defs.update(svg.defs)
    toc.append(("evidence", "Evidence for each answer", []))
    parts.append(evidence_section(data, found, plots))

    # -- leaderboard --------------------------------------------------------------------
    children = []
    body = []
    for norm, g in data.leaderboard.groupby("norm", sort=True):
        anchor = _anchor("lb", norm)
        ref = g["ref_eps"].iloc[0] if "ref_eps" in g else float("nan")
        children.append((anchor, f"{norm}"))
        body.append(f'<h3 id="{anchor}">{esc(norm)} — {len(g)} implementations, reference ε = {esc(T.f_dist(ref))}</h3>')
        body.append(table(g, T.LEADERBOARD_COLS, classes={"flags": "flagged"}))
    toc.append(("leaderboard", "Leaderboard per norm", children))
    parts.append(f'<section id="leaderboard"><h2>Leaderboard per norm</h2><p class="explain">{esc(T.EXPLAIN_LEADERBOARD)}</p>'
                 + "".join(body) + "</section>")

    # -- robustness curves --------------------------------------------------------------
    children, body = [], []
    for i, curve in enumerate(data.curves):
        anchor = _anchor("curve", curve.model, curve.norm)
        children.append((anchor, f"{curve.model} · {curve.norm}"))
        body.append(f'<h3 id="{anchor}">{esc(curve.model)} · {esc(curve.norm)}</h3>')
        body.append(figure(plots.inline(curve_svg(data, i)), T.curve_caption(curve),
                            f"robust accuracy against epsilon, {curve.model}, {curve.norm}"))
    toc.append(("curves", "Robust accuracy against ε", children))
    parts.append(f'<section id="curves"><h2>Robust accuracy against ε</h2><p class="explain">{esc(T.EXPLAIN_CURVES)}</p>'
                 + "".join(body) + "</section>")

    # -- alignment ----------------------------------------------------------------------
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
    toc.append(("alignment", "Alignment of shared families", children))
    parts.append(f'<section id="alignment"><h2>Alignment of shared families</h2><p class="explain">{esc(T.EXPLAIN_ALIGNMENT)}</p>'
                 + "".join(body) + "</section>")

    # -- flags --------------------------------------------------------------------------
    toc.append(("flags", "Flags", []))
    body = [f'<p class="explain">{esc(T.EXPLAIN_FLAGS)}</p>']
    if len(data.flags):
        counts = data.flags.groupby("flag").size()
        body.append(_ul(f"{flag} ({n}): {T.flag_meaning(flag)}" for flag, n in counts.items()))
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
    parts.append('<section id="flags"><h2>Flags</h2>' + "".join(body) + "</section>")

    # -- crashes ------------------------------------------------------------------------
    toc.append(("crashes", "Crashes, timeouts and invalid output", []))
    body = [f'<p class="explain">{esc(T.EXPLAIN_CRASHES)}</p>']
    body.append(table(data.crashes, T.CRASH_COLS, classes={"cause": "cause"}) if len(data.crashes)
                else "<p>None: every job finished.</p>")
    parts.append('<section id="crashes"><h2>Crashes, timeouts and invalid output</h2>' + "".join(body) + "</section>")

    if data.true_optimality is not None and len(data.true_optimality):
        toc.append(("exact", "Against exact distances", []))
        parts.append(f'<section id="exact"><h2>Against exact distances</h2><p class="explain">{esc(T.EXPLAIN_EXACT)}</p>'
                     + table(data.true_optimality, T.EXACT_COLS) + "</section>")

    toc.append(("implementations", "Implementations and parameters", []))
    parts.append('<section id="implementations"><h2>Implementations and parameters</h2>'
                 + table(data.implementations, T.IMPL_COLS, classes={"params": "params"}) + "</section>")

    nav = ['<nav class="toc" aria-label="Contents"><strong>Contents</strong><ol>']
    for anchor, title, kids in toc:
        nav.append(f'<li><a href="#{anchor}">{esc(title)}</a>')
        if kids:
            nav.append("<ol>" + "".join(f'<li><a href="#{a}">{esc(t)}</a></li>' for a, t in kids) + "</ol>")
        nav.append("</li>")
    nav.append("</ol></nav>")

    title = "attackaudit report — " + (", ".join(s["run_names"]) or "results")
    header = ('<header class="top"><h1>Attack implementation audit</h1>'
              f'<p class="ran"><strong>What ran:</strong> {esc(T.ran_line(data))}</p></header>')
    footer = (f'<p class="meta">{esc(", ".join(s["runs"]) or "result table")} · generated {esc(generated)} by '
              "attackaudit · same models, same samples, same query budget for every implementation</p>")
    return _document(title, header + "".join(parts) + footer, side='<aside class="side">' + "".join(nav) + "</aside>")


def _document(title: str, body: str, side: str = "") -> str:
    script_hash = base64.b64encode(hashlib.sha256(SORT_SCRIPT.encode()).digest()).decode()
    csp = (f"default-src 'none'; style-src 'unsafe-inline'; img-src data:; "
           f"script-src 'sha256-{script_hash}'; base-uri 'none'; form-action 'none'")
    from .answer_html import STYLE as ANSWER_STYLE

    return ("<!DOCTYPE html>\n"
            f'<html lang="en"><head><meta charset="utf-8">'
            f'<meta http-equiv="Content-Security-Policy" content="{esc(csp)}">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{esc(title)}</title><style>{STYLE}{ANSWER_STYLE}</style></head>"
            f"<body{' class=' + chr(34) + 'with-side' + chr(34) if side else ''}>{side}<main>"
            + body + f"<script>{SORT_SCRIPT}</script></main></body></html>\n")


def render_compare_html(diff: pd.DataFrame, run_a: str, run_b: str, generated: str | None = None,
                        tables: tuple[pd.DataFrame, pd.DataFrame] | None = None) -> str:
    """The release audit of two runs (``fidelity.diff``) as one self-contained HTML page: on the
    first screen what regressed, improved and could not be run, one line of evidence each, each
    linked to its evidence; ``tables`` (run A's and run B's result rows) add the per-image scatter
    of A's distances against B's and the jobs B could not run (status "unsupported")."""
    from .answer_html import (compare_evidence, compare_first_screen, could_not_run, diff_anchor,
                              unsupported_statuses)

    generated = generated or datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    counts = diff["verdict"].value_counts() if len(diff) else pd.Series(dtype=int)
    summary = ", ".join(f"{n} {v}" for v, n in counts.items()) or "nothing to compare"
    order = {"regressed": 0, "improved": 1, "new": 2, "removed": 3, "unchanged": 4}
    rows = diff.assign(_o=diff["verdict"].map(order).fillna(9)).sort_values(["_o", "implementation", "norm"]) \
        if len(diff) else diff
    statuses = unsupported_statuses(tables)
    lines = [T.verdict_line(r) for _, r in rows.iterrows()]
    body = (f'<header class="top"><h1>Release audit</h1><p class="ran"><strong>A:</strong> {esc(run_a)} → '
            f"<strong>B:</strong> {esc(run_b)} · {esc(summary)}</p></header>"
            f'<section id="answer"><h2>What changed from A to B</h2>{compare_first_screen(rows, statuses)}</section>'
            + compare_evidence(rows, tables, statuses)
            + f"<section id=\"diff\"><h2>Every implementation</h2>"
            f"<p class=\"explain\">{esc(T.EXPLAIN_DIFF)}</p><p><strong>{esc(summary)}</strong></p>"
            + _ul(lines) + table(rows, T.DIFF_COLS, classes={"verdict": "flagged"},
                                 links={"verdict": lambda r: diff_anchor(r) if r["verdict"] in ("regressed", "improved")
                                        or could_not_run(r, statuses) else ""})
            + f'<p class="meta">generated {esc(generated)} by attackaudit</p></section>')
    return _document(f"attackaudit compare — {run_a} vs {run_b}", body)
