"""Speed-up of the Dask executor: the demo grid with 1 and with 2 workers (a LocalCluster).

    python benchmarks/scaling.py [--workers 1 2] [--libraries adv_lib ...] [--samples 16]

Prints the wall time per worker count and the speed-up over one worker. Each run writes to a
fresh temporary directory, so nothing is resumed.
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from attackaudit.config import resolve
from attackaudit.runner import run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", nargs="+", type=int, default=[1, 2])
    parser.add_argument("--libraries", nargs="+", default=None, help="default: all five")
    parser.add_argument("--models", nargs="+", default=None, help="default: the demo's")
    parser.add_argument("--samples", type=int, default=None, help="default: the demo's")
    args = parser.parse_args()
    flags = {"preset": "demo", "executor": "dask", "quiet": True, "libraries": args.libraries,
             "models": args.models, "samples": args.samples}
    times: dict[int, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for k in args.workers:
            config = resolve(None, {**flags, "workers": k, "out": str(Path(tmp) / f"w{k}")})
            start = time.perf_counter()
            summary = run(config)
            times[k] = time.perf_counter() - start
            print(f"{k} worker(s): {times[k]:7.1f} s  ({summary.line()})", flush=True)
    base = times[min(times)]
    for k, t in sorted(times.items()):
        print(f"speed-up with {k} worker(s): {base / t:.2f}×")


if __name__ == "__main__":
    main()
