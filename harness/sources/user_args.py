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

NORMS = ("l0", "l1", "l2", "linf")


def checked_scalars(n: int, *, samples: object, budget: object, seed: object, batch_size: object, workers: object,
                    steps_scale: object, timeout_s: object, targeted: object, metamorphic: object,
                    progress: object) -> tuple[int, int]:
    """(samples, workers) with their defaults filled in (all ``n`` inputs; up to 2 workers), or
    ValueError naming the first argument that is wrong, in ``compare``'s parameter order."""
    if samples is None:
        samples = n
    check_int("samples", samples, 1)  # more than n: all n, with a note (data.samples_note, the run's rule)
    check_int("budget", budget, 1)
    check_int("seed", seed, 0)
    check_int("batch_size", batch_size, 0)
    workers = min(2, os.cpu_count() or 1) if workers is None else workers
    check_int("workers", workers, 0)
    for name, value in (("steps_scale", steps_scale), ("timeout_s", timeout_s)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise ValueError(f"{name} must be a positive number, got {value!r}")
    for name, value in (("targeted", targeted), ("metamorphic", metamorphic), ("progress", progress)):
        if not isinstance(value, bool):
            raise ValueError(f"{name} must be True or False, got {value!r}")
    return samples, workers


def filters(**filters: str | Sequence[str] | None) -> dict[str, list[str] | None]:
    """Each filter (families, norms, libraries, attacks) as a list of names (None: all); ValueError
    for a malformed filter or an unknown norm."""
    names = {name: names_of(name, value) for name, value in filters.items()}
    if names["norms"] and (bad := [v for v in names["norms"] if v.lower() not in NORMS]):
        raise ValueError(f"norms: {bad[0]!r} is not one of {', '.join(NORMS)} (any case)")
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
