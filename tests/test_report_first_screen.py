"""The first screen's answer table, as report.html and report.md render it from a real report.

The run is test_reports' table (apgd with a crashing hostile implementation and a weaker foolbox,
fmn) plus families that give every case of the first screen: two inconclusive families of two
rows each (long names), one where every implementation crashed (verdict none), and two picks far
below the best of their norm (a "clear" one and an "only" one). Rows are hand-built
(fidelity.synthetic), stored as a run directory and reported by ``write_report``; the checks read
the rendered files and compare them with the report's own tables (flags.csv, leaderboard.csv,
report.json). The layout at real window sizes is checked in test_report_browser.py.
"""
from __future__ import annotations

import json
import re
from html import unescape
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from attackaudit.fidelity.synthetic import job_rows, table
from attackaudit.reports import write_report
from test_reports import make_table, store_run


def first_screen_jobs(models: tuple[str, ...] = ("m-cnn", "m-mlp"), n: int = 10) -> list[pd.DataFrame]:
    """The families added to ``make_table``'s (same images, the same per-model base distances)."""
    jobs = []
    for k, model in enumerate(models):
        base = np.random.default_rng(k).uniform(0.05, 0.3, n)
        base[0] = 0.0
        wobble = np.where(np.arange(n) % 2 == 0, 1.07, 0.99)    # neither different nor equivalent on 18 images
        first_crash, last_crash = ["crash"] + ["ok"] * (n - 1), ["ok"] * (n - 1) + ["crash"]
        jobs += [
            job_rows(model, "cleverhans/projected_gradient_descent", "linf", base * 1.02, family="pgd",
                     library_version="4.0.0"),
            job_rows(model, "art/ProjectedGradientDescentPyTorch", "linf", base * 1.02 * wobble, family="pgd",
                     library_version="1.17"),
            job_rows(model, "torchattacks/FAB", "linf", base * 2.0, family="fab", library_version="3.5.1"),
            job_rows(model, "adv_lib/ddn", "l2", base * 4, family="ddn", library_version="0.2.8"),
            job_rows(model, "foolbox/DDNAttack", "l2", base * 4 * wobble, family="ddn", library_version="3.3.4"),
            job_rows(model, "torchattacks/EADEN", "l2", base * 4 * 2.5, family="ead", library_version="3.5.1"),
            job_rows(model, "art/ElasticNet", "l2", base * 4 * 3.2, family="ead", library_version="1.17"),
            job_rows(model, "foolbox/L2CarliniWagnerAttack", "l2", base * 4 * 1.3, family="cw",
                     library_version="3.3.4", status=first_crash, error=["RuntimeError: x"] + [""] * (n - 1)),
            job_rows(model, "torchattacks/CW", "l2", base * 4 * 1.5, family="cw", library_version="3.5.1",
                     status=last_crash, error=[""] * (n - 1) + ["RuntimeError: y"]),
        ]
    return jobs


def write_first_screen_run(run: Path) -> dict[str, Path]:
    """Store the run and write its report (every format) into it."""
    store_run(run, table(make_table(), *first_screen_jobs()))
    return write_report([run])


def reported_run(tmp_path_factory, name: str, write=write_first_screen_run) -> Path:
    """A fresh directory ``name`` holding the run ``write`` stores and reports."""
    run = tmp_path_factory.mktemp(name)
    write(run)
    return run


class _AnswerRows(HTMLParser):
    """The rows of report.html's answer tables: per row its cells' text (``class`` -> text) and
    the ``title`` of the pick's link, the family's cells taken from the first row of its tbody."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[dict] = []
        self._in_answer = self._in_body = False
        self._cell: str | None = None
        self._family: dict = {}

    def handle_starttag(self, tag: str, attrs: list) -> None:
        a = dict(attrs)
        if tag == "table" and "answer" in (a.get("class") or "").split():
            self._in_answer = True
        elif self._in_answer and tag == "tbody":
            self._in_body = True
        elif self._in_body and tag == "tr":
            self.rows.append({"first": False})
        elif self._in_body and tag in ("th", "td"):
            self._cell = a.get("class") or ""
            self.rows[-1][self._cell] = ""
            if self._cell == "fam":
                self.rows[-1]["first"] = True
        elif self._in_body and tag == "a" and self._cell == "pick":
            self.rows[-1]["title"] = a.get("title", "")

    def handle_endtag(self, tag: str) -> None:
        if tag == "table":
            self._in_answer = self._in_body = False
        elif tag in ("th", "td"):
            self._cell = None
        elif tag == "tr" and self._in_body:
            row = self.rows[-1]
            if row["first"]:
                self._family = {"fam": row["fam"], "ver": row["ver"]}
            row["family"], row["verdict"] = self._family["fam"], self._family["ver"]

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self.rows[-1][self._cell] += data


def html_answer_rows(page: str) -> list[dict]:
    """report.html's first-screen rows; texts with whitespace collapsed."""
    parser = _AnswerRows()
    parser.feed(page[:page.index("</section>")])
    for row in parser.rows:
        for k, v in list(row.items()):
            if isinstance(v, str):
                row[k] = " ".join(unescape(v).split())
    return parser.rows


def flag_counts(run: Path) -> tuple[dict[tuple[str, str, str], int], dict[tuple[str, str], tuple[int, int]]]:
    """From the run's flags.csv and leaderboard.csv: the number of distinct defect flags of each
    (implementation, version, norm), and per (family, norm) (implementations flagged, implementations).
    A weakness (``optimality_gap``) is not a flag on the first screen (fidelity/flag_kinds.py)."""
    from attackaudit.fidelity.flag_kinds import is_defect

    flags = pd.read_csv(run / "flags.csv", dtype=str, keep_default_na=False)
    assert (flags["severity"] == ["defect" if is_defect(f) else "weakness" for f in flags["flag"]]).all()
    flags = flags[flags["severity"] == "defect"]
    board = pd.read_csv(run / "leaderboard.csv", dtype={"library_version": str}, keep_default_na=False)
    own = {k: g["flag"].nunique() for k, g in flags.groupby(["implementation", "library_version", "norm"])}
    family = {}
    for (fam, norm), g in board.groupby(["family", "norm"]):
        keys = list(zip(g["implementation"], g["library_version"]))
        family[(fam, norm)] = (sum((i, v, norm) in own for i, v in keys), len(keys))
    return own, family


@pytest.fixture(scope="module")
def screen(tmp_path_factory) -> tuple[Path, list[dict]]:
    run = tmp_path_factory.mktemp("first-screen")
    write_first_screen_run(run)
    return run, html_answer_rows((run / "report.html").read_text())


def _key(row: dict) -> tuple[str, str]:
    """(implementation, version) of a row, from its pick link's title "implementation version"
    (("", "") for the row of a family where none is trusted)."""
    if row["pick"] == "none trusted":
        return "", ""
    name, _, version = row["title"].rpartition(" ")
    return name, version


def _family_norm(row: dict) -> tuple[str, str]:
    family, norm = re.match(r"(\S+) · (\S+)", row["family"]).groups()
    return family, norm


def test_each_flag_count_sits_on_the_row_it_counts(screen):
    run, rows = screen
    own, family = flag_counts(run)
    assert len(rows) == 11 and sum(r["first"] for r in rows) == 9       # nine families, two of two rows
    for r in rows:
        fam, norm = _family_norm(r)
        n = own.get((*_key(r), norm), 0)
        assert r["own"] == (f"⚑ {n}" if n else ""), r              # this implementation's flags, none else
        k, total = family[(fam, norm)]
        assert r["family"] == f"{fam} · {norm}" + (f" ⚑ {k} of {total}" if k else ""), r
    # the family's count beside a trusted pick that has no flag of its own; foolbox's optimality_gap
    # (a weakness) is not counted: one defect (the crashing hostile implementation) of three
    apgd = next(r for r in rows if r["family"].startswith("apgd · l2"))
    assert apgd["family"] == "apgd · l2 ⚑ 1 of 3" and apgd["own"] == "" and apgd["title"] == "adv_lib/apgd 0.2.8"
    flags = pd.read_csv(run / "flags.csv", dtype=str, keep_default_na=False)
    assert set(flags[(flags["implementation"] == "foolbox/LinfPGD") & (flags["norm"] == "l2")]["flag"]) == {
        "optimality_gap"}
    # where none is trusted there is nothing to pick: the pick column says so, no ξ, no own ⚑
    cw = next(r for r in rows if r["family"].startswith("cw · l2"))
    assert (cw["verdict"], cw["pick"], cw["num"], cw["own"], cw["family"]) == (
        "none", "none trusted", "", "", "cw · l2 ⚑ 2 of 2")


def test_a_pick_far_below_its_norms_best_is_marked_weak(screen):
    from attackaudit.fidelity.strength import WEAK_FRACTION
    from attackaudit.reports.first_screen import WEAK_PICK_FRACTION

    assert WEAK_PICK_FRACTION == WEAK_FRACTION == 0.5                # one fraction for the report and the summary
    run, rows = screen
    board = pd.read_csv(run / "leaderboard.csv", dtype={"library_version": str}, keep_default_na=False)
    xi = {(r.implementation, r.library_version, r.norm): r.optimality for r in board.itertuples(index=False)}
    best = board.sort_values("optimality", ascending=False).drop_duplicates("norm").set_index("norm")
    weak = []
    for r in rows:
        fam, norm = _family_norm(r)
        if r["pick"] == "none trusted":
            continue
        mine = xi[(*_key(r), norm)]
        assert r["num"].split()[0] == f"{mine:.3f}"
        if mine < WEAK_PICK_FRACTION * best.loc[norm, "optimality"]:
            weak.append((fam, norm, r["verdict"]))
            assert r["nb"] == "weak", r
        else:
            assert "weak" not in r["nb"], r
    assert sorted(weak) == [("ead", "l2", "clear"), ("fab", "linf", "only")]
    # the best of each norm with a weak pick named once, under the table
    page = (run / "report.html").read_text()
    legend = re.search(r'</div><p class="key">(weak: .*?)</p>', page).group(1)
    for norm in ("l2", "linf"):
        assert f"{norm} {best.loc[norm, 'implementation']}" in unescape(legend)
    # weak is shown, not judged: no flag comes with it and the verdicts are fidelity's own
    flags = pd.read_csv(run / "flags.csv")
    assert not len(flags[flags["implementation"].isin(["torchattacks/EADEN", "torchattacks/FAB"])])
    rec = {(r["family"], r["norm"]): r["verdict"] for r in json.loads((run / "report.json").read_text())["recommendation"]}
    assert rec[("ead", "l2")] == "clear" and rec[("fab", "linf")] == "only implementation"


def test_inconclusive_families_show_each_member_and_what_would_decide(screen):
    _, rows = screen
    pgd = [r for r in rows if r["family"].startswith("pgd · linf")]
    assert [r["title"] for r in pgd] == ["cleverhans/projected_gradient_descent 4.0.0",
                                         "art/ProjectedGradientDescentPyTorch 1.17"]
    assert pgd[0]["verdict"] == "inconclusive" and re.fullmatch(
        r"rerun: --samples \d+|needs ≈\d+ images", pgd[0]["nb"])
    assert pgd[1]["nb"] == "" and not pgd[1]["first"]


def _md_cells(line: str) -> list[str]:
    cells = re.split(r"(?<!\\)\|", line.strip())[1:-1]
    return [" ".join(unescape(re.sub(r"\\(.)", r"\1", c)).split()) for c in cells]


def test_report_md_opens_with_the_same_answer_table(screen):
    run, rows = screen
    md = (run / "report.md").read_text().splitlines()
    assert md[0] == "# Attack implementation audit" and md[1] == ""
    body = []
    for line in md[2:]:
        if not line.startswith("|"):
            break
        body.append(line)
    assert _md_cells(body[0]) == ["family · norm", "verdict", "pick", "ξ (95% interval)", "note", "⚑"]
    expected = [[r["family"] if r["first"] else "", r["verdict"] if r["first"] else "", r["pick"], r["num"], r["nb"],
                 r["own"]] for r in rows]
    assert [_md_cells(line) for line in body[2:]] == expected
