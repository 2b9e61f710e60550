"""The noise corpus: what sound (and not so sound) built-in attacks really do, run by the harness,
stored per image so that ``benchmarks/calibration.py`` resamples real noise for its nulls.

    .venv/bin/python benchmarks/noise_corpus.py [--samples 64] [--steps-scale 0.25] [--work runs/noise]

Three grids on the same hashed subset of the digits test set (seed 0; subsets nest, so every
grid attacks the same images):

| grid | models | attacks | what it measures |
|---|---|---|---|
| ``base`` | ``digits-mlp``, ``digits-cnn``, ``digits-cnn-at-linf`` (adversarially trained: the hard model) and their seed twins ``~seed`` | every built-in spec but the slowest (``SLOW``; the seed twins: the randomised ones only) | seed noise: each randomised spec with two seeds |
| ``split`` | ``digits-mlp~split`` (the first 32 images) | the deterministic specs | batch against one image per call |
| ``shift`` | ``digits-mlp~shift`` | every spec | the shift twin's float32 noise |

The rows are kept with the columns the calibration and the fidelity rules read, one row per
(model, spec, image), in ``benchmarks/noise/corpus.parquet`` (``model`` keeps its twin suffix).
Rerunning resumes the grids in ``--work`` (the run directories are not kept in the repository)
and rewrites the parquet; ``--extract-only`` only rewrites it from finished grids.
The time it took and the settings are in ``benchmarks/noise/README.md``.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import pandas as pd

HERE = Path(__file__).resolve().parent
OUT = HERE / "noise" / "corpus.parquet"
MODELS = ["digits-mlp", "digits-cnn", "digits-cnn-at-linf"]
SPLIT_MODELS = ["digits-mlp"]
SHIFT_MODELS = ["digits-mlp"]
#: images of the batch-split twins (the first ones of the subset: subsets nest)
SPLIT_SAMPLES = 32
#: deterministic specs left out for time: on the shared 2-core machine foolbox's Brendel-Bethge took
#: 360 s for one 64-image job (its numba compile included), ART's C&W and EAD run one image per
#: call anyway (batch_size=1) at tens of seconds per job; the corpus has every other built-in
SLOW = frozenset({"foolbox/L0BrendelBethgeAttack/l0", "foolbox/L1BrendelBethgeAttack/l1",
                  "foolbox/L2BrendelBethgeAttack/l2", "foolbox/LinfinityBrendelBethgeAttack/linf",
                  "art/CarliniL2Method/l2", "art/CarliniLInfMethod/linf", "art/ElasticNet/l1"})
#: the columns kept: what fidelity's rules and the calibration read (the rest of a row is
#: bookkeeping: run, job id, hashes, params, the per-norm copies of the distance)
KEEP = ["model", "sample", "label", "clean_correct", "library", "library_version", "attack", "implementation",
        "family", "norm", "kind", "budget", "forwards", "backwards", "refused", "best_distance",
        "returned_distance", "returned_adversarial", "status", "error", "wall_s", "returned_class",
        "ball_calls", "ball_out", "ball_worst_ratio", "ball_worst_eps", "eps_fail_max", "eps_fail_ratio"]


def _specs() -> tuple[list[str], list[str]]:
    """(randomised, deterministic) built-in spec keys of the installed libraries."""
    from attackaudit.adapters import catalogue
    from attackaudit.sources.twins import is_randomised

    rand, det = [], []
    for entry in catalogue(None):
        if entry.plugin is None and entry.available:
            for spec in entry.specs:
                if not spec.targeted_only and spec.key not in SLOW:
                    (rand if is_randomised(spec) else det).append(spec.key)
    return rand, det


def grids(samples: int, steps_scale: float, budget: int, work: Path) -> dict[str, dict]:
    """The run configs (``config.resolve`` flags) of the four grids."""
    rand, det = _specs()
    # force: a grid whose attack list changed keeps the finished jobs it still has (job ids do not
    # depend on the list) and sets the others aside
    common = {"samples": samples, "steps_scale": steps_scale, "budget": budget, "seed": 0, "workers": 2,
              "quiet": True, "force": True}
    return {
        "base": {**common, "out": str(work / "base"), "attacks": rand + det,
                 "models": MODELS + [m + "~seed" for m in MODELS]},
        # one image per call costs ~6x a batched job's CPU per image: the first SPLIT_SAMPLES images
        "split": {**common, "out": str(work / "split"), "attacks": det, "split_samples": SPLIT_SAMPLES,
                  "models": [m + "~split" for m in SPLIT_MODELS]},
        "shift": {**common, "out": str(work / "shift"), "attacks": rand + det,
                  "models": [m + "~shift" for m in SHIFT_MODELS]},
    }


def extract(work: Path, names: list[str]) -> pd.DataFrame:
    """The kept columns of every finished grid's rows, one table."""
    from attackaudit.results.store import load_run

    parts = []
    for name in names:
        rows = load_run(work / name)
        parts.append(rows.reindex(columns=KEEP).assign(grid=name))
    t = pd.concat(parts, ignore_index=True)
    t["error"] = t["error"].fillna("").astype(str).str.slice(0, 120)  # one line is enough to tell a cause
    for col in ("model", "library", "library_version", "attack", "implementation", "family", "norm", "kind",
                "status", "grid"):
        t[col] = t[col].astype("category")
    return t


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--samples", type=int, default=64)
    ap.add_argument("--steps-scale", dest="steps_scale", type=float, default=0.25)
    ap.add_argument("--budget", type=int, default=1000)
    ap.add_argument("--work", default="runs/noise", help="where the grids' run directories go (resumable)")
    ap.add_argument("--grids", nargs="+", default=["base", "split", "shift"])
    ap.add_argument("--extract-only", action="store_true")
    args = ap.parse_args(argv)
    work = Path(args.work)
    from attackaudit.run.config import resolve
    from attackaudit.run.runner import run

    times = {}
    if not args.extract_only:
        for name, flags in grids(args.samples, args.steps_scale, args.budget, work).items():
            if name not in args.grids:
                continue
            start = time.perf_counter()
            summary = run(resolve(flags=flags))
            times[name] = round(time.perf_counter() - start, 1)
            with open(work / "times.jsonl", "a") as fh:
                fh.write(json.dumps({"grid": name, "wall_s": times[name], "line": summary.line()}) + "\n")
            print(f"{name}: {summary.line()}", flush=True)
    t = extract(work, args.grids)
    OUT.parent.mkdir(exist_ok=True)
    t.to_parquet(OUT, index=False, compression="zstd")
    meta = {"samples": args.samples, "steps_scale": args.steps_scale, "budget": args.budget, "seed": 0,
            "grids": args.grids, "wall_s": times, "rows": len(t)}
    print(json.dumps(meta))
    print(f"{len(t)} rows -> {OUT} ({OUT.stat().st_size / 1e6:.2f} MB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
