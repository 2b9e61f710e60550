"""Result store: ``runs/<name>/jobs/<job_id>.parquet`` (atomic), ``manifest.json``, logs.

A job file is written to a temporary name and renamed, so a killed run never leaves a partial
file under the final name; a file that still fails to read (truncated by a crashing disk, say) is
treated as missing and its job re-run.
"""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq

from attackaudit.results.schema import ROW_COLUMNS, Twin, with_invalid_reason, with_models, with_twin_columns
from attackaudit.errors import InputError


class RunDirError(InputError):
    """The run directory cannot be used (not writable, or holds another config)."""


def jobs_dir(run_dir: Path) -> Path:
    return Path(run_dir) / "jobs"


def logs_dir(run_dir: Path) -> Path:
    return Path(run_dir) / "logs"


def repeat_dir(run_dir: Path) -> Path:
    """Where ``run --repeat 2`` keeps its second run of the first model's jobs (a run directory of
    its own: ``jobs/``, ``logs/``), which reports compare with the first (``nondeterminism``)."""
    return Path(run_dir) / "repeat"


def job_path(run_dir: Path, job_id: str) -> Path:
    return jobs_dir(run_dir) / f"{job_id}.parquet"


def atomic_write_bytes(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_job(run_dir: Path, job_id: str, rows: pd.DataFrame) -> Path:
    """Write one job's rows atomically; returns the final path."""
    path = job_path(run_dir, job_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        rows.to_parquet(tmp, index=False)
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def job_is_complete(run_dir: Path, job_id: str) -> bool:
    """True when the job's file exists and its Parquet footer and row count read back."""
    path = job_path(run_dir, job_id)
    if not path.exists():
        return False
    try:
        meta = pq.read_metadata(path)
        return meta.num_rows > 0
    except Exception:
        return False


def job_statuses(run_dir: Path, job_id: str) -> set[str]:
    """The statuses of a complete job's rows (empty when its file is missing or unreadable)."""
    try:
        return set(pq.read_table(job_path(run_dir, job_id), columns=["status"]).column(0).to_pylist())
    except Exception:
        return set()


def read_manifest(run_dir: Path) -> dict | None:
    path = Path(run_dir) / "manifest.json"
    if not path.exists():
        return None
    return json.loads(path.read_text())


def write_manifest(run_dir: Path, manifest: dict) -> None:
    atomic_write_bytes(Path(run_dir) / "manifest.json",
                       (json.dumps(manifest, indent=2, sort_keys=True, default=str) + "\n").encode())


def update_manifest(run_dir: Path, **fields: object) -> None:
    """Add (or replace) ``fields`` in ``run_dir``'s manifest, atomically (the runner writes the
    manifest first; a run that extends until decided adds its looks)."""
    write_manifest(run_dir, (read_manifest(run_dir) or {}) | fields)


def load_exact(run_dir: Path) -> pd.DataFrame | None:
    """Exact distances stored by ``attackaudit exact`` under ``run_dir/exact``; None when absent.
    Unreadable files are skipped; the ``adversarial`` column (verified inputs) is dropped."""
    frames = []
    for path in sorted((Path(run_dir) / "exact").glob("*.parquet")):
        try:
            frame = pd.read_parquet(path)
        except Exception:
            continue
        frames.append(frame.drop(columns=[c for c in ("adversarial",) if c in frame.columns]))
    frames = [f for f in frames if len(f)]
    return pd.concat(frames, ignore_index=True) if frames else None


def load_run(run_dir: str | Path) -> pd.DataFrame:
    """All per-sample rows of a run (one row per sample per job), as a pandas DataFrame. A model
    named in the manifest's ``model_names`` (``attackaudit.compare(name=...)``) is shown by its name.

    Unreadable job files are skipped (the next run of the same command re-runs them).
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise FileNotFoundError(f"run directory {run_dir} does not exist")
    frames = []
    for path in sorted(jobs_dir(run_dir).glob("*.parquet")):
        try:
            # rows written before the twin columns or the invalid reason: derived here, once
            frames.append(with_invalid_reason(with_twin_columns(pd.read_parquet(path))))
        except Exception:
            continue
    if not frames:
        return pd.DataFrame(columns=ROW_COLUMNS)
    rows = pd.concat(frames, ignore_index=True)
    names = model_names(run_dir)
    if names:
        rows = with_models(rows, [Twin(names.get(b, b), k) for b, k in zip(rows["base_model"], rows["twin"])])
    return rows


def model_names(run_dir: Path) -> dict[str, str]:
    """{model source: the name it is shown by} of a run (the manifest's ``model_names``: what
    ``attackaudit.compare(name=...)`` gave its model, whose source is a path in the run
    directory); a ``--repeat`` directory reads its run's."""
    run_dir = Path(run_dir)
    for d in (run_dir, run_dir.parent) if run_dir.name == "repeat" else (run_dir,):
        try:
            names = (read_manifest(d) or {}).get("model_names")
        except (OSError, ValueError):
            continue
        if names:
            return dict(names)
    return {}


def model_label(model: Twin, names: dict[str, str]) -> str:
    """``model`` as rows, bars and pages show it: its base model's name in ``names`` (a twin keeps
    its kind: ``mynet~shift``), else the source itself."""
    return Twin(names.get(model.base_model, model.base_model), model.kind).name


def ensure_writable(run_dir: Path) -> None:
    """Create ``run_dir`` and prove it is writable, or raise RunDirError with one line."""
    run_dir = Path(run_dir)
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        probe = run_dir / ".write-probe"
        probe.write_text("ok")
        probe.unlink()
    except OSError as exc:
        raise RunDirError(f"--out {run_dir} is not writable ({exc.strerror or exc}); choose another directory") from None

