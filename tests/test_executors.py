"""Dask and local executors give identical per-sample rows; seeded runs are deterministic."""
import pandas as pd
import pytest

import attackaudit
from attackaudit.run.config import resolve
from attackaudit.run.runner import run
from attackaudit.results.schema import parse_model_name

GRID = dict(models=["digits-cnn"], libraries=["adv_lib"], attacks=["adv_lib/ddn", "adv_lib/apgd:ce/l2"],
            norms=["l2"], samples=4, steps_scale=0.05, quiet=True)


def rows(out):
    df = attackaudit.load_run(out).drop(columns=["wall_s", "run"])
    return df.sort_values(["job_id", "sample"]).reset_index(drop=True)


def test_every_executor_runs_a_job_on_the_same_torch_threads_whatever_the_workers():
    """The thread count orders torch's reductions (1 and 2 threads gave margins 8e-8 apart), so it
    may not follow --workers or the machine's cores."""
    from attackaudit.run.executors import JOB_THREADS, InProcessExecutor, LocalExecutor

    assert LocalExecutor(1).threads == LocalExecutor(4).threads == InProcessExecutor().threads == JOB_THREADS == 1


@pytest.mark.slow
def test_dask_local_cluster_matches_local_executor(tmp_path):
    local = run(resolve(None, {**GRID, "out": str(tmp_path / "local")}))
    dask = run(resolve(None, {**GRID, "out": str(tmp_path / "dask"), "executor": "dask", "workers": 2}))
    assert local.counts == dask.counts == {"ok": 2}
    pd.testing.assert_frame_equal(rows(tmp_path / "local"), rows(tmp_path / "dask"))
    # the same seeded config run again gives the same per-sample numbers
    run(resolve(None, {**GRID, "out": str(tmp_path / "again")}))
    pd.testing.assert_frame_equal(rows(tmp_path / "local"), rows(tmp_path / "again"))


def test_progress_inside_a_job_reaches_the_parent(tmp_path):
    """Samples done and the running batch's budget use come from the job, through the worker's
    pipe, to the runner's per-worker bars."""
    from attackaudit.run.executors import LocalExecutor
    from attackaudit.run.runner import plan
    from attackaudit.run.worker import execute_job

    config = resolve(None, {**GRID, "attacks": ["adv_lib/ddn"], "samples": 6, "batch_size": 2,
                            "steps_scale": 0.4, "out": str(tmp_path / "p")})
    (job,) = plan(config).jobs
    seen = []
    execute_job(job, tmp_path / "inproc", progress=lambda *p: seen.append(p))
    done = [d for d, _, _ in seen]
    assert done == sorted(done) and done[-1] == 6 and {t for _, t, _ in seen} == {6}
    assert {d for d, _, u in seen if u == 0.0} >= {2, 4, 6}  # every batch's end
    inside = [u for _, _, u in seen if u > 0]  # the tracker's reports while a batch runs
    assert inside and all(0 < u <= 1 for u in inside)

    reports = []
    LocalExecutor(1).run([job], tmp_path / "child", lambda j, r: reports.append(("done", r["status"])),
                         lambda slot, j, *p: reports.append((slot, j.job_id, *p)))
    assert reports[-1] == ("done", "ok")
    assert (0, job.job_id, 6, 6, 0.0) in reports


def test_each_attack_stays_on_the_worker_that_first_ran_it():
    """Two workers taking turns: every attack's jobs go to one worker (its one-off costs, e.g.
    numba compiling Brendel-Bethge, are paid once per run), and no worker idles while jobs wait."""
    from attackaudit.run.executors import _next_for
    from attackaudit.run.job import Job

    specs = ["foolbox/L0BrendelBethgeAttack/l0", "foolbox/L1BrendelBethgeAttack/l1", "art/DeepFool/l2"]
    queue = [Job(run="r", twin=parse_model_name(m), spec_key=s) for s in specs for m in ("digits-mlp", "digits-cnn")]
    ran: dict[int, list[str]] = {0: [], 1: []}
    last = {0: "", 1: ""}
    turn = 0
    while queue:
        others = set(ran[1 - turn])
        job = queue.pop(_next_for(queue, last[turn], others))
        ran[turn].append(job.spec_key)
        last[turn] = job.spec_key
        turn = 1 - turn
    assert not set(ran[0]) & set(ran[1]) & set(specs[:2])
    assert sorted(len(r) for r in ran.values()) == [3, 3]  # the last attack is shared: nobody idles
    # with nothing else left, a worker takes another worker's attack rather than idle
    assert _next_for([Job(run="r", twin=parse_model_name("m"), spec_key="x/y/l2")], "", {"x/y/l2"}) == 0


def test_a_slow_worker_start_is_ours_and_not_the_job_s_timeout(tmp_path, monkeypatch):
    """The job's --timeout counts from the end of the worker's imports (seconds of torch on a loaded
    machine: CI once timed a plugin's attack out at 8 s before it started). A start past
    START_TIMEOUT_S is a harness_error, never the library's timeout."""
    from attackaudit.run import executors
    from attackaudit.run.runner import plan

    config = resolve(None, {**GRID, "attacks": ["adv_lib/ddn"], "out": str(tmp_path / "p")})
    (job,) = plan(config).jobs
    results = []
    monkeypatch.setattr(executors, "LIMIT_CHECK_S", 0.02)
    monkeypatch.setattr(executors, "START_TIMEOUT_S", 0.05)  # no spawned worker imports torch so fast
    executors.LocalExecutor(1, executors.Limits(timeout_s=3600)).run([job], tmp_path / "slow",
                                                                      lambda j, r: results.append(r))
    assert [r["status"] for r in results] == ["harness_error"]
    assert "did not finish starting within 0.05 s" in results[0]["error"]
