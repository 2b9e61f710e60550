"""The grid: models × attack implementations (one per norm) on one hashed subset.

``plan`` resolves which jobs a config means; ``run`` executes the unfinished ones with an
executor, so rerunning the same command resumes a killed run and re-executes only what is missing,
and the jobs whose worker failed before their attack started (``harness_error``: ours, not the
library's); ``retry="crashed"`` (``--retry crashed``) also re-executes the jobs that crashed.
"""
from __future__ import annotations

import difflib
import platform
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import torch
from tqdm import tqdm

from attackaudit.exact.defaults import exact_after_run
from attackaudit.run.config import ConfigError, RunConfig
from attackaudit.run.executors import DaskExecutor, Executor, Limits, LocalExecutor
from attackaudit.run.faults import HarnessFault, all_alike
from attackaudit.run.job import Job
from attackaudit.results.parameters import PARAMETERS
from attackaudit.results.schema import HARNESS_ERROR, MODEL_TWINS, Twin, implementation_name
from attackaudit.results.store import (ensure_writable, job_statuses, logs_dir, model_label, read_manifest, repeat_dir,
                                      write_manifest)
from attackaudit.sources.run_twins import has_job, is_randomised, run_twin_models, twin_samples

if TYPE_CHECKING:
    from attackaudit.adapters import AttackSpec
    from attackaudit.sources.subset import Subset


@dataclass
class Plan:
    jobs: list[Job]
    skipped: list[dict]          # specs not run, with the reason (e.g. no targeted mode)
    unavailable: list[dict]      # libraries that failed to import
    versions: dict[str, str]
    subset_hash: str
    specs: dict[str, dict] = field(default_factory=dict)
    subset: Subset | None = None  # the attacked samples
    notes: list[str] = field(default_factory=list)  # --plugin attacks the filters left out, said on stderr
    plugin_fingerprints: dict[str, str] = field(default_factory=dict)  # plugin file -> fingerprint


def _excluded_by(spec: AttackSpec, config: RunConfig) -> str:
    """The name filter (--families, --norms, --attacks) that leaves ``spec`` out, or ''."""
    for flag, chosen, value in (("--families", config.families, spec.family), ("--norms", config.norms, spec.norm)):
        if chosen is not None and value.lower() not in {c.lower() for c in chosen}:  # PGD is pgd
            return flag
    names = {n.lower() for n in (spec.key, spec.implementation, implementation_name(spec.library, spec.name))}
    if config.attacks is not None and not any(a.lower() in names for a in config.attacks):
        return "--attacks"
    return ""


def _criterion_skip(spec: AttackSpec, targeted: bool) -> tuple[str, str]:
    """(why the manifest lists ``spec`` as skipped, the note a ``--plugin`` spec gets on stderr)
    when the run's criterion (``--targeted`` or not) has no call for it, else ("", "")."""
    if targeted and not spec.targeted_support:
        return spec.note or "no targeted mode in this library", "skipped by --targeted (targeted_support=False)"
    if not targeted and spec.targeted_only:
        return ("targeted only: runs with --targeted",
                "skipped: targeted only (targeted_only=True), run with --targeted")
    return "", ""


def _job(config: RunConfig, model: Twin, spec: AttackSpec, plugin_ref: str) -> Job:
    """The job of ``spec`` on ``model``; ``plugin_ref``: the ``--plugin`` file that defines the
    spec (``PluginSource.ref``, pinned to its content) or "" for a built-in or entry-point spec."""
    copied = {p.name: getattr(config, p.name) for p in PARAMETERS if p.job}  # the table's job=True fields
    return Job(run=config.name, twin=model, spec_key=spec.key, attack=spec.id,
               **{**copied, "samples": twin_samples(model, config.samples, config.split_samples)},
               plugins=(plugin_ref,) if plugin_ref else (),
               model_dir=str(Path(config.model_dir).resolve()) if config.model_dir else "")


def _unmatched(entries: list, config: RunConfig) -> list[str]:
    """Each ``--families``/``--attacks`` value that names no spec of the libraries asked for, with
    the nearest names that do (a typo, ``apgdd``, is named, never silently matched by nothing)."""
    specs = [s for e in entries if e.available and (config.libraries is None or e.library in config.libraries
                                                    or e.plugin is not None) for s in e.specs]
    known = {"--families": {s.family for s in specs},
             "--attacks": {n for s in specs for n in (s.key, s.implementation, implementation_name(s.library, s.name))}}
    out = []
    for flag, values in (("--families", config.families), ("--attacks", config.attacks)):
        lower = {k.lower(): k for k in known[flag]}  # names match in any case: the nearest too
        for value in values or []:
            if value.lower() not in lower:
                near = difflib.get_close_matches(value.lower(), sorted(lower), n=3, cutoff=0.6)
                out.append(f"{flag} {value!r} names no attack"
                           + (f" (nearest: {', '.join(lower[n] for n in near)})" if near else ""))
    return out


def _lacking_norms(entries: list, config: RunConfig) -> list[str]:
    """Each library asked for whose attacks (of ``--families``/``--attacks``) lack a ``--norms``
    norm, with the norms they have: why filters that match no attack match none."""
    out, any_norm = [], replace(config, norms=None)
    for e in entries:
        if not e.available or not config.norms or (config.libraries is not None and e.library not in config.libraries
                                                   and e.plugin is None):
            continue
        have = sorted({s.norm for s in e.specs if not _excluded_by(s, any_norm)})
        lacking = [n for n in config.norms if n not in have]
        if lacking:
            chosen = f" of --families {' '.join(config.families)}" if config.families else ""
            out.append(f"{e.library} has no {'/'.join(lacking)} attack{chosen} (it has: {', '.join(have) or 'none'})")
    return out


def _matches(spec: AttackSpec, config: RunConfig) -> bool:
    if config.libraries is not None and spec.library not in config.libraries:
        return False
    return not _excluded_by(spec, config)


def plan(config: RunConfig) -> Plan:
    """The jobs of ``config``; raises ConfigError for names that match nothing."""
    from attackaudit.adapters import BUILTIN_LIBRARIES, PluginError, catalogue

    from attackaudit.sources.subset import load_subset, samples_note

    known_libraries = set(BUILTIN_LIBRARIES)
    try:
        # only the libraries asked for: importing a built-in library takes seconds of the parent's CPU
        entries = catalogue(config.libraries, plugins=config.plugins)
        known_libraries |= {e.library for e in entries}
        if any(lib not in known_libraries for lib in config.libraries or []):  # name them all
            known_libraries |= {e.library for e in catalogue(None, plugins=config.plugins)}
    except PluginError as exc:
        raise ConfigError(str(exc)) from None
    for lib in config.libraries or []:
        if lib not in known_libraries:
            raise ConfigError(f"unknown library {lib!r}; known: {', '.join(sorted(known_libraries))}")
    subset = load_subset(config.dataset, config.samples, config.seed)
    size_note = samples_note(config.samples, len(subset))
    config.samples = len(subset)  # what the jobs attack, their ids and the manifest say: all of the dataset
    models = list(config.twins)
    if config.metamorphic:  # the model twins on every model, the run twins on the first one
        model_twins = [m.of(kind) for kind in MODEL_TWINS for m in models if not m.is_twin]
        models += [m for m in model_twins + run_twin_models(models) if m not in models]
    jobs, skipped, unavailable, versions, specs = [], [], [], {}, {}
    left_out: dict[tuple[str, str], list[str]] = {}  # (plugin file, why) -> its attacks not run
    for entry in entries:
        # an explicit --plugin is a choice of library in itself: --libraries never drops it
        if config.libraries is not None and entry.library not in config.libraries and entry.plugin is None:
            continue
        versions[entry.library] = entry.version
        if not entry.available:
            unavailable.append({"library": entry.library, "reason": entry.reason})
            continue
        for spec in entry.specs:
            if entry.plugin is not None:
                if (flag := _excluded_by(spec, config)):
                    left_out.setdefault((entry.plugin.path, f"left out by {flag}"), []).append(spec.key)
                    continue
            elif not _matches(spec, config):
                continue
            reason, plugin_note = _criterion_skip(spec, config.targeted)
            if reason:
                skipped.append({"attack": spec.key, "reason": reason})
                if entry.plugin is not None:
                    left_out.setdefault((entry.plugin.path, plugin_note), []).append(spec.key)
                continue
            # "randomised": declared by the spec (or a measured built-in): the report names an
            # implementation whose seed twin differs without it (reports/seed_twins.py)
            specs[spec.key] = {"library": spec.library, "name": spec.name, "family": spec.family,
                               "norm": spec.norm, "kind": spec.kind.value, "params": dict(spec.params),
                               "implementation": spec.implementation, "randomised": is_randomised(spec)}
            plugin_ref = entry.plugin.ref if entry.plugin else ""
            jobs += [_job(config, model, spec, plugin_ref) for model in models
                     if has_job(model, spec)]  # a seed twin: randomised specs only
    unmatched = _unmatched(entries, config)
    if not jobs and not unavailable:
        why = unmatched + _lacking_norms(entries, config)
        raise ConfigError("the filters (--libraries/--families/--norms/--attacks) match no attack"
                          + (f": {'; '.join(why)}" if why else "") + "; `attackaudit attacks` lists the catalogue")
    fingerprints = {e.plugin.path: e.plugin.fingerprint for e in entries if e.plugin is not None}
    notes = [f"--plugin {path}: {len(keys)} attack{'s' * (len(keys) > 1)} {why}: {', '.join(keys)}"
             for (path, why), keys in left_out.items()] + unmatched + ([size_note] if size_note else [])
    return Plan(jobs, skipped, unavailable, versions, subset.hash, specs, subset, notes, fingerprints)


@dataclass
class RunSummary:
    run_dir: Path
    total: int
    executed: int
    counts: dict[str, int]
    wall_s: float

    def line(self) -> str:
        c = self.counts
        return (f"{self.total} jobs: {c.get('ok', 0)} ok, {c.get('crash', 0)} crashed, "
                f"{c.get('timeout', 0)} timed out, {c.get('invalid', 0)} invalid"
                + (f", {c['unsupported']} unsupported by this release (ours, not the library's)" if c.get("unsupported") else "")
                + (f", {c[HARNESS_ERROR]} could not start (harness errors, ours: the next call runs them again; "
                   f"the cause in {self.run_dir}/logs)" if c.get(HARNESS_ERROR) else "")
                + " "
                f"({self.executed} run now, {self.total - self.executed} already done) "
                f"in {self.wall_s:.1f} s -> {self.run_dir}")


def run_identity(config: RunConfig, p: Plan) -> dict[str, object]:
    """What determines results: the result config, plus each --plugin file's fingerprint (its
    content and the library version it records), so that an edited plugin is a changed config."""
    identity = config.result_config()
    if p.plugin_fingerprints:
        identity["plugin_fingerprints"] = p.plugin_fingerprints
    return identity


def check_resumable(run_dir: Path, config: RunConfig, current: dict[str, object] | None = None) -> bool:
    """Whether ``config`` may run in ``run_dir``'s directory: True when its previous run had
    another config but no result to protect (every job a ``harness_error``: e.g. a script first fed
    on standard input, whose model fingerprint could not read the class's source), so its jobs are
    to be superseded; False when nothing changed (or ``--force``); ConfigError otherwise."""
    manifest = read_manifest(run_dir)
    if manifest is None or config.force:
        return False
    previous = manifest.get("config", {})
    current = config.result_config() if current is None else current
    changed = sorted(k for k in set(previous) | set(current) if previous.get(k) != current.get(k))
    if changed and not any(job_statuses(run_dir, j) - {HARNESS_ERROR} for j in manifest.get("jobs", [])):
        return True
    if changed:
        raise ConfigError(f"{run_dir} holds a run with a different config ({', '.join(changed)}); "
                          "use another --out, or --force to run this config there")


def repeat_jobs(config: RunConfig, jobs: list[Job]) -> list[Job]:
    """The jobs ``--repeat 2`` runs a second time, into ``store.repeat_dir``: every job on the
    first model, unchanged (same seed, same job id), so that two seeded runs can be compared."""
    if config.repeat < 2:
        return []
    return [j for j in jobs if j.model == config.models[0]]


def supersede(run_dir: Path, current: set[str]) -> None:
    """Move the previous manifest's job files that ``current`` lacks to ``superseded/`` (--force):
    ``load_run`` and reports read ``jobs/``, where they would mix two configs' results (an
    edited plugin's old rows beside its new ones)."""
    from attackaudit.results.store import job_path

    for job_id in set((read_manifest(run_dir) or {}).get("jobs", [])) - current:
        path = job_path(run_dir, job_id)
        if path.exists():
            (run_dir / "superseded").mkdir(exist_ok=True)
            path.replace(run_dir / "superseded" / path.name)


def changed_libraries(run_dir: Path, versions: dict[str, str]) -> dict[str, tuple[str, str]]:
    """{library: (the version the run directory's results were made with, the installed one)} for
    every library whose release changed since the manifest was written (a candidate ``LIB@PATH``
    carries its own local label, so two source trees differ too)."""
    before = (read_manifest(run_dir) or {}).get("library_versions") or {}
    return {lib: (str(before[lib]), str(v)) for lib, v in versions.items() if lib in before and str(before[lib]) != str(v)}


def _say_on_stderr(note: str) -> None:
    print(f"attackaudit: note: {note}", file=sys.stderr)


def run(config: RunConfig, executor: Executor | None = None, say: Callable[[str], None] = _say_on_stderr) -> RunSummary:
    """Run (or resume) the grid of ``config`` in this interpreter; returns the summary. (A release
    audit runs a whole grid under a release's interpreter with ``audit_env.run_under``.)
    ``executor``: one with ``LocalExecutor.run``'s signature instead of ``config.executor``'s
    (``attackaudit.compare`` passes an ``InProcessExecutor`` for a model that does not pickle);
    ``say``: where the plan's notes go (stderr; ``compare`` words them for its caller).
    Raises ``HarnessFault`` when every job run now failed before its attack started."""
    start = time.perf_counter()
    run_dir = Path(config.out)
    ensure_writable(run_dir)
    p = plan(config)
    identity = run_identity(config, p)
    if check_resumable(run_dir, config, identity) or config.force:
        supersede(run_dir, {j.job_id for j in p.jobs})
    changed = changed_libraries(run_dir, p.versions)
    if changed:  # a job id names the spec, not the release: a resumed job would keep the old one's rows
        supersede(run_dir, {j.job_id for j in p.jobs if j.attack.library not in changed})
        say("finished jobs of " + ", ".join(f"{lib} ({old} -> {new})" for lib, (old, new) in sorted(changed.items()))
            + " run again: the installed release is not the one that made their results")
    for note in p.notes:
        say(note)
    from attackaudit.sources.model_checks import check_models

    from attackaudit.sources.subset import dataset_size

    model_checks = check_models(config, p.subset)  # loads every model once: bad sources fail here
    if not config.quiet:
        for check in model_checks.values():
            for warning in check["warnings"]:
                print(f"attackaudit: warning: {warning}", file=sys.stderr)
    write_manifest(run_dir, {
        "name": config.name, "config": identity, "library_versions": p.versions,
        "torch_version": torch.__version__, "python": platform.python_version(), "device": config.device,
        "seed": config.seed, "subset_hash": p.subset_hash, "dataset": config.dataset,
        # how many images a rerun could draw: verdicts that need more say "cannot be decided here"
        "dataset_images": dataset_size(config.dataset),
        "jobs": [j.job_id for j in p.jobs], "skipped": p.skipped, "unavailable": p.unavailable,
        "specs": p.specs, "model_checks": model_checks, "repeat": config.repeat, "model_names": config.model_names,
    })
    pending = [j for j in p.jobs if _to_run(run_dir, j, config.retry)]
    again = repeat_jobs(config, p.jobs)
    again_pending = [j for j in again if _to_run(repeat_dir(run_dir), j, config.retry)]
    limits = Limits(config.timeout_s, config.memory_limit_mb)
    if executor is None:
        executor = (DaskExecutor(config.scheduler, config.workers, limits) if config.executor == "dask"
                    else LocalExecutor(config.workers, limits))
    bar = tqdm(total=len(p.jobs) + len(again), initial=len(p.jobs) + len(again) - len(pending) - len(again_pending),
               disable=config.quiet,
               desc="jobs", unit="job", dynamic_ncols=True)

    results: list[dict[str, str]] = []

    def on_done(job: Job, result: dict[str, str]) -> None:
        results.append(result)
        bar.update(1)
        bar.set_postfix_str(f"{model_label(job.twin, config.model_names)} {job.spec_key} {result.get('status')}",
                            refresh=False)

    sample_bars = SampleBars(enabled=not config.quiet and sys.stderr.isatty(), names=config.model_names)
    try:
        executor.run(pending, run_dir, on_done, sample_bars.update)
        if again_pending:
            executor.run(again_pending, repeat_dir(run_dir), on_done, sample_bars.update)
    finally:
        sample_bars.close()
        bar.close()
    if (fault := all_alike(results)):  # nothing ran: a report would say nothing, the cause must be said
        example = next(r["job_id"] for r in results if r.get("error") == fault)
        raise HarnessFault(f"every job failed before its attack started: {fault} (the traceback: "
                           f"{logs_dir(run_dir) / example}.log)")
    exact_after_run(run_dir, config, p, say)  # exact minima where the model admits them; never raises
    return RunSummary(run_dir, len(p.jobs), len(pending), _status_counts(run_dir, p.jobs),
                      time.perf_counter() - start)


class SampleBars:
    """One bar per worker under the job bar: the samples of its running job, and how much of the
    budget the running batch has used (a long job is otherwise a frozen line)."""

    def __init__(self, enabled: bool, names: dict[str, str] | None = None) -> None:
        self.enabled = enabled
        self.names = names or {}  # model source -> its name (store.model_label)
        self.bars: dict[int, tqdm] = {}
        self.jobs: dict[int, str] = {}

    def update(self, slot: int, job: Job | None, done: int, total: int, used: float) -> None:
        if not self.enabled or job is None:
            return
        bar = self.bars.get(slot)
        if bar is None:
            bar = self.bars[slot] = tqdm(total=total, position=slot + 1, leave=False, dynamic_ncols=True,
                                         bar_format="{desc} {bar} {n_fmt}/{total_fmt} samples "
                                                    "[{elapsed}{postfix}]")
        if self.jobs.get(slot) != job.job_id:  # a new job on this worker: its own clock
            self.jobs[slot] = job.job_id
            bar.reset(total=total)
        bar.n = done
        bar.set_description_str(f"  worker {slot + 1}: {model_label(job.twin, self.names)} {job.spec_key}",
                                refresh=False)
        bar.set_postfix_str(f"batch budget {used:.0%}", refresh=False)
        bar.refresh()

    def close(self) -> None:
        for bar in self.bars.values():
            bar.close()


#: ``retry`` values: which finished jobs run again (a ``harness_error`` job always does)
RETRY_STATUSES = {"": set(), "crashed": {"crash"}}


def _to_run(run_dir: Path, job: Job, retry: str = "") -> bool:
    """Whether ``job`` runs in this call: it has no complete result file, or its rows are a
    ``harness_error`` (its worker failed before the attack started), or ``retry`` asks again for its
    status (``RETRY_STATUSES``)."""
    statuses = job_statuses(run_dir, job.job_id)  # empty: no complete, readable result file
    return not statuses or bool(statuses & ({HARNESS_ERROR} | RETRY_STATUSES[retry]))


def _status_counts(run_dir: Path, jobs: list[Job]) -> dict[str, int]:
    import pandas as pd

    from attackaudit.results.store import job_path

    counts: dict[str, int] = {}
    for job in jobs:
        try:
            statuses = set(pd.read_parquet(job_path(run_dir, job.job_id), columns=["status"])["status"])
        except Exception:
            statuses = {"missing"}
        status = next((s for s in (HARNESS_ERROR, "timeout", "crash", "invalid", "unsupported", "missing")
                       if s in statuses), "ok")
        counts[status] = counts.get(status, 0) + 1
    return counts
