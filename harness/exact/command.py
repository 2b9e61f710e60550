"""``attackaudit exact``: exact minimal L∞ / L1 / L0 / L2 distances of a zoo model, stored beside a run.

Writes ``OUT/exact/<model>__<norm>.parquet`` (atomically: temporary file, then ``os.replace``),
one row per sample of the same hashed subset a run with the same ``--samples``/``--seed`` uses.
When OUT is a run directory its own subset (samples, seed, dataset from its manifest) is used by
default, and a ``--samples``/``--seed``/``--dataset`` that differs from it is refused.
The ``adversarial`` column holds the verified adversarial input (float64, flattened C·H·W) so it
can be re-checked on the model; it is empty where none was found.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from attackaudit.exact.cache import EXACT_COLUMNS, write_atomic  # noqa: F401  (EXACT_COLUMNS: the table's columns)
from attackaudit.errors import InputError
from attackaudit.results.schema import Twin, as_twin


def exact_path(out: Path, model: str, norm: str) -> Path:
    safe = "".join(ch if ch.isalnum() or ch in "-_.~" else "-" for ch in model)
    return Path(out) / "exact" / f"{safe}__{norm}.parquet"


def run_exact(model: Twin | str, norm: str, samples: int, seed: int, out: Path, time_limit: float,
              dataset: str = "digits", *, margin: float = 1e-4, progress=None, use_cache: bool = True) -> pd.DataFrame:
    """Solve every sample of the run's subset; returns the rows it wrote (EXACT_COLUMNS).

    ``time_limit`` is per sample (seconds). ``margin``: an adversarial must beat the label's logit
    by this much (in float64; default 1e-4 so the float32 model flips too). ``flips_float32`` says whether the float32 model — what attacks
    and the tracker see — also misclassifies the stored adversarial: with a 1e-6 margin float32
    rounding of the logits (~1e-6) undoes about a third of them on digits-mlp; a larger margin
    (1e-4) fixes that at a distance cost of order margin/‖∇logits‖. ``progress``: optional
    callable(row dict) after each sample. Samples solved before (the shipped tables, the cache:
    ``exact.cache``) are read, not solved again, unless ``use_cache`` is False. Raises
    ValueError/KeyError for an unknown model, dataset or norm and ``UnsupportedLayer`` for a
    model the MILP cannot encode.
    """
    from attackaudit.sources.subset import load_subset
    from attackaudit.exact.cache import solve_subset
    from attackaudit.exact.solver import NORMS

    if norm not in NORMS:
        raise InputError(f"--norm {norm!r}: exact distances exist for {', '.join(NORMS)} only", "norm")
    if not margin >= 0:
        raise InputError(f"--margin must be ≥ 0, got {margin}", "margin")
    if time_limit <= 0:
        raise InputError(f"--time-limit must be positive, got {time_limit}", "time_limit")
    subset = load_subset(dataset, samples, seed)
    table, _ = solve_subset(model, norm, subset, time_limit, margin=margin, use_cache=use_cache, progress=progress)
    write_atomic(table, exact_path(out, as_twin(model).name, norm))
    return table


def run_subset(out: Path, samples: int | None, seed: int | None, dataset: str | None) -> tuple[int, int, str]:
    """(samples, seed, dataset) to solve: the run's own in a run directory ``out`` (a given value
    must match it), else the given ones (``samples`` required; seed 0 and digits by default).
    Raises ValueError with one line on a mismatch or when the run's subset cannot be drawn again."""
    from attackaudit.results.store import read_manifest

    manifest = read_manifest(Path(out)) if Path(out).is_dir() else None
    if manifest is None:
        if samples is None:
            raise InputError(f"--samples is required: {out} holds no run (no manifest.json) to take the subset from")
        return samples, 0 if seed is None else seed, dataset or "digits"
    config = manifest.get("config", {})
    run = (config.get("samples"), manifest.get("seed", config.get("seed")), manifest.get("dataset", config.get("dataset")))
    for flag, given, theirs in zip(("--samples", "--seed", "--dataset"), (samples, seed, dataset), run):
        if given is not None and given != theirs:
            raise InputError(f"{flag} {given} differs from the run in {out} ({run[0]} samples, seed {run[1]}, "
                             f"dataset {run[2]}); omit {flag} to solve the run's own subset, or use another --out")
    if None in run:
        raise InputError(f"{out}/manifest.json does not record samples, seed and dataset; give them and another --out")
    from attackaudit.sources.subset import load_subset

    drawn = load_subset(run[2], int(run[0]), int(run[1])).hash
    if manifest.get("subset_hash") and drawn != manifest["subset_hash"]:
        raise InputError(f"the run in {out} attacked subset {manifest['subset_hash'][:12]}, but {run[0]} samples "
                         f"with seed {run[1]} now draw {drawn[:12]} (made by an older version?): rerun it first")
    return int(run[0]), int(run[1]), str(run[2])
