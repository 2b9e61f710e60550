"""A run shaped like the demo's report: every (family, norm) of the real catalogue (46 of them,
with the catalogue's own implementation names, the longest ones included), two models, 16 images,
and every verdict a first screen can show: clear (with the losers weaker, ``optimality_gap``),
tied, inconclusive, only implementation (some far below the best of their norm: weak) and none
(every implementation crashed). Rows are hand-built (fidelity.synthetic) so that the verdicts do not
depend on the libraries; the names and the family × norm grid are the catalogue's.
"""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import numpy as np
import pandas as pd

from attackaudit.fidelity.synthetic import job_rows, table

VERSIONS = {"adv_lib": "0.2.8", "foolbox": "3.3.4", "art": "1.17", "torchattacks": "3.5.1", "cleverhans": "4.0.0"}


def catalogue_grid() -> dict[tuple[str, str], list[str]]:
    """(family, norm) -> implementation names, from the real catalogue (built-ins only)."""
    from attackaudit.adapters import catalogue

    grid: dict[tuple[str, str], list[str]] = defaultdict(list)
    for entry in catalogue():
        for s in entry.specs:
            name = f"{s.library}/{s.name}" + (f":{s.variant}" if s.variant else "")
            if s.library in VERSIONS and name not in grid[(s.family, s.norm)]:
                grid[(s.family, s.norm)].append(name)
    return dict(sorted(grid.items()))


def demo_shaped_rows(models: tuple[str, ...] = ("digits-mlp", "digits-cnn"), n: int = 16) -> pd.DataFrame:
    jobs = []
    grid = catalogue_grid()
    for k, ((family, norm), names) in enumerate(grid.items()):
        case = "only" if len(names) == 1 else ("clear", "tied", "inconclusive", "none")[k % 4]
        scale = 3.0 if k % 7 == 3 else 1.0                               # some families far below their norm's best
        for m, model in enumerate(models):
            base = np.random.default_rng(100 * m + 7).uniform(0.05, 0.3, n) * scale
            for i, name in enumerate(names):
                factor = {"clear": 1.0 if i == 0 else 1.6 + 0.1 * i, "tied": 1.0,
                          "inconclusive": np.where(np.arange(n) % 2 == 0, 1.07, 0.99) if i else 1.0,
                          "none": 1.0 + 0.1 * i, "only": 1.0}[case]
                status = ["crash"] + ["ok"] * (n - 1) if case == "none" else "ok"
                error = ["RuntimeError: x"] + [""] * (n - 1) if case == "none" else ""
                jobs.append(job_rows(model, name, norm, base * factor, family=family,
                                     library_version=VERSIONS[name.split("/")[0]], status=status, error=error))
    return table(*jobs)


def write_demo_shaped_run(run: Path) -> dict[str, Path]:
    """Store the run and write its report (every format) into it."""
    from attackaudit.reports import write_report
    from test_reports import store_run

    store_run(run, demo_shaped_rows(), name="demo-shaped")
    return write_report([run])
