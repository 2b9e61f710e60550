"""Recall at the size a user runs: the defect corpus's cases at `attackaudit run`'s default settings
and at the demo preset's, with ``--metamorphic``, instead of each case's own chosen settings.

A case's own ``[run]`` is the smallest run that shows its defect (8-125 images, a fraction of the
steps); a user who runs the spec without choosing a size gets ``RunConfig``'s defaults
(``harness/run/config.py``: samples, budget, steps_scale, seed, split_samples) or, with
``--preset demo``, the demo's. ``size_settings`` reads them from the code when it runs, so the
column follows the defaults when they change; ``size_models`` keeps the case's models (the size,
not the model, is what changes) with their twin suffixes dropped, since ``--metamorphic`` adds every
twin itself (the model twins on each model, the run twins on the first).

``benchmarks/defect_corpus.py --size default demo --record`` writes one row per case and size to
``benchmarks/defects/default_run.csv`` (``SIZE_CSV``): the settings it ran, whether the case's flags
named the spec, whether its patched twin stayed clean, and what the twin rules saw (``seen``).
"""
from __future__ import annotations

import time
from dataclasses import fields
from pathlib import Path

import numpy as np
import pandas as pd

SIZE_CSV = Path(__file__).resolve().parent / "defects" / "default_run.csv"
#: the sizes of a user's run the corpus is run at: RunConfig's defaults, and the demo preset's
SIZES = ("default", "demo")
#: the RunConfig fields that make a run's size (all of them result fields)
SIZE_FIELDS = ("samples", "split_samples", "budget", "steps_scale", "seed")
COLUMNS = ["case", "size", *SIZE_FIELDS, "models", "named", "fix_clean", "on_defect", "on_fix", "seen",
           "wall_s", "date"]


def size_settings(size: str) -> dict:
    """``{samples, split_samples, budget, steps_scale, seed}`` of a user's run at ``size``:
    ``RunConfig``'s defaults ("default"), or a preset's values over them (``PRESETS[size]``)."""
    from attackaudit.run.config import PRESETS, RunConfig

    defaults = {f.name: f.default for f in fields(RunConfig) if f.name in SIZE_FIELDS}
    if size == "default":
        return defaults
    if size not in PRESETS:
        raise ValueError(f"unknown size {size!r}; use default or a preset ({', '.join(PRESETS)})")
    return defaults | {k: v for k, v in PRESETS[size].items() if k in SIZE_FIELDS}


def size_models(case) -> list[str]:
    """The case's models without their twin suffixes, in order (``--metamorphic`` adds the twins):
    ``["digits-mlp", "digits-mlp~split"]`` → ``["digits-mlp"]``."""
    from attackaudit.run.config import RunConfig

    real = [m.base_model for m in RunConfig(models=list(case.run["models"])).twins]
    return list(dict.fromkeys(real))


def seen(case, defect: pd.DataFrame) -> str:
    """What the rules saw of the case's spec in its defect run: per twin kind the batch, shift and
    perm judgements (informative images, how many differ, how many the twin made worse, p), and the
    jobs' statuses; a short line for the CSV."""
    from attackaudit.fidelity._table import prepare
    from attackaudit.fidelity.twins import judge

    mine = defect[(defect["implementation"] == case.implementation) & (defect["norm"] == case.norm)]
    status = mine.drop_duplicates("job_id")["status"].value_counts() if "job_id" in mine else pd.Series(dtype=int)
    parts = [" ".join(f"{k} {v}" for k, v in sorted(status.items())) + " jobs"] if len(status) else []
    judged = judge(prepare(defect))
    judged = judged[(judged["implementation"] == case.implementation) & (judged["norm"] == case.norm)]
    for r in judged.itertuples(index=False):
        seed = f", seed twin {int(r.n_differ_seed)}" if np.isfinite(r.n_differ_seed) else ""
        parts.append(f"{r.kind}: {r.n_differ} of {r.n} informative (of {r.n_images}) differ, "
                     f"{r.n_twin_farther} worse on the twin{seed}, p {r.p_value:.2g}, q {r.q_value:.2g}")
    return "; ".join(parts)


def size_row(case, size: str, outcome, defect: pd.DataFrame, wall_s: float) -> dict:
    """The CSV row of ``case`` run at ``size`` (``outcome``: defect_corpus.judge's)."""
    s = size_settings(size)
    return {"case": case.id, "size": size, **s, "models": " ".join(size_models(case)),
            "named": "yes" if outcome.named else "NO", "fix_clean": "yes" if outcome.clean else "NO",
            "on_defect": ", ".join(outcome.on_defect) or "—", "on_fix": ", ".join(outcome.on_fix) or "—",
            "seen": seen(case, defect), "wall_s": round(wall_s), "date": time.strftime("%Y-%m-%d")}


def load_sizes(path: Path = SIZE_CSV) -> pd.DataFrame:
    """The stored rows (``COLUMNS``; empty when none were recorded)."""
    return pd.read_csv(path, dtype={"case": str, "size": str}) if path.is_file() else pd.DataFrame(columns=COLUMNS)


def store_sizes(rows: list[dict], path: Path = SIZE_CSV) -> None:
    """Replace the stored rows of the same (case, size) by ``rows``; keep the rest; sorted."""
    old = load_sizes(path)
    new = pd.DataFrame(rows, columns=COLUMNS)
    keys = set(zip(new["case"], new["size"]))
    old = old[[k not in keys for k in zip(old["case"], old["size"])]]
    both = pd.concat([old, new], ignore_index=True) if len(old) else new
    both.sort_values(["case", "size"]).to_csv(path, index=False)


def size_cell(stored: pd.DataFrame, case_id: str, size: str) -> str:
    """The corpus table's "named in a <size> run" cell: yes / NO (and the twin's state when it is
    not clean), "stale" when today's settings differ from those stored, "—" when not run."""
    row = stored[(stored["case"] == case_id) & (stored["size"] == size)]
    if row.empty:
        return "—"
    r = row.iloc[0]
    now = size_settings(size)
    if any(float(r[k]) != float(now[k]) for k in SIZE_FIELDS):
        return f"stale ({r['date']})"
    return str(r["named"]) + ("" if r["fix_clean"] == "yes" else "; fix flagged")


def twin_power(n_images: int, differ_share: float, farther_share: float, kind: str = "split") -> float:
    """Probability that a deterministic attack's batch twin names a defect at ``n_images`` informative
    images, when each image differs with probability ``differ_share`` and a differing image is worse
    on the twin with probability ``farther_share`` (both as measured at a user's size): the twin
    rule's binomial test against ``twins.NULL_RATE[kind]`` and, on the split twin, its sign test
    (``twins.one_way_p``: exact, two-sided, ½), at ``stats.ALPHA``, summed exactly over every count
    of differing and farther images."""
    from scipy import stats as sps

    from attackaudit.fidelity.stats import ALPHA
    from attackaudit.fidelity.twins import MIN_IMAGES, NULL_RATE

    k = np.arange(MIN_IMAGES[kind], n_images + 1)
    k = k[sps.binom.sf(k - 1, n_images, NULL_RATE[kind]) < ALPHA]  # counts the binomial test flags
    if kind != "split":
        return float(sps.binom.pmf(k, n_images, differ_share).sum())
    total = 0.0
    for kk in k:
        j = np.arange(kk + 1)
        sign_p = np.minimum(1.0, 2 * np.minimum(sps.binom.cdf(j, kk, 0.5), sps.binom.sf(j - 1, kk, 0.5)))
        total += sps.binom.pmf(kk, n_images, differ_share) * sps.binom.pmf(j[sign_p < ALPHA], kk, farther_share).sum()
    return float(total)


def images_to_name(differ_share: float, farther_share: float, kind: str = "split", power: float = 0.8,
                   most: int = 4096) -> int | None:
    """The fewest informative images at which ``twin_power`` reaches ``power`` (None: not within
    ``most``, e.g. differences without a side on the split twin)."""
    lo, n = None, 2
    while n <= most:
        if twin_power(n, differ_share, farther_share, kind) >= power:
            lo = n
            break
        n *= 2
    if lo is None:
        return None
    low = lo // 2
    while lo - low > 1:  # power rises with n up to the tests' discreteness: bisect between the doublings
        mid = (lo + low) // 2
        lo, low = (mid, low) if twin_power(mid, differ_share, farther_share, kind) >= power else (lo, mid)
    return lo
