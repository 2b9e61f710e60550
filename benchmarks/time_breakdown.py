"""Where a run's time goes: job wall time summed per library and per attack, from a run directory.

    python benchmarks/time_breakdown.py runs/demo [--top 15] [--markdown]

Reads the per-sample rows (``attackaudit.load_run``); a job's wall time is stored on each of its
rows, so it is taken once per job. Prints one table per library and the slowest attacks, with
each one's share of the summed job time (which exceeds the run's wall time when workers overlap).
"""
from __future__ import annotations

import argparse

import pandas as pd

from attackaudit import load_run


def job_times(run_dir: str) -> pd.DataFrame:
    """One row per job: library, implementation, norm, model, wall_s."""
    rows = load_run(run_dir)
    return rows.groupby("job_id", as_index=False).agg(
        library=("library", "first"), implementation=("implementation", "first"), norm=("norm", "first"),
        model=("model", "first"), wall_s=("wall_s", "max"))


def breakdown(jobs: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """Summed job seconds, job count, mean seconds per job and share of the total, slowest first."""
    total = jobs["wall_s"].sum()
    table = jobs.groupby(by).agg(seconds=("wall_s", "sum"), jobs=("wall_s", "size"), per_job=("wall_s", "mean"))
    table["share"] = table["seconds"] / total
    return table.sort_values("seconds", ascending=False).reset_index()


def markdown(table: pd.DataFrame) -> str:
    """A GitHub Markdown table (pandas' to_markdown needs tabulate, which the project does not ship)."""
    cells = [[f"{v:.2f}" if isinstance(v, float) else str(v) for v in row] for row in table.itertuples(index=False)]
    lines = ["| " + " | ".join(table.columns) + " |", "|" + "---|" * len(table.columns)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in cells])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir")
    parser.add_argument("--top", type=int, default=15, help="slowest attacks to list")
    parser.add_argument("--markdown", action="store_true", help="Markdown tables (for benchmarks/README.md)")
    args = parser.parse_args()
    jobs = job_times(args.run_dir)
    show = markdown if args.markdown else (lambda t: t.to_string(index=False, float_format=lambda v: f"{v:.2f}"))
    print(f"{len(jobs)} jobs, {jobs['wall_s'].sum():.0f} s of job time\n")
    print(show(breakdown(jobs, ["library"])))
    print()
    print(show(breakdown(jobs, ["implementation", "norm"]).head(args.top)))


if __name__ == "__main__":
    main()
