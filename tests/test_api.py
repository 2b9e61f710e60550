"""The notebook API: ``attackaudit.compare`` on a model object, ``attackaudit.open``, ``Result``;
its run directory is an ordinary one, its bad arguments one ValueError each, and
``examples/notebook.ipynb`` runs as a user would run it."""
import ast
import copy
import io
import json
import re
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

import attackaudit
from attackaudit.cli import main as cli_main
from attackaudit.sources.subset import digits
from attackaudit.sources.user_model import model_fingerprint
from attackaudit.sources.zoo import load_model

NOTEBOOK = Path(__file__).parents[1] / "examples" / "notebook.ipynb"
GRID = dict(families="pgd", norms="linf", libraries=["adv_lib", "torchattacks"], samples=6, budget=300,
            steps_scale=0.2, progress=False)


class UsersNet(nn.Module):
    """A user's model: the zoo's tiny MLP inside a class of their own, holding a lock (so it does
    not pickle and its jobs run in-process)."""

    def __init__(self):
        super().__init__()
        self.inner = load_model("digits-mlp-tiny")
        self.lock = threading.Lock()

    def forward(self, x):
        with self.lock:
            return self.inner(x)


def users_model() -> UsersNet:
    model = UsersNet().train()
    model.requires_grad_(True)  # as a user's model is after training
    return model


@pytest.fixture(scope="module")
def in_process(tmp_path_factory):
    x, y = digits("test")
    model = users_model()
    out = tmp_path_factory.mktemp("api") / "run"
    result = attackaudit.compare(model, x, y, out=out, **GRID)
    return result, model, (x, y), out


def test_compare_runs_the_grid_and_the_result_answers(in_process):
    result, model, _, out = in_process
    assert result.execution.startswith("in-process: the model cannot be pickled")
    rows = result.rows
    assert len(rows) == 12 and set(rows["implementation"]) == {"adv_lib/pgd_linf", "torchattacks/PGD"}
    assert set(rows["status"]) == {"ok"} and np.isfinite(rows["best_distance"]).mean() > 0.5  # real attacks
    assert set(result.leaderboard["implementation"]) == set(rows["implementation"])
    verdict = result.trust("pgd", "linf")
    assert verdict["family"] == "pgd" and verdict["verdict"] and verdict["summary"]
    assert all({"implementation", "optimality", "optimality_ci"} <= set(m) for m in verdict["trust_set"])
    assert set(result.flags.columns) >= {"implementation", "flag", "evidence"}
    with pytest.raises(ValueError, match="family 'apgd' under norm 'linf' is not in this run; it has pgd/linf"):
        result.trust("apgd", "linf")
    page = result._repr_html_()
    assert "<table>" in page and f"<td>{verdict['verdict']}</td>" in page and verdict["implementation"] in page
    # the run gave the model back as it was: training mode, gradients on, on its device
    assert model.training and model.inner.training and all(p.requires_grad for p in model.parameters())


def test_plot_draws_each_implementation_and_the_envelope(in_process):
    result = in_process[0]
    fig = result.plot("pgd", "linf")
    (ax,) = fig.axes
    labels = [line.get_label() for line in ax.get_lines()]
    assert labels[0] == "envelope" and len(labels) == 3
    assert {label.split()[0] for label in labels[1:]} == {"adv_lib/pgd_linf", "torchattacks/PGD"}
    envelope = ax.get_lines()[0].get_ydata()
    assert envelope[0] == pytest.approx(1.0) and envelope[-1] < envelope[0]  # the best attack breaks samples
    fig.savefig(io.BytesIO(), format="png")
    with pytest.raises(ValueError, match="no results"):
        result.plot("pgd", "l2")


def test_the_run_directory_is_ordinary_reportable_and_resumable(in_process, capsys, tmp_path):
    result, model, (x, y), out = in_process
    assert (out / "manifest.json").exists() and len(list((out / "jobs").glob("*.parquet"))) == 2
    assert cli_main(["report", str(out), "--out", str(tmp_path / "cli"), "--format", "json"]) == 0
    capsys.readouterr()
    assert json.loads((tmp_path / "cli" / "report.json").read_text())["recommendation"]
    written = result.report(tmp_path / "api", formats=["md"])
    assert (tmp_path / "api" / "report.md").exists() and "report.md" in written
    again = attackaudit.compare(model, x, y, out=out, **GRID)
    assert "(0 run now, 2 already done)" in json.loads((out / "notebook.json").read_text())["summary"]
    assert again.rows["best_distance"].equals(result.rows["best_distance"])
    opened = attackaudit.open(out)
    assert opened.execution == result.execution and len(opened.rows) == len(result.rows)
    retrained = users_model()
    with torch.no_grad():  # another model under the same out: refused, never mixed with the old rows
        next(retrained.parameters()).add_(0.01)
    with pytest.raises(ValueError, match=r"^out: .* holds a run with a different config \(models\)"):
        attackaudit.compare(retrained, x, y, out=out, **GRID)


def test_import_and_open_stay_free_of_torch(in_process):
    out = in_process[3]
    code = ("import sys, attackaudit\n"
            "from attackaudit import Result, compare, open\n"
            f"r = attackaudit.open({str(out)!r})\n"
            "assert r.trust('pgd', 'linf')['verdict'] and len(r.leaderboard) == 2\n"
            "assert 'torch' not in sys.modules, 'torch was loaded'\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr


X, Y = digits("test")
BAD = {
    "model": (dict(model="digits-mlp"), "model must be a torch.nn.Module"),
    "inputs flat": (dict(inputs=X.flatten(1)), "inputs must be N×C×H×W"),
    "inputs uint8": (dict(inputs=(X * 255).to(torch.uint8)), "inputs must be floating point"),
    "inputs outside [0, 1]": (dict(inputs=X * 2), r"inputs must be finite and in \[0, 1\]"),
    "inputs list": (dict(inputs=X.tolist()), "inputs must be a torch.Tensor or numpy array"),
    "labels length": (dict(labels=Y[:-1]), "labels must be"),
    "labels float": (dict(labels=Y.float()), "labels must be"),
    "labels beyond the classes": (dict(labels=Y + 5), r"labels must lie in \[0, 10\) .*\(first: labels\[\d+\] = 1\d\)"),
    "inputs NaN": (dict(inputs=X.clone().index_put_((torch.tensor([3]), torch.tensor([0]), torch.tensor([2]),
                                                      torch.tensor([5])), torch.tensor(float("nan")))),
                   r"inputs must be finite and in \[0, 1\]: inputs\[3, 0, 2, 5\] = nan, the first of 1 such values$"),
    "inputs 0-255": (dict(inputs=X * 255), r"inputs\[0, 0, 0, 4\] = 175.3, the first of \d+ such values \(divide 0–255 "
                                                                 r"images by 255\)$"),
    "inputs without channels": (dict(inputs=X[:, 0].numpy()), r"got shape \(\d+, 8, 8\) \(one channel: pass "
                                                               r"inputs\[:, None\]\)"),
    "model on the meta device": (dict(model=nn.Sequential(nn.Flatten(), nn.Linear(64, 10, device="meta"))),
                                 r"^model: 1\.weight is on the meta device \(it has no values\); load the weights"),
    "model in float64": (dict(model=load_model("digits-mlp-tiny").double()),
                         r"^model: .* is torch\.float64; attackaudit attacks float32 models: pass model\.float\(\)$"),
    "samples zero": (dict(samples=0), "samples must be an integer ≥ 1"),
    "budget": (dict(budget=0), "budget must be an integer ≥ 1"),
    "seed": (dict(seed=-1), "seed must be an integer ≥ 0"),
    "norms": (dict(norms=["L3"]), "norms must be 'l0', 'l1', 'l2' or 'linf' \\(any case\\), got 'L3'"),
    "families empty": (dict(families=[]), "families must be a name or a non-empty list"),
    "workers": (dict(workers=-1), "workers must be an integer ≥ 0"),
    "device": (dict(device="gpu"), "device must be"),
    "steps_scale": (dict(steps_scale=0), "steps_scale must be a positive number"),
    "targeted": (dict(targeted="yes"), "targeted must be True or False"),
    "plugins": (dict(plugins=["no/such/plugin.py"]), "plugins: .* is not a file"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_a_bad_argument_is_one_valueerror_naming_it(case, tmp_path):
    change, message = BAD[case]
    args = dict(model=load_model("digits-mlp-tiny"), inputs=X, labels=Y) | change
    with pytest.raises(ValueError, match=message) as err:
        attackaudit.compare(args.pop("model"), args.pop("inputs"), args.pop("labels"), out=tmp_path / "r",
                            **args)
    assert len(str(err.value).splitlines()) == 1
    assert not (tmp_path / "r").exists()  # nothing was written


class DropoutNet(nn.Module):
    """A user's freshly trained model: dropout, still in training mode."""

    def __init__(self):
        super().__init__()
        self.inner = load_model("digits-mlp-tiny")
        self.drop = nn.Dropout(0.5)

    def forward(self, x):
        return self.inner(self.drop(x))


def test_inputs_as_users_have_them_run_with_a_note_each(tmp_path, capsys):
    """float64 numpy images (``digits.images / 16``), numpy labels, a dropout model left in training
    mode and a family list with a typo: the run goes on, and the result says what it changed."""
    model = DropoutNet().train()
    images = X.numpy().astype(np.float64)
    assert images.dtype == np.float64
    result = attackaudit.compare(model, images, Y.numpy(), families=["pgd", "pgdd"], norms="linf",
                                 libraries="adv_lib", samples=4, budget=200, steps_scale=0.1, workers=0,
                                 progress=False, out=tmp_path / "r")
    assert set(result.rows["status"]) == {"ok"} and np.isfinite(result.rows["best_distance"]).any()
    notes = result.notes
    assert "inputs: torch.float64 cast to the model's dtype, torch.float32" in notes
    assert any(n.startswith("model: it is in training mode (Dropout act differently in eval mode); it is attacked "
                            "in eval mode") for n in notes), notes
    assert "families='pgdd' names no attack (nearest: pgd, pdgd, apgd)" in notes  # compare()'s words
    assert model.training and model.drop.training                        # given back as it was
    err = capsys.readouterr().err
    assert all(f"attackaudit: note: {n}" in err for n in notes)
    assert attackaudit.open(tmp_path / "r").notes == notes and "note: inputs: torch.float64" in result._repr_html_()
    with pytest.raises(ValueError, match=r"^the filters \(libraries/families/norms/attacks\) match no attack: "
                                         r"families='apgdd' names no attack \(nearest: apgd"):
        attackaudit.compare(load_model("digits-mlp-tiny"), X, Y, families="apgdd", libraries="adv_lib", samples=4,
                            workers=0, progress=False, out=tmp_path / "typo")


def test_messages_speak_the_callers_language(tmp_path, capsys):
    """An inconclusive verdict asks for more images: a Result says ``samples=N`` (compare's
    argument) in its verdicts and in the report it writes; ``attackaudit report`` says ``--samples N``."""
    from attackaudit.fidelity.synthetic import job_rows, table
    from attackaudit.results.store import write_job, write_manifest

    rng = np.random.default_rng(1)
    base = rng.uniform(0.1, 0.3, 8)  # two implementations 4% apart, on 8 images: more images would decide
    rows = table(job_rows("m", "a/pgd", "linf", base, family="pgd"),
                 job_rows("m", "b/pgd", "linf", base * rng.lognormal(0.03, 0.08, 8), family="pgd"))
    run = tmp_path / "run"
    for i, (_, g) in enumerate(rows.groupby("job_id")):
        write_job(run, f"job{i}", g)
    write_manifest(run, {"name": "words", "seed": 0})
    result = attackaudit.open(run)
    verdict = result.trust("pgd", "linf")
    assert verdict["verdict"] == "inconclusive"
    assert re.search(r"rerun with samples=\d+", verdict["summary"]) and "--samples" not in verdict["summary"]
    assert "--samples" not in result._repr_html_() and "--samples" not in result.recommendation["summary"].iloc[0]
    written = result.report(tmp_path / "api", formats=["md", "html"])
    for name in ("report.md", "report.html"):
        text = written[name].read_text()
        assert re.search(r"rerun with samples=\d+", text) and not re.search(r"--samples \d", text), name
    assert cli_main(["report", str(run), "--out", str(tmp_path / "cli"), "--format", "md"]) == 0
    capsys.readouterr()
    assert re.search(r"rerun with --samples \d+", (tmp_path / "cli" / "report.md").read_text())


def test_open_names_a_run_dir_that_is_missing_or_empty(tmp_path):
    with pytest.raises(ValueError, match=r"^run_dir .*nowhere does not exist$"):
        attackaudit.open(tmp_path / "nowhere")
    with pytest.raises(ValueError, match=r"^run_dir .* holds no results"):
        attackaudit.open(tmp_path)


@settings(max_examples=30, deadline=None)
@given(position=st.integers(0, 10_000), delta=st.floats(1e-6, 1.0) | st.floats(-1.0, -1e-6))
def test_the_model_fingerprint_follows_every_weight(position, delta):
    """Results are reused only for the same model: a copy has the same fingerprint, and a change
    of any one weight gives another (and so another run config)."""
    model = load_model("digits-mlp-tiny")
    assert model_fingerprint(copy.deepcopy(model)) == model_fingerprint(model)
    params = list(model.parameters())
    flat = torch.cat([p.detach().flatten() for p in params])
    i = position % flat.numel()
    changed = copy.deepcopy(model)
    with torch.no_grad():
        offset = i
        for p in changed.parameters():
            if offset < p.numel():
                p.view(-1)[offset] += delta
                break
            offset -= p.numel()
    assert model_fingerprint(changed) != model_fingerprint(model)


# -- the notebook, executed as Jupyter would: one namespace, each cell's last expression displayed --
def _run_notebook(path: Path) -> list[object]:
    """Execute the code cells in order; returns what Jupyter would display for each cell."""
    namespace: dict = {"__name__": "__main__"}  # the notebook's classes live in __main__, as in Jupyter
    shown = []
    for cell in json.loads(path.read_text())["cells"]:
        if cell["cell_type"] != "code":
            continue
        tree = ast.parse("".join(cell["source"]))
        last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
        exec(compile(tree, str(path), "exec"), namespace)
        if last is not None:
            value = eval(compile(ast.Expression(last.value), str(path), "eval"), namespace)
            if hasattr(value, "_repr_html_"):
                value._repr_html_()
            if hasattr(value, "savefig"):
                value.savefig(io.BytesIO(), format="png")
            shown.append(value)
    return shown


def test_the_example_notebook_runs_and_answers_which_apgd_to_trust(capsys):
    shown = _run_notebook(NOTEBOOK)
    result = next(v for v in shown if isinstance(v, attackaudit.Result))
    assert result.execution.startswith("isolated")  # a notebook's own class reaches the workers
    assert set(result.rows["library"]) == {"adv_lib", "torchattacks"} and set(result.rows["family"]) == {"apgd"}
    assert set(result.rows["status"]) == {"ok"}
    out = capsys.readouterr().out
    assert "clean accuracy 0.9" in out  # the model the notebook trains is a real one
    assert f"{result.trust('apgd', 'linf')['verdict']} - " in out
    assert (result.run_dir / "report.html").exists()
    # the command line resumes it as its own: the same grid, nothing left to run
    config = json.loads((result.run_dir / "manifest.json").read_text())["config"]
    args = ["run", "--out", str(result.run_dir), "--models", *config["models"], "--dataset", config["dataset"],
            "--families", *config["families"], "--norms", *config["norms"], "--libraries", *config["libraries"],
            "--samples", str(config["samples"]), "--budget", str(config["budget"]),
            "--steps-scale", str(config["steps_scale"]), "--device", config["device"], "--quiet"]
    assert cli_main(args) == 0
    assert "(0 run now, 4 already done)" in capsys.readouterr().err
