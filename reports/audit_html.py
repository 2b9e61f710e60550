"""The release audit's HTML page (``attackaudit compare``: compare.html; ``attackaudit audit``:
audit.html): on the first screen what regressed, improved and could not be run, one line of
evidence each (``compare_first_screen``), each linked to its evidence block below
(``compare_evidence``: the row's numbers and, with the two runs' tables, the per-image scatter of
run A's distances against run B's), then every implementation's verdict. The wording is
``audit_text.py``; the page frame ``html_page.py``.

Every id comes from ``answer.anchor`` (a hash), so no library name reaches an attribute unescaped.
"""
from __future__ import annotations

from datetime import datetime, timezone

import pandas as pd

from attackaudit.fidelity.flag_kinds import FAILURE_FLAGS

from .answer import anchor
from .audit_text import DIFF_COLS, DIFF_EVIDENCE_COLS, EXPLAIN_DIFF, EXPLAIN_DIFF_EVIDENCE, ordered, verdict_line
from .html_page import document
from .html_parts import Plots, esc, figure, table, ul
from .plots import scatter_svg
from .tables import Pair, sample_distances


def render_compare_html(diff: pd.DataFrame, run_a: str, run_b: str, generated: str | None = None,
                        tables: tuple[pd.DataFrame, pd.DataFrame] | None = None, title: str = "Release audit",
                        notes: list[str] = ()) -> str:
    """The release audit of two runs (``fidelity.diff``) as one self-contained HTML page: on the
    first screen what regressed, improved and could not be run, one line of evidence each, each
    linked to its evidence; ``tables`` (run A's and run B's result rows) add the per-image scatter
    of A's distances against B's and the jobs B could not run (status "unsupported"); ``title`` and
    ``notes`` (e.g. the settings that differ) head the page."""
    generated = generated or datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    counts = diff["verdict"].value_counts() if len(diff) else pd.Series(dtype=int)
    summary = ", ".join(f"{n} {v}" for v, n in counts.items()) or "nothing to compare"
    rows = ordered(diff)
    statuses = unsupported_statuses(tables)
    lines = [verdict_line(r) for _, r in rows.iterrows()]
    body = (f'<header class="top"><h1>{esc(title)}</h1><p class="ran"><strong>A:</strong> {esc(run_a)} → '
            f"<strong>B:</strong> {esc(run_b)} · {esc(summary)}</p>"
            + "".join(f"<p><strong>{esc(n)}</strong></p>" for n in notes) + "</header>"
            f'<section id="answer"><h2>What changed from A to B</h2>{compare_first_screen(rows, statuses)}</section>'
            + compare_evidence(rows, tables, statuses)
            + f"<section id=\"diff\"><h2>Every implementation</h2>"
            f"<p class=\"explain\">{esc(EXPLAIN_DIFF)}</p><p><strong>{esc(summary)}</strong></p>"
            + ul(lines) + table(rows, DIFF_COLS, classes={"verdict": "flagged"},
                                 links={"verdict": lambda r: diff_anchor(r) if r["verdict"] in ("regressed", "improved")
                                        or could_not_run(r, statuses) else ""})
            + f'<p class="meta">generated {esc(generated)} by attackaudit</p></section>')
    return document(f"attackaudit compare — {run_a} vs {run_b}", body)


def could_not_run(row: pd.Series, statuses: dict | None = None) -> str:
    """Why an implementation of a diff could not be run in one of the runs ("" when it ran)."""
    if row["verdict"] == "new":
        return "did not run in A"
    if row["verdict"] == "removed":
        return "did not run in B"
    failed = sorted(set(str(row.get("flags_b") or "").split(",")) & set(FAILURE_FLAGS))
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
    a, b = a[a["twin"] == ""], b[b["twin"] == ""]  # the twins are the same networks again
    both = a.merge(b, on=["model", "sample"], suffixes=("_a", "_b"))
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
                      f'{esc(r["verdict"])}</h3><p>{esc(verdict_line(r))}</p>'
                      + (f"<p><strong>Could not run:</strong> {esc(could_not_run(r, statuses))}</p>"
                         if could_not_run(r, statuses) else "")
                      + table(facts, DIFF_EVIDENCE_COLS, sortable=False) + plot_html
                      + '<p><a href="#answer">↑ back to the changes</a></p></div>')
    return (f'<section id="evidence"><h2>Evidence</h2><p class="explain">{esc(EXPLAIN_DIFF_EVIDENCE)}</p>'
            + "".join(blocks) + "</section>")


def unsupported_statuses(tables: tuple[pd.DataFrame, pd.DataFrame] | None) -> dict[tuple[str, str], str]:
    """(implementation, norm) → why run B could not run it ("unsupported in B on …"), from B's rows."""
    return _unsupported(tables[1]) if tables is not None else {}
