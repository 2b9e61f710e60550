"""Per-job time of ``attackaudit.compare(..., workers=0)`` (the jobs in the calling process)
against isolated worker processes, on the same grid with the same thread settings.

Issue 39 measured 796 s in-process against 107 s isolated on one machine (per-job wall time
5-10x). A job's time is the attack's wall time the rows record (``wall_s``: the attack through its
tracker, model loading excluded). The two modes alternate, ``--reps`` times each into fresh run
directories (this machine is shared: a slow minute must not fall on one mode only), and the script
prints, per mode, the median over repetitions of the summed job time, and the ratio in-process /
isolated of the per-job medians (1.0: the same).

    python benchmarks/in_process.py [--reps 3] [--caller-threads M] [--samples 16]

Both modes run under the same settings: one worker (``workers=1``) gets the CPU count as its torch
threads (``LocalExecutor``), and so does the in-process run (``InProcessExecutor``).
``--caller-threads``: torch threads the calling process has before ``compare`` (a notebook that
trained with another setting); the in-process run uses the worker's setting whatever the caller's,
and gives the caller's back.
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import torch
from torch import nn

import attackaudit
from attackaudit.run.executors import InProcessExecutor, LocalExecutor
from attackaudit.sources.subset import digits
from attackaudit.sources.zoo import load_model

#: minimal and fixed-ε attacks of two libraries, L2 and L∞: 12 jobs of a few seconds each
GRID = dict(families=["pgd", "fmn", "ddn", "apgd", "fgm"], norms=["l2", "linf"], libraries=["adv_lib", "torchattacks"],
            budget=1000, steps_scale=0.5, progress=False)


class UsersMLP(nn.Module):
    """A user's model as issue 39 had it: the digits MLP with dropout, of a class of its own."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = load_model("digits-mlp")
        self.drop = nn.Dropout(0.2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(self.drop(x))


def job_times(workers: int, samples: int, root: Path) -> dict[str, float]:
    """{"implementation norm": attack wall time in s} of one compare() call into a fresh directory
    (job ids name the run directory's model file, so they differ between calls)."""
    x, y = digits("test")
    out = Path(tempfile.mkdtemp(prefix=f"w{workers}-", dir=root))
    result = attackaudit.compare(UsersMLP().eval(), x, y, samples=samples, workers=workers, out=out, **GRID)
    rows = result.rows
    return {f"{impl} {norm}": float(v) for (impl, norm), v in rows.groupby(["implementation", "norm"])["wall_s"].first().items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--samples", type=int, default=16)
    parser.add_argument("--caller-threads", type=int, default=0, help="0: leave the caller's setting")
    args = parser.parse_args()
    threads = LocalExecutor(1).threads
    assert InProcessExecutor().threads == threads  # the same setting in both modes
    if args.caller_threads:
        torch.set_num_threads(args.caller_threads)
    times: dict[str, list[dict[str, float]]] = {"isolated": [], "in-process": []}
    with tempfile.TemporaryDirectory(prefix="attackaudit-inproc-") as tmp:
        for rep in range(args.reps):
            for mode, workers in (("isolated", 1), ("in-process", 0)) if rep % 2 == 0 else (
                    ("in-process", 0), ("isolated", 1)):
                start = time.perf_counter()
                times[mode].append(job_times(workers, args.samples, Path(tmp)))
                print(f"rep {rep + 1} {mode:10s}: {len(times[mode][-1])} jobs, attack time "
                      f"{sum(times[mode][-1].values()):.1f} s, call {time.perf_counter() - start:.1f} s", flush=True)
    jobs = sorted(set.intersection(*(set(t) for runs in times.values() for t in runs)))
    per_job = {mode: {j: statistics.median(t[j] for t in runs) for j in jobs} for mode, runs in times.items()}
    ratios = [per_job["in-process"][j] / per_job["isolated"][j] for j in jobs if per_job["isolated"][j] > 0]
    total = {mode: statistics.median(sum(t[j] for j in jobs) for t in runs) for mode, runs in times.items()}
    print(f"threads {threads} (caller {torch.get_num_threads()} after the runs), {os.cpu_count()} CPUs, {len(jobs)} jobs, "
          f"{args.reps} repetitions per mode")
    print(f"summed attack time: isolated {total['isolated']:.1f} s, in-process {total['in-process']:.1f} s "
          f"(ratio {total['in-process'] / total['isolated']:.2f})")
    print(f"per-job ratio in-process / isolated: median {statistics.median(ratios):.2f}, "
          f"range {min(ratios):.2f}-{max(ratios):.2f}")


if __name__ == "__main__":
    main()
