"""The noise corpus: what sound (and not so sound) built-in attacks really do, run by the harness,
stored per image so that ``benchmarks/calibration.py`` resamples real noise for its nulls.

    .venv/bin/python benchmarks/noise_corpus.py [--samples 64] [--steps-scale 0.25] [--work runs/noise]
        [--grids base split shift batch] [--models digits-mlp ...] [--merge] [--extract-only]

Four grids on the same hashed subset of the digits test set (seed 0; subsets nest, so every
grid attacks the same images):

| grid | models | attacks | what it measures |
|---|---|---|---|
| ``base`` | ``digits-mlp``, ``digits-cnn``, ``digits-cnn-at-linf`` (adversarially trained: the hard model) and their seed twins ``~seed`` | every built-in spec (the seed twins: those ``needs_seed_twin`` gives one); the slowest (``SLOW``) only when named with ``--specs`` | seed noise: each randomised spec with two seeds |
| ``split`` | ``digits-mlp~split``, ``digits-cnn~split`` (all 64 images) | the deterministic specs | batch against one image per call |
| ``shift`` | ``digits-mlp~shift`` | every spec | the shift twin's float32 noise |
| ``batch`` | ``digits-mlp~batch`` (64 images, reversed, with 32 companions in the call) | every spec | batch against another batch arrangement |

The rows are kept with the columns the calibration and the fidelity rules read (``KEEP``), one
row per (model, spec, image), in ``benchmarks/noise/corpus.parquet`` (``model`` keeps its twin
suffix; ``grid`` names the grid). Rerunning resumes the grids in ``--work`` (the run directories
are not kept in the repository) and rewrites the parquet; ``--extract-only`` only rewrites it from
finished grids. ``--models`` restricts the grids run to those models (exact names, twin suffix
included: ``digits-mlp`` is not ``digits-mlp~seed``); ``--merge`` keeps the stored parquet's rows
of every (grid, model) not rerun and replaces those rerun, so one grid (or one model of one) is
refreshed without the others' run directories.

Times on the shared 2-core machine (seed 0, 64 images, 0.25 of the steps, budget 1000): base 35 min
(three models; the machine shared by five sessions, load 5–8), split 125 s, shift 84 s (the first
corpus); then, with ``best_margin``, ``rng_used`` and the other fallback columns kept, rerun and
merged (load 2–3, another engineer's tests beside): split 387 s, batch 358 s, base on
``digits-mlp`` only 187 s (``--grids base --models digits-mlp``: the base rows the batch twins
are judged against; its seed twin's rows kept); then the split twin on ``digits-mlp`` and
``digits-cnn`` at all 64 images with ``digits-cnn``'s base rows (``--grids split base --models
digits-mlp~split digits-cnn~split digits-cnn --merge``): base 568 s, split 1409 s for 118 jobs,
beside a mutation run; then the ``SLOW`` specs, on every grid (``--specs <the seven keys> --grids
base split batch shift --merge``), in one run beside other work whose time was not kept. The
settings and row counts are in fidelity/README.md, "Real noise"."""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import pandas as pd

HERE = Path(__file__).resolve().parent
OUT = HERE / "noise" / "corpus.parquet"
MODELS = ["digits-mlp", "digits-cnn", "digits-cnn-at-linf"]
SPLIT_MODELS = ["digits-mlp", "digits-cnn"]
SHIFT_MODELS = ["digits-mlp"]
BATCH_MODELS = ["digits-mlp"]
#: images of the batch-split twins (the first ones of the subset: subsets nest)
SPLIT_SAMPLES = 64
#: specs a default run leaves out for time: on the shared 2-core machine foolbox's Brendel-Bethge
#: took 360 s for one 64-image job (its numba compile included), ART's C&W and EAD run one image
#: per call anyway (batch_size=1) at tens of seconds per job. The stored corpus has them: they were
#: run apart, named with ``--specs`` and merged (``--merge``)
SLOW = frozenset({"foolbox/L0BrendelBethgeAttack/l0", "foolbox/L1BrendelBethgeAttack/l1",
                  "foolbox/L2BrendelBethgeAttack/l2", "foolbox/LinfinityBrendelBethgeAttack/linf",
                  "art/CarliniL2Method/l2", "art/CarliniLInfMethod/linf", "art/ElasticNet/l1"})
#: the columns kept: what fidelity's rules and the calibration read (the rest of a row is
#: bookkeeping: run, job id, hashes, params, the per-norm copies of the distance)
KEEP = ["model", "sample", "label", "clean_correct", "library", "library_version", "attack", "implementation",
        "family", "norm", "kind", "budget", "forwards", "backwards", "refused", "best_distance",
        "returned_distance", "returned_adversarial", "status", "error", "wall_s", "returned_class",
        "ball_calls", "ball_out", "ball_worst_ratio", "ball_worst_eps", "eps_fail_max", "eps_fail_ratio",
        # attackaudit.results.schema FALLBACK_COLUMNS (absent in the first corpus's rows: NaN there):
        # the batch twins' boundary exemption reads best_margin, their randomness test rng_used
        "returned_fallback", "best_margin", "rng_used", "eps_success", "ball_mean_ratio"]
#: the grids' categorical columns
CATEGORIES = ("model", "library", "library_version", "attack", "implementation", "family", "norm", "kind",
              "status", "grid")


def _specs() -> tuple[list[str], list[str]]:
    """(randomised, deterministic) built-in spec keys of the installed libraries."""
    from attackaudit.adapters import catalogue
    from attackaudit.sources.run_twins import is_randomised

    rand, det = [], []
    for entry in catalogue(None):
        if entry.plugin is None and entry.available:
            for spec in entry.specs:
                if not spec.targeted_only and spec.key not in SLOW:
                    (rand if is_randomised(spec) else det).append(spec.key)
    return rand, det


def grids(samples: int, steps_scale: float, budget: int, work: Path,
          models: list[str] | None = None, specs: list[str] | None = None) -> dict[str, dict]:
    """The run configs (``config.resolve`` flags) of the four grids; ``models``: only those models
    (exact names; None: all); ``specs``: only these spec keys, ``SLOW`` ones included (None: every
    built-in but ``SLOW``)."""
    rand, det = _specs()
    if specs is not None:
        from attackaudit.adapters import catalogue
        from attackaudit.sources.run_twins import is_randomised
        known = {spec.key: spec for e in catalogue(None) if e.plugin is None and e.available for spec in e.specs}
        unknown = sorted(set(specs) - set(known))
        if unknown:
            raise SystemExit(f"--specs: {', '.join(unknown)} is not an available built-in spec; "
                             "`attackaudit list` names them")
        rand = [k for k in specs if is_randomised(known[k])]
        det = [k for k in specs if not is_randomised(known[k])]
    # force: a grid whose attack list changed keeps the finished jobs it still has (job ids do not
    # depend on the list) and sets the others aside
    common = {"samples": samples, "steps_scale": steps_scale, "budget": budget, "seed": 0, "workers": 2,
              "quiet": True, "force": True}
    out = {
        "base": {**common, "out": str(work / "base"), "attacks": rand + det,
                 "models": MODELS + [m + "~seed" for m in MODELS]},
        # one image per call costs ~6x a batched job's CPU per image: the first SPLIT_SAMPLES images
        "split": {**common, "out": str(work / "split"), "attacks": det, "split_samples": SPLIT_SAMPLES,
                  "models": [m + "~split" for m in SPLIT_MODELS]},
        "shift": {**common, "out": str(work / "shift"), "attacks": rand + det,
                  "models": [m + "~shift" for m in SHIFT_MODELS]},
        # every image in another arrangement (reversed, with companions): one job per spec, as on M
        "batch": {**common, "out": str(work / "batch"), "attacks": rand + det,
                  "models": [m + "~batch" for m in BATCH_MODELS]},
    }
    if models is not None:
        for flags in out.values():
            flags["models"] = [m for m in flags["models"] if m in models]
    return {name: flags for name, flags in out.items() if flags["models"]}


def extract(work: Path, names: list[str]) -> pd.DataFrame:
    """The kept columns of every finished grid's rows, one table."""
    from attackaudit.results.store import load_run

    parts = []
    for name in names:
        rows = load_run(work / name)
        parts.append(rows.reindex(columns=KEEP).assign(grid=name))
    return tidy(pd.concat(parts, ignore_index=True))


def tidy(t: pd.DataFrame) -> pd.DataFrame:
    """The stored form: ``KEEP`` and ``grid``, one-line errors, categorical labels."""
    t = t.reindex(columns=[*KEEP, "grid"])
    t["error"] = t["error"].fillna("").astype(str).str.slice(0, 120)  # one line is enough to tell a cause
    t["returned_fallback"] = t["returned_fallback"].fillna("").astype(str)
    t["rng_used"] = t["rng_used"].astype("boolean")  # NA: a row of the first corpus, not measured
    for col in CATEGORIES:
        t[col] = t[col].astype(str).astype("category")
    return t


def merge(stored: pd.DataFrame, new: pd.DataFrame, by_spec: bool = False) -> pd.DataFrame:
    """``stored``'s rows of every (grid, model) that ``new`` lacks, then ``new``'s rows; with
    ``by_spec``, of every (grid, model, implementation, norm) it lacks (``--specs``: the other
    specs' rows of a rerun model stay)."""
    cols = ["grid", "model"] + (["implementation", "norm"] if by_spec else [])
    rerun = set(zip(*(new[c].astype(str) for c in cols)))
    keep = [k not in rerun for k in zip(*(stored[c].astype(str) for c in cols))]
    return tidy(pd.concat([stored.loc[keep].astype({c: str for c in CATEGORIES}),
                           new.astype({c: str for c in CATEGORIES})], ignore_index=True))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--samples", type=int, default=64)
    ap.add_argument("--steps-scale", dest="steps_scale", type=float, default=0.25)
    ap.add_argument("--budget", type=int, default=1000)
    ap.add_argument("--work", default="runs/noise", help="where the grids' run directories go (resumable)")
    ap.add_argument("--grids", nargs="+", default=["base", "split", "shift", "batch"])
    ap.add_argument("--models", nargs="+", help="only these models (exact names, twin suffix included)")
    ap.add_argument("--merge", action="store_true",
                    help="keep the stored parquet's rows of the (grid, model) pairs not rerun, replace the others")
    ap.add_argument("--specs", nargs="+",
                    help="only these built-in spec keys, SLOW ones included (with --merge: replaces only their rows)")
    ap.add_argument("--extract-only", action="store_true")
    args = ap.parse_args(argv)
    work = Path(args.work)
    from attackaudit.run.config import resolve
    from attackaudit.run.runner import run

    times = {}
    configs = {k: v for k, v in grids(args.samples, args.steps_scale, args.budget, work, args.models,
                                                    args.specs).items()
               if k in args.grids}
    if not args.extract_only:
        for name, flags in configs.items():
            start = time.perf_counter()
            summary = run(resolve(flags=flags))
            times[name] = round(time.perf_counter() - start, 1)
            with open(work / "times.jsonl", "a") as fh:
                fh.write(json.dumps({"grid": name, "wall_s": times[name], "line": summary.line()}) + "\n")
            print(f"{name}: {summary.line()}", flush=True)
    t = extract(work, list(configs))
    if args.models:  # a run directory may hold other models' jobs from an earlier, wider run
        t = t[t["model"].astype(str).isin(args.models)]
    if args.merge and OUT.is_file():
        t = merge(pd.read_parquet(OUT), t, by_spec=args.specs is not None)
    OUT.parent.mkdir(exist_ok=True)
    t.to_parquet(OUT, index=False, compression="zstd")
    meta = {"samples": args.samples, "steps_scale": args.steps_scale, "budget": args.budget, "seed": 0,
            "grids": list(configs), "models": args.models, "merge": args.merge, "specs": args.specs, "wall_s": times, "rows": len(t)}
    print(json.dumps(meta))
    print(f"{len(t)} rows -> {OUT} ({OUT.stat().st_size / 1e6:.2f} MB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
