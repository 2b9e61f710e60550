"""How each spec's job time grows with the images: every spec of a grid at 16 and at 128 images.

    python benchmarks/batch_cost.py [--libraries ...] [--norms l2] [--families apgd cw ddn]
                                    [--model digits-mlp] [--small 16] [--large 128] [--steps-scale 0.5]

Each job runs through the harness's own job path (``attackaudit.run.worker.execute_job``, in this
process, under a worker's settings: one torch thread), so what is timed is what a run runs: the
tracker, the minimal-ε search, the re-checks. Both sizes of one spec run back to back in one
process, after an untimed job on 2 images that takes the one-off costs (imports, numba's compile of
foolbox's Brendel-Bethge), so the ratio (what to compare) sees the same machine load. Printed per spec: the time at
each size, their ratio, the calls made to the library at each size (the minimal-ε search's calls
for a fixed-ε spec, one per batch for a minimal one), and ``per-image``: whether the time grows
with the images while the calls do not (ratio above ``PER_IMAGE_RATIO`` with no more calls): the
library loops over the images itself, which no change of the harness can batch. For a fixed-ε
spec that takes one ε per call, ``floor``: the fewest calls any search of its samples on the shared
grid could make at the search's precision (``minimal.calls_floor`` of the smallest successful ε
each sample got: the distinct ends of their final cells). Last come the specs over the issue's bar
(``TARGET_RATIO``), by cause: more calls (one ε per call: their final brackets need about one ε
per image, and the floor says how far any search is held to that), or more time in one call.
"""
from __future__ import annotations

import argparse
import tempfile
import time
from dataclasses import dataclass

import pandas as pd
import torch

import attackaudit.measure.minimal as minimal
import attackaudit.run.job as job_module
from attackaudit.adapters import AttackKind, load_library
from attackaudit.adapters import BUILTIN_LIBRARIES
from attackaudit.results.schema import Twin
from attackaudit.run.job import Job
from attackaudit.run.worker import execute_job, resolve_spec, worker_settings

#: a time ratio above this at 8x the images, with no more calls, says the library loops per image
PER_IMAGE_RATIO = 4.0
#: the issue's bar: a batching spec's job at 128 images costs at most this times its job at 16
TARGET_RATIO = 2.5


@dataclass
class Timed:
    """One job: wall seconds (the job's own ``wall_s``), calls to the library, status, and for a
    spec that takes one ε per call the fewest calls a search could make (``minimal.calls_floor``; 0
    for the others)."""

    seconds: float
    calls: int
    status: str
    floor: int = 0


def _counting_search(counter: list[int]):
    """``minimal_search`` with its ``attack`` counted into ``counter[0]``."""
    def search(attack, *args, **kwargs):
        def counted(*a, **k):
            counter[0] += 1
            return attack(*a, **k)
        return minimal.minimal_search(counted, *args, **kwargs)
    return search


def run_job(spec_key: str, model: str, samples: int, steps_scale: float, run_dir: str) -> Timed:
    """One job of ``spec_key`` on ``samples`` images, through ``execute_job``."""
    job = Job(run="batch-cost", twin=Twin(model), spec_key=spec_key, samples=samples, steps_scale=steps_scale)
    spec, _, _ = resolve_spec(job)
    counter = [0]
    job_module.minimal_search = _counting_search(counter)
    try:
        start = time.perf_counter()
        result = execute_job(job, run_dir)
        wall = time.perf_counter() - start
    finally:
        job_module.minimal_search = minimal.minimal_search
    rows = pd.read_parquet(result["path"]) if result.get("path") else pd.DataFrame()
    seconds = float(rows["wall_s"].iloc[0]) if len(rows) else wall
    fixed = spec is not None and spec.kind is AttackKind.FIXED
    calls = counter[0] if fixed else 1
    floor = 0
    if fixed and not spec.per_sample_eps and "eps_success" in rows:
        success = torch.tensor(rows["eps_success"].to_numpy(dtype="float64"))
        floor = minimal.calls_floor(success, minimal.EPS_START[spec.norm])
    return Timed(seconds, calls, result["status"], floor)


def spec_keys(libraries: list[str], norms: list[str] | None, families: list[str] | None,
              kinds: list[str] | None) -> list[str]:
    """The keys of the grid's specs (untargeted runs: a targeted-only spec is left out)."""
    keys = []
    for library in libraries:
        entry = load_library(library)
        if not entry.available:
            print(f"# {library}: unavailable ({entry.reason})")
            continue
        for spec in entry.specs:
            if spec.targeted_only or (norms and spec.norm not in norms) or (families and spec.family not in families):
                continue
            if kinds and spec.kind.value not in kinds:
                continue
            keys.append(spec.key)
    return keys


def _markdown(frame: pd.DataFrame) -> str:
    """``frame`` as a Markdown table (pandas' own needs ``tabulate``, which the project does not install)."""
    lines = ["| " + " | ".join(map(str, frame.columns)) + " |", "|" + "---|" * len(frame.columns)]
    lines += ["| " + " | ".join(map(str, row)) + " |" for row in frame.itertuples(index=False)]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--libraries", nargs="+", default=list(BUILTIN_LIBRARIES))
    parser.add_argument("--norms", nargs="+", default=None, help="default: all")
    parser.add_argument("--families", nargs="+", default=None, help="default: all")
    parser.add_argument("--kinds", nargs="+", default=None, choices=["minimal", "fixed"], help="default: both")
    parser.add_argument("--specs", nargs="+", default=None, help="these spec keys only")
    parser.add_argument("--model", default="digits-mlp")
    parser.add_argument("--small", type=int, default=16)
    parser.add_argument("--large", type=int, default=128)
    parser.add_argument("--steps-scale", type=float, default=0.5, help="the demo's")
    parser.add_argument("--warm-up", type=int, default=2, help="images of an untimed job first (0: none)")
    parser.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    args = parser.parse_args()
    keys = args.specs or spec_keys(args.libraries, args.norms, args.families, args.kinds)
    worker_settings(1)
    table = []
    with tempfile.TemporaryDirectory() as tmp:
        for key in keys:
            if args.warm_up:  # one-off costs (imports, numba's compile of Brendel-Bethge) land here
                run_job(key, args.model, args.warm_up, args.steps_scale, tmp)
            small = run_job(key, args.model, args.small, args.steps_scale, tmp)
            large = run_job(key, args.model, args.large, args.steps_scale, tmp)
            ratio = large.seconds / max(small.seconds, 1e-9)
            per_image = ratio > PER_IMAGE_RATIO and large.calls <= small.calls
            table.append({"spec": key, f"s@{args.small}": round(small.seconds, 2),
                          f"s@{args.large}": round(large.seconds, 2), "ratio": round(ratio, 2),
                          f"calls@{args.small}": small.calls, f"calls@{args.large}": large.calls,
                          f"floor@{args.small}": small.floor or "", f"floor@{args.large}": large.floor or "",
                          "per_image": per_image, "status": f"{small.status}/{large.status}"})
            print(" ".join(f"{k}={v}" for k, v in table[-1].items()), flush=True)
    frame = pd.DataFrame(table)
    print(_markdown(frame) if args.markdown else frame.to_string(index=False))
    small_sum, large_sum = frame[f"s@{args.small}"].sum(), frame[f"s@{args.large}"].sum()
    print(f"summed: {small_sum:.1f} s -> {large_sum:.1f} s ({large_sum / max(small_sum, 1e-9):.2f}x)")
    over = frame[(frame["ratio"] > TARGET_RATIO) & ~frame["per_image"]]
    more_calls = over[f"calls@{args.large}"] > over[f"calls@{args.small}"]
    print(f"over {TARGET_RATIO}x with more calls (one ε per call): {', '.join(over[more_calls]['spec']) or 'none'}")
    for _, row in over[more_calls].iterrows():
        small_floor, large_floor = row[f"floor@{args.small}"], row[f"floor@{args.large}"]
        if small_floor and large_floor:
            print(f"  {row['spec']}: calls {row[f'calls@{args.small}']} -> {row[f'calls@{args.large}']}, "
                  f"floor {small_floor} -> {large_floor} ({large_floor / small_floor:.2f}x)")
    print(f"over {TARGET_RATIO}x within one call: {', '.join(over[~more_calls]['spec']) or 'none'}")
    looped = frame[frame["per_image"]]
    for _, row in looped.iterrows():
        print(f"loops per image in the library: {row['spec']} ({row[f's@{args.large}']} s at {args.large} images, "
              f"{row['ratio']}x)")


if __name__ == "__main__":
    main()
