"""A run that extends until decided, on real seed noise: its A/A false-positive rate across the
looks, against judging every look at the full α, and its power (``--until-decided``;
docs/statistics.md "Runs that extend until decided").

Per repetition, as ``real_nulls.pair_checks`` draws its null: a randomised built-in (drawn from
every randomised spec the noise corpus ran with two seeds on every base model) against its own seed
twin renamed as a second implementation of its family, on ``--models`` models; ``cap`` images drawn
with replacement from the images every job ran on (one block per image over the models). Look k
judges the first n_k of them (``fidelity.sequential.look_sizes``: nested, as the harness's subsets
are) with ``fidelity.recommend`` at the procedure's level, and the row stops at the first look that
decides it (``fidelity.sequential.is_open``, the rule the runner applies):

- ``spending``: look k at a_k = α·((n_k/n_K)^ρ − (n_{k−1}/n_K)^ρ), ρ = 3 (``look_alphas``): what
  ``--until-decided`` does; ``linear spending``: ρ = 1;
- ``every look at alpha``: α = 0.05 at every look, uncorrected: the inflation spending prevents;
- ``one look at cap``: one plain run of the cap's size at α.

A false claim of the null is "clear" (one excluded, a direction) or a decided "mixed" (the endpoints
shown opposed), at any look; "tied" is right. The power scenarios make the twin farther on every
image (``POWER``: 20%, ``real_nulls``' planted difference, and 8%, just beyond the 5% margin):
right is "clear" with the original as the top pick. ``mean_images``: the images the row ran to (its
cost).

    python benchmarks/sequential.py [--reps 100] [--first 16] [--cap 64] [--models 1] [--seed 0] [--save]

``--save`` writes (replaces the rows of the same first, cap and models in) ``benchmarks/noise/sequential.csv``,
which tests/test_sequential.py checks.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))

import real_noise as rn  # noqa: E402
import real_nulls as rnl  # noqa: E402
from attackaudit.fidelity import leaderboard, recommend  # noqa: E402
from attackaudit.fidelity.sequential import is_open, look_alphas, look_sizes  # noqa: E402
from attackaudit.fidelity.stats import ALPHA  # noqa: E402

STORED = Path(__file__).resolve().parent / "noise" / "sequential.csv"
PROCEDURES = ("spending", "linear spending", "every look at alpha", "one look at cap")
COLUMNS = ["procedure", "scenario", "first", "cap", "looks", "models", "fired", "evaluated", "rate",
           "mean_images", "reps"]


def levels(procedure: str, sizes: list[int]) -> list[tuple[int, float]]:
    """(images, α) of each look of ``procedure``."""
    if procedure == "spending":  # what --until-decided does: α·t^ρ, ρ = SPENDING_POWER
        return list(zip(sizes, look_alphas(sizes, ALPHA)))
    if procedure == "linear spending":  # ρ = 1: α in proportion to the images
        return list(zip(sizes, look_alphas(sizes, ALPHA, power=1.0)))
    if procedure == "every look at alpha":
        return [(n, ALPHA) for n in sizes]
    return [(sizes[-1], ALPHA)]


def run_looks(table: pd.DataFrame, looks: list[tuple[int, float]], seen: dict) -> tuple[pd.Series, int]:
    """(the row's recommendation at the look that decided it, or at the last; that look's images).
    ``seen``: what this table's looks already computed, by images (the first images and their
    leaderboard) and by (images, α) (the verdict): the procedures share looks."""
    for n, alpha in looks:
        if (n, alpha) not in seen:
            if n not in seen:
                t = table[table["sample"] < n]
                seen[n] = (t, leaderboard(t))
            t, board = seen[n]
            seen[(n, alpha)] = recommend(t, rnl.EMPTY_FLAGS, board=board, n_boot=2, alpha=alpha).iloc[0]
        row = seen[(n, alpha)]
        if not is_open(row):
            return row, n
    return row, n


def false_claim(row: pd.Series) -> bool:
    """A claim the null makes false: a direction ("clear") or a decided crossing ("mixed")."""
    return row["verdict"] == "clear" or (row["verdict"] == "inconclusive" and not is_open(row))


#: the planted differences (the seed twin's distances times the factor on every image): right is
#: "clear" with the original as the top pick
POWER = {"far20": 1.2, "far8": 1.08}


def repetition(rng: np.random.Generator, sizes: list[int], m: int,
               procedures: tuple[str, ...] = PROCEDURES) -> dict[tuple[str, str], tuple[bool, int]]:
    """{(procedure, scenario): (fired, images at stop)} of one draw of the null and of each ``POWER`` scenario."""
    R, P = rnl.resampler(), rnl.pools()
    impl, norm = P["seed"][rng.integers(len(P["seed"]))]
    models = rn.draw_models(rng, m, R.base_models)
    images = rnl._images(R, rng, sizes[-1], [rn.Job(impl, norm, b + s) for b in models for s in ("", "~seed")])
    a, b = rnl._pair_table(R, impl, norm, models, images)
    tables = {"A/A real seeds": pd.concat([a, b], ignore_index=True)}
    for name, factor in POWER.items():
        tables[name] = pd.concat([a, rnl._pair_table(R, impl, norm, models, images, scale=factor)[1]], ignore_index=True)
    out = {}
    for scenario, table in tables.items():
        seen: dict = {}
        for procedure in procedures:
            row, n = run_looks(table, levels(procedure, sizes), seen)
            fired = false_claim(row) if scenario not in POWER else (
                row["verdict"] == "clear" and row["implementation"] == impl)
            out[(procedure, scenario)] = (fired, n)
    return out


def measure(reps: int, first: int, cap: int, m: int, seed: int,
            procedures: tuple[str, ...] = PROCEDURES) -> pd.DataFrame:
    """The table of ``COLUMNS``: per procedure and scenario, how often it fired over ``reps``."""
    rng, sizes = np.random.default_rng(seed), look_sizes(first, cap)
    hits: dict[tuple[str, str], list[tuple[bool, int]]] = {}
    t0 = time.perf_counter()
    for rep in range(reps):
        for key, value in repetition(rng, sizes, m, procedures).items():
            hits.setdefault(key, []).append(value)
        if (rep + 1) % 10 == 0:
            print(f"{rep + 1} of {reps} repetitions ({time.perf_counter() - t0:.0f} s)", file=sys.stderr, flush=True)
    return pd.DataFrame([{"procedure": p, "scenario": s, "first": first, "cap": cap, "looks": len(sizes),
                          "models": m, "fired": int(sum(f for f, _ in v)), "evaluated": len(v),
                          "rate": float(np.mean([f for f, _ in v])), "mean_images": float(np.mean([n for _, n in v])),
                          "reps": reps} for (p, s), v in hits.items()], columns=COLUMNS)


def save(rows: pd.DataFrame, path: Path = STORED) -> None:
    """Replace the stored rows of the same (first, cap, models, procedure) by ``rows``."""
    old = pd.read_csv(path) if path.is_file() else pd.DataFrame(columns=COLUMNS)
    key = ["first", "cap", "models", "procedure"]
    mine = set(map(tuple, rows[key].to_numpy().tolist()))
    keep = old[[tuple(k) not in mine for k in old[key].to_numpy().tolist()]] if len(old) else old
    pd.concat([keep, rows], ignore_index=True).sort_values(["first", "cap", "models", "scenario", "procedure"]) \
        .to_csv(path, index=False, float_format="%.4g")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=100)
    ap.add_argument("--first", type=int, default=16)
    ap.add_argument("--cap", type=int, default=64)
    ap.add_argument("--models", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--save", action="store_true", help=f"write the rows into {STORED}")
    ap.add_argument("--procedures", nargs="+", default=list(PROCEDURES),
                    help=f"of {', '.join(PROCEDURES)} (the draws do not depend on them)")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    rows = measure(args.reps, args.first, args.cap, args.models, args.seed, tuple(args.procedures))
    print("| procedure | scenario | looks | fired / reps | rate | mean images |")
    print("|---|---|---|---|---|---|")
    for r in rows.itertuples(index=False):
        print(f"| {r.procedure} | {r.scenario} | {r.looks} ({r.first}→{r.cap}) | {r.fired} / {r.evaluated} | "
              f"{r.rate:.3f} | {r.mean_images:.1f} |")
    print(f"({time.perf_counter() - t0:.0f} s)")
    if args.save:
        save(rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
