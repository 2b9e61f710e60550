"""A behavioural changelog of one attack library: consecutive releases audited on a small grid.

    .venv/bin/python benchmarks/release_history.py torchattacks --last 6 --out runs/history/torchattacks
    .venv/bin/python benchmarks/release_history.py art --releases 1.14.0 1.19.2 1.20.1 --families pgd fgm

Every release runs the same grid once (``attackaudit audit``'s machinery: a cached overlay per
release, the whole run under its interpreter, ``OUT/<library>-<version>/``, resumable), on the
families the five libraries share (APGD, PGD, FGM, C&W, DeepFool, FMN, DDN where present). Then:

- ``history.csv``: ξ and ASR (at the reference ε) of every implementation in every release,
  against one envelope over all releases (so releases are comparable), with each row's status
  counts (``unsupported`` apart from ``crash``);
- ``steps.csv``: each consecutive pair's ``fidelity.diff`` verdict per implementation, as
  ``attackaudit audit`` gives it;
- ``history.md``: both tables, the releases that could not be prepared and why, and the wall time;
- ``history.png``: ξ and ASR per release, one line per implementation and norm.

A release that cannot be prepared (no wheel for this Python, or it does not work beside the
project's torch and numpy) is skipped and named, as ``--bisect`` skips it.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import pandas as pd

from attackaudit.audit.command import Release, diff_sides, prepare_side, run_side
from attackaudit.audit.bisect import index_versions, is_prerelease
from attackaudit.audit.env import AuditEnvError, installed_version
from attackaudit.run.config import resolve

#: the families all or most of the five libraries implement (fidelity's alignment lines them up)
SHARED_FAMILIES = ["apgd", "pgd", "fgm", "cw", "deepfool", "fmn", "ddn"]
LIBRARIES = {"adv_lib": "adv-lib", "foolbox": "foolbox", "art": "adversarial-robustness-toolbox",
             "torchattacks": "torchattacks", "cleverhans": "cleverhans"}


def history_table(tables: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """ξ and ASR per (release, implementation, norm) against one envelope over every release's
    rows (releases × implementations × norms); status counts per row."""
    from attackaudit import fidelity

    rows = pd.concat([t for t in tables.values() if len(t)], ignore_index=True)
    board = fidelity.leaderboard(rows)
    status = (rows.groupby(["library_version", "implementation", "norm"])["status"]
              .value_counts().unstack(fill_value=0).reset_index())
    board = board.rename(columns={"asr_at_ref": "asr"})
    out = board[["library_version", "implementation", "family", "norm", "optimality", "asr"]].merge(
        status, on=["library_version", "implementation", "norm"], how="left")
    order = {v: i for i, v in enumerate(tables)}
    out["_order"] = out["library_version"].map(order)
    return out.sort_values(["implementation", "norm", "_order"]).drop(columns="_order").reset_index(drop=True)


def step_table(sides: list, alpha: float, min_delta: float) -> pd.DataFrame:
    """``fidelity.diff`` of each consecutive pair of prepared releases."""
    steps = []
    for a, b in zip(sides, sides[1:]):
        diff, _, _ = diff_sides(a, b, alpha=alpha, min_delta=min_delta)
        steps.append(diff.assign(step=f"{a.version} -> {b.version}"))
    cols = ["step", "implementation", "norm", "verdict", "reason", "optimality_a", "optimality_b", "asr_a", "asr_b",
            "n_better", "n_worse", "p_value"]
    return pd.concat(steps, ignore_index=True)[cols] if steps else pd.DataFrame(columns=cols)


def plot(history: pd.DataFrame, releases: list[str], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(13, 5), sharex=True)
    x = {v: i for i, v in enumerate(releases)}
    for (impl, norm), g in history.groupby(["implementation", "norm"]):
        xs = [x[v] for v in g["library_version"]]
        for ax, col in zip(axes, ("optimality", "asr")):
            ax.plot(xs, g[col], marker="o", label=f"{impl} [{norm}]")
    for ax, col in zip(axes, ("ξ (one envelope over all releases)", "ASR at the reference ε")):
        ax.set_xticks(range(len(releases)), releases, rotation=45, ha="right")
        ax.set_ylabel(col)
        ax.set_ylim(-0.05, 1.05)
    axes[1].legend(fontsize=6, loc="center left", bbox_to_anchor=(1.0, 0.5))
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def markdown(library: str, history: pd.DataFrame, steps: pd.DataFrame, skipped: dict[str, str],
             env_lines: list[str], grid: dict, wall_s: float) -> str:
    def table(df: pd.DataFrame) -> str:
        shown = df.copy()
        for c in shown.columns:
            if shown[c].dtype.kind == "f":
                shown[c] = shown[c].map(lambda v: "—" if pd.isna(v) else f"{v:.3g}")
        head = "| " + " | ".join(map(str, shown.columns)) + " |"
        return "\n".join([head, "|" + "---|" * len(shown.columns)] +
                         ["| " + " | ".join(map(str, r)) + " |" for r in shown.itertuples(index=False)])

    changed = steps[steps["verdict"] != "unchanged"]
    parts = [f"# {library}: release history", "", f"grid: {json.dumps(grid)}; wall time {wall_s:.0f} s", "",
             "## Changes between consecutive releases", "",
             table(changed) if len(changed) else "none: every implementation `unchanged` at every step", "",
             "## Environments", ""] + [f"- {ln}" for ln in env_lines]
    if skipped:
        parts += ["", "## Releases that could not be prepared", ""] + [f"- {v}: {why}" for v, why in skipped.items()]
    parts += ["", "## ξ and ASR per release", "", table(history), "", "## Every step", "", table(steps), ""]
    return "\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("library", choices=sorted(LIBRARIES))
    p.add_argument("--releases", nargs="+", help="versions, oldest first (default: the last --last on the index)")
    p.add_argument("--last", type=int, default=6)
    p.add_argument("--families", nargs="+", default=SHARED_FAMILIES)
    p.add_argument("--norms", nargs="+")
    p.add_argument("--models", nargs="+", default=["digits-mlp"])
    p.add_argument("--samples", type=int, default=8)
    p.add_argument("--steps-scale", dest="steps_scale", type=float, default=0.1)
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--alpha", type=float, default=0.05)
    p.add_argument("--min-delta", dest="min_delta", type=float, default=0.02)
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)

    start = time.perf_counter()
    dist, out = LIBRARIES[args.library], Path(args.out)
    releases = args.releases or [v for v in index_versions(dist) if not is_prerelease(v)][-args.last:]
    flags = {"models": args.models, "samples": args.samples, "steps_scale": args.steps_scale,
             "families": args.families, "workers": args.workers, "quiet": True,
             **({"norms": args.norms} if args.norms else {})}
    base = resolve(None, {**flags, "out": str(out / args.library), "libraries": [args.library]})
    installed = installed_version(dist)
    sides, skipped, env_lines = [], {}, []
    for version in releases:
        try:
            side = prepare_side(Release(version), installed, dist, args.library, out, print)
            run_side(side, base, args.library, print)
        except AuditEnvError as exc:
            print(f"release_history: skipping {dist} {version}: {exc}", file=sys.stderr)
            skipped[version] = str(exc)
            continue
        sides.append(side)
    from attackaudit.audit.command import environment_lines
    from attackaudit.reports.run_files import load_runs

    env_lines = environment_lines(sides)
    tables = {s.version: (load_runs([s.run_dir])[0] if not s.empty else pd.DataFrame()) for s in sides}
    history = history_table(tables)
    steps = step_table(sides, args.alpha, args.min_delta)
    history.to_csv(out / "history.csv", index=False)
    steps.to_csv(out / "steps.csv", index=False)
    plot(history, [s.version for s in sides], out / "history.png", f"{dist}: releases {', '.join(tables)}")
    wall = time.perf_counter() - start
    grid = {**flags, "budget": base.budget, "seed": base.seed}
    (out / "history.md").write_text(markdown(dist, history, steps, skipped, env_lines, grid, wall), encoding="utf-8")
    print(f"{dist}: {len(sides)} releases run, {len(skipped)} skipped, "
          f"{int((steps['verdict'] != 'unchanged').sum())} changes; {wall:.0f} s; {out / 'history.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
