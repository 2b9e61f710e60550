"""Report I/O: reading one or several run directories into one table, and writing the fidelity
tables (CSV, strict JSON). Computation is ``tables.py``; rendering ``text``, ``markdown``, ``html``."""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Iterable

import numpy as np
import pandas as pd

from attackaudit.results.schema import SPLIT
from attackaudit.results.store import load_exact, load_run, read_manifest
from attackaudit.errors import InputError

if TYPE_CHECKING:
    from .tables import ReportData


# ------------------------------------------------------------------------------------ reading
def load_repeats(run_dirs: Iterable[Path | str]) -> pd.DataFrame | None:
    """The second seeded runs that ``run --repeat 2`` stored beside the first (``store.repeat_dir``),
    merged; None when no directory has one."""
    from attackaudit.results.store import repeat_dir

    frames = [load_run(repeat_dir(d)) for d in run_dirs if repeat_dir(d).is_dir()]
    frames = [f for f in frames if len(f)]
    return pd.concat(frames, ignore_index=True) if frames else None


def _check_mergeable(dirs: list[Path], tables: list[pd.DataFrame]) -> None:
    """Runs merge into one envelope only on the same samples, budget and attack mode. The batch-split
    twin (``MODEL~split``) may run on the first images of the subset only (``split_samples``; subsets
    nest), so its subset is checked to lie inside the run's, not to equal it."""
    whole = []  # each run's rows on its whole subset (the split twin's left out)
    for d, rows in zip(dirs, tables):
        split = rows["twin"] == SPLIT
        if split.any() and not set(rows.loc[split, "sample"]) <= set(rows.loc[~split, "sample"]):
            raise InputError(f"run {d}: its batch-split twin attacked images outside the run's subset")
        whole.append(rows[~split])
    for column, what in (("subset_hash", "subset"), ("budget", "query budget"), ("targeted", "attack mode")):
        seen: dict = {}
        for d, rows, rows_whole in zip(dirs, tables, whole):
            for value in (rows_whole if column == "subset_hash" else rows)[column].unique():
                seen.setdefault(value, d)
        if len(seen) > 1:
            (a, da), (b, db) = list(seen.items())[:2]
            raise InputError(f"runs {da} and {db} differ in {what} ({a} vs {b}); only runs on the same "
                             "subset, budget and attack mode merge into one envelope")


def load_runs(run_dirs: Iterable[Path | str]) -> tuple[pd.DataFrame, list[dict], pd.DataFrame | None]:
    """Merged rows, manifests and exact distances of one or several run directories.

    Later directories' rows win over earlier ones for the same implementation, model, norm and
    sample (fidelity keeps the last). Raises ValueError (one line) for a missing directory, one
    without results, or no directory at all.
    """
    dirs = [Path(d) for d in run_dirs]
    if not dirs:
        raise InputError("no run directory given")
    tables, manifests, exacts = [], [], []
    for d in dirs:
        if not d.is_dir():
            raise InputError(f"run directory {d} does not exist")
        rows = load_run(d)
        if rows.empty:
            raise InputError(f"run directory {d} holds no results (no readable jobs/*.parquet); "
                             f"run `attackaudit run --out {d}` first")
        tables.append(rows)
        try:
            manifests.append(read_manifest(d) or {})
        except (OSError, ValueError):
            manifests.append({})
        exact = load_exact(d)
        if exact is not None:
            exacts.append(exact)
    _check_mergeable(dirs, tables)
    table = pd.concat(tables, ignore_index=True)
    exact = pd.concat(exacts, ignore_index=True).drop_duplicates(
        [c for c in ("model", "dataset", "norm", "sample") if c in exacts[0].columns], keep="last") \
        if exacts else None
    return table, manifests, exact


# ------------------------------------------------------------------------------------ writing
def _jsonable(value: object) -> object:
    """inf → "inf", NaN → null, numpy scalars → Python: strict JSON that keeps "never broken"."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return [_jsonable(v) for v in value.tolist()]
    if isinstance(value, (np.bool_,)):
        return bool(value)
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        f = float(value)
        if math.isnan(f):
            return None
        if math.isinf(f):
            return "inf" if f > 0 else "-inf"
        return f
    if isinstance(value, Path):
        return str(value)
    if value is pd.NA or value is pd.NaT:
        return None
    return value


def records(frame: pd.DataFrame) -> list[dict]:
    return [_jsonable(r) for r in frame.to_dict(orient="records")]


def dump_json(obj: object, path: Path) -> Path:
    path.write_text(json.dumps(_jsonable(obj), indent=2, ensure_ascii=False, allow_nan=False) + "\n",
                    encoding="utf-8")
    return path


def write_tables(data: ReportData, out: Path, json_too: bool = True) -> dict[str, Path]:
    """``leaderboard``, ``alignment`` (+ ``alignment_pairs`` as CSV), ``flags`` and, with exact
    distances, ``exact_optimality``: CSV always, JSON when ``json_too``. JSON is strict: inf is the
    string "inf", NaN null."""
    out.mkdir(parents=True, exist_ok=True)
    written: dict[str, Path] = {}

    def csv(name: str, frame: pd.DataFrame) -> None:
        path = out / f"{name}.csv"
        frame.to_csv(path, index=False)
        written[f"{name}.csv"] = path

    csv("leaderboard", data.leaderboard)
    csv("alignment", data.side)
    csv("alignment_pairs", data.pairs)
    csv("flags", data.flags)
    if data.true_optimality is not None:
        csv("exact_optimality", data.true_optimality)
    if json_too:
        written["leaderboard.json"] = dump_json(records(data.leaderboard), out / "leaderboard.json")
        written["alignment.json"] = dump_json({"implementations": records(data.side), "pairs": records(data.pairs)},
                                              out / "alignment.json")
        written["flags.json"] = dump_json(records(data.flags), out / "flags.json")
        if data.true_optimality is not None:
            written["exact_optimality.json"] = dump_json(records(data.true_optimality),
                                                         out / "exact_optimality.json")
    return written
