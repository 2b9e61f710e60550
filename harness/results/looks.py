"""A look of a run that extends until decided, read back: the directory each look's run lives in
and the rows it holds (its results, ``--repeat`` rows, exact distances and manifest). Stored data
only: fidelity judges a look (``fidelity/sequential.py`` ``judge_look``), for the runner, which
judges each look to choose the rows it extends (``run/sequential.py``), and the report, which shows
each row's last look (``reports/looks.py``): both read the same rows the same way, so they say the
same, and the results package stays below fidelity."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from attackaudit.results.store import load_exact, load_run, read_manifest, repeat_dir

#: where the looks after the first live in a run directory: ``OUT/looks/n<images>``
LOOKS_DIR = "looks"


def look_dir(out: Path, look: int, images: int) -> Path:
    """The run directory of look ``look`` (1-based): ``out`` for the first, ``out/looks/n<images>`` after."""
    return Path(out) if look == 1 else Path(out) / LOOKS_DIR / f"n{images}"


@dataclass(frozen=True)
class LookRows:
    """One look's run directory as ``attackaudit report`` reads it: its rows, its ``--repeat`` rows
    (None without any), its exact distances (None without any) and its manifest ({} without one)."""

    table: pd.DataFrame
    repeats: pd.DataFrame | None
    exact: pd.DataFrame | None
    manifest: dict


def read_look(run_dir: Path) -> LookRows:
    """The rows of one look's run directory. Raises FileNotFoundError for a missing directory."""
    again = repeat_dir(run_dir)
    repeats = load_run(again) if again.is_dir() else None
    return LookRows(load_run(run_dir), repeats if repeats is not None and len(repeats) else None,
                    load_exact(run_dir), read_manifest(run_dir) or {})
