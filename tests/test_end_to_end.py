"""The whole path on real files: ``attackaudit run`` (a small real grid with a plugin whose attacks
return invalid and out-of-box batches, and one that is not deterministic, run twice with
``--repeat 2``), ``attackaudit exact`` beside it, then ``attackaudit report``; the findings are read
back from the files the report wrote, never from the functions that computed them."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

import attackaudit
from attackaudit.cli import main as cli_main

PROBE = str(Path(__file__).parent / "plugins" / "probe.py")
MODEL = "digits-mlp-tiny"  # a ReLU MLP the exact solver handles in a fraction of a second per sample
RUN = ["run", "--models", MODEL, "--plugin", PROBE, "--samples", "4", "--quiet",
       "--attacks", "probe/descent/linf", "probe/noisy", "probe/nan", "probe/out_of_box"]


def _findings(run: Path) -> set[tuple[str, str]]:
    """(implementation, flag) of every row of the report's flags.json, checked against flags.csv."""
    rows = json.loads((run / "flags.json").read_text())
    found = {(r["implementation"], r["flag"]) for r in rows}
    table = pd.read_csv(run / "flags.csv")
    assert set(zip(table["implementation"], table["flag"])) == found
    return found


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("e2e") / "run"
    assert cli_main([*RUN, "--repeat", "2", "--out", str(run)]) == 0
    return run


def test_repeat_runs_the_first_models_jobs_again_and_resumes(run_dir, capsys):
    rows, again = attackaudit.load_run(run_dir), attackaudit.load_run(run_dir / "repeat")
    assert set(again["job_id"]) == set(rows["job_id"])  # one model: every job, the same job ids
    assert json.loads((run_dir / "manifest.json").read_text())["repeat"] == 2
    descent = lambda df: df[df["attack"] == "descent"].sort_values("sample")["best_distance"].tolist()  # noqa: E731
    assert descent(rows) == descent(again) and len(descent(rows)) == 4  # a seeded attack gives the same numbers
    noisy = lambda df: df[df["attack"] == "noisy"].sort_values("sample")["best_distance"].tolist()  # noqa: E731
    assert noisy(rows) != noisy(again)
    capsys.readouterr()
    assert cli_main([*RUN, "--repeat", "2", "--out", str(run_dir)]) == 0  # a rerun runs nothing, repeats included
    assert "(0 run now" in capsys.readouterr().err


def test_report_and_exact_flag_the_real_runs_defects(run_dir, capsys):
    """Invalid and out-of-box outputs, the attack whose two seeded runs differ, and — once the
    exact distances demand a logit margin of 2, which a boundary-crossing attack never reaches —
    ``below_exact``; with the default margin (1e-4) the exact minimum is below every attack's."""
    assert cli_main(["exact", "--model", MODEL, "--norm", "linf", "--out", str(run_dir), "--margin", "2",
                     "--time-limit", "20"]) == 0
    stored = pd.read_parquet(run_dir / "exact" / f"{MODEL}__linf.parquet")
    assert (stored["margin"] == 2).all() and set(stored["status"]) == {"optimal"}
    assert cli_main(["report", str(run_dir), "--format", "json"]) == 0
    found = _findings(run_dir)
    assert {("probe/nan", "invalid"), ("probe/out_of_box", "out_of_box"), ("probe/noisy", "nondeterminism"),
            ("probe/descent", "below_exact")} <= found, found
    # the sound, seeded attack is neither invalid nor nondeterministic, and the defects stay apart
    assert not {f for impl, f in found if impl == "probe/descent"} & {"invalid", "out_of_box", "nondeterminism"}
    assert ("probe/nan", "out_of_box") not in found and ("probe/out_of_box", "invalid") not in found
    board = pd.read_csv(run_dir / "leaderboard.csv")
    assert {"probe/descent", "probe/noisy"} <= set(board["implementation"])
    summary = json.loads((run_dir / "report.json").read_text())
    assert summary and (run_dir / "exact_optimality.csv").is_file()
    capsys.readouterr()

    tight = stored["exact_distance"].to_numpy()
    assert cli_main(["exact", "--model", MODEL, "--norm", "linf", "--out", str(run_dir), "--time-limit", "20"]) == 0
    default = pd.read_parquet(run_dir / "exact" / f"{MODEL}__linf.parquet")
    assert (default["exact_distance"].to_numpy() < tight).all()  # --margin changes what is solved
    assert cli_main(["report", str(run_dir), "--format", "json"]) == 0
    again = _findings(run_dir)
    assert ("probe/descent", "below_exact") not in again
    assert {("probe/nan", "invalid"), ("probe/noisy", "nondeterminism")} <= again


def test_without_repeat_no_second_run_and_no_nondeterminism(tmp_path):
    run = tmp_path / "once"
    assert cli_main([*RUN[:-4], "probe/noisy", "--out", str(run)]) == 0
    assert not (run / "repeat").exists()
    assert cli_main(["report", str(run), "--format", "json"]) == 0
    assert not {f for _, f in _findings(run)} & {"nondeterminism"}


def test_repeat_is_1_or_2(tmp_path, capsys):
    assert cli_main([*RUN, "--repeat", "3", "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--repeat" in err[0]
