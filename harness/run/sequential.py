"""Runs that extend until decided (``attackaudit run --until-decided CAP``,
``attackaudit.compare(until_decided=CAP)``): judge the first subset, then run again only the
family × norm rows still undecided, at doubling nested sizes up to the cap or the dataset's size.

The looks (``fidelity/sequential.py``: the sizes, the α each spends, which rows stay open):

- look 1 is the ordinary run of ``--samples n₁`` in ``--out`` itself (the same jobs, the same
  job ids: a plain run of that size resumes as the first look, and the reverse);
- look k ≥ 2 is an ordinary run directory ``OUT/looks/n<n_k>`` of ``--samples n_k`` with only the
  specs of the rows look k−1 left open (``--attacks`` those specs), on the base models only, judged
  at its own α. The twins (``--metamorphic``, or twin models named in ``--models``) run once, on the
  first look's images, beside their base model's own batch: their findings (batch dependence,
  shift sensitivity, label bug) are carried to every later look (``base_models_only``). Its jobs rerun the first n_{k−1} images rather than adding the new images as
  jobs of their own: a job's identity is its (model, spec, subset size), and an attack that looks at
  its batch (a step size or a stopping rule over the batch) sees the same companions as a plain run
  of n_k images would give it, so each look's rows are a plain run's rows. The cost: with doubling,
  at most twice the images of the last look (job cost grows sublinearly in the images);
- after each look the verdicts are recorded in ``OUT/manifest.json`` (``looks``: per look its
  ``images``, ``directory``, the ``alpha`` it spent and ``alpha_cumulative``, the ``rows`` judged
  with their verdicts, those left ``open`` and those ``extended`` to the next look) and each
  look's own manifest gets its ``alpha`` (so ``attackaudit report`` on it judges as the look did).

Judging is deterministic (seeded bootstrap) and every look is an ordinary resumable run, so a run
killed mid-look resumes by running the same command again: the finished looks are judged again
from their kept rows (the same verdicts), the interrupted look keeps its finished jobs.
"""
from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

import pandas as pd

from attackaudit.fidelity.sequential import (SPENDING_POWER, is_open, judge_look, look_alphas, look_sizes, row_key,
                                             twins_findings, verdicts)
from attackaudit.fidelity.stats import ALPHA
from attackaudit.run.config import RunConfig
from attackaudit.run.executors import Executor
from attackaudit.run import runner  # runner.run looked up at each call (a test stops it there)
from attackaudit.run.runner import RunSummary
from attackaudit.results.looks import look_dir, read_look
from attackaudit.results.store import read_manifest, update_manifest


@dataclass
class SequentialSummary:
    """What the looks ran: ``RunSummary``'s fields over all the looks, and the looks themselves."""

    run_dir: Path
    total: int
    executed: int
    counts: dict[str, int]
    wall_s: float
    looks: list[dict] = field(default_factory=list)

    def line(self) -> str:
        jobs = RunSummary(self.run_dir, self.total, self.executed, self.counts, self.wall_s).line()
        return f"{looks_line(self.looks)}; {jobs}"


def looks_line(looks: list[dict]) -> str:
    """The looks in one line: sizes, α, how many rows each decided and how many stayed open."""
    parts = []
    for look in looks:
        judged = look["rows"]
        decided = sum(v != "inconclusive" for v in judged.values())
        parts.append(f"{look['images']} images (α {look['alpha']:.4g}): {decided} of {len(judged)} rows decided")
    left = len(looks[-1]["open"]) if looks else 0
    return ("until decided: " + ", then ".join(parts)
            + (f"; {left} still undecided at the cap" if left else ""))


def run_until_decided(config: RunConfig, executor: Executor | None = None,
                      say: Callable[[str], None] | None = None) -> SequentialSummary:
    """Run ``config``'s grid in looks (module docstring) up to ``config.until_decided`` images or
    the dataset's size; returns the summary of every look. ``executor`` and ``say`` as
    ``runner.run`` takes them (the later looks' plan notes, about their ``--attacks`` filter, are
    not said; each look is announced)."""
    from attackaudit.sources.subset import dataset_size

    say = say or (lambda note: print(f"attackaudit: note: {note}", file=sys.stderr))
    start = time.perf_counter()
    out = Path(config.out)
    available = dataset_size(config.dataset)
    cap = min(config.until_decided, available) if available else config.until_decided
    sizes = look_sizes(min(config.samples, cap), cap)
    alphas = look_alphas(sizes, ALPHA)
    if available is not None and available < config.until_decided:
        say(f"--until-decided {config.until_decided} is more than the {available} images the dataset has: "
            f"the last look attacks all {available}")
    looks: list[dict] = []
    summaries: list[RunSummary] = []
    attacks = config.attacks
    carried = None
    for k, (images, alpha) in enumerate(zip(sizes, alphas), start=1):
        where = look_dir(out, k, images)
        look_config = replace(config, out=str(where), samples=images, attacks=attacks, until_decided=0,
                              force=config.force or k > 1,  # a later look's directory holds only its own specs
                              **({} if k == 1 else base_models_only(config)))
        summaries.append(runner.run(look_config, executor, say if k == 1 else (lambda note: None)))
        update_manifest(where, alpha=alpha, look=k)
        if k == 2:  # the twins ran on the first look only: their findings, once for every later look
            carried = twins_findings(read_look(out))
        rec = judge_look(read_look(where), alpha, carried)
        rows = verdicts(rec)
        still = sorted(row_key(r["family"], r["norm"]) for _, r in rec.iterrows() if is_open(r))
        last = k == len(sizes) or not still
        looks.append({"look": k, "images": images, "directory": str(where.relative_to(out)) if k > 1 else ".",
                      "alpha": alpha, "alpha_cumulative": sum(alphas[:k]), "jobs": summaries[-1].total,
                      "rows": rows, "open": still, "extended": [] if last else still})
        update_manifest(out, alpha=alphas[0], looks=looks,
                        until_decided={"cap": config.until_decided, "sizes": sizes, "alphas": alphas, "alpha": ALPHA,
                                       "spending": f"alpha * (n / n_max) ** {SPENDING_POWER:g}, the increment tested at each look"})
        if last:
            break
        specs = (read_manifest(where) or {}).get("specs", {})
        attacks = sorted(key for key, s in specs.items() if row_key(s["family"], s["norm"]) in still)
        say(f"look {k + 1} of at most {len(sizes)}: {sizes[k]} images at α {alphas[k]:.4g} for the "
            f"{len(still)} of {len(rows)} rows still undecided ({', '.join(still)}): {len(attacks)} attacks")
    counts: dict[str, int] = {}
    for s in summaries:
        for status, n in s.counts.items():
            counts[status] = counts.get(status, 0) + n
    return SequentialSummary(out, sum(s.total for s in summaries), sum(s.executed for s in summaries), counts,
                             time.perf_counter() - start, looks)


def base_models_only(config: RunConfig) -> dict:
    """The fields of a later look's config that leave the twins out: its models without the twin
    models, no ``--metamorphic``, no ``--repeat``. The twins ran on the first look's images, where
    each twin and its base model share their images and their batch; their findings are carried
    (``fidelity.sequential.twins_findings``, once for every later look). Rerun beside a larger base
    batch, a model twin would read a batch-dependent or chaotic search as the twin's difference."""
    return {"models": [m.name for m in config.twins if not m.is_twin],
            "metamorphic": False, "repeat": 1}


def run_grid(config: RunConfig, executor: Executor | None = None,
             say: Callable[[str], None] | None = None) -> RunSummary | SequentialSummary:
    """``runner.run`` for one look, ``run_until_decided`` when ``config.until_decided`` is set: what
    ``attackaudit run`` and ``attackaudit.compare`` call."""
    if config.until_decided:
        return run_until_decided(config, executor, say)
    return runner.run(config, executor) if say is None else runner.run(config, executor, say)
