"""Executors: run jobs isolated (local child processes) or on a Dask cluster.

Either way a job is a pure function of its ``Job`` that writes its own result file, so no
coordination is needed; what the executor adds is turning a worker's death, a hang past the
timeout or a memory blow-up into ``crash``/``timeout`` rows, and never stopping the grid. A worker
that dies before the job's attack started (it could not start, or load the job's model) gives
``harness_error`` rows instead (``harness/run/faults.py``): ours, never the library's crash. Only
when worker after worker dies while starting does the grid stop, with ``HarnessFault``.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import signal
import sys
import time
import types
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing.connection import wait
from pathlib import Path
from typing import Callable, Iterable, Iterator, Protocol

import psutil

from attackaudit.run.faults import HarnessFault, fault_line
from attackaudit.run.job import Job, failure_rows
from attackaudit.results.schema import HARNESS_ERROR
from attackaudit.results.store import logs_dir, write_job

OnDone = Callable[[Job, dict], None]
#: ``on_progress(worker slot, job, samples done, samples, budget fraction used in the running batch)``
OnProgress = Callable[[int, Job, int, int, float], None]


class Executor(Protocol):
    """What ``runner.run`` drives: ``LocalExecutor``, ``DaskExecutor`` or ``InProcessExecutor``.
    Each job's result file is written by the job itself; ``on_done(job, result)`` is told of each
    end, ``on_progress`` (when the executor can) of progress inside a job."""

    def run(self, jobs: Iterable[Job], run_dir: Path, on_done: OnDone,
            on_progress: OnProgress | None = None) -> None: ...


@dataclass
class Limits:
    timeout_s: float = 900.0
    memory_limit_mb: int = 8192


def record_failure(job: Job, run_dir: Path, status: str, error: str, detail: str = "") -> dict[str, str]:
    """Write ``status`` rows for a job whose worker produced nothing, and log the cause (and
    ``detail``, e.g. the dead worker's own traceback)."""
    from attackaudit.results.store import job_is_complete
    from attackaudit.run.worker import job_subset, resolve_spec

    if job_is_complete(run_dir, job.job_id):  # the worker wrote its rows, then died: keep them
        return {"job_id": job.job_id, "status": "ok"}
    subset = job_subset(job.dataset, job.samples, job.seed)
    spec, version, _ = resolve_spec(job)
    log = logs_dir(run_dir) / f"{job.job_id}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a") as fh:
        fh.write(f"{status}: {error}\n" + (f"{detail.rstrip()}\n" if detail.strip() else ""))
    write_job(run_dir, job.job_id, failure_rows(job, subset, status, error, spec, version))
    return {"job_id": job.job_id, "status": status, "error": error}


def _signal_name(exitcode: int | None) -> str:
    if exitcode is None:
        return "unknown exit"
    if exitcode < 0:
        try:
            return f"signal {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"signal {-exitcode}"
    return f"exit code {exitcode}"


def _read_tail(path: Path | None, limit: int = 20_000) -> str:
    try:
        return path.read_text(errors="replace")[-limit:] if path is not None else ""
    except OSError:
        return ""


@contextmanager
def _main_left_behind() -> Iterator[None]:
    """Spawn without the caller's ``__main__``: a worker needs nothing of it (it runs
    ``worker_loop``, gets jobs as ``Job``s and the model as a file, a notebook's or a script's
    classes pickled by value), and re-importing it is what broke a caller on standard input or
    ``-c`` (no file to re-run) and re-ran a script without the ``__main__`` guard (its training) in
    every worker. ``multiprocessing.spawn`` reads ``sys.modules["__main__"]`` in the parent when a
    process starts; an empty module stands in for that moment."""
    main = sys.modules.get("__main__")
    sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        yield
    finally:
        if main is not None:
            sys.modules["__main__"] = main


def _start_with_stderr(proc: mp.process.BaseProcess, path: Path | None) -> None:
    """Start ``proc`` (without the caller's ``__main__``: ``_main_left_behind``) with its stderr
    (fd 2) in ``path``: a spawned child that dies before it runs any of our code leaves its
    traceback there, for the job's log, instead of in the caller's terminal. fd 2 of this process
    points at the file only for the moment of the spawn."""
    if path is None:
        with _main_left_behind():
            proc.start()
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh, _main_left_behind():
        sys.stderr.flush()
        saved = os.dup(2)
        try:
            os.dup2(fh.fileno(), 2)
            proc.start()
        finally:
            os.dup2(saved, 2)
            os.close(saved)


class _Worker:
    """One persistent child process running ``worker_loop``; restarted after it dies. Its stderr
    outside a job goes to ``stderr_log`` (a job's own goes to that job's log)."""

    def __init__(self, ctx, threads: int, stderr_log: Path | None = None) -> None:
        from attackaudit.run.worker import worker_loop

        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=worker_loop, args=(child, threads), daemon=True)
        self.stderr_log = stderr_log
        _start_with_stderr(self.proc, stderr_log)
        child.close()
        self.ready = False       # its imports are done ("ready" received)
        self.attacking = False   # the running job's attack has started (its first progress message)
        self.job: Job | None = None
        self.last_spec = ""
        self.specs: set[str] = set()  # the attacks this worker has run (paid their one-off costs)
        self.started = 0.0
        self._ps: psutil.Process | None = None

    def submit(self, job: Job, run_dir: Path) -> None:
        self.job, self.started, self.last_spec = job, time.monotonic(), job.spec_key
        self.attacking = False
        self.specs.add(job.spec_key)
        self.conn.send((job, str(run_dir)))

    def rss_mb(self) -> float:
        try:
            if self._ps is None:
                self._ps = psutil.Process(self.proc.pid)
            proc = self._ps
            return sum(p.memory_info().rss for p in [proc, *proc.children(recursive=True)]) / 2**20
        except psutil.Error:
            return 0.0

    def kill(self) -> None:
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join(5)

    def stop(self) -> None:
        try:
            self.conn.send(None)
        except (BrokenPipeError, OSError):
            pass
        self.proc.join(5)
        self.kill()


def _next_for(queue: list[Job], last_spec: str, others: set[str] = frozenset()) -> int:
    """Queue position of the next job for a worker: the same attack as its last one if any, else
    the first job of an attack no other worker has run (``others``), else the first job.

    A worker's first job of an attack pays its one-off costs, and for foolbox's Brendel-Bethge
    these are large: numba compiles its trust-region solver per process, 25-85 s of CPU per norm
    (jitclass code cannot be cached on disk). Keeping an attack on the worker that first ran it
    pays them once per run instead of once per worker; the last rule keeps every worker busy.
    """
    same = next((i for i, job in enumerate(queue) if job.spec_key == last_spec), None)
    if same is not None:
        return same
    return next((i for i, job in enumerate(queue) if job.spec_key not in others), 0)


#: seconds a worker may take to start (its imports: torch and the libraries, seconds on a loaded
#: machine) before a job sent to it is ``harness_error``. The job's --timeout counts from the
#: end of the imports: a slow start is ours, never the library's ``timeout``
START_TIMEOUT_S = 300.0

#: seconds between two checks of a running job's time and memory limits (the parent otherwise
#: sleeps until a worker sends something or dies)
LIMIT_CHECK_S = 1.0


#: torch intra-op threads of every job. One, whatever the machine and ``--workers``: the thread
#: count sets the order of torch's parallel reductions, so the same job on 1 and 2 threads gave
#: margins 8e-8 apart (and an attack's later steps may follow them), and a run's numbers would
#: depend on the machine's cores and on --workers, which is not a result field. Parallelism comes
#: from --workers (benchmarks/README.md: two threads in one worker gained little over one on the
#: digits zoo; two workers 1.97x).
JOB_THREADS = 1


class LocalExecutor:
    """``workers`` persistent child processes; each job isolated by its process boundary.

    ``threads``: torch threads per job (``JOB_THREADS``; a benchmark may set more, which changes
    results in their last bits)."""

    def __init__(self, workers: int = 1, limits: Limits | None = None, threads: int = JOB_THREADS,
                 keep_alive: bool = False) -> None:
        self.workers = max(1, workers)
        self.limits = limits or Limits()
        self.threads = max(1, threads)
        self.ctx = mp.get_context("spawn")
        self.keep_alive = keep_alive  # reuse the child processes across run() calls
        self._pool: list[_Worker] = []

    def run(self, jobs: Iterable[Job], run_dir: Path, on_done: OnDone,
            on_progress: OnProgress | None = None) -> None:
        queue = list(jobs)
        pool = self._pool
        pool[:] = [w for w in pool if w.proc.is_alive()]
        while len(pool) < min(self.workers, len(queue)):
            pool.append(_Worker(self.ctx, self.threads, _stderr_log(run_dir, len(pool))))
        last_check = time.monotonic()
        start_deaths = 0  # workers in a row that died before they were ready
        try:
            while queue or any(w.job for w in pool):
                for w in pool:
                    if w.job is None and queue:
                        others = set().union(*(v.specs for v in pool if v is not w))
                        w.submit(queue.pop(_next_for(queue, w.last_spec, others)), run_dir)
                busy = [w for w in pool if w.job is not None]
                # block until a worker answers or dies: polling costs the parent CPU the workers need
                wait([x for w in busy for x in (w.conn, w.proc.sentinel)], timeout=LIMIT_CHECK_S)
                check_limits = time.monotonic() - last_check >= LIMIT_CHECK_S
                if check_limits:
                    last_check = time.monotonic()
                for i, w in enumerate(pool):
                    if w.job is None:
                        continue
                    result = self._poll(w, run_dir, lambda *p, i=i, w=w: on_progress and on_progress(i, w.job, *p),
                                        check_limits)
                    if result is None:
                        continue
                    job, w.job = w.job, None
                    on_done(job, result)
                    start_deaths = 0 if w.ready else start_deaths + 1
                    if start_deaths >= max(2, self.workers):  # no worker can start: no job can run
                        raise HarnessFault(f"{result.get('error', '')} (so did every worker; the traceback: "
                                           f"{logs_dir(run_dir) / job.job_id}.log)")
                    if result.get("restart"):
                        w.kill()
                        pool[i] = _Worker(self.ctx, self.threads, w.stderr_log)
                        pool[i].specs = w.specs  # its one-off costs are lost, but not its claim
        finally:
            if not self.keep_alive:
                for w in pool:
                    w.stop()
                pool.clear()

    def _poll(self, w: _Worker, run_dir: Path, progress: Callable[..., object],
              check_limits: bool = True) -> dict | None:
        """The job's result if it ended (normally or not), else None; progress messages on the
        way go to ``progress(done, total, budget fraction)``. Time and memory limits are checked
        only when ``check_limits`` (reading every process's memory is not free)."""
        while w.conn.poll():
            try:
                message = w.conn.recv()
            except (EOFError, OSError):
                break
            if "ready" in message:
                # a job sent to a starting worker is timed from the end of its imports, so a
                # restart after a crash does not eat into the next job's --timeout
                w.started = time.monotonic()
                w.ready = True
                continue
            if "progress" not in message:
                return message
            w.attacking = True
            progress(*message["progress"])
        if not w.proc.is_alive():
            w.proc.join(1)
            return _death(w, run_dir) | {"restart": True}
        if not check_limits:
            return None
        elapsed = time.monotonic() - w.started
        if not w.ready:
            if elapsed > START_TIMEOUT_S:
                w.kill()
                return record_failure(w.job, run_dir, HARNESS_ERROR, fault_line(
                    f"worker did not finish starting within {START_TIMEOUT_S:g} s", _read_tail(w.stderr_log))) | {
                    "restart": True}
        elif elapsed > self.limits.timeout_s:
            w.kill()
            cause = f"timed out after {self.limits.timeout_s:g} s"
            return record_failure(w.job, run_dir, "timeout", cause) | {"restart": True}
        rss = w.rss_mb()
        if rss > self.limits.memory_limit_mb:
            w.kill()
            cause = f"memory limit exceeded ({rss:.0f} MiB > {self.limits.memory_limit_mb} MiB)"
            return record_failure(w.job, run_dir, "crash", cause) | {"restart": True}
        return None


def _stderr_log(run_dir: Path, slot: int) -> Path:
    """Where worker ``slot``'s stderr outside its jobs goes (what a worker prints while starting)."""
    return logs_dir(run_dir) / "workers" / f"worker-{slot}.stderr"


def _death(w: _Worker, run_dir: Path) -> dict[str, str]:
    """The rows of a job whose worker died: ``crash`` once its attack had started (the library's,
    e.g. a segfault), else ``harness_error`` with the worker's own traceback in the job's log."""
    how = _signal_name(w.proc.exitcode)
    if w.attacking:
        return record_failure(w.job, run_dir, "crash", f"worker died ({how})")
    if not w.ready:  # it never ran our code: its traceback is in the worker's stderr log
        detail = _read_tail(w.stderr_log)
        error = fault_line(f"worker died before its job started ({how})", detail)
    else:  # it died loading the job (a faulthandler traceback, if any, is in the job's stderr)
        detail = _read_tail(logs_dir(run_dir) / f"{w.job.job_id}.stderr")
        error = fault_line(f"worker died before the attack started ({how})", detail)
    return record_failure(w.job, run_dir, HARNESS_ERROR, error, detail)


class InProcessExecutor:
    """Jobs one after another in this process: no isolation, time or memory limit (an attack's
    exception still becomes rows; a segfault ends the caller). For a model that cannot be sent to
    worker processes (``attackaudit.compare`` on a model that does not pickle, or ``workers=0``).

    The jobs run under a worker's settings (``worker.worker_settings``: ``threads`` torch threads,
    ``JOB_THREADS`` as in ``LocalExecutor``; numba's optimisation level) and with a
    worker's progress rate, and the caller's settings come back afterwards, so that a job takes
    the time it takes in a worker (``benchmarks/in_process.py`` measures the ratio)."""

    def __init__(self, threads: int = JOB_THREADS) -> None:
        self.threads = max(1, threads)

    def run(self, jobs: Iterable[Job], run_dir: Path, on_done: OnDone,
            on_progress: OnProgress | None = None) -> None:
        from attackaudit.run.worker import execute_job_safely, throttled, worker_settings

        restore = worker_settings(self.threads)
        try:
            for job in jobs:
                def progress(done: int, total: int, used: float, job: Job = job) -> None:
                    if on_progress is not None:
                        on_progress(0, job, done, total, used)
                on_done(job, execute_job_safely(job, run_dir, throttled(progress)))
        finally:
            restore()


_DASK_CHILD: LocalExecutor | None = None


def _isolated_job(job: Job, run_dir: str, timeout_s: float, memory_limit_mb: int) -> dict:
    """A Dask task: the job in a one-shot child process, with the same limits as locally."""
    if mp.current_process().daemon:  # a daemonic Dask worker may not fork: run in-process
        from attackaudit.run.worker import execute_job_safely

        return execute_job_safely(job, run_dir)
    global _DASK_CHILD
    if _DASK_CHILD is None or (_DASK_CHILD.limits.timeout_s, _DASK_CHILD.limits.memory_limit_mb) != (
            timeout_s, memory_limit_mb):
        # one persistent child per Dask worker process: imports are paid once, not per job
        _DASK_CHILD = LocalExecutor(1, Limits(timeout_s, memory_limit_mb), keep_alive=True)
    results: list[dict] = []
    _DASK_CHILD.run([job], Path(run_dir), lambda _job, result: results.append(result))
    return results[0]


class DaskExecutor:
    """Send jobs to a Dask cluster (``scheduler`` address) or a LocalCluster of ``workers``."""

    def __init__(self, scheduler: str | None = None, workers: int = 1, limits: Limits | None = None) -> None:
        self.scheduler = scheduler
        self.workers = max(1, workers)
        self.limits = limits or Limits()

    def run(self, jobs: Iterable[Job], run_dir: Path, on_done: OnDone,
            on_progress: OnProgress | None = None) -> None:
        """``on_progress`` is accepted for the executors' common signature and never called: a
        Dask task reports only its end."""
        from distributed import Client, LocalCluster, as_completed

        jobs = list(jobs)
        cluster = None
        if self.scheduler:
            client = Client(self.scheduler)
        else:
            import dask

            dask.config.set({"distributed.worker.daemon": False})  # lets a task isolate its job
            cluster = LocalCluster(n_workers=self.workers, threads_per_worker=1, processes=True,
                                   dashboard_address=None)
            client = Client(cluster)
        try:
            futures = {client.submit(_isolated_job, job, str(Path(run_dir).resolve()), self.limits.timeout_s,
                                     self.limits.memory_limit_mb, key=f"attackaudit-{job.job_id}", pure=False): job
                       for job in jobs}
            for future in as_completed(futures):
                job = futures[future]
                try:
                    result = future.result()
                except Exception as exc:  # the task machinery, not the attack (whose errors are rows)
                    result = record_failure(job, run_dir, HARNESS_ERROR,
                                            f"dask task failed: {type(exc).__name__}: {exc}")
                on_done(job, result)
        finally:
            client.close()
            if cluster is not None:
                cluster.close()
