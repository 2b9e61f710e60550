"""The targeted rules on real attack noise: every built-in spec that declares targeted support, run
targeted by the harness on the noise corpus's images, and the rules that only targeted runs have
judged on the rows: the false-positive rates fidelity/README.md quotes for ``success_ignores_target``
and ``targets_ignored`` (both ``label_bug``) and ``fallback_output`` in a targeted run.

    .venv/bin/python benchmarks/targeted_noise.py [--samples 64] [--work runs/noise] [--measure-only]

One grid: ``digits-mlp``, seed 0 (the harness draws each image's target), 0.25 of the steps,
budget 1000, as the noise corpus (``noise_corpus.py``; its ``SLOW`` specs left out). The rows are
kept in ``benchmarks/noise/targeted.parquet`` (the corpus's columns, ``targeted`` and ``target``);
rerunning resumes the run in ``--work``. ``measure`` judges the stored rows with the rules'
own functions (``fidelity.defects``): per rule the jobs it judged and the jobs it flagged, naming
them (fidelity/README.md says which are defect-corpus cases: the rest are false positives).

Measured (2026-12-03, 64 digits, 62 jobs ran; 414 s on the shared 2-core machine):
``success_ignores_target`` names torchattacks 3.5.1's FAB L2 and L∞ (7 of 40 and 9 of 39 images
that reached the target returned in a third class: the defect-corpus case
``torchattacks-fab-targeted-success-test``) and no other job; ``targets_ignored`` none;
``fallback_output`` foolbox 3.3.4's C&W L2 (all-zero default on 55 of 64 images: the corpus case
``foolbox-cw-l2-zero-fallback``), and before the tracker stopped naming a lone constant image in a
third class also ART's JSMA (image 140 saturated to all-one, class 4, target 1: a search's end).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import pandas as pd

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from noise_corpus import KEEP, SLOW, tidy  # noqa: E402

OUT = HERE / "noise" / "targeted.parquet"
MODEL = "digits-mlp"


def _specs() -> list[str]:
    """Every built-in spec of the installed libraries that declares targeted support."""
    from attackaudit.adapters import catalogue

    return [spec.key for entry in catalogue(None) if entry.plugin is None and entry.available
            for spec in entry.specs if spec.targeted_support and spec.key not in SLOW]


def run_grid(samples: int, work: Path) -> float:
    from attackaudit.run.config import resolve
    from attackaudit.run.runner import run

    start = time.perf_counter()
    run(resolve(flags={"out": str(work / "targeted"), "models": [MODEL], "attacks": _specs(), "samples": samples,
                       "steps_scale": 0.25, "budget": 1000, "seed": 0, "targeted": True, "workers": 2,
                       "quiet": True, "force": True}))
    return round(time.perf_counter() - start, 1)


def extract(work: Path) -> pd.DataFrame:
    from attackaudit.results.store import load_run

    rows = load_run(work / "targeted")
    t = tidy(rows.reindex(columns=KEEP).assign(grid="targeted"))
    return t.assign(targeted=rows["targeted"].to_numpy(bool), target=rows["target"].to_numpy())


def measure(t: pd.DataFrame) -> pd.DataFrame:
    """Per rule: the jobs judged (ran ok on at least one image) and those flagged, named."""
    from attackaudit.fidelity._table import prepare
    from attackaudit.fidelity.defects import fallback_output, success_ignores_target, targets_ignored

    t = prepare(t.astype({c: str for c in t.select_dtypes("category").columns}))
    jobs = t[t["status"] == "ok"].groupby(["implementation", "norm"]).ngroups
    out = []
    for rule, fn in (("success_ignores_target", success_ignores_target), ("targets_ignored", targets_ignored),
                     ("fallback_output", fallback_output)):
        found = sorted({(f["implementation"], f["norm"]) for f in fn(t)})
        out.append({"rule": rule, "jobs": jobs, "flagged": len(found),
                    "which": ", ".join(f"{i} {n}" for i, n in found) or "—"})
    return pd.DataFrame(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--samples", type=int, default=64)
    ap.add_argument("--work", default="runs/noise")
    ap.add_argument("--measure-only", action="store_true", help="judge the stored rows, run nothing")
    args = ap.parse_args(argv)
    if not args.measure_only:
        wall = run_grid(args.samples, Path(args.work))
        t = extract(Path(args.work))
        OUT.parent.mkdir(exist_ok=True)
        t.to_parquet(OUT, index=False, compression="zstd")
        print(json.dumps({"samples": args.samples, "wall_s": wall, "rows": len(t)}))
    t = pd.read_parquet(OUT)
    print(measure(t).to_string(index=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
