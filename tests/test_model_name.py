"""A notebook model is shown by a name, never by the temporary path its source is (issue 51,
item 5): ``compare(name=...)`` (default: the class name) names it in the rows, the progress bar,
the flags, ``explain`` and the reports, its twins with their suffix; renaming resumes the run;
``print(result)`` shows the verdicts (item 11)."""
from __future__ import annotations

import json

import pytest
from torch import nn

import attackaudit
from attackaudit.cli import main as cli_main
from attackaudit.sources.subset import digits
from attackaudit.sources.zoo import load_model

GRID = dict(attacks=["adv_lib/fmn/linf", "adv_lib/pdpgd/linf"], samples=4, budget=60, steps_scale=0.1, workers=1)


class TinyNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = load_model("digits-mlp-tiny")

    def forward(self, x):
        return self.inner(x)


@pytest.fixture(scope="module")
def named(tmp_path_factory):
    x, y = digits("test")
    out = tmp_path_factory.mktemp("named") / "run"
    return attackaudit.compare(TinyNet(), x, y, metamorphic=True, name="mynet", out=out, **GRID), out


def test_the_name_is_what_rows_flags_and_reports_show(named, capsys):
    result, out = named
    assert set(result.rows["model"]) >= {"mynet", "mynet~shift", "mynet~perm"}
    assert not any(m.startswith("module:") for m in result.rows["model"])
    assert all(str(m).startswith("mynet") for m in result.flags.get("model", []))
    assert json.loads((out / "notebook.json").read_text())["model"] == "mynet"
    assert json.loads((out / "manifest.json").read_text())["model_names"] == {
        json.loads((out / "notebook.json").read_text())["model_source"]: "mynet"}
    assert cli_main(["explain", str(out), "adv_lib/fmn", "--norm", "linf"]) == 0
    told = capsys.readouterr().out
    assert "mynet" in told and "module:" not in told and "/models/" not in told
    written = result.report(out / "report")
    assert "module:" not in written["report.md"].read_text()


def test_print_result_shows_the_verdicts(named):
    result, _ = named
    text = str(result)
    assert text.splitlines()[0] == repr(result)
    rec = result.recommendation
    for _, r in rec.iterrows():
        assert f"{r['family']} {r['norm']}: {r['verdict']}: " in text


def test_the_default_name_is_the_class_and_renaming_resumes(tmp_path, capfd):
    x, y = digits("test")
    out = tmp_path / "run"
    first = attackaudit.compare(TinyNet(), x, y, out=out, **GRID)
    assert set(first.rows["model"]) == {"TinyNet"}
    bar = capfd.readouterr().err
    assert "TinyNet adv_lib/" in bar and "module:" not in bar  # the job bar names the model by its name
    again = attackaudit.compare(TinyNet(), x, y, out=out, name="v2", progress=False, **GRID)
    assert set(again.rows["model"]) == {"v2"}
    assert "(0 run now, 2 already done)" in json.loads((out / "notebook.json").read_text())["summary"]
    with pytest.raises(ValueError, match=r"^name must be letters, digits, '_', '\.' or '-' .*got 'my net~1'$"):
        attackaudit.compare(TinyNet(), x, y, out=tmp_path / "bad", name="my net~1", **GRID)
