"""``attackaudit compare A B`` on runs made with different settings (issue 51, item 3): refused
in one line naming the settings that differ, or with ``--across-settings`` compared and labelled
on stdout, in compare.md, compare.html and audit.json; compare.md is titled as a comparison (not
a release audit) and its arrows are arrows, not escaped HTML."""
from __future__ import annotations

import json

import pytest

from attackaudit.cli import main as cli_main
from attackaudit.reports.compare_settings import setting_changes

GRID = ["--models", "digits-mlp-tiny", "--attacks", "adv_lib/fmn/linf", "adv_lib/pdpgd/linf", "--samples", "4",
        "--budget", "60", "--workers", "1", "--quiet"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("settings")
    for name, scale in (("a", "1.0"), ("b", "0.2"), ("c", "1.0")):
        extra = ["--libraries", "adv_lib"] if name == "c" else []
        assert cli_main(["run", *GRID, *extra, "--steps-scale", scale, "--out", str(root / name)]) == 0
    return root


def test_runs_with_other_settings_are_refused_naming_them(runs, capsys):
    assert cli_main(["compare", str(runs / "a"), str(runs / "b"), "--out", str(runs / "refused")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "ran with different settings (steps_scale 1.0 -> 0.2)" in err and "--across-settings" in err
    assert not (runs / "refused").exists()


def test_across_settings_every_output_says_so(runs, capsys):
    out = runs / "across"
    assert cli_main(["compare", str(runs / "a"), str(runs / "b"), "--out", str(out), "--across-settings"]) == 0
    stdout = capsys.readouterr().out
    label = ("Settings differ between A and B (steps_scale 1.0 -> 0.2): each verdict measures the change of "
             "settings together with any change of library.")
    assert stdout.splitlines()[0] == label
    page = (out / "compare.md").read_text()
    assert page.startswith("# Comparison of two runs\n") and "Release audit" not in page
    assert label in page and "&gt;" not in page and " -> " in page
    html = (out / "compare.html").read_text()
    assert "<h1>Comparison of two runs</h1>" in html and "steps_scale 1.0 -&gt; 0.2" in html
    assert json.loads((out / "audit.json").read_text())["settings_differ"] == ["steps_scale 1.0 -> 0.2"]


def test_another_grid_is_listed_never_refused(runs, capsys):
    assert cli_main(["compare", str(runs / "a"), str(runs / "c"), "--out", str(runs / "grid")]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first == "The grids differ (libraries (default) -> adv_lib): what one run lacks is new or removed."
    assert setting_changes({"config": {"budget": 5}}, {}) == ([], [])  # a run that predates the record
