"""Time `attackaudit report` on a synthetic run the size of the demo, without running the demo.

    python benchmarks/report_speed.py [--out DIR] [--samples 16] [--models M ...] [--profile N] [--keep]

Builds a run directory (jobs/*.parquet and manifest.json, the layout of harness/results/store.py) with
every built-in spec of the catalogue on ``--models`` (default: the seven models of the full demo,
fixed here rather than read from preset "demo" so that the measured size stays the 686-job demo
whatever the preset becomes), ``--samples`` samples each: 98 specs × 7 models × 16 samples ≈ 11000
rows. Distances are
drawn per (model, norm) from one seeded "true" distance per sample, scaled by a per-implementation
strength, with failures, a few crashed jobs and the logit-shift twin's copy of the CNN, so the
fidelity tables, flags and plots have the work of a real demo report. Then it times
``write_report`` (all three formats) in this process, prints the time per phase and the size of
every file written, and with ``--profile N`` the N most expensive functions (CPU time).
"""
from __future__ import annotations

import argparse
import cProfile
import pstats
import shutil
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from attackaudit.fidelity.synthetic import job_rows
from attackaudit.results.store import write_job, write_manifest
from attackaudit.run.config import RunConfig

#: median minimal distance per norm on the digits zoo (order of magnitude of a real demo)
SCALE = {"l0": 6.0, "l1": 3.0, "l2": 1.0, "linf": 0.12}

#: the full demo's models (686 jobs with the 98 specs), including both metamorphic twins
DEMO_MODELS = ("digits-mlp", "digits-mlp-tiny", "digits-cnn", "digits-cnn-at-linf", "digits-cnn-at-l2",
               "digits-cnn~shift", "digits-cnn~perm")


def build_run(out: Path, samples: int = 16, seed: int = 0, models: Sequence[str] = DEMO_MODELS) -> int:
    """Write a synthetic demo-sized run into ``out``; returns the number of rows."""
    from attackaudit.adapters import catalogue

    rng = np.random.default_rng(seed)
    specs = [s for e in catalogue(None) if e.available for s in e.specs]
    twins = RunConfig(models=list(models)).twins  # the models as the command line gives them, read once
    truth = {(m.base_model, n): rng.lognormal(0.0, 0.5, samples) * SCALE[n] for m in twins for n in SCALE}
    labels = np.arange(samples) % 10
    n_rows = 0
    for spec in specs:
        strength = 1.0 + rng.exponential(0.15)       # ≥ 1: how far above the true minimum it lands
        fail_rate = rng.choice([0.0, 0.0, 0.05, 0.3])
        for twin in twins:
            model, base = twin.name, twin.base_model
            d = truth[(base, spec.norm)] * strength * rng.lognormal(0.0, 0.08, samples)
            d[rng.random(samples) < fail_rate] = np.inf
            d[labels == 7] = 0.0 if base == "digits-mlp-tiny" else d[labels == 7]  # misclassified clean
            status = "crash" if rng.random() < 0.01 else "ok"
            if status == "crash":
                d = np.full(samples, np.inf)
            rows = job_rows(model, spec.implementation, spec.norm, d, family=spec.family, kind=spec.kind,
                            status=status, error="RuntimeError: synthetic crash" if status == "crash" else "",
                            forwards=rng.integers(100, 1000, samples), backwards=rng.integers(50, 900, samples),
                            wall_s=float(rng.exponential(3.0)), samples=np.arange(samples), labels=labels,
                            run=out.name)
            rows["job_id"] = f"{model}__{spec.key}".replace("/", "-")
            write_job(out, rows["job_id"].iloc[0], rows)
            n_rows += len(rows)
    write_manifest(out, {"name": out.name, "config": {"preset": "demo", "samples": samples}, "seed": seed,
                         "library_versions": {}, "torch_version": "synthetic", "device": "cpu",
                         "subset_hash": "h", "dataset": "digits", "skipped": [], "unavailable": []})
    return n_rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="run directory to build (default: a temporary one)")
    parser.add_argument("--samples", type=int, default=16)
    parser.add_argument("--models", nargs="+", default=list(DEMO_MODELS), metavar="M",
                        help="models of the run (default: the full demo's seven)")
    parser.add_argument("--profile", type=int, default=0, metavar="N", help="print the N costliest functions")
    parser.add_argument("--keep", action="store_true", help="keep the temporary run directory")
    args = parser.parse_args()
    from attackaudit.reports import build, load_runs, write_report_data

    tmp = Path(tempfile.mkdtemp(prefix="report_speed_"))
    out = Path(args.out) if args.out else tmp / "demo-synthetic"
    start = time.perf_counter()
    n = build_run(out, args.samples, models=args.models)
    print(f"built {n} rows in {time.perf_counter() - start:.1f} s -> {out}", flush=True)

    profile = cProfile.Profile(time.process_time) if args.profile else None
    if profile:
        profile.enable()
    t0 = time.perf_counter()
    table, manifests, exact = load_runs([out])
    t1 = time.perf_counter()
    data = build(table, manifests, [out], exact)
    t2 = time.perf_counter()
    written = write_report_data(data, out)
    t3 = time.perf_counter()
    if profile:
        profile.disable()
    print(f"report: load {t1 - t0:.1f} s, fidelity tables {t2 - t1:.1f} s, rendering and writing {t3 - t2:.1f} s, "
          f"total {t3 - t0:.1f} s (wall; CPU time under --profile)")
    for name, path in sorted(written.items()):
        print(f"  {name:28s} {path.stat().st_size / 1024:9.1f} KiB")
    if profile:
        pstats.Stats(profile).sort_stats("cumulative").print_stats(args.profile)
    if not args.out and not args.keep:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
