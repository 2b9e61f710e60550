"""``attackaudit.compare``'s scalar, filter, plugin and ``out`` arguments checked, torch-free (as
``harness/run/grid_args.py`` holds the command line's grid flags): each bad one is a ValueError of
one line naming it, in ``compare``'s parameter order. The model and the tensors are checked by
``user_model.checked_inputs``, which needs torch."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Sequence

import numpy as np

from attackaudit.errors import InputError
from attackaudit.results.parameters import BY_API, BY_NAME, Parameter

NORMS: tuple[str, ...] = BY_NAME["norms"].choices or ()
#: compare()'s own switch, not a run parameter: the config's quiet, the other way round
PROGRESS = Parameter("progress", bool, True, api="progress")


def checked_scalars(n: int, *, samples: object, budget: object, seed: object, batch_size: object, workers: object,
                    steps_scale: object, timeout_s: object, targeted: object, metamorphic: object,
                    progress: object) -> tuple[int, int]:
    """(samples, workers) with their defaults filled in (all ``n`` inputs; up to 2 workers), or
    ValueError naming the first argument that is wrong, in ``compare``'s parameter order. The
    rules are the parameter table's (harness/results/parameters.py)."""
    if samples is None:
        samples = n  # more than n: all n, with a note (data.samples_note, the run's rule)
    workers = min(2, os.cpu_count() or 1) if workers is None else workers
    for name, value in (("samples", samples), ("budget", budget), ("seed", seed), ("batch_size", batch_size),
                        ("workers", workers), ("steps_scale", steps_scale), ("timeout_s", timeout_s),
                        ("targeted", targeted), ("metamorphic", metamorphic), ("progress", progress)):
        check(name, value)
    return samples, workers  # type: ignore[return-value]


def check(name: str, value: object) -> None:
    """InputError (a ValueError) naming the ``compare()`` keyword ``name`` when ``value`` breaks
    its row of the parameter table: ``samples must be an integer ≥ 1, got 0``."""
    problem = (PROGRESS if name == "progress" else BY_API[name]).problem(value, "api")
    if problem:
        raise InputError(problem, name)


def filters(**filters: str | Sequence[str] | None) -> dict[str, list[str] | None]:
    """Each filter (families, norms, libraries, attacks) as a list of names (None: all); ValueError
    for a malformed filter or an unknown norm."""
    names = {name: names_of(name, value) for name, value in filters.items()}
    if names["norms"]:
        check("norms", names["norms"])
    if names["norms"]:  # "Linf" is linf, as families="PGD" is pgd (the runner matches names in any case)
        names["norms"] = [v.lower() for v in names["norms"]]
    return names


def plugin_paths(plugins: str | os.PathLike | Sequence[str | os.PathLike]) -> list[str]:
    """The plugin files as absolute paths; one path alone is one file. ValueError for a non-file."""
    if isinstance(plugins, (str, os.PathLike)):  # one file
        plugins = [plugins]
    plugin_paths = [str(Path(p).resolve()) for p in plugins]
    for path in plugin_paths:
        if not Path(path).is_file():
            raise ValueError(f"plugins: {path} is not a file; pass .py files that define specs()")
    return plugin_paths


def run_dir_of(out: str | os.PathLike | None) -> Path:
    """``out`` created (None: a new temporary directory); ValueError when it cannot be."""
    run_dir = Path(out) if out is not None else Path(tempfile.mkdtemp(prefix="attackaudit-"))
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ValueError(f"out: cannot create {run_dir} ({exc.strerror or exc})") from None
    return run_dir


def check_int(name: str, value: object, low: int, high: int | None = None, what_high: str = "") -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low or (
            high is not None and value > high):
        bound = f"between {low} and {what_high or high}" if high is not None else f"≥ {low}"
        raise ValueError(f"{name} must be an integer {bound}, got {value!r}")


def names_of(name: str, value: str | Sequence[str] | None) -> list[str] | None:
    """A filter as a list of names; one string is one name."""
    if value is None:
        return None
    values = [value] if isinstance(value, str) else list(value) if isinstance(value, (list, tuple)) else None
    if values is None or not values or not all(isinstance(v, str) and v for v in values):
        raise ValueError(f"{name} must be a name or a non-empty list of names, got {value!r}")
    return values
