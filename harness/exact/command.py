"""``attackaudit exact``: exact minimal L∞ / L1 / L0 / L2 distances of a zoo model, stored beside a run.

Writes ``OUT/exact/<model>__<norm>.parquet`` (atomically: temporary file, then ``os.replace``),
one row per sample of the same hashed subset a run with the same ``--samples``/``--seed`` uses.
When OUT is a run directory its own subset (samples, seed, dataset from its manifest) is used by
default, and a ``--samples``/``--seed``/``--dataset`` that differs from it is refused.
The ``adversarial`` column holds the verified adversarial input (float64, flattened C·H·W) so it
can be re-checked on the model; it is empty where none was found.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

EXACT_COLUMNS = ["model", "dataset", "subset_hash", "sample", "label", "norm", "exact_distance",
                 "lower_bound", "upper_bound", "status", "solve_s", "adversarial_class", "adversarial",
                 "flips_float32", "margin", "error"]


def exact_path(out: Path, model: str, norm: str) -> Path:
    safe = "".join(ch if ch.isalnum() or ch in "-_.~" else "-" for ch in model)
    return Path(out) / "exact" / f"{safe}__{norm}.parquet"


def _candidates(dataset: str, label: int) -> np.ndarray | None:
    """Training points of other classes (N×D): misclassified ones seed the upper bound."""
    if dataset != "digits":
        return None
    from attackaudit.sources.data import digits

    x, y = digits("train")
    return x[y != label].reshape(int((y != label).sum()), -1).double().numpy()


def run_exact(model: str, norm: str, samples: int, seed: int, out: Path, time_limit: float,
              dataset: str = "digits", *, margin: float = 1e-4, progress=None) -> pd.DataFrame:
    """Solve every sample of the run's subset; returns the rows it wrote (EXACT_COLUMNS).

    ``time_limit`` is per sample (seconds). ``margin``: an adversarial must beat the label's logit
    by this much (in float64; default 1e-4 so the float32 model flips too). ``flips_float32`` says whether the float32 model — what attacks
    and the tracker see — also misclassifies the stored adversarial: with a 1e-6 margin float32
    rounding of the logits (~1e-6) undoes about a third of them on digits-mlp; a larger margin
    (1e-4) fixes that at a distance cost of order margin/‖∇logits‖. ``progress``: optional
    callable(row dict) after each sample. Raises ValueError/KeyError for an unknown model, dataset or norm and
    ``UnsupportedLayer`` for a model the MILP cannot encode.
    """
    from attackaudit.sources.data import load_subset
    from attackaudit.exact.encoding import check_encoding, encode_sequential
    from attackaudit.exact.solver import NORMS, minimal_distance

    if norm not in NORMS:
        raise ValueError(f"--norm {norm!r}: exact distances exist for {', '.join(NORMS)} only")
    if not margin >= 0:
        raise ValueError(f"--margin must be ≥ 0, got {margin}")
    if time_limit <= 0:
        raise ValueError(f"--time-limit must be positive, got {time_limit}")
    net = _load(model, dataset)
    subset = load_subset(dataset, samples, seed)
    layers = encode_sequential(net, tuple(subset.inputs.shape[1:]))
    check_encoding(net, layers, subset.inputs)
    rows = []
    for i in range(len(subset)):
        label = int(subset.labels[i])
        x0 = subset.inputs[i].reshape(-1).double().numpy()
        start = time.perf_counter()
        try:
            r = minimal_distance(layers, x0, label, norm, time_limit=time_limit, margin=margin,
                                 candidates=_candidates(dataset, label))
            row = {"exact_distance": r.distance, "lower_bound": r.lower_bound, "upper_bound": r.upper_bound,
                   "status": r.status, "solve_s": r.solve_s, "adversarial_class": r.adversarial_class,
                   "adversarial": None if r.adversarial is None else r.adversarial.tolist(), "error": r.error}
        except Exception as exc:  # one sample's failure is data, not the end of the command
            row = {"exact_distance": np.nan, "lower_bound": np.nan, "upper_bound": np.nan, "status": "error",
                   "solve_s": time.perf_counter() - start, "adversarial_class": -1, "adversarial": None,
                   "error": f"{type(exc).__name__}: {exc}".splitlines()[0][:500]}
        row["flips_float32"] = _flips_float32(net, row["adversarial"], subset.inputs.shape[1:], label)
        row |= {"margin": margin, "model": model, "dataset": dataset, "subset_hash": subset.hash,
                "sample": int(subset.indices[i]), "label": label, "norm": norm}
        rows.append(row)
        if progress is not None:
            progress(row)
    table = pd.DataFrame(rows, columns=EXACT_COLUMNS)
    _write_atomic(table, exact_path(out, model, norm))
    return table


def _load(model: str, dataset: str):
    """A zoo model by name; other model sources (``module:file.py:fn`` …) through
    ``attackaudit.sources.models`` when that module is present."""
    from attackaudit.sources.zoo import SHIFT_SUFFIX, ZOO, load_model

    if model.removesuffix(SHIFT_SUFFIX) in ZOO:
        return load_model(model)
    try:
        from attackaudit.sources.models import load_model_source
    except ImportError:
        return load_model(model)  # its KeyError names the zoo's models
    return load_model_source(model, dataset=dataset)


def _flips_float32(net, adversarial: list | None, shape, label: int) -> bool:
    if adversarial is None:
        return False
    import torch

    from attackaudit.measure.success import is_success

    with torch.no_grad():
        x = torch.tensor(adversarial, dtype=torch.float32).reshape(1, *shape)
        return bool(is_success(net(x), torch.tensor([label]))[0])


def _write_atomic(table: pd.DataFrame, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        table.to_parquet(tmp, index=False)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def run_subset(out: Path, samples: int | None, seed: int | None, dataset: str | None) -> tuple[int, int, str]:
    """(samples, seed, dataset) to solve: the run's own in a run directory ``out`` (a given value
    must match it), else the given ones (``samples`` required; seed 0 and digits by default).
    Raises ValueError with one line on a mismatch or when the run's subset cannot be drawn again."""
    from attackaudit.results.store import read_manifest

    manifest = read_manifest(Path(out)) if Path(out).is_dir() else None
    if manifest is None:
        if samples is None:
            raise ValueError(f"--samples is required: {out} holds no run (no manifest.json) to take the subset from")
        return samples, 0 if seed is None else seed, dataset or "digits"
    config = manifest.get("config", {})
    run = (config.get("samples"), manifest.get("seed", config.get("seed")), manifest.get("dataset", config.get("dataset")))
    for flag, given, theirs in zip(("--samples", "--seed", "--dataset"), (samples, seed, dataset), run):
        if given is not None and given != theirs:
            raise ValueError(f"{flag} {given} differs from the run in {out} ({run[0]} samples, seed {run[1]}, "
                             f"dataset {run[2]}); omit {flag} to solve the run's own subset, or use another --out")
    if None in run:
        raise ValueError(f"{out}/manifest.json does not record samples, seed and dataset; give them and another --out")
    from attackaudit.sources.data import load_subset

    drawn = load_subset(run[2], int(run[0]), int(run[1])).hash
    if manifest.get("subset_hash") and drawn != manifest["subset_hash"]:
        raise ValueError(f"the run in {out} attacked subset {manifest['subset_hash'][:12]}, but {run[0]} samples "
                         f"with seed {run[1]} now draw {drawn[:12]} (made by an older version?): rerun it first")
    return int(run[0]), int(run[1]), str(run[2])


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True, help="zoo model (ReLU MLP or small CNN)")
    parser.add_argument("--norm", required=True, choices=["linf", "l1", "l0", "l2"],
                        help="l0: fewest moved pixels; l2: a MIQP, solved by SCIP (pyscipopt)")
    parser.add_argument("--samples", type=int, default=None,
                        help="subset size, as in `run` (default: the run's own in OUT)")
    parser.add_argument("--out", type=Path, required=True, help="run directory; writes OUT/exact/")
    parser.add_argument("--seed", type=int, default=None, help="subset seed, as in `run` (default: the run's, else 0)")
    parser.add_argument("--time-limit", type=float, default=60.0, help="seconds per sample (default 60)")
    parser.add_argument("--margin", type=float, default=1e-4,
                        help="logit margin an adversarial must reach, in float64 (default 1e-4: "
                             "float32 rounding of the logits undoes a 1e-6 margin)")
    parser.add_argument("--dataset", default=None, help="dataset source (default: the run's, else digits)")


def main(args: argparse.Namespace) -> int:
    """Exit 0 when done (time-limited samples are results, not failures), 2 on bad input."""
    from attackaudit.exact.encoding import UnsupportedLayer

    def report(row: dict) -> None:
        if not getattr(args, "quiet", False):
            print(f"sample {row['sample']}: {row['status']} distance {row['exact_distance']:.6g} "
                  f"[{row['lower_bound']:.6g}, {row['upper_bound']:.6g}] in {row['solve_s']:.1f}s",
                  file=sys.stderr)

    try:
        samples, seed, dataset = run_subset(args.out, args.samples, args.seed, args.dataset)
        table = run_exact(args.model, args.norm, samples, seed, args.out, args.time_limit,
                          dataset=dataset, margin=args.margin, progress=report)
    except (KeyError, ValueError, UnsupportedLayer, FileNotFoundError) as exc:
        print(f"attackaudit exact: {exc}".splitlines()[0], file=sys.stderr)
        return 2
    counts = table["status"].value_counts().to_dict()
    print(f"{exact_path(args.out, args.model, args.norm)}: {len(table)} samples, "
          + ", ".join(f"{k} {v}" for k, v in counts.items())
          + f"; median solve {table['solve_s'].median():.2f}s")
    return 0
