"""The worker side of a job: resolve everything from the ``Job`` and write its result file.

``execute_job`` is what every executor runs, in a child process (local) or on a Dask worker.
"""
from __future__ import annotations

import faulthandler
import os
import sys
import time
import traceback
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import pandas as pd
import torch
from torch import Tensor

import attackaudit.sources.run_twins as run_twins
from attackaudit.adapters import AttackSpec, LibraryEntry, PluginError, SpecError, SpecSource
from attackaudit.measure.criterion import Criterion, Targeted, Untargeted
from attackaudit.run.faults import fix_for
from attackaudit.run.job import Companions, Job, JobProgress, clean_logits, failure_rows, job_rows
from attackaudit.results.schema import HARNESS_ERROR, error_line
from attackaudit.results.store import job_path, logs_dir, write_job

if TYPE_CHECKING:
    from multiprocessing.connection import Connection

    from attackaudit.sources.subset import Subset


@lru_cache(maxsize=8)
def _spec_entries(source: SpecSource) -> tuple[list[LibraryEntry], str]:
    """(the entries ``source`` defines, "") or ([], why it cannot be loaded): a worker runs many
    jobs of one library, so it imports and validates each source once."""
    try:
        return source.load(), ""
    except (PluginError, SpecError) as exc:
        return [], str(exc)


def resolve_spec(job: Job) -> tuple[AttackSpec | None, str, str]:
    """(spec scaled by ``job.steps_scale``, library version, "") or (None, version, the one-line
    reason) for the job's spec: only the job's ``spec_source`` is imported, never the catalogue."""
    entries, error = _spec_entries(job.spec_source)
    if error:
        return None, "", error
    spec, version, error = job.spec_source.find(job.spec_key, entries)
    return (spec.scaled(job.steps_scale) if spec is not None else None), version, error


@lru_cache(maxsize=4)
def job_subset(dataset: str, samples: int, seed: int) -> Subset:
    """The job's evaluation subset, cached: a worker runs many jobs on the same subset."""
    from attackaudit.sources.subset import load_subset

    return load_subset(dataset, samples, seed)


def load_job_model(job: Job) -> torch.nn.Module:
    """The job's model (``job.twin``) on the job's device: a zoo model or its twin, or any model source
    of ``attackaudit.sources.model_loader`` (robustbench:, torchvision:, timm:, module:)."""
    from attackaudit.sources.model_loader import load_model_source

    return load_model_source(job.twin, model_dir=job.model_dir, dataset=job.dataset,
                             threat_model=job.threat_model, allow_download=job.allow_download,
                             trust_checkpoint=job.trust_checkpoint, device=job.device)


#: clean logits per (model, subset, device, batching): a worker runs many jobs on one model
_CLEAN: dict[tuple, torch.Tensor] = {}
_CLEAN_ENTRIES = 16


def _clean_logits(job: Job, model: torch.nn.Module, subset: Subset) -> Tensor:
    with torch.no_grad():  # a cheap fingerprint of the weights: a file changed between two runs
        weights = tuple(float(p.detach().flatten()[:64].double().sum()) for p in model.parameters())
    batch_size = run_twins.batch_size(job.twin, job.batch_size)  # the batches the job's attack gets
    key = (job.model, job.model_dir, job.threat_model, job.dataset, job.samples, job.seed, job.device,
           batch_size, weights)
    if key not in _CLEAN:
        if len(_CLEAN) >= _CLEAN_ENTRIES:
            _CLEAN.pop(next(iter(_CLEAN)))
        _CLEAN[key] = clean_logits(model.to(job.device).eval(), subset.inputs.to(job.device), batch_size)
    return _CLEAN[key]


def job_criterion(job: Job, subset: Subset, num_classes: int) -> Criterion:
    """The job's criterion: ``Untargeted()``, or with ``--targeted`` ``Targeted`` with the seeded
    random targets of the subset (one per sample, never its label; the same for every job of the run)."""
    from attackaudit.sources.subset import random_targets

    return Targeted(random_targets(subset.labels, num_classes, job.seed)) if job.targeted else Untargeted()


def job_companions(job: Job, num_classes: int, model: torch.nn.Module | None = None) -> Companions | None:
    """The batch-composition twin's companions (``run_twins.companions``): the dataset's images after
    the job's subset in its order (subsets nest), with their targets drawn as the job's are; None
    on every other model. With ``model``, the first companion is made adversarial already
    (``run_twins.already_adversarial``): an attack that stops the whole batch once one image is done
    then stops at once."""
    from attackaudit.sources.subset import dataset_size

    extra = run_twins.companions(job.twin, job.samples, dataset_size(job.dataset))
    if not extra:
        return None
    wide = job_subset(job.dataset, job.samples + extra, job.seed)
    rows = slice(job.samples, None)
    labels, criterion = wide.labels[rows], job_criterion(job, wide, num_classes).take(rows)
    if model is not None:
        with torch.no_grad():
            predicted = model.to(job.device).eval()(wide.inputs[rows][:1].to(job.device)).argmax(1).cpu()
        labels, criterion = run_twins.already_adversarial(labels, criterion, int(predicted[0]), num_classes)
    return Companions(wide.inputs[rows], labels, wide.indices[rows], criterion)


def job_targets(job: Job, subset: Subset, num_classes: int) -> Tensor | None:
    """The targets of ``job_criterion`` (N), or None untargeted."""
    return job_criterion(job, subset, num_classes).targets


def execute_job(job: Job, run_dir: str | Path, progress: JobProgress | None = None) -> dict[str, str]:
    """Run one job and write ``jobs/<job_id>.parquet``; returns {job_id, status, counts}.

    Never raises for an attack's failure: that becomes rows. Raises only when the rows cannot be
    written at all. ``progress``: see ``job_rows``; it is called once with (0, samples, 0.0) when the
    attack is about to start, so an executor can tell a death before it (``harness_error``, ours)
    from one during it (``crash``). A failure before the attack (the spec's module does not import,
    the model does not load or run on the data) is ``harness_error``, with its traceback in the log.
    """
    run_dir = Path(run_dir)
    log_path = logs_dir(run_dir) / f"{job.job_id}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    subset = job_subset(job.dataset, job.samples, job.seed)
    with open(log_path, "w") as log:
        spec, version, error = resolve_spec(job)
        if spec is None:  # the spec's source did not load here: not the library's crash
            log.write(f"{HARNESS_ERROR}: {error}\n")
            rows = failure_rows(job, subset, HARNESS_ERROR, error, library_version=version)
        else:
            try:
                model = load_job_model(job)
                clean = _clean_logits(job, model, subset)
                criterion = job_criterion(job, subset, clean.shape[1])
                companions = job_companions(job, clean.shape[1], model)
            except Exception as exc:  # before the attack (model load, its clean pass): ours, not the library's
                trace = traceback.format_exc()
                log.write(f"{HARNESS_ERROR}: before the attack started\n{trace}")
                fix = fix_for(trace)
                rows = failure_rows(job, subset, HARNESS_ERROR, error_line(exc) + (f"; {fix}" if fix else ""), spec,
                                    version)
            else:
                if progress is not None:
                    progress(0, len(subset.labels), 0.0)  # the attack starts now
                try:
                    rows = job_rows(job, spec, version, model, subset, criterion, log, progress, clean, companions)
                except Exception as exc:  # outside an attack call, yet during the job: rows, with the cause
                    log.write(traceback.format_exc())
                    rows = failure_rows(job, subset, "crash", error_line(exc), spec, version)
    write_job(run_dir, job.job_id, rows)
    status = _job_status(rows)
    error = next((str(e) for e in rows.loc[rows["status"] == status, "error"] if e), "")
    return {"job_id": job.job_id, "status": status, "error": error, "path": str(job_path(run_dir, job.job_id))}


def execute_job_safely(job: Job, run_dir: str | Path, progress: JobProgress | None = None) -> dict[str, str]:
    """``execute_job``, and when even that raises (the data does not load, the rows cannot be
    written) a ``harness_error`` result without rows, its traceback in the job's log: the job is
    not complete, so the next call of the run runs it again."""
    try:
        return execute_job(job, run_dir, progress)
    except Exception as exc:
        log_path = logs_dir(Path(run_dir)) / f"{job.job_id}.log"
        with open(log_path, "a") as log:
            log.write(f"{HARNESS_ERROR}: the job could not run\n{traceback.format_exc()}")
        return {"job_id": job.job_id, "status": HARNESS_ERROR, "error": error_line(exc)}


def _job_status(rows: pd.DataFrame) -> str:
    statuses = set(rows["status"])
    for status in (HARNESS_ERROR, "timeout", "crash", "invalid"):
        if status in statuses:
            return status
    return "ok"


#: seconds between two progress messages of one job
PROGRESS_INTERVAL = 0.5


def throttled(progress: JobProgress) -> JobProgress:
    """``progress``, called at most every PROGRESS_INTERVAL seconds while a batch runs (always at
    a batch's start and end, where the budget fraction is 0): the tracker reports every flush of its
    query window, far more often than a progress bar needs redrawing."""
    last = [time.monotonic()]

    def send(done: int, total: int, used: float) -> None:
        now = time.monotonic()
        if used and now - last[0] < PROGRESS_INTERVAL:
            return
        last[0] = now
        progress(done, total, used)
    return send


def _progress_sender(conn: Connection) -> JobProgress:
    """Progress of the running job to the parent (``throttled``), as ``{"progress": (done, total,
    budget fraction)}``."""
    return throttled(lambda done, total, used: conn.send({"progress": (done, total, used)}))


def worker_settings(threads: int) -> Callable[[], None]:
    """Put this process in a worker's settings, which jobs are measured under; returns what puts
    back the previous ones (an in-process run gives the caller's process back as it was).

    ``threads``: torch's intra-op threads (``executors.JOB_THREADS``: one, for results that do not
    depend on the machine). numba's LLVM optimiser is most of the cost of compiling foolbox's
    Brendel-Bethge solver, which happens once per process and norm and cannot be cached on disk (jitclass): at -O0 the
    compile takes ~40% less CPU (e.g. L2: 36 s against 58 s) while the solver runs ~1.4x slower on
    the digits zoo, a net gain below a few hundred BB jobs per worker. Same IEEE arithmetic (numba
    never enables fast-math by default), so the same results. A user's NUMBA_OPT wins (and numba
    reads it once, when first imported)."""
    before_threads, before_numba = torch.get_num_threads(), os.environ.get("NUMBA_OPT")
    torch.set_num_threads(max(1, threads))
    os.environ.setdefault("NUMBA_OPT", "0")

    def restore() -> None:
        torch.set_num_threads(before_threads)
        if before_numba is None:
            os.environ.pop("NUMBA_OPT", None)
    return restore


def worker_loop(conn: Connection, threads: int) -> None:
    """A persistent child: receive (job, run_dir), execute, answer; ``None`` ends it.

    Each job's stderr (and a fatal signal's traceback, via faulthandler) goes to its log file.
    """
    worker_settings(threads)
    faulthandler.enable()  # on fd 2, which points at the current job's log while it runs
    stderr_fd = os.dup(2)
    # the imports are done: a job's time limit starts now, not when the process was spawned
    conn.send({"ready": True})
    while True:
        message = conn.recv()
        if message is None:
            return
        job, run_dir = message
        log_path = logs_dir(Path(run_dir)) / f"{job.job_id}.stderr"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "w") as err:
            os.dup2(err.fileno(), 2)
            try:
                result = execute_job_safely(job, run_dir, _progress_sender(conn))
            finally:
                sys.stderr.flush()
                os.dup2(stderr_fd, 2)
        conn.send(result)
