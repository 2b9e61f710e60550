"""The exact minima shipped with the package (``shipped/<model>__<norm>.parquet``): how they are
made and what they cost.

``python -m attackaudit.exact.ship --model digits-mlp --norm l2 --samples 64 --time-limit 600``
solves seed 0's first ``--samples`` samples (through the cache, so an interrupted build resumes
and a longer one extends a shorter one) and writes the shipped table: every solved sample of
that prefix, in subset order, with the cache's columns (``cache.CACHE_COLUMNS``: the network's
hash, so that changed weights ignore the table). ``--timings`` prints the solve time per sample
(median, max) of every shipped table, the numbers docs/measurement.md states.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from attackaudit.exact.cache import CACHE_COLUMNS, SHIPPED, SOLVED, lookup, network_hash, solve_subset, write_atomic

#: the subsets shipped: seed 0's permutation of the digits test set (the default of `run`)
SEED = 0
DATASET = "digits"
MARGIN = 1e-4


def shipped_path(model: str, norm: str) -> Path:
    return SHIPPED / f"{model}__{norm}.parquet"


def export(model: str, norm: str, samples: int) -> pd.DataFrame:
    """Write the shipped table of ``model`` × ``norm`` from what the cache and the table shipped
    now hold for seed 0's first ``samples`` samples (the better row per sample: solved, then the
    longer time limit, then the cache's); returns it. Samples no one solved are
    absent; a time-limited one is kept with its bounds."""
    from attackaudit.exact.cache import load_network
    from attackaudit.exact.encoding import encode_sequential
    from attackaudit.sources.subset import load_subset

    subset = load_subset(DATASET, samples, SEED)
    net_hash = network_hash(encode_sequential(load_network(model, DATASET), tuple(subset.inputs.shape[1:])))
    known = lookup(net_hash, DATASET, norm, MARGIN, shipped_first=False)  # a new answer replaces a shipped one
    known = known.assign(_solved=known["status"].isin(SOLVED), _limit=known["time_limit"].astype(float))
    known = known.sort_values(["_solved", "_limit"], ascending=False, kind="stable").drop_duplicates(
        ["sample", "input_hash"])
    order = {int(s): k for k, s in enumerate(subset.indices)}
    table = known[known["sample"].astype(int).isin(order)].copy()
    table["_order"] = table["sample"].astype(int).map(order)
    table = table.sort_values("_order")[CACHE_COLUMNS].reset_index(drop=True)
    write_atomic(table, shipped_path(model, norm))
    return table


def timings() -> pd.DataFrame:
    """Per shipped table: samples, how many solved, and the solve time per sample (median, max;
    wall, and CPU where it was recorded), over the images not misclassified already."""
    rows = []
    for path in sorted(SHIPPED.glob("*.parquet")):
        t = pd.read_parquet(path)
        model, norm = path.stem.split("__")
        live = t[t["status"] != "clean_misclassified"]  # those cost nothing
        s, cpu = live["solve_s"].astype(float), live["cpu_s"].astype(float).dropna()
        rows.append({"model": model, "norm": norm, "samples": len(t), "optimal": int((t["status"] == "optimal").sum()),
                     "clean_misclassified": int((t["status"] == "clean_misclassified").sum()),
                     "time_limit": int((t["status"] == "time_limit").sum()),
                     "median_s": float(np.median(s)) if len(s) else np.nan, "max_s": float(s.max()) if len(s) else np.nan,
                     "cpu_samples": len(cpu), "median_cpu_s": float(np.median(cpu)) if len(cpu) else np.nan,
                     "max_cpu_s": float(cpu.max()) if len(cpu) else np.nan,
                     "limit_s": float(t["time_limit"].max()) if len(t) else np.nan})
    return pd.DataFrame(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m attackaudit.exact.ship", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", action="append", default=[])
    parser.add_argument("--norm", action="append", default=[])
    parser.add_argument("--samples", type=int, default=16)
    parser.add_argument("--time-limit", type=float, default=600.0)
    parser.add_argument("--timings", action="store_true", help="print the shipped tables' solve times and exit")
    args = parser.parse_args(argv)
    if args.timings:
        print(timings().to_string(index=False))
        return 0
    from attackaudit.sources.subset import load_subset

    subset = load_subset(DATASET, args.samples, SEED)
    for model in args.model:
        for norm in args.norm:
            def say(row: dict) -> None:
                print(f"{model} {norm} sample {row['sample']}: {row['status']} {row['exact_distance']:.6g} "
                      f"in {row['solve_s']:.1f}s", file=sys.stderr, flush=True)

            solve_subset(model, norm, subset, args.time_limit, margin=MARGIN, progress=say)
            print(f"{shipped_path(model, norm)}: {len(export(model, norm, args.samples))} samples")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
