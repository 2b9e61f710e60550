"""The runner end to end through the CLI: results, resume, isolation, bad input."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import psutil
import pytest

import attackaudit
from attackaudit.adapters import load_library
from attackaudit.cli import main as cli_main
from attackaudit.sources.subset import load_subset
from attackaudit.run.job import attack_with_tracker, seed_everything
from attackaudit.sources.zoo import load_model

PLUGIN = str(Path(__file__).parent / "plugins" / "misbehaving.py")
PROBE = str(Path(__file__).parent / "plugins" / "probe.py")
SMALL = ["--models", "digits-cnn", "--libraries", "adv_lib", "--attacks", "adv_lib/ddn", "adv_lib/fmn",
         "--norms", "l2", "--samples", "4", "--steps-scale", "0.1", "--quiet"]


def cli(*args, timeout=600, env=None):
    return subprocess.run([sys.executable, "-m", "attackaudit", *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


def comparable(df: pd.DataFrame) -> pd.DataFrame:
    return (df.drop(columns=["wall_s", "run"]).sort_values(["job_id", "sample"]).reset_index(drop=True))


def test_run_writes_per_sample_rows_and_resumes(tmp_path, capsys):
    out = tmp_path / "r"
    res = cli("run", *SMALL, "--out", str(out))
    assert res.returncode == 0, res.stderr
    assert str(out) in res.stdout
    df = attackaudit.load_run(out)
    assert len(df) == 2 * 4 and set(df["status"]) == {"ok"}
    sub = load_subset("digits", 4, 0)
    assert (df["subset_hash"] == sub.hash).all()
    # each row holds its own sample's numbers: the same seeded attack run here, through a tracker
    model = load_model("digits-cnn")
    for spec in (s for s in load_library("adv_lib").specs if s.key in ("adv_lib/ddn/l2", "adv_lib/fmn/l2")):
        seed_everything(0)
        tracker, _, error = attack_with_tracker(spec.scaled(0.1), model, sub.inputs, sub.labels, budget=2000)
        rows = df[df["attack"] == spec.name].set_index("sample").loc[sub.indices.tolist()]
        assert error == "" and rows["forwards"].tolist() == tracker.forwards.tolist(), spec.key
        assert rows["backwards"].tolist() == tracker.backwards.tolist(), spec.key
        assert rows["best_distance"].tolist() == pytest.approx(tracker.best_distance.tolist(), rel=1e-6), spec.key
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
    # results made by another release of the library are not resumed (with or without --force): the
    # job id names the spec, not the release, and the old rows would stand for the new release
    manifest["library_versions"]["adv_lib"] = "0.2.7"
    (out / "manifest.json").write_text(json.dumps(manifest))
    assert cli_main(["run", *SMALL, "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "2 run now" in err and "adv_lib (0.2.7 -> 0.2.8)" in err, err
    assert (out / "superseded").is_dir() and len(list((out / "superseded").glob("*.parquet"))) == 2
    assert json.loads((out / "manifest.json").read_text())["library_versions"]["adv_lib"] == "0.2.8"


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
    logs = [p for p in (out / "logs").glob("*") if p.is_file()]  # logs/workers/ holds spawned workers' stderr
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
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, args, culprit):
    # in this process: a fresh interpreter per case cost ~3 s each; the console's own exit path is
    # checked once below, in a child process
    base = ["run", "--out", str(tmp_path / "x")] if "--out" not in args else ["run"]
    assert cli_main([*base, *args]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and culprit in lines[0] and captured.out == "", captured


def test_bad_input_in_a_fresh_interpreter_is_one_line_and_exit_2(tmp_path):
    """``python -m attackaudit`` itself: its exit status is 2 and its whole stderr one line (no
    traceback, no warning of an import)."""
    res = cli("run", "--out", str(tmp_path / "x"), "--models", "no-such-model")
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "no-such-model" in lines[0], res.stderr


def _wait_for_marker(probe: Path, proc: subprocess.Popen, exclude: str = "") -> Path:
    """The marker a probe gate writes once its job is running (and waiting), other than ``exclude``'s."""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        found = [m for m in probe.glob("*.running") if not m.name.startswith(exclude or "\0")]
        if found:
            return found[0]
        assert proc.poll() is None, "the run ended before its job started"
        time.sleep(0.1)
    raise AssertionError("no job started")


def _dies(pid: int, within_s: float = 30.0) -> bool:
    """Whether process ``pid`` is gone (or a zombie) within ``within_s`` seconds."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.1)
    return False


@pytest.mark.slow
def test_kills_while_a_job_runs_then_rerun_equals_an_uninterrupted_run(tmp_path):
    """SIGKILL lands while a job runs (its attack is held inside the worker): first while the first
    job runs, then, after letting that one finish, while the second runs. Nothing of a killed job is
    kept, a finished one is, and the rerun's rows equal those of a run never interrupted."""
    args = ["run", "--models", "digits-cnn", "--plugin", PROBE, "--attacks", "probe/gate_a", "probe/gate_b",
            "--samples", "4", "--quiet"]
    ref = tmp_path / "ref"
    assert cli(*args, "--out", str(ref)).returncode == 0
    expected = comparable(attackaudit.load_run(ref))
    assert len(expected) == 8
    probe, out = tmp_path / "probe", tmp_path / "killed"
    probe.mkdir()
    env = {**os.environ, "ATTACKAUDIT_PROBE": str(probe)}
    for gate in ("gate_a", "gate_b"):
        (probe / f"hold-{gate}").touch()
    finished: list[str] = []
    for round_ in range(2):
        proc = subprocess.Popen([sys.executable, "-m", "attackaudit", *args, "--out", str(out)], env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        marker = _wait_for_marker(probe, proc, exclude=finished[0] if finished else "")
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        gate, worker = marker.name.split(".")[0], int(marker.read_text().split()[0])
        assert _dies(worker), f"round {round_}: the worker running {gate} survived the kill"
        rows = attackaudit.load_run(out) if list((out / "jobs").glob("*.parquet")) else pd.DataFrame(
            columns=["attack", "job_id", "sample"])
        assert sorted(set(rows["attack"])) == finished, (round_, gate)  # the killed job left nothing
        assert not rows.duplicated(["job_id", "sample"]).any()
        for m in probe.glob("*.running"):
            m.unlink()
        finished.append(gate)
        (probe / f"hold-{gate}").unlink()  # the next round lets this one finish
    res = cli(*args, "--out", str(out), env=env)
    assert res.returncode == 0, res.stderr
    assert not list((out / "jobs").glob(".*.tmp"))
    pd.testing.assert_frame_equal(comparable(attackaudit.load_run(out)), expected)


def test_memory_blow_up_is_killed_and_recorded(tmp_path):
    out = tmp_path / "mem"
    plugin = str(Path(__file__).parent / "plugins" / "memory_hog.py")
    res = cli("run", "--models", "digits-cnn", "--libraries", "memhog", "--plugin", plugin, "--samples", "2",
              "--memory-limit-mb", "2500", "--quiet", "--out", str(out))
    assert res.returncode == 0, res.stderr
    df = attackaudit.load_run(out)
    assert set(df["status"]) == {"crash"}
    assert "memory limit exceeded" in df["error"].iloc[0]
