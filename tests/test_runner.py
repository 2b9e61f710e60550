"""The runner end to end through the CLI: results, resume, isolation, bad input."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

import attackaudit
from attackaudit.cli import main as cli_main

PLUGIN = str(Path(__file__).parent / "plugins" / "misbehaving.py")
SMALL = ["--models", "digits-cnn", "--libraries", "adv_lib", "--attacks", "adv_lib/ddn", "adv_lib/fmn",
         "--norms", "l2", "--samples", "4", "--steps-scale", "0.1", "--quiet"]


def cli(*args, timeout=600):
    return subprocess.run([sys.executable, "-m", "attackaudit", *args], capture_output=True, text=True,
                          timeout=timeout)


def comparable(df: pd.DataFrame) -> pd.DataFrame:
    return (df.drop(columns=["wall_s", "run"]).sort_values(["job_id", "sample"]).reset_index(drop=True))


def test_run_writes_per_sample_rows_and_resumes(tmp_path, capsys):
    out = tmp_path / "r"
    res = cli("run", *SMALL, "--out", str(out))
    assert res.returncode == 0, res.stderr
    assert str(out) in res.stdout
    df = attackaudit.load_run(out)
    assert len(df) == 2 * 4 and set(df["status"]) == {"ok"}
    assert (df["forwards"] + df["backwards"] <= df["budget"]).all()
    assert (df["forwards"] > 0).all() and (df["backwards"] > 0).all()
    assert df["subset_hash"].nunique() == 1
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["library_versions"]["adv_lib"] == "0.2.8"
    assert manifest["subset_hash"] == df["subset_hash"].iloc[0]
    mtimes = {p: p.stat().st_mtime_ns for p in (out / "jobs").glob("*.parquet")}
    # the reruns in this process (a fresh interpreter per command costs more than the jobs)
    capsys.readouterr()
    assert cli_main(["run", *SMALL, "--out", str(out)]) == 0 and "0 run now" in capsys.readouterr().err
    assert mtimes == {p: p.stat().st_mtime_ns for p in (out / "jobs").glob("*.parquet")}
    # a truncated job file is detected and re-run, never read as data
    victim = next(iter(mtimes))
    victim.write_bytes(victim.read_bytes()[:50])
    assert cli_main(["run", *SMALL, "--out", str(out)]) == 0 and "1 run now" in capsys.readouterr().err
    pd.testing.assert_frame_equal(comparable(attackaudit.load_run(out)), comparable(df))
    # a changed config under the same directory is refused, unless --force
    five = [("5" if a == "4" else a) for a in SMALL]
    assert cli_main(["run", *five, "--out", str(out)]) == 2
    changed = capsys.readouterr().err.strip().splitlines()
    assert len(changed) == 1 and "samples" in changed[0] and "--force" in changed[0], changed


def test_misbehaving_attacks_become_rows_and_the_run_goes_on(tmp_path):
    out = tmp_path / "bad"
    res = cli("run", "--models", "digits-cnn", "--libraries", "misbehaving", "--plugin", PLUGIN,
              "--samples", "4", "--timeout", "8", "--quiet", "--out", str(out))
    assert res.returncode == 0, res.stderr
    df = attackaudit.load_run(out)
    status = df.groupby("attack")["status"].first().to_dict()
    error = df.groupby("attack")["error"].first().to_dict()
    assert status == {"fgsm": "ok", "raise": "crash", "abort": "crash", "hang": "timeout", "nan": "invalid",
                      "out_of_box": "invalid"}
    assert "index out of range" in error["raise"]
    assert "SIGABRT" in error["abort"]
    assert "timed out" in error["hang"]
    assert "NaN" in error["nan"] and "outside the [0, 1] box" in error["out_of_box"]
    # the crashing attack's one forward is still counted; the plugin's version is recorded
    assert (df[df.attack == "raise"]["forwards"] == 1).all()
    assert set(df["library_version"]) == {"0.0.1"}
    fgsm = df[df.attack == "fgsm"]
    assert (fgsm["best_distance"] < float("inf")).mean() >= 0.75
    logs = list((out / "logs").glob("*"))
    assert any("index out of range" in p.read_text(errors="replace") for p in logs)
    # --strict turns those rows into exit status 1 (a resumed run: nothing runs again)
    assert cli_main(["run", "--models", "digits-cnn", "--libraries", "misbehaving", "--plugin", PLUGIN,
                     "--samples", "4", "--timeout", "8", "--quiet", "--strict", "--out", str(out)]) == 1


@pytest.mark.parametrize("args, culprit", [
    (["--models", "no-such-model"], "no-such-model"),
    (["--libraries", "nolib"], "nolib"),
    (["--norms", "l3"], "l3"),
    (["--samples", "0"], "--samples"),
    (["--bogus-flag"], "--bogus-flag"),
    (["--out", "/proc/attackaudit-not-writable"], "/proc/attackaudit-not-writable"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, culprit):
    base = ["run", "--out", str(tmp_path / "x")] if "--out" not in args else ["run"]
    res = cli(*base, *args)
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and culprit in lines[0], res.stderr


def test_sigkill_at_any_moment_then_rerun_completes_without_duplicates(tmp_path):
    ref = tmp_path / "ref"
    args = ["run", "--models", "digits-cnn", "--libraries", "adv_lib", "--attacks", "adv_lib/ddn",
            "adv_lib/fmn", "adv_lib/df", "--norms", "l2", "--samples", "4", "--steps-scale", "0.1", "--quiet"]
    assert cli(*args, "--out", str(ref)).returncode == 0
    expected = comparable(attackaudit.load_run(ref))
    out = tmp_path / "killed"
    for delay in (0.5, 4.0, 7.0):
        proc = subprocess.Popen([sys.executable, "-m", "attackaudit", *args, "--out", str(out)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        time.sleep(delay)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        df = attackaudit.load_run(out) if out.exists() else pd.DataFrame()
        assert not df.duplicated(["job_id", "sample"]).any()
    assert cli(*args, "--out", str(out)).returncode == 0
    got = comparable(attackaudit.load_run(out))
    assert not list((out / "jobs").glob(".*.tmp"))
    pd.testing.assert_frame_equal(got, expected)


def test_memory_blow_up_is_killed_and_recorded(tmp_path):
    out = tmp_path / "mem"
    plugin = str(Path(__file__).parent / "plugins" / "memory_hog.py")
    res = cli("run", "--models", "digits-cnn", "--libraries", "memhog", "--plugin", plugin, "--samples", "2",
              "--memory-limit-mb", "2500", "--quiet", "--out", str(out))
    assert res.returncode == 0, res.stderr
    df = attackaudit.load_run(out)
    assert set(df["status"]) == {"crash"}
    assert "memory limit exceeded" in df["error"].iloc[0]
