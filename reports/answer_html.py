"""The first screen of ``report.html`` and of the compare / audit pages, and the evidence each
verdict links to (one click away, by ``#id``).

report.html: ``answer_section`` (the rows of ``first_screen.screen_rows``: per family and norm its
verdict and the family's ⚑ count in one header cell spanning its rows, then one row per trusted
implementation, or the best flagged one, with its ξ and interval, a weak mark naming the best of
its norm when it is far below it, and its own ⚑ count; nothing clipped: long names wrap),
``evidence_section`` (per
family and norm: the trust set's robustness curves with the envelope, the per-image scatter of the
two implementations the verdict compared, the flagged implementations) and ``flag_rows_html``
(per flagged implementation and norm, the per-image rows its flags rest on).

compare.html / audit.html: ``compare_first_screen`` (regressed, improved, could not run, one line
of evidence each) and ``compare_evidence`` (each of those rows' numbers, and with the two runs'
tables the per-image scatter of run A's distances against run B's).

Every id comes from ``answer.anchor`` (a hash), so no library name reaches an attribute unescaped.
"""
from __future__ import annotations

import math
import re

import pandas as pd

from . import text as T
from .answer import Answer, answers, flag_anchor, flag_evidence_rows
from .first_screen import SCREEN_COLUMNS, SCREEN_KEY, VERDICT_LABEL, WEAK_PICK_FRACTION, ScreenRow, norm_bests, screen_rows
from .html_parts import Plots, esc, figure, table
from .plots import members_svg, scatter_svg
from .tables import Pair, ReportData

VERDICT_TIP = {
    "clear": "one implementation is significantly better than the other unflagged ones",
    "tied": "the trusted implementations are equivalent here: use any",
    "inconclusive": "neither shown different nor equivalent: rerun with the number of images the row names",
    "only implementation": "the only unflagged implementation of this family and norm; its summary says how it "
                           "stands against the best attack of its norm",
    "none": "no implementation can be trusted: every one is flagged",
}
#: implementations drawn in a "none" verdict's evidence (no trust set to draw)
UNTRUSTED_SHOWN = 4

STYLE = """
aside.side{position:fixed;top:0;left:0;bottom:0;width:230px;overflow-y:auto;background:var(--soft);border-right:1px solid var(--line);padding:12px 10px;font-size:.8em}
aside.side nav.toc{background:none;border:0;padding:0;margin:0}
aside.side ol{padding-left:16px}
body.with-side main{margin-left:230px;max-width:1220px}
@media (max-width:1000px){aside.side{position:static;width:auto;border-right:0}body.with-side main{margin-left:0}}
header.top h1{font-size:1.35em;margin:0}
p.ran{margin:2px 0 8px;font-size:.9em}
section#answer h2{border-top:0;margin:6px 0 2px;padding-top:0;font-size:1.15em}
p.key{color:var(--muted);font-size:.8em;margin:0 0 4px}
.answer-grid{display:grid;grid-template-columns:minmax(0,1fr);gap:6px 16px;max-height:calc(100vh - 200px);overflow-y:auto;align-items:start}
@media (min-width:1700px){body.with-side main{max-width:none}.answer-grid{grid-template-columns:minmax(0,1fr) minmax(0,1fr)}}
@media (max-width:1699px){.answer-grid table.answer+table.answer thead{display:none}}
table.answer{table-layout:fixed;width:100%;font-size:.8em;min-width:0;margin:0}
table.answer th,table.answer td{padding:2px 5px;max-width:none;white-space:normal;overflow-wrap:anywhere;vertical-align:top}
table.answer thead th{white-space:nowrap;overflow-wrap:normal}
table.answer tbody{border-top:1px solid var(--line)}
table.answer tbody tr{background:none}table.answer tbody:nth-of-type(even){background:#fafbfc}
table.answer col.fam{width:168px}table.answer col.ver{width:100px}table.answer col.pick{width:31%}table.answer col.xi{width:122px}table.answer col.fl{width:46px}
table.answer a{color:inherit;text-decoration:none}table.answer a:hover{text-decoration:underline}
table.answer .fam a.badge{margin-left:2px}
.v{display:inline-block;padding:0 6px;border-radius:8px;font-size:.92em;font-weight:600;white-space:nowrap}
.v-clear{background:#dcf3e2;color:#135e28}.v-tied{background:#e1ecfa;color:#1f4f8a}.v-inconclusive{background:#fff1cc;color:#7a5600}
.v-only{background:#eceff3;color:#3d4654}.v-none{background:#fbe0de;color:#8c1d13}
.nowrap{white-space:nowrap}
.weak{display:inline-block;padding:0 5px;border-radius:8px;background:#fff1cc;color:#7a5600;font-weight:600;white-space:nowrap}
.ci{color:var(--muted);font-size:.9em}
a.badge{display:inline-block;white-space:nowrap;padding:0 6px;border-radius:8px;background:#fbe0de;color:#8c1d13;font-weight:600;text-decoration:none}
.ev{border-top:1px solid var(--line);padding-top:4px}
.ev:target,.rows:target,tr:target{background:#fffbe6}
.ev figure{display:inline-block;vertical-align:top;margin:6px 12px 6px 0}
.changes{display:grid;grid-template-columns:repeat(3,1fr);gap:0 18px}
.changes>div{max-height:calc(100vh - 190px);overflow-y:auto}
.changes h3{margin:6px 0 4px}
.changes ul{margin:0;padding-left:18px;font-size:.85em}
.changes li{margin:2px 0}
table.plain{font-variant-numeric:tabular-nums}
.rows h4{margin:14px 0 2px}.rows ul{margin:2px 0;font-size:.88em}
"""


def _ci(ci: tuple[float, float]) -> str:
    return f"{ci[0]:.2f}–{ci[1]:.2f}" if all(math.isfinite(x) for x in ci) else ""


def _name(key: tuple[str, str]) -> str:
    return f"{key[0]} {key[1]}".strip()


def _who(a: Answer) -> str:
    if a.members:
        names = ", ".join(m.implementation for m in a.members)
        return f"{names}; {a.rerun}" if a.rerun else names
    return f"{a.top[0]} (best, flagged)" if a.flagged else "—"


def _wrappable(name: str) -> str:
    """``name`` escaped, with a line-break opportunity after each "/" and "_" (long names wrap there)."""
    return esc(name).replace("/", "/<wbr>").replace("_", "_<wbr>")


def _flags_badge(r: ScreenRow) -> str:
    """This implementation's own ⚑ count, naming its flags, linked to the rows they rest on."""
    if not r.flags:
        return ""
    return (f'<a class="badge" href="#{flag_anchor(r.implementation, r.library_version, r.answer.norm)}" '
            f'title="{esc(r.implementation)} under {esc(r.answer.norm)}: {esc(", ".join(r.flags))}">'
            f"{esc(r.flags_text)}</a>")


def _family_cells(r: ScreenRow) -> str:
    """The family's header cell (family · norm and its ⚑ k of n, linked to the flagged list) and
    its verdict, both spanning the family's rows."""
    a = r.answer
    label = VERDICT_LABEL.get(a.verdict, a.verdict)
    flagged = ", ".join(f"{k[0]} {k[1]}".strip() for k in a.flagged)
    badge = (f' <a class="badge" href="#{a.id}-f" title="flagged in {esc(r.family_text)}: {esc(flagged)}">'
             f"{esc(r.family_flags_text)}</a>" if a.flagged else "")
    span = f' rowspan="{r.span}"' if r.span > 1 else ""
    return (f'<th scope="rowgroup" class="fam"{span}><a href="#{a.id}">{esc(r.family_text)}</a>{badge}</th>'
            f'<td class="ver"{span}><span class="v v-{esc(label)}" title="{esc(VERDICT_TIP.get(a.verdict, ""))}">'
            f"{esc(label)}</span></td>")


def _note(r: ScreenRow) -> str:
    """The weak mark (a badge, then the norm's best) and the images that would decide, unbroken."""
    parts = []
    if r.weak is not None:
        tip = (f"ξ {T.f_opt(r.optimality)} is under {WEAK_PICK_FRACTION:g} of the best ξ of {r.answer.norm} in this "
               f"run: this family is far from what the norm allows. Not a flag; the verdict within {r.answer.family} "
               "stands.")
        parts.append(f'<span class="weak" title="{esc(tip)}">weak</span>{_wrappable(r.weak_text[len("weak"):])}')
    if r.rerun_text:  # "--samples N" kept on one line: a broken flag reads as two words
        parts.append(re.sub(r"(--\S+ \S+)", r'<span class="nowrap">\1</span>', esc(r.rerun_text)))
    return "; ".join(parts)


def _answer_row(r: ScreenRow) -> str:
    a = r.answer
    name = f"{r.implementation} {r.library_version}".strip()
    return (f'<tr>{_family_cells(r) if r.span else ""}'
            f'<td class="pick"><a href="#{a.id}" title="{esc(name)}">{_wrappable(r.label)}</a></td>'
            f'<td class="num">{esc(T.f_opt(r.optimality))}'
            + (f' <span class="ci">{esc(r.ci_text)}</span>' if r.ci_text else "")
            + f'</td><td class="nb">{_note(r)}</td><td class="own">{_flags_badge(r)}</td></tr>')


def _answer_table(rows: list[ScreenRow]) -> str:
    cls = ("fam", "ver", "pick", "xi", "nb", "fl")
    head = ("<colgroup>" + "".join(f'<col class="{c}">' for c in cls) + "</colgroup><thead><tr>"
            + "".join(f'<th scope="col" title="{esc(tip)}">{esc(h)}</th>' for h, tip in SCREEN_COLUMNS)
            + "</tr></thead>")
    bodies, body = [], []
    for r in rows:
        if r.span and body:
            bodies.append(body)
            body = []
        body.append(_answer_row(r))
    bodies += [body] if body else []
    return f'<table class="answer">{head}' + "".join(f"<tbody>{''.join(b)}</tbody>" for b in bodies) + "</table>"


def answer_section(data: ReportData, found: list[Answer]) -> str:
    """The answer: per family and norm its header cell and one row per implementation shown
    (``first_screen.screen_rows``), in two side-by-side tables where the window is wide enough
    (families with a real choice first), each row linking to its evidence."""
    if not found:
        return ('<section id="answer"><h2>Which implementation to trust</h2>'
                "<p>No implementation produced results.</p></section>")
    half = -(-len(found) // 2)
    bests = norm_bests(data)
    tables = _answer_table(screen_rows(found[:half], bests)) + (
        _answer_table(screen_rows(found[half:], bests)) if len(found) > 1 else "")
    key = f"{SCREEN_KEY} Click a row for its evidence, a ⚑ for what was flagged."
    return (f'<section id="answer"><h2>Which implementation to trust</h2><p class="key">{esc(key)}</p>'
            f'<div class="answer-grid">{tables}</div></section>')


def _members_table(a: Answer) -> str:
    if not a.members:
        return ""
    frame = pd.DataFrame([{"implementation": _name(m.key), "optimality": m.optimality, "ci": _ci(m.ci),
                           "answer": m.answer if i else "top pick", "estimate": m.estimate if i else math.nan,
                           "p": m.p_equivalent, "decide": m.images_to_decide} for i, m in enumerate(a.members)])
    cols = [T.Col("trusted", "implementation"), T.Col("global ξ", "optimality", T.f_opt, True),
            T.Col("95% interval", "ci"), T.Col("vs top pick", "answer"),
            T.Col("per image vs top pick", "estimate", T.f_ratio, True),
            T.Col(f"equivalent within ±{T.MARGIN}: Holm p", "p", T.f_p, True),
            T.Col("images to decide", "decide", T.f_count, True)]
    return table(frame, cols, sortable=False)


def _evidence_block(a: Answer, plots: dict[str, str]) -> str:
    keys = [m.key for m in a.members] or a.implementations[:UNTRUSTED_SHOWN]
    parts = [f'<div class="ev" id="{a.id}"><h3>{esc(a.family)} · {esc(a.norm)}: {esc(a.verdict)}'
             f"{': ' + esc(_who(a)) if a.members else ''}</h3><p>{esc(a.summary)}</p>", _members_table(a)]
    if f"m{a.id}" in plots:
        what = "trust set" if a.members else "implementations (none trusted)"
        parts.append(figure(plots[f"m{a.id}"], f"Robust accuracy against ε of the {what} (coloured) and the "
                             "envelope (black: the smallest perturbation any implementation found per image), over the "
                             "images of every model together; the per-model curves are under Robust accuracy against ε.", f"robustness curves, {a.family}, {a.norm}"))
    if a.pair is not None and f"p{a.id}" in plots:
        parts.append(figure(plots[f"p{a.id}"], T.pair_sentence(a.pair).replace("The two implementations that "
                             "differ most", "The comparison behind the verdict"),
                             f"per-image distances, {_name(a.pair.a)} against {_name(a.pair.b)}"))
    if a.flagged:
        items = "".join(f'<li>{esc(_name(k))}: <a href="#{flag_anchor(k[0], k[1], a.norm)}">{esc(", ".join(f))}</a>'
                        "</li>" for k, f in a.flagged.items())
        parts.append(f'<div id="{a.id}-f"><strong>Flagged, never trusted:</strong><ul>{items}</ul></div>')
    else:
        parts.append(f'<p id="{a.id}-f">Nothing flagged in {esc(a.family)} · {esc(a.norm)}.</p>')
    parts.append('<p><a href="#answer">↑ back to the answer</a></p></div>')
    return "".join(parts)


def evidence_plots(data: ReportData, found: list[Answer]) -> dict[str, object]:
    """The evidence plots (``svg.Svg``) by key: "m<id>" the curves, "p<id>" the deciding scatter."""
    curves_by_norm: dict[str, list] = {}
    for c in data.curves:
        if "~" not in c.model:
            curves_by_norm.setdefault(c.norm, []).append(c)
    out: dict[str, object] = {}
    for a in found:
        keys = [m.key for m in a.members] or a.implementations[:UNTRUSTED_SHOWN]
        curves = curves_by_norm.get(a.norm, [])
        if keys and curves:
            out[f"m{a.id}"] = data.svg(f"m{a.id}", lambda keys=keys, curves=curves:
                                       members_svg(curves, keys, data.colors))
        if a.pair is not None and len(a.pair.dist_a):
            out[f"p{a.id}"] = data.svg(f"p{a.id}", lambda p=a.pair: scatter_svg(p))
    return out


def evidence_section(data: ReportData, found: list[Answer], plots: Plots) -> str:
    """Per family and norm, what its answer rests on."""
    svgs = evidence_plots(data, found)
    inlined = {k: plots.inline(v) for k, v in svgs.items()}
    blocks = "".join(_evidence_block(a, inlined) for a in found)
    return (f'<section id="evidence"><h2>Evidence for each answer</h2><p class="explain">'
            f"{esc(T.EXPLAIN_EVIDENCE)}</p>{blocks}</section>")


def flag_rows_html(data: ReportData) -> str:
    """Per flagged implementation and norm, its findings and the per-image rows they rest on."""
    blocks = []
    findings = {k: g for k, g in data.flags.groupby(["implementation", "library_version", "norm"], sort=False)}
    for (impl, version, norm), (rows, n) in flag_evidence_rows(data).items():
        f = findings[(impl, version, norm)]
        lines = "".join(f"<li><strong>{esc(r.flag)}</strong> ({esc('all models' if r.model == '*' else r.model)}): "
                        f"{esc(r.evidence)}</li>" for r in f.itertuples(index=False))
        cols = [c for c in T.FLAG_ROW_COLS if c.key != "error" or rows["error"].astype(bool).any()]
        shown = (f"<p>The {len(rows)} rows that stand out most, of {n} that stand out:</p>" if n > len(rows) else "")
        blocks.append(f'<div class="rows" id="{flag_anchor(impl, version, norm)}"><h4>{esc(_name((impl, version)))} · '
                      f"{esc(norm)}</h4><ul>{lines}</ul>{shown}"
                      + (table(rows, cols, sortable=False) if len(rows) else "<p>No single row stands out: the "
                         "finding is about the results as a whole.</p>") + "</div>")
    if not blocks:
        return ""
    return (f'<h3 id="flag-rows">Findings per implementation, with the rows they rest on</h3>'
            f'<p class="explain">{esc(T.EXPLAIN_FLAG_ROWS)}</p>' + "".join(blocks))


# ------------------------------------------------------------------------------------ compare
def could_not_run(row: pd.Series, statuses: dict | None = None) -> str:
    """Why an implementation of a diff could not be run in one of the runs ("" when it ran)."""
    if row["verdict"] == "new":
        return "did not run in A"
    if row["verdict"] == "removed":
        return "did not run in B"
    failed = sorted(set(str(row.get("flags_b") or "").split(",")) & {"crash", "timeout", "invalid"})
    extra = (statuses or {}).get((row["implementation"], row["norm"]), "")
    reasons = [f"{', '.join(failed)} in B"] if failed else []
    return "; ".join(reasons + ([extra] if extra else []))


def _unsupported(table_b: pd.DataFrame | None) -> dict[tuple[str, str], str]:
    if table_b is None or table_b.empty or "status" not in table_b:
        return {}
    t = table_b[table_b["status"].astype(str) == "unsupported"]
    out = {}
    for (impl, norm), g in t.groupby(["implementation", "norm"]):
        err = next((str(e) for e in g.get("error", pd.Series(dtype=str)) if str(e)), "")
        out[(str(impl), str(norm))] = f"unsupported in B on {g['model'].nunique()} model(s)" + (f": {err[:100]}" if err else "")
    return out


def diff_anchor(row: pd.Series) -> str:
    from .answer import anchor

    return anchor("diff", row["implementation"], row["norm"], row.get("model", "*"))


def compare_first_screen(rows: pd.DataFrame, statuses: dict | None = None) -> str:
    """Regressed, improved, could not run: one line of evidence each, each linking to its evidence."""
    def item(r: pd.Series, why: str) -> str:
        model = "" if r["model"] in ("*", "") else f" on {r['model']}"
        return (f'<li><a href="#{diff_anchor(r)}">{esc(r["implementation"])} [{esc(r["norm"])}{esc(model)}]</a> '
                f'{esc(r["version_a"] or "—")} → {esc(r["version_b"] or "—")}: {esc(why)}</li>')

    groups = {"Regressed": [], "Improved": [], "Could not run": []}
    for _, r in rows.iterrows():
        failed = could_not_run(r, statuses)
        if failed:  # a job that failed has no performance to speak of: listed once, under what it is
            groups["Could not run"].append(item(r, f"{failed} ({r['verdict']}: {r['reason']})"))
        elif r["verdict"] == "regressed":
            groups["Regressed"].append(item(r, r["reason"]))
        elif r["verdict"] == "improved":
            groups["Improved"].append(item(r, r["reason"]))
    cols = "".join(f'<div><h3>{esc(k)} ({len(v)})</h3>{"<ul>" + "".join(v) + "</ul>" if v else "<p>none</p>"}</div>'
                   for k, v in groups.items())
    return f'<div class="changes">{cols}</div>'


def compare_pair(row: pd.Series, dist_a: pd.DataFrame, dist_b: pd.DataFrame) -> Pair | None:
    """Run A's against run B's per-image distances of one implementation and norm (images that
    needed an attack in either run, every model both ran), as a ``tables.Pair`` for ``scatter_svg``."""
    key = (row["implementation"], row["norm"])
    a = dist_a[(dist_a["implementation"] == key[0]) & (dist_a["norm"] == key[1])]
    b = dist_b[(dist_b["implementation"] == key[0]) & (dist_b["norm"] == key[1])]
    if row.get("model", "*") not in ("*", ""):
        a, b = a[a["model"] == row["model"]], b[b["model"] == row["model"]]
    both = a.merge(b, on=["model", "sample"], suffixes=("_a", "_b"))
    both = both[~both["model"].astype(str).str.contains("~", regex=False)]
    both = both[(both["best_distance_a"] > 0) | (both["best_distance_b"] > 0)]
    if both.empty:
        return None
    return Pair(str(row.get("family", "")), key[1], (key[0], f"A {row['version_a']}"), (key[0], f"B {row['version_b']}"),
                "a", "b", float(row["optimality_a"]), float(row["optimality_b"]), float(row["p_value"]),
                float(row.get("effect_size", 0.0)), int(row["n_worse"]), int(row["n_better"]),
                both["best_distance_a"].to_numpy(dtype=float), both["best_distance_b"].to_numpy(dtype=float),
                both["model"].astype(str).to_numpy(dtype=object))


def compare_evidence(rows: pd.DataFrame, tables: tuple[pd.DataFrame, pd.DataFrame] | None,
                     statuses: dict | None = None) -> str:
    """One block per regressed, improved or could-not-run row: its numbers and, with ``tables``,
    the per-image scatter of run A's distances (x) against run B's (y)."""
    from .tables import sample_distances

    shown = [r for _, r in rows.iterrows() if r["verdict"] in ("regressed", "improved") or could_not_run(r, statuses)]
    if not shown:
        return ""
    dists = tuple(sample_distances(t) for t in tables) if tables is not None else None
    pairs = {diff_anchor(r): compare_pair(r, *dists) for r in shown} if dists else {}
    svgs = {rid: scatter_svg(p) for rid, p in pairs.items() if p is not None}
    plots = Plots(list(svgs.values()))
    blocks = []
    for r in shown:
        rid = diff_anchor(r)
        facts = pd.DataFrame([r])
        plot_html = ""
        if rid in svgs:
            plot_html = figure(plots.inline(svgs[rid]),
                             f"Each point is one image (one marker per model): its distance in run A (x) and in run B "
                             f"(y). Points above the diagonal got worse in B ({int(r['n_worse'])}), below it better "
                             f"({int(r['n_better'])}); points on the dotted red lines are failures.",
                             f"per-image distances of {r['implementation']}, run A against run B")
        blocks.append(f'<div class="ev" id="{rid}"><h3>{esc(r["implementation"])} [{esc(r["norm"])}]: '
                      f'{esc(r["verdict"])}</h3><p>{esc(T.verdict_line(r))}</p>'
                      + (f"<p><strong>Could not run:</strong> {esc(could_not_run(r, statuses))}</p>"
                         if could_not_run(r, statuses) else "")
                      + table(facts, T.DIFF_EVIDENCE_COLS, sortable=False) + plot_html
                      + '<p><a href="#answer">↑ back to the changes</a></p></div>')
    return (f'<section id="evidence"><h2>Evidence</h2><p class="explain">{esc(T.EXPLAIN_DIFF_EVIDENCE)}</p>'
            + "".join(blocks) + "</section>")


def unsupported_statuses(tables: tuple[pd.DataFrame, pd.DataFrame] | None) -> dict:
    return _unsupported(tables[1]) if tables is not None else {}


__all__ = ["answer_section", "answers", "compare_evidence", "compare_first_screen", "evidence_section",
           "flag_rows_html", "unsupported_statuses"]
