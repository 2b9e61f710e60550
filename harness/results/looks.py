"""A look of a run that extends until decided, read back: the directory each look's run lives in
and its verdicts at the α it spent. One definition for the runner, which judges each look to choose
the rows it extends (``run/sequential.py``), and the report, which shows each row's last look
(``reports/looks.py``): both read the same rows the same way, so they say the same."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from attackaudit.fidelity.flag_kinds import raised_by_twins
from attackaudit.fidelity.sequential import judge, look_flags
from attackaudit.fidelity.yardstick_verdicts import manifest_settings
from attackaudit.results.store import load_exact, load_run, read_manifest, repeat_dir

#: where the looks after the first live in a run directory: ``OUT/looks/n<images>``
LOOKS_DIR = "looks"


def look_dir(out: Path, look: int, images: int) -> Path:
    """The run directory of look ``look`` (1-based): ``out`` for the first, ``out/looks/n<images>`` after."""
    return Path(out) if look == 1 else Path(out) / LOOKS_DIR / f"n{images}"


def judge_run(run_dir: Path, alpha: float, first: Path | None = None) -> pd.DataFrame:
    """The recommendation of one look's run directory at its level ``alpha``
    (``fidelity.sequential.judge`` on its rows, its ``--repeat`` rows and exact distances, as
    ``attackaudit report`` reads them). ``first``: the first look's directory, for a later look,
    which runs the base models only: the twins' findings of the first look are carried to it.
    Raises FileNotFoundError for a missing directory."""
    carried = None
    if first is not None and Path(first).resolve() != Path(run_dir).resolve():
        table, repeats, exact, _, settings = _look_rows(Path(first))
        carried = raised_by_twins(look_flags(table, repeats, exact, settings)[0])
    table, repeats, exact, images, settings = _look_rows(Path(run_dir))
    return judge(table, alpha, repeats, exact, images, settings, carried=carried)


def _look_rows(run_dir: Path) -> tuple:
    """(rows, ``--repeat`` rows or None, exact distances, the dataset's images, the settings) of a run directory."""
    again = repeat_dir(run_dir)
    repeats = load_run(again) if again.is_dir() else None
    manifest = read_manifest(run_dir) or {}
    return (load_run(run_dir), repeats if repeats is not None and len(repeats) else None,
            load_exact(run_dir), manifest.get("dataset_images"), manifest_settings([manifest]))
