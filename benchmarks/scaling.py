"""Speed-up with 1 and 2 workers: the same grid on each executor, and the machine's own ceiling.

    python benchmarks/scaling.py [--executors local dask] [--workers 1 2]
                                 [--libraries adv_lib cleverhans] [--models ...] [--samples 16]

The default grid (adv-lib and cleverhans, 38 specs, on three zoo models, the demo's 16 samples
and step scale: 114 jobs of about a second each) takes a few minutes; ``--libraries`` and
``--models`` widen it (``--models`` with the demo's four models and all five libraries is the
whole demo's grid, about 5 minutes on two cores). Every run writes to a fresh temporary
directory, so nothing is resumed.

Before the grids it measures the **ceiling**: one fixed CPU-bound torch workload (forwards and
backwards of the digits CNN, one thread) in one process, then in two processes at once. On a
machine whose two cores share their execution units the two processes each run slower, and no
executor can beat that ratio. The speed-up it prints for each executor is to be read against it,
together with the one-off cost each extra worker pays (its imports, printed as ``start-up``).
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import tempfile
import time
from pathlib import Path

from attackaudit.run.config import resolve
from attackaudit.run.runner import run

DEFAULT_LIBRARIES = ["adv_lib", "cleverhans"]
DEFAULT_MODELS = ["digits-cnn", "digits-mlp", "digits-cnn-at-linf"]


def _workload(seconds_out, steps: int) -> None:
    import torch

    from attackaudit.sources.zoo import load_model

    torch.set_num_threads(1)
    model = load_model("digits-cnn").eval()
    x = torch.rand(16, 1, 8, 8, requires_grad=True)
    start = time.perf_counter()
    for _ in range(steps):
        model(x).sum().backward()
    seconds_out.put(time.perf_counter() - start)


def ceiling(steps: int = 4000) -> float:
    """Throughput of two processes over one on the same CPU-bound torch loop (2.0 = ideal)."""
    ctx = mp.get_context("spawn")

    def timed(n: int) -> float:
        out = ctx.Queue()
        procs = [ctx.Process(target=_workload, args=(out, steps)) for _ in range(n)]
        for p in procs:
            p.start()
        times = [out.get() for _ in procs]
        for p in procs:
            p.join()
        return max(times)

    one = timed(1)
    two = timed(2)
    return 2 * one / two


def startup_seconds() -> float:
    """Wall time for a fresh interpreter to import what a worker imports before its first job."""
    import subprocess
    import sys

    code = ("import time; t = time.perf_counter(); import attackaudit.run.worker, torch, adv_lib.attacks, "
            "cleverhans.torch.attacks.projected_gradient_descent; print(time.perf_counter() - t)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--executors", nargs="+", default=["local", "dask"], choices=["local", "dask"])
    parser.add_argument("--workers", nargs="+", type=int, default=[1, 2])
    parser.add_argument("--libraries", nargs="+", default=DEFAULT_LIBRARIES)
    parser.add_argument("--models", nargs="+", default=DEFAULT_MODELS)
    parser.add_argument("--samples", type=int, default=None, help="default: the demo's")
    parser.add_argument("--no-ceiling", action="store_true", help="skip the machine's own ceiling")
    args = parser.parse_args()
    if not args.no_ceiling:
        print(f"ceiling: two processes do {ceiling():.2f}× the work of one on this machine", flush=True)
        print(f"start-up: a worker's imports take {startup_seconds():.1f} s", flush=True)
    for executor in args.executors:
        flags = {"preset": "demo", "executor": executor, "quiet": True, "libraries": args.libraries,
                 "models": args.models, "samples": args.samples}
        times: dict[int, float] = {}
        with tempfile.TemporaryDirectory() as tmp:
            for k in args.workers:
                config = resolve(None, {**flags, "workers": k, "out": str(Path(tmp) / f"w{k}")})
                start = time.perf_counter()
                summary = run(config)
                times[k] = time.perf_counter() - start
                print(f"{executor}, {k} worker(s): {times[k]:7.1f} s  ({summary.line()})", flush=True)
        base = times[min(times)]
        for k, t in sorted(times.items()):
            print(f"{executor}: speed-up with {k} worker(s): {base / t:.2f}×", flush=True)


if __name__ == "__main__":
    main()
