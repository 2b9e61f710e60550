"""The first screen of ``report.html`` and the evidence each verdict links to (one click away,
by ``#id``).

report.html: ``answer_section`` (the rows of ``first_screen.screen_rows``: per family and norm its
verdict and the family's ⚑ count in one header cell spanning its rows, then one row per trusted
implementation, or the best flagged one, with its ξ and interval, a weak mark naming the best of
its norm when it is far below it, and its own ⚑ count; nothing clipped: long names wrap),
``evidence_section`` (per
family and norm: the trust set's robustness curves with the envelope, the per-image scatter of the
two implementations the verdict compared, the flagged implementations) and ``flag_rows_html``
(per flagged implementation and norm, the per-image rows its flags rest on).

The release audit's first screen and evidence are ``audit_html.py``; the CSS of both,
``html_page.py``.

Every id comes from ``answer.anchor`` (a hash), so no library name reaches an attribute unescaped.
"""
from __future__ import annotations

import math

import pandas as pd

from .answer import Answer, answers, flag_anchor, flag_evidence_rows
from attackaudit.fidelity.flag_kinds import FLAG_MEANINGS
from .first_screen import (DECIDED, SCREEN_COLUMNS, SCREEN_KEY, VERDICT_LABEL, WEAK_PICK_FRACTION, ScreenRow, norm_bests,
                           ordered, screen_rows, weak_legend)
from .formats import MARGIN, Col, f_count, f_opt, f_p, f_ratio
from .formats import f_ci
from .html_parts import Plots, esc, figure, table
from .plots import members_svg, scatter_svg
from .tables import ReportData
from .text import EXPLAIN_EVIDENCE, EXPLAIN_FLAG_ROWS, FLAG_ROW_COLS, pair_sentence

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


def _ci(ci: tuple[float, float]) -> str:
    return f_ci(*ci)  # at ξ's own precision (formats.f_ci)


def _name(key: tuple[str, str]) -> str:
    return f"{key[0]} {key[1]}".strip()


def _who(a: Answer) -> str:
    if a.members:
        names = ", ".join(m.implementation for m in a.members)
        return f"{names}; {a.rerun}" if a.rerun else names
    return "none trusted"


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
    """The weaker and weak marks (badges; their titles say why) and the images that would decide."""
    parts = []
    if r.weaker:
        tip = "; ".join(f"{f}: {FLAG_MEANINGS.get(f, '')}" for f in r.weaker)
        parts.append(f'<span class="weak" title="{esc(tip)}">{esc(r.weaker_text)}</span>')
    if r.weak is not None:
        tip = (f"ξ {f_opt(r.optimality)} is under {WEAK_PICK_FRACTION:g} of the best ξ of {r.answer.norm} in this "
               f"run ({r.weak.text}): this family is far from what the norm allows. Not a flag; the verdict within "
               f"{r.answer.family} stands.")
        parts.append(f'<span class="weak" title="{esc(tip)}">{esc(r.weak_text)}</span>')
    if r.rerun_text:
        parts.append(f'<span title="{esc(r.answer.rerun)}">{esc(r.rerun_text)}</span>')
    return "; ".join(parts)


def _answer_row(r: ScreenRow) -> str:
    a = r.answer
    if r.none_trusted:  # nothing to pick: the evidence names the best flagged one
        pick = (f'<a href="#{a.id}" title="{esc(r.family_text)}: every implementation is flagged">'
                f'{esc(r.label)}</a>')
    else:
        name = f"{r.implementation} {r.library_version}".strip()
        pick = f'<a href="#{a.id}" title="{esc(name)}">{_wrappable(r.label)}</a>'
    return (f'<tr>{_family_cells(r) if r.span else ""}<td class="pick">{pick}</td>'
            f'<td class="num">{esc(f_opt(r.optimality)) if not r.none_trusted else ""}'
            + (f' <span class="ci">{esc(r.ci_text)}</span>' if r.ci_text and not r.none_trusted else "")
            + f'</td><td class="nb">{_note(r)}</td><td class="own">{_flags_badge(r)}</td></tr>')


def _answer_table(rows: list[ScreenRow], caption: str, cls: str) -> str:
    cols = ("fam", "ver", "pick", "xi", "nb", "fl")
    head = (f'<caption>{esc(caption)}</caption><colgroup>' + "".join(f'<col class="{c}">' for c in cols)
            + "</colgroup><thead><tr>"
            + "".join(f'<th scope="col" title="{esc(tip)}">{esc(h)}</th>' for h, tip in SCREEN_COLUMNS)
            + "</tr></thead>")
    bodies, body = [], []
    for r in rows:
        if r.span and body:
            bodies.append(body)
            body = []
        body.append(_answer_row(r))
    bodies += [body] if body else []
    return (f'<table class="answer {cls}">{head}' + "".join(f"<tbody>{''.join(b)}</tbody>" for b in bodies)
            + "</table>")


def answer_section(data: ReportData, found: list[Answer]) -> str:
    """The answer: the decided families and norms first (clear, tied, only implementation), then
    the open ones (inconclusive, none trusted), each a table of ``first_screen.screen_rows`` (per
    family and norm its header cell and one row per implementation shown, one line each), side by
    side where the window is wide enough; each row links to its evidence."""
    if not found:
        return ('<section id="answer"><h2>Which implementation to trust</h2>'
                "<p>No implementation produced results.</p></section>")
    found = ordered(found)
    bests = norm_bests(data)
    decided = [a for a in found if a.verdict in DECIDED]
    open_ = [a for a in found if a.verdict not in DECIDED]
    rows = screen_rows(decided, bests) + screen_rows(open_, bests)
    tables = (_answer_table(screen_rows(decided, bests), f"Decided: {len(decided)} of {len(found)} families and "
                            "norms", "decided") if decided else "") + (
        _answer_table(screen_rows(open_, bests), f"Not decided: {len(open_)} (more images would decide, or "
                      "every implementation is flagged)", "open") if open_ else "")
    legend = weak_legend(rows)
    key = f"{SCREEN_KEY} Click a row for its evidence, a ⚑ for what was flagged."
    return (f'<section id="answer"><h2>Which implementation to trust</h2><div class="answer-grid">{tables}</div>'
            + (f'<p class="key">{esc(legend)}</p>' if legend else "") + f'<p class="key">{esc(key)}</p></section>')


def _members_table(a: Answer) -> str:
    if not a.members:
        return ""
    frame = pd.DataFrame([{"implementation": _name(m.key), "optimality": m.optimality, "ci": _ci(m.ci),
                           "answer": m.answer if i else "top pick", "estimate": m.estimate if i else math.nan,
                           "p": m.p_equivalent, "decide": m.images_to_decide} for i, m in enumerate(a.members)])
    cols = [Col("trusted", "implementation"), Col("global ξ", "optimality", f_opt, True),
            Col("95% interval", "ci"), Col("vs top pick", "answer"),
            Col("per image vs top pick", "estimate", f_ratio, True),
            Col(f"equivalent within ±{MARGIN}: Holm p", "p", f_p, True),
            Col("images to decide", "decide", f_count, True)]
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
        parts.append(figure(plots[f"p{a.id}"], pair_sentence(a.pair).replace("The two implementations that "
                             "differ most", "The comparison behind the verdict"),
                             f"per-image distances, {_name(a.pair.a)} against {_name(a.pair.b)}"))
    if a.flagged:
        items = "".join(f'<li>{esc(_name(k))}: <a href="#{flag_anchor(k[0], k[1], a.norm)}">{esc(", ".join(f))}</a>'
                        "</li>" for k, f in a.flagged.items())
        parts.append(f'<div id="{a.id}-f"><strong>Flagged (a defect), never trusted:</strong><ul>{items}</ul></div>')
    else:
        parts.append(f'<p id="{a.id}-f">Nothing flagged in {esc(a.family)} · {esc(a.norm)}.</p>')
    if a.weaker:
        items = "".join(f'<li>{esc(_name(k))}: <a href="#{flag_anchor(k[0], k[1], a.norm)}">{esc(", ".join(f))}</a>'
                        "</li>" for k, f in a.weaker.items())
        parts.append("<div><strong>Weaker (a weakness, not a flag: still a candidate, the trust set's own tests "
                     f"decide):</strong><ul>{items}</ul></div>")
    parts.append('<p><a href="#answer">↑ back to the answer</a></p></div>')
    return "".join(parts)


def evidence_plots(data: ReportData, found: list[Answer]) -> dict[str, object]:
    """The evidence plots (``svg.Svg``) by key: "m<id>" the curves, "p<id>" the deciding scatter."""
    curves_by_norm: dict[str, list] = {}
    for c in data.curves:
        if not c.is_twin:
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
            f"{esc(EXPLAIN_EVIDENCE)}</p>{blocks}</section>")


def flag_rows_html(data: ReportData) -> str:
    """Per flagged implementation and norm, its findings and the per-image rows they rest on."""
    blocks = []
    findings = {k: g for k, g in data.flags.groupby(["implementation", "library_version", "norm"], sort=False)}
    for (impl, version, norm), (rows, n) in flag_evidence_rows(data).items():
        f = findings[(impl, version, norm)]
        lines = "".join(f"<li><strong>{esc(r.flag)}</strong> ({esc('all models' if r.model == '*' else r.model)}): "
                        f"{esc(r.evidence)}</li>" for r in f.itertuples(index=False))
        cols = [c for c in FLAG_ROW_COLS if c.key != "error" or rows["error"].astype(bool).any()]
        shown = (f"<p>The {len(rows)} rows that stand out most, of {n} that stand out:</p>" if n > len(rows) else "")
        blocks.append(f'<div class="rows" id="{flag_anchor(impl, version, norm)}"><h4>{esc(_name((impl, version)))} · '
                      f"{esc(norm)}</h4><ul>{lines}</ul>{shown}"
                      + (table(rows, cols, sortable=False) if len(rows) else "<p>No single row stands out: the "
                         "finding is about the results as a whole.</p>") + "</div>")
    if not blocks:
        return ""
    return (f'<h3 id="flag-rows">Findings per implementation, with the rows they rest on</h3>'
            f'<p class="explain">{esc(EXPLAIN_FLAG_ROWS)}</p>' + "".join(blocks))


__all__ = ["answer_section", "answers", "evidence_plots", "evidence_section", "flag_rows_html"]
