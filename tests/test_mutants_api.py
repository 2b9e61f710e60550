"""``attackaudit.api``: what mutation testing found the suite left unchecked (docs/testing.md).

One real ``compare`` run (the probe plugin's deterministic ``descent`` attack on the zoo's tiny
MLP, in this process: a few seconds) gives a ``Result`` whose answers are read as a notebook user
reads them: the repr, the Jupyter table, ``trust``, the plot, the report files. The argument
checks are read through the messages ``compare`` raises.
"""
from __future__ import annotations

import dataclasses
import json
import os
import tempfile
from pathlib import Path

import numpy as np
import pytest

import attackaudit
from attackaudit import api
from attackaudit.api import NOTEBOOK_FILE, Result, _members, _short
from attackaudit.reports import write_report_data
from attackaudit.reports.wording import speak_document
from attackaudit.sources.subset import load_subset
from attackaudit.sources.zoo import load_model

PROBE = str(Path(__file__).parent / "plugins" / "probe.py")


@pytest.fixture(scope="module")
def digits():
    sub = load_subset("digits", 12, 0)
    return load_model("digits-mlp-tiny"), sub.inputs, sub.labels


@pytest.fixture(scope="module")
def run(digits, tmp_path_factory):
    model, x, y = digits
    out = tmp_path_factory.mktemp("api") / "run"
    result = attackaudit.compare(model, x, y, libraries="probe", attacks=["probe/descent"], plugins=[PROBE],
                                 samples=6, budget=100, workers=0, progress=False, out=out)
    return result, out


# -- compare's argument checks --------------------------------------------------------------------
def bad(digits, **kwargs) -> str:
    model, x, y = digits
    with pytest.raises(ValueError) as caught:
        attackaudit.compare(model, x[:10], y[:10], **kwargs)
    return str(caught.value)


@pytest.mark.parametrize("kwargs, message", [
    ({"samples": 0}, "samples must be an integer ≥ 1, got 0"),
    ({"samples": 3.0}, "samples must be an integer ≥ 1, got 3.0"),
    ({"samples": True}, "samples must be an integer ≥ 1, got True"),
    ({"budget": 0}, "budget must be an integer ≥ 1, got 0"),
    ({"seed": -1}, "seed must be an integer ≥ 0, got -1"),
    ({"batch_size": -1}, "batch_size must be an integer ≥ 0, got -1"),
    ({"workers": -1}, "workers must be an integer ≥ 0, got -1"),
    ({"steps_scale": 0}, "steps_scale must be a positive number, got 0"),
    ({"steps_scale": True}, "steps_scale must be a positive number, got True"),
    ({"steps_scale": "1"}, "steps_scale must be a positive number, got '1'"),
    ({"timeout_s": -1.0}, "timeout_s must be a positive number, got -1.0"),
    ({"targeted": 1}, "targeted must be True or False, got 1"),
    ({"metamorphic": None}, "metamorphic must be True or False, got None"),
    ({"progress": "yes"}, "progress must be True or False, got 'yes'"),
    ({"families": []}, "families must be a name or a non-empty list of names, got []"),
    ({"libraries": [""]}, "libraries must be a name or a non-empty list of names, got ['']"),
    ({"attacks": ["a", 3]}, "attacks must be a name or a non-empty list of names, got ['a', 3]"),
    ({"families": 3}, "families must be a name or a non-empty list of names, got 3"),
    ({"norms": ["L2", "L9", "x"]}, "norms must be 'l0', 'l1', 'l2' or 'linf' (any case), got 'L9'"),
    ({"plugins": "no/such/plugin.py"},
     f"plugins: {Path('no/such/plugin.py').resolve()} is not a file; pass .py files that define specs()"),
])
def test_a_bad_argument_is_named_with_what_it_must_be(digits, kwargs, message):
    assert bad(digits, **kwargs) == message


def test_the_scalars_defaults_and_their_smallest_good_values():
    common = dict(budget=1, seed=0, batch_size=0, steps_scale=1e-3, timeout_s=0.5, targeted=False,
                  metamorphic=True, progress=False)
    assert api._checked_scalars(10, samples=None, workers=None, **common) == (10, min(2, os.cpu_count() or 1))
    assert api._checked_scalars(10, samples=1, workers=0, **common) == (1, 0)
    assert api._checked_scalars(10, samples=np.int64(10), workers=3, **common) == (10, 3)
    with pytest.raises(ValueError, match=r"^x must be an integer between 0 and 3, got 4$"):
        api._check_int("x", 4, 0, 3)
    api._check_int("x", 3, 0, 3)


def test_filters_are_lists_or_none():
    assert api._filters(families=None, norms=None, libraries="probe", attacks=("a/b", "c/d")) == {
        "families": None, "norms": None, "libraries": ["probe"], "attacks": ["a/b", "c/d"]}
    assert api._filters(families=None, norms=["l0", "l1", "l2", "linf"], libraries=None, attacks=None)["norms"] == [
        "l0", "l1", "l2", "linf"]


def test_plugin_paths_are_absolute_files(tmp_path, monkeypatch):
    (tmp_path / "mine.py").write_text("def specs():\n    return []\n")
    monkeypatch.chdir(tmp_path)
    expected = [str(tmp_path / "mine.py")]
    assert api._plugin_paths("mine.py") == expected
    assert api._plugin_paths(Path("mine.py")) == expected
    assert api._plugin_paths(["mine.py", tmp_path / "mine.py"]) == expected * 2
    assert api._plugin_paths(()) == []


def test_out_is_created_with_its_parents_or_named(tmp_path):
    nested = tmp_path / "a" / "b" / "run"
    assert api._run_dir(nested) == nested and nested.is_dir()
    assert api._run_dir(str(nested)) == nested  # an existing one is reused
    fresh = api._run_dir(None)
    assert fresh.is_dir() and fresh.parent == Path(tempfile.gettempdir()) and fresh.name.startswith("attackaudit-")
    fresh.rmdir()
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(ValueError) as caught:
        api._run_dir(blocker / "run")
    assert str(caught.value) == f"out: cannot create {blocker / 'run'} (Not a directory)"


# -- the Result of a run ----------------------------------------------------------------------------
def test_result_reads_how_the_run_went(run):
    result, out = run
    note = json.loads((out / NOTEBOOK_FILE).read_text())
    assert result.run_dir == out
    assert result.execution == note["execution"] and result.execution.startswith("in-process: workers=0")
    assert result.model_name == note["model"] == "Sequential"
    assert result.notes == note["notes"] and result.notes and result.notes[0].startswith("plugins ")
    assert repr(result) == f"Result({str(out)!r}; {result.execution})"


def test_a_run_without_a_notebook_file_reads_as_a_cli_run(run, tmp_path):
    _, out = run
    other = tmp_path / "cli-run"
    (other / "jobs").mkdir(parents=True)
    for f in (out / "jobs").glob("*.parquet"):
        (other / "jobs" / f.name).write_bytes(f.read_bytes())
    result = attackaudit.open(other)
    assert result.run_dir == other
    assert result.execution == "by `attackaudit run` (each job in a worker process)"
    assert result.model_name == "" and result.notes == []
    assert len(result.rows) == len(run[0].rows) == 12


def test_open_names_a_missing_or_empty_run_dir(tmp_path):
    with pytest.raises(ValueError) as caught:
        attackaudit.open(tmp_path / "nope")
    assert str(caught.value) == f"run_dir {tmp_path / 'nope'} does not exist"
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "x.PARQUET.txt").write_text("")
    with pytest.raises(ValueError) as caught:
        attackaudit.open(tmp_path)
    assert str(caught.value) == f"run_dir {tmp_path} holds no results (no jobs/*.parquet)"


def test_trust_is_the_row_of_its_family_and_norm_in_plain_values(run):
    result, _ = run
    for norm in ("l2", "linf"):
        verdict = result.trust("descent", norm)
        assert verdict["family"] == "descent" and verdict["norm"] == norm
        assert verdict["implementation"] == "probe/descent" and verdict["verdict"] == "none"
        assert type(verdict["optimality"]) is float and type(verdict["samples_per_model"]) is int
        assert not any(isinstance(v, np.generic) for v in verdict.values())
    with pytest.raises(ValueError) as caught:
        result.trust("descent", "l0")
    assert str(caught.value) == "family 'descent' under norm 'l0' is not in this run; it has descent/l2, descent/linf"
    with pytest.raises(ValueError, match="^family 'pgd' under norm 'l2' is not in this run; "):
        result.trust("pgd", "l2")


def empty_result(result: Result) -> Result:
    """The same run as seen when no implementation produced results (its recommendation empty)."""
    empty = Result(result.run_dir)
    empty.data = dataclasses.replace(result.data, recommend=result.data.recommend.iloc[0:0])
    return empty


def test_trust_and_the_table_of_a_run_without_verdicts(run):
    empty = empty_result(run[0])
    with pytest.raises(ValueError) as caught:
        empty.trust("descent", "l2")
    assert str(caught.value) == "family 'descent' under norm 'l2' is not in this run; it has nothing"
    assert empty._repr_html_().endswith("</p><p>No implementation produced results.</p>")


def test_the_jupyter_table(run):
    result, out = run
    shown = Result(out)
    shown.notes = ["<b>cast</b> & kept"]
    page = shown._repr_html_()
    assert page.startswith(f"<p><b>attackaudit</b> · {out} · 12 rows · {shown.execution}</p>"
                           "<p>note: &lt;b&gt;cast&lt;/b&gt; &amp; kept</p><table>")
    assert ("<table><thead><tr><th>family</th><th>norm</th><th>verdict</th><th>trust (global ξ, 95% CI)</th>"
            "<th>flagged</th><th>weaker</th></tr></thead><tbody>") in page
    summary = "every implementation is flagged (probe/descent (last_not_best)); none is trusted"
    assert (f"<tr><td>descent</td><td>l2</td><td>none</td><td>{summary}</td><td>1</td><td>0</td></tr>"
            f"<tr><td>descent</td><td>linf</td><td>none</td><td>{summary}</td><td>1</td><td>0</td></tr></tbody></table>"
            ) in page
    assert page.endswith("<p>flagged: a defect, never trusted; weaker: only a weakness (optimality_gap), still trusted. "
                         ".trust(family, norm) for the reasons, .flags for the findings (their severity), "
                         ".report(path) for the full report.</p>")


def test_members_of_a_trust_set():
    both = {"trust_set": [{"implementation": "a/pgd", "optimality": 0.93, "optimality_ci": [0.9, 0.951]},
                          {"implementation": "b/pgd", "optimality": 0.8, "optimality_ci": [float("nan"), 0.9]},
                          {"implementation": "c/pgd", "optimality": 0.7},
                          {"optimality_ci": None}]}
    assert _members(both) == "a/pgd (0.930, 0.900–0.951); b/pgd (0.800); c/pgd (0.700); ? (n/a)"
    # ξ and its interval at one precision: never "0.999 (1.00–1.00)" (issue 51, item 11)
    assert _members({"trust_set": [{"implementation": "x", "optimality": 0.999, "optimality_ci": [0.998, 1.0]}]}) \
        == "x (0.999, 0.998–1.000)"
    assert _members({"trust_set": [], "note": "n", "summary": "s"}) == "n"
    assert _members({"trust_set": None, "note": "", "summary": "s"}) == "s"
    assert _members({"note": None}) == "none"


def test_a_compare_model_is_named_by_its_class_and_twin():
    source = "module:/tmp/x/run/models/Net-0a1b.py:load"
    assert _short(source, "Net") == "Net"
    assert _short(source + "~shift", "Net") == "Net~shift"
    assert _short("module:/tmp/:load/run/models/Net-0a1b.py:load~perm", "Net") == "Net~perm"
    assert _short(source, "") == source
    assert _short("module:/tmp/x/net.py:load", "Net") == "module:/tmp/x/net.py:load"  # not compare()'s
    assert _short("digits-mlp/models/x", "Net") == "digits-mlp/models/x"


def test_the_report_is_written_in_compare_s_words(run, tmp_path):
    result, out = run
    cli = write_report_data(result.data, tmp_path / "cli", ("md", "html", "json"))
    written = result.report(tmp_path / "api")
    assert set(written) >= {"report.md", "report.html", "report.json"}
    for name in ("report.md", "report.html", "report.json"):
        assert written[name].parent == tmp_path / "api"
        text, plain = written[name].read_text(), cli[name].read_text()
        assert text == speak_document(plain, "api"), name
        if name != "report.json":  # this run's JSON names no flag
            assert "--samples" in plain and "--samples" not in text and "samples=" in text, name
    md = result.report(formats=("md",))
    assert "report.html" not in md and md["report.md"] == out / "report.md"
    assert "--samples" not in md["report.md"].read_text()


def test_the_plot_of_a_family_and_norm(run):
    result, _ = run
    fig = result.plot("descent", "l2")
    (ax,) = fig.axes
    assert tuple(fig.get_size_inches()) == pytest.approx((5.2, 3.6))
    assert ax.get_title() == "descent · Sequential"
    assert ax.get_xlabel() == "ε (l2)" and ax.get_ylabel() == "robust accuracy"
    labels = [line.get_label() for line in ax.get_lines()]
    assert labels[0] == "envelope" and labels[1].startswith("probe/descent 1.0 (ξ ") and len(labels) == 2
    (curve,) = [c for c in result.data.curves if c.norm == "l2"]
    finite = curve.d_star[np.isfinite(curve.d_star)]
    assert ax.get_xlim() == pytest.approx((0, float(finite.max()) * 1.08))
    assert ax.get_ylim() == pytest.approx((-0.02, 1.02))
    envelope, impl = ax.get_lines()
    assert envelope.get_color() == "black" and envelope.get_linewidth() == 2.5 and impl.get_linewidth() == 1.4
    assert [t.get_text() for t in ax.get_legend().get_texts()] == labels
    with pytest.raises(ValueError) as caught:
        result.plot("pgd", "l2")
    assert str(caught.value) == "family 'pgd' under norm 'l2' has no results in this run"


def test_progress_false_shows_no_progress_bar_and_true_shows_the_jobs_bar(digits, tmp_path, capfd):
    model, x, y = digits
    kwargs = dict(libraries="probe", attacks=["probe/descent"], plugins=[PROBE], samples=2, budget=20, workers=0)
    attackaudit.compare(model, x, y, progress=False, out=tmp_path / "quiet", **kwargs)
    assert "jobs" not in capfd.readouterr().err
    attackaudit.compare(model, x, y, progress=True, out=tmp_path / "bars", **kwargs)
    assert "jobs:" in capfd.readouterr().err


def test_the_plot_draws_implementations_in_their_own_colours_under_a_small_legend(run):
    result, _ = run
    (ax,) = result.plot("descent", "l2").axes
    envelope, impl = ax.get_lines()
    assert envelope.get_color() == "black" and impl.get_color() not in ("black", "k", (0, 0, 0, 1))
    assert [t.get_fontsize() for t in ax.get_legend().get_texts()] == [7, 7]


def test_the_notebook_file_is_json_indented_as_the_run_s_other_files(run):
    _, out = run
    text = (out / NOTEBOOK_FILE).read_text()
    assert text == json.dumps(json.loads(text), indent=2) + "\n"


def test_a_harness_fault_is_raised_in_compare_s_words_with_the_way_around_it(digits, tmp_path, monkeypatch):
    import attackaudit.run.runner as runner
    from attackaudit.reports.wording import speak
    from attackaudit.run.faults import HarnessFault

    cause = "every job failed before its attack started: ImportError: no module x; rerun with --samples 2"
    where = "/r/jobs/a.traceback.txt)"

    def fault(config, *args, **kwargs):
        raise HarnessFault(f"{cause} (the traceback: {where}")

    monkeypatch.setattr(runner, "run", fault)
    model, x, y = digits
    kwargs = dict(libraries="probe", attacks=["probe/descent"], plugins=[PROBE], samples=2, progress=False)
    with pytest.raises(HarnessFault) as caught:
        attackaudit.compare(model, x, y, workers=0, out=tmp_path / "in-process", **kwargs)
    spoken = speak(f"{cause} (the traceback: {where}", "api")
    assert str(caught.value) == spoken and "ImportError: no module x" in spoken and "--samples" not in spoken
    with pytest.raises(HarnessFault) as caught:
        attackaudit.compare(model, x, y, workers=1, out=tmp_path / "isolated", **kwargs)
    head = spoken.rpartition(" (the traceback: ")[0]
    assert str(caught.value) == f"{head}, or pass workers=0 to run the jobs in this process (the traceback: {where}"
