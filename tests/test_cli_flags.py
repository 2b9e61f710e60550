"""Every command-line flag of ``run``, ``compare`` and ``exact`` that a user reaches for, each with
an observable effect: what the plan holds (which jobs, on which samples), what the stored rows
hold, which processes ran the jobs, what the command wrote, and its exit code. Small grids: the
probe plugin (tests/plugins/probe.py, plain torch: no library import) on 2-8 digits."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

import attackaudit
from attackaudit.cli import _run_flags, build_parser
from attackaudit.cli import main as cli_main
from attackaudit.results.schema import TWIN_KINDS
from attackaudit.run.config import load_toml, resolve
from attackaudit.sources.subset import load_subset
from attackaudit.run.runner import plan

PROBE = str(Path(__file__).parent / "plugins" / "probe.py")
DESCENT = ["--plugin", PROBE, "--libraries", "probe", "--attacks", "probe/descent/l2", "--quiet"]


def planned(*argv: str):
    """(RunConfig, Plan) of ``attackaudit run ARGV``, as the command resolves them."""
    args = build_parser().parse_args(["run", *argv])
    config = resolve(load_toml(args.config) if args.config else None, _run_flags(args))
    return config, plan(config)


def rows_of(out: Path) -> pd.DataFrame:
    return attackaudit.load_run(out).sort_values(["job_id", "sample"]).reset_index(drop=True)


# -- run: what is planned ------------------------------------------------------------------
def test_preset_quick_and_demo_set_the_grid_and_flags_override_them(tmp_path):
    config, p = planned("--preset", "quick", *DESCENT, "--out", str(tmp_path / "q"))
    assert (config.samples, config.steps_scale, config.workers, config.norms) == (8, 0.1, 2, ["l2", "linf"])
    assert {j.model for j in p.jobs} == {"digits-cnn"} and {j.samples for j in p.jobs} == {8}
    assert {j.steps_scale for j in p.jobs} == {0.1}
    config, p = planned("--preset", "demo", *DESCENT, "--samples", "2", "--out", str(tmp_path / "d"))
    assert {j.model for j in p.jobs} == {"digits-mlp-tiny", *(f"digits-mlp-tiny~{k}" for k in TWIN_KINDS)}
    assert {j.samples for j in p.jobs} == {2} and {j.steps_scale for j in p.jobs} == {0.5}
    assert config.until_decided == 128  # the demo extends its undecided rows up to the shipped exact minima
    config, p = planned(*DESCENT, "--out", str(tmp_path / "plain"))
    assert {j.model for j in p.jobs} == {"digits-cnn"} and (config.samples, config.steps_scale) == (32, 1.0)


def test_seed_draws_another_subset(tmp_path):
    _, zero = planned(*DESCENT, "--samples", "4", "--out", str(tmp_path / "a"))
    _, one = planned(*DESCENT, "--samples", "4", "--seed", "1", "--out", str(tmp_path / "b"))
    assert zero.subset_hash == load_subset("digits", 4, 0).hash
    assert one.subset_hash == load_subset("digits", 4, 1).hash != zero.subset_hash
    assert {j.seed for j in one.jobs} == {1} and {j.seed for j in zero.jobs} == {0}


def test_metamorphic_adds_the_twins(tmp_path):
    _, plain = planned(*DESCENT, "--out", str(tmp_path / "a"))
    _, twins = planned(*DESCENT, "--metamorphic", "--out", str(tmp_path / "b"))
    assert {j.model for j in plain.jobs} == {"digits-cnn"}
    assert {"digits-cnn", "digits-cnn~shift", "digits-cnn~perm"} <= {j.model for j in twins.jobs}


def test_families_keep_only_those_families(tmp_path):
    everything = ["--plugin", PROBE, "--libraries", "probe", "--out"]
    _, all_of_it = planned(*everything, str(tmp_path / "a"))
    _, invalid = planned(*everything, str(tmp_path / "b"), "--families", "invalid")
    assert len({j.spec_key for j in all_of_it.jobs}) > 2
    assert {j.spec_key for j in invalid.jobs} == {"probe/nan/linf", "probe/out_of_box/linf"}


# -- run: what the rows hold -----------------------------------------------------------------
def test_config_toml_is_read_and_flags_override_it(tmp_path):
    toml = tmp_path / "grid.toml"
    toml.write_text(f'[run]\nmodels = ["digits-cnn"]\nsamples = 3\nbudget = 40\nplugins = ["{PROBE}"]\n'
                    'libraries = ["probe"]\nattacks = ["probe/descent/l2"]\nquiet = true\n')
    assert cli_main(["run", str(toml), "--out", str(tmp_path / "t")]) == 0
    rows = rows_of(tmp_path / "t")
    assert len(rows) == 3 and set(rows["budget"]) == {40} and (rows["refused"] == 20).all()
    assert set(rows["sample"]) == set(load_subset("digits", 3, 0).indices.tolist())
    config, p = planned(str(toml), "--samples", "2", "--out", str(tmp_path / "f"))  # a flag wins over the file
    assert {(j.samples, j.budget) for j in p.jobs} == {(2, 40)}


def test_budget_bounds_the_stored_queries_and_refuses_the_rest(tmp_path):
    """descent makes 30 forwards and 30 backwards per sample: with --budget 50 every sample is
    answered 50 times and refused the other 10 (the TOML test's budget of 40 refuses 20)."""
    assert cli_main(["run", *DESCENT, "--samples", "2", "--budget", "50", "--out", str(tmp_path / "b")]) == 0
    capped = rows_of(tmp_path / "b")
    assert set(capped["budget"]) == {50}
    assert ((capped["forwards"] + capped["backwards"]) == 50).all()
    assert (capped["refused"] == 10).all()


def test_targeted_gives_every_sample_a_target_and_success_means_reaching_it(tmp_path):
    assert cli_main(["run", *DESCENT, "--samples", "4", "--steps-scale", "0.3", "--targeted",
                     "--out", str(tmp_path / "t")]) == 0
    sub = load_subset("digits", 4, 0)
    rows = rows_of(tmp_path / "t").set_index("sample").loc[sub.indices.tolist()]
    assert rows["targeted"].all() and (rows["target"] != rows["label"]).all()
    # the same seeded attack here, towards the stored targets: the rows call "adversarial" exactly
    # the outputs the model puts in the target class (leaving the label is not enough)
    from attackaudit.adapters import load_plugin_file
    from attackaudit.sources.zoo import load_model

    (entry,) = load_plugin_file(PROBE)
    spec = next(s for s in entry.specs if s.key == "probe/descent/l2").scaled(0.3)
    targets = torch.tensor(rows["target"].to_numpy())
    with torch.no_grad():
        model = load_model("digits-cnn")
    out = spec.run(model, sub.inputs, sub.labels, targeted=True, targets=targets)
    with torch.no_grad():
        predicted = model(out).argmax(1)
    assert rows["returned_adversarial"].tolist() == (predicted == targets).tolist()
    assert rows["returned_adversarial"].any() and not rows["returned_adversarial"].all()


def _markers(probe: Path) -> dict[str, tuple[int, int]]:
    """attack → (pid, parent pid) of the process that ran it."""
    out = {}
    for m in probe.glob("*.running"):
        pid, ppid = m.read_text().split()
        out[m.name.split(".")[0]] = (int(pid), int(ppid))
    return out


@pytest.mark.parametrize("executor", ["local", "dask"])
def test_workers_2_run_two_jobs_at_once_on_the_executor(tmp_path, monkeypatch, executor):
    """meet_a and meet_b each wait until the other has started (one worker would wait in vain and
    crash): with --workers 2 both finish. Local workers are children of the command's process; Dask
    runs each job under a worker process of its cluster."""
    probe = tmp_path / "probe"
    probe.mkdir()
    monkeypatch.setenv("ATTACKAUDIT_PROBE", str(probe))
    out = tmp_path / executor
    assert cli_main(["run", "--plugin", PROBE, "--libraries", "probe", "--attacks", "probe/meet_a", "probe/meet_b",
                     "--samples", "2", "--workers", "2", "--executor", executor, "--quiet", "--out", str(out)]) == 0
    assert set(rows_of(out)["status"]) == {"ok"}
    ran = _markers(probe)
    assert set(ran) == {"meet_a", "meet_b"} and ran["meet_a"][0] != ran["meet_b"][0]
    parents = {ppid for _, ppid in ran.values()}
    if executor == "local":
        assert parents == {os.getpid()}
    else:
        assert os.getpid() not in parents


def test_ctrl_c_during_a_run_exits_130_and_a_rerun_resumes(tmp_path):
    probe, out = tmp_path / "probe", tmp_path / "run"
    probe.mkdir()
    (probe / "hold-gate_a").touch()
    args = [sys.executable, "-m", "attackaudit", "run", "--plugin", PROBE, "--libraries", "probe", "--attacks",
            "probe/gate_a", "--samples", "2", "--quiet", "--out", str(out)]
    env = {**os.environ, "ATTACKAUDIT_PROBE": str(probe)}
    # a shell without job control starts background commands with SIGINT ignored, and Python keeps
    # an inherited SIG_IGN (so would a user's `attackaudit run ... &`): give the run the disposition
    # of a terminal's foreground job, whatever launched the tests
    proc = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 300
    while not list(probe.glob("gate_a.*.running")):
        assert proc.poll() is None and time.monotonic() < deadline, "the job never started"
        time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C sends: the whole foreground group
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert err.strip().splitlines()[-1] == "attackaudit: interrupted; rerun the same command to resume"
    assert not list((out / "jobs").glob("*.parquet"))
    (probe / "hold-gate_a").unlink()
    assert subprocess.run(args, env=env, capture_output=True).returncode == 0
    assert set(rows_of(out)["status"]) == {"ok"}


# -- compare -----------------------------------------------------------------------------------
DRIFT = '''
from functools import partial
import torch, torch.nn.functional as F
from attackaudit.adapters import AttackSpec
__version__ = "{version}"

def walk(model, inputs, labels, *, step, steps=40, targeted=False, targets=None):
    x = inputs.clone()
    for _ in range(steps):
        x.requires_grad_(True)
        (g,) = torch.autograd.grad(F.cross_entropy(model(x), labels), x)
        x = (x.detach() + step * g / g.flatten(1).norm(dim=1).clamp_min(1e-12).view(-1, 1, 1, 1)).clamp(0, 1)
    return x.detach()

def specs():
    return [AttackSpec("drift", "walk", "walk", "l2", "minimal", {{"step": {step}}}, partial(walk, step={step}))]
'''


@pytest.fixture(scope="module")
def drift_runs(tmp_path_factory):
    """The same implementation in two releases on two models, 8 digits: 1.0 takes steps of 0.05,
    2.0 of 0.4, so it overshoots: a larger perturbation on every image (a regression)."""
    root = tmp_path_factory.mktemp("drift")
    runs = []
    for version, step in (("1.0", 0.05), ("2.0", 0.4)):
        plugin = root / f"drift_{version[0]}.py"
        plugin.write_text(DRIFT.format(version=version, step=step))
        out = root / version
        assert cli_main(["run", "--plugin", str(plugin), "--libraries", "drift", "--models", "digits-cnn",
                         "digits-mlp", "--samples", "8", "--quiet", "--out", str(out)]) == 0
        runs.append(out)
    return runs


def _compare(capsys, *argv: str) -> tuple[int, dict]:
    code = cli_main(["compare", *argv])
    capsys.readouterr()
    return code, json.loads((Path(argv[argv.index("--out") + 1]) / "audit.json").read_text())


def test_compare_strict_alpha_and_by_model(drift_runs, tmp_path, capsys):
    a, b = map(str, drift_runs)
    code, doc = _compare(capsys, a, b, "--out", str(tmp_path / "plain"))
    assert code == 0 and doc["counts"] == {"regressed": 1}, doc["verdicts"]
    assert [v["model"] for v in doc["verdicts"]] == ["*"]
    code, _ = _compare(capsys, a, b, "--strict", "--out", str(tmp_path / "strict"))
    assert code == 1
    # at a family-wise level no 16-image paired test can reach, the change is not significant
    code, doc = _compare(capsys, a, b, "--strict", "--alpha", "1e-9", "--out", str(tmp_path / "alpha"))
    assert code == 0 and "regressed" not in doc["counts"], doc["verdicts"]
    code, doc = _compare(capsys, a, b, "--by-model", "--out", str(tmp_path / "models"))
    assert {v["model"] for v in doc["verdicts"]} >= {"digits-cnn", "digits-mlp"}
    # a materiality margin wider than the overshoot: the change is immaterial, not a regression
    code, doc = _compare(capsys, a, b, "--strict", "--min-delta", "1000", "--out", str(tmp_path / "margin"))
    assert code == 0 and "regressed" not in doc["counts"], doc["verdicts"]
    assert "±100000%" in json.dumps(doc["verdicts"], ensure_ascii=False), doc["verdicts"]


# -- exact -------------------------------------------------------------------------------------
EXACT = ["exact", "--model", "digits-mlp-tiny", "--norm", "linf", "--time-limit", "20"]


def _solved(out: Path) -> pd.DataFrame:
    return pd.read_parquet(out / "exact" / "digits-mlp-tiny__linf.parquet")


def test_exact_seed_and_dataset_choose_the_samples(tmp_path, capsys):
    assert cli_main([*EXACT, "--samples", "2", "--seed", "3", "--out", str(tmp_path / "s")]) == 0
    seeded = _solved(tmp_path / "s")
    assert seeded["sample"].tolist() == load_subset("digits", 2, 3).indices.tolist()
    assert seeded["sample"].tolist() != load_subset("digits", 2, 0).indices.tolist()
    # a dataset of its own: two digits made darker, so the solved distances are those of these inputs
    sub = load_subset("digits", 2, 0)
    tensors = tmp_path / "dark.pt"
    torch.save({"inputs": sub.inputs * 0.5, "labels": sub.labels}, tensors)
    source = f"tensors:{tensors}"
    assert cli_main([*EXACT, "--samples", "2", "--dataset", source, "--out", str(tmp_path / "d")]) == 0
    dark = _solved(tmp_path / "d")
    assert set(dark["dataset"]) == {source} and set(dark["subset_hash"]) == {load_subset(source, 2, 0).hash}
    plain = cli_main([*EXACT, "--samples", "2", "--out", str(tmp_path / "p")]) == 0 and _solved(tmp_path / "p")
    assert not np.allclose(dark.sort_values("sample")["exact_distance"], plain.sort_values("sample")["exact_distance"])
    capsys.readouterr()
