"""One story in every view: what each view says about each implementation's flags agrees with
fidelity/flag_kinds.py (a defect: "flagged", never trusted; a weakness, ``optimality_gap``:
"weaker", still a candidate).

One run (test_report_first_screen's: a crashing hostile implementation that also has an
optimality_gap, foolbox's LinfPGD and ART's ElasticNet with an optimality_gap alone, C&W
implementations that crashed) is reported and read back through every view: report.html (first
screen and flag list), report.md, flags.json / report.json, the notebook's ``Result`` (its
recommendation and its Jupyter table), ``attackaudit explain`` and ``attackaudit compare`` (against
the same run with foolbox's gap closed). Each is compared with the standing flag_kinds gives each
(implementation, version, norm) from flags.csv. Before flag_kinds, the first screen counted
optimality_gap as a flag ("⚑ 2 of 3") while the notebook said "flagged 1" for the same family and
``explain`` said of a gap alone "it is flagged; a flagged implementation is never trusted".
"""
from __future__ import annotations

import json
import re
from html import unescape
from pathlib import Path

import pandas as pd
import pytest

from attackaudit.fidelity.flag_kinds import FLAG_KINDS, WEAKNESS_FLAGS, family_counts, severity, standing
from test_report_first_screen import _md_cells, html_answer_rows, reported_run
from test_reports import make_table, store_run


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    return reported_run(tmp_path_factory, "flag-story")


@pytest.fixture(scope="module")
def truth(run: Path) -> dict[tuple[str, str, str], list[str]]:
    """(implementation, version, norm) -> its flags, from flags.csv."""
    flags = pd.read_csv(run / "flags.csv", dtype=str, keep_default_na=False)
    return {k: sorted(set(g["flag"])) for k, g in flags.groupby(["implementation", "library_version", "norm"])}


def test_the_registry_names_every_flag_once():
    from attackaudit.fidelity import FLAGS

    assert set(FLAG_KINDS) == set(FLAGS)
    assert WEAKNESS_FLAGS == {"optimality_gap"}
    assert severity("optimality_gap") == "weakness" and severity("crash") == "defect"
    assert severity("a_flag_from_a_newer_release") == "defect"         # never trust what the code cannot name
    assert standing(["optimality_gap"]) == "weaker" and standing(["crash", "optimality_gap"]) == "flagged"


def test_the_run_has_every_standing(truth):
    words = {standing(f) for f in truth.values()}
    assert words == {"flagged", "weaker"}
    assert any("optimality_gap" in f and standing(f) == "flagged" for f in truth.values())   # a defect and a gap


def test_json_and_csv_carry_each_findings_severity(run: Path, truth):
    flags = json.loads((run / "flags.json").read_text())
    assert flags and all(f["severity"] == severity(f["flag"]) for f in flags)
    report = json.loads((run / "report.json").read_text())
    keys = {(k[0], k[1]) for k, f in truth.items() if standing(f) == "flagged"}
    weaker = {(k[0], k[1]) for k, f in truth.items() if standing(f) == "weaker"} - keys
    assert report["summary"]["n_flagged"] == len(keys) and report["summary"]["n_weaker"] == len(weaker)
    counts = family_counts(pd.read_csv(run / "flags.csv", dtype=str, keep_default_na=False))
    for r in report["recommendation"]:
        assert r["flagged"] == counts.get((r["family"], r["norm"]), (0, 0))[0], r


def test_the_first_screen_counts_defects_and_words_weaknesses(run: Path, truth):
    rows = html_answer_rows((run / "report.html").read_text())
    board = pd.read_csv(run / "leaderboard.csv", dtype={"library_version": str}, keep_default_na=False)
    for r in rows:
        family, norm = re.match(r"(\S+) · (\S+)", r["family"]).groups()
        members = board[(board["family"] == family) & (board["norm"] == norm)]
        flagged = sum(standing(truth.get((i, v, norm), [])) == "flagged"
                      for i, v in zip(members["implementation"], members["library_version"]))
        assert r["family"] == f"{family} · {norm}" + (f" ⚑ {flagged} of {len(members)}" if flagged else ""), r
        if r["pick"] == "none trusted":
            continue
        name, _, version = r["title"].rpartition(" ")
        own = truth.get((name, version, norm), [])
        assert standing(own) != "flagged", r                                   # a flagged one is never picked
        assert r["own"] == "" and ("weaker" in r["nb"].split("; ")) == (standing(own) == "weaker"), r
    # the flag list under "Flags": each flag with its severity, in report.html and report.md
    page, md = (run / "report.html").read_text(), (run / "report.md").read_text()
    for flag in {f for fs in truth.values() for f in fs}:
        word = "a weakness: weaker, still trusted" if flag in WEAKNESS_FLAGS else "a defect: flagged, never trusted"
        assert re.search(rf"<li>{flag} \(\d+; {word}\)", page) and re.search(rf"- {flag} \(\d+; {word}\)", md), flag
    # the leaderboard's flags column marks the weakness, never a defect
    board_md = [_md_cells(line) for line in md.splitlines() if line.startswith("| foolbox/LinfPGD ")]
    assert any(c == "optimality_gap (weaker)" for row in board_md for c in row), board_md
    assert "optimality_gap (weaker)" in unescape(page) and not re.search(r"crash \(weaker\)", unescape(page) + md)
    body = [line for line in md.splitlines()[2:] if line.startswith("|")]
    html_rows = [[r["family"] if r["first"] else "", r["verdict"] if r["first"] else "", r["pick"], r["num"], r["nb"],
                  r["own"]] for r in rows]
    assert [_md_cells(line) for line in body[2:2 + len(rows)]] == html_rows


def test_the_notebook_says_the_same(run: Path, truth):
    from attackaudit import Result

    result = Result(run)
    rec = result.recommendation
    counts = family_counts(pd.read_csv(run / "flags.csv", dtype=str, keep_default_na=False))
    seen_weaker = 0
    for r in rec.itertuples(index=False):
        flagged, weaker = counts.get((r.family, r.norm), (0, 0))
        assert (r.flagged, r.weaker) == (flagged, weaker), r
        seen_weaker += weaker
    assert seen_weaker >= 2                                                # foolbox's LinfPGD, ART's ElasticNet
    cells = re.findall(r"<tr><td>([^<]*)</td><td>([^<]*)</td><td>[^<]*</td><td>[^<]*</td><td>(\d+)</td><td>(\d+)</td>",
                       result._repr_html_())
    assert {(f, n): (int(a), int(b)) for f, n, a, b in cells} == {
        (r.family, r.norm): (int(r.flagged), int(r.weaker)) for r in rec.itertuples(index=False)}
    assert set(result.flags["severity"]) == {"defect", "weakness"}
    assert all(s == severity(f) for f, s in zip(result.flags["flag"], result.flags["severity"]))


@pytest.mark.parametrize("implementation,norm", [("foolbox/LinfPGD", "l2"), ("art/ElasticNet", "l2"),
                                                 ("torchattacks/CW", "l2"), ("adv_lib/apgd", "l2")])
def test_explain_says_the_same(run: Path, truth, implementation: str, norm: str):
    from attackaudit.reports.explain import explain

    story = "\n".join(explain(run, implementation, norm))
    own = next((f for k, f in truth.items() if k[0] == implementation and k[2] == norm), [])
    defects = [f for f in own if severity(f) == "defect"]
    weak = [f for f in own if severity(f) == "weakness"]
    flags = pd.read_csv(run / "flags.csv", dtype=str, keep_default_na=False)
    findings = flags[(flags["implementation"] == implementation) & (flags["norm"] == norm)]["flag"].tolist()
    n_defect = sum(severity(f) == "defect" for f in findings)
    assert f"flags: {len(findings)}" in story
    if own:
        assert f"({n_defect} defect, {len(findings) - n_defect} weakness)" in story
    for f in own:
        assert re.search(rf"  {f} \({severity(f)}; ", story), f
    assert ("it is flagged (" in story) == bool(defects)
    assert ("a flagged implementation is never trusted" in story) == bool(defects)
    assert ("  weaker: optimality_gap (a weakness, not a flag" in story) == bool(weak)
    if not defects:
        assert "never trusted" not in story


def test_compare_marks_a_weakness_that_went_away(run: Path, tmp_path: Path):
    from attackaudit.cli import main as cli_main

    # foolbox's LinfPGD 6% behind adv_lib in run A (an optimality_gap), level with it in run B
    a, b = store_run(tmp_path / "a", make_table()), store_run(tmp_path / "b", make_table(fool_scale=1.0))
    assert cli_main(["compare", str(a), str(b), "--out", str(tmp_path / "cmp")]) == 0
    diff = pd.read_csv(tmp_path / "cmp" / "diff.csv", dtype=str, keep_default_na=False)
    fool = diff[diff["implementation"] == "foolbox/LinfPGD"]
    assert (fool["flags_disappeared"] == "optimality_gap").any()
    cells = [_md_cells(line) for line in (tmp_path / "cmp" / "compare.md").read_text().splitlines()
             if line.startswith("| foolbox/LinfPGD")]
    assert any("optimality_gap (weaker)" in c for row in cells for c in row), cells
    assert not any("crash (weaker)" in c for row in cells for c in row)
    page = unescape((tmp_path / "cmp" / "compare.html").read_text())
    assert "optimality_gap (weaker)" in page
