"""Exact minima in every run where the model admits them: ``exact_after_run``, called at the end
of ``run.runner.run``, writes ``RUN/exact/<model>__<norm>.parquet`` (``command.exact_path``) for
the run's own subset, for every zoo model of ``EXACT_MODELS`` the run attacks (directly or through
a twin: ``M~shift``, ``M~perm``, ``M~seed``, ... share M's network, and the report joins a twin to
M's rows) and every norm its jobs attack.

Known samples cost nothing (the shipped tables hold seed 0's first samples, the cache the rest:
``exact.cache``); the others are solved with ``SAMPLE_TIME_LIMIT`` seconds each, cheap models and
norms first, until ``RUN_BUDGET_S`` seconds are spent: samples past it are left out of the table
(the report's true optimality covers the samples the table holds), a time-limited sample keeps
its proven bounds. Nothing here fails a run: what was done, and any failure, is in
``RUN/exact/status.json`` and a line on stderr. A run with ``exact = false`` (``--no-exact``)
or ``--targeted`` (exact distances are untargeted) skips it.
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Callable, Sequence

from attackaudit.results.schema import Twin

#: zoo models small enough for exact minima in every run (ReLU MLPs on the embedded digits)
EXACT_MODELS = ("digits-mlp-tiny", "digits-mlp")
#: cheap first: the order the solver spends the budget in
NORM_ORDER = ("linf", "l1", "l0", "l2")
#: seconds per sample a run's own solve may take (the tiny MLP needs ~1 s, digits-mlp's L1 and L2 up to ~60 s)
SAMPLE_TIME_LIMIT = 30.0
#: seconds a run spends solving samples nobody solved before, all models and norms together
RUN_BUDGET_S = 300.0


def admitted(models: Sequence[Twin], dataset: str) -> list[str]:
    """The base models of ``models`` (``RunConfig.twins``) that admit exact minima on ``dataset``,
    in EXACT_MODELS order."""
    if dataset != "digits":
        return []
    bases = {m.base_model for m in models}
    return [m for m in EXACT_MODELS if m in bases]


def run_pairs(config, plan) -> list[tuple[str, str]]:
    """(base model, norm) pairs to solve for a run: every admitted model with each norm its jobs
    attack, cheap first (the tiny model, then L∞, L1, L0, L2)."""
    if not getattr(config, "exact", True) or config.targeted:
        return []
    models = admitted(config.twins, config.dataset)
    norms = {(j.twin.base_model, j.attack.norm) for j in plan.jobs}
    return [(m, n) for m in models for n in NORM_ORDER if (m, n) in norms]


def exact_after_run(run_dir: Path, config, plan, say: Callable[[str], None] = print, *,
                    sample_time_limit: float = SAMPLE_TIME_LIMIT, budget_s: float = RUN_BUDGET_S) -> dict:
    """Write the run's exact tables; never raises. Returns (and stores in RUN/exact/status.json)
    per model and norm: samples, cached, solved, left out, seconds, statuses, or the error."""
    status: dict = {}
    try:
        pairs = run_pairs(config, plan)
        if pairs and plan.subset is not None:
            status = _solve_pairs(Path(run_dir), pairs, plan.subset, sample_time_limit, budget_s)
    except Exception as exc:  # the attacks' results stand whatever happens here
        status["error"] = f"{type(exc).__name__}: {exc}".splitlines()[0][:500]
    if status:
        _write_status(Path(run_dir), status)
        _say_status(status, say, quiet=bool(getattr(config, "quiet", False)))
    return status


def _solve_pairs(run_dir: Path, pairs: list[tuple[str, str]], subset, sample_time_limit: float,
                 budget_s: float) -> dict:
    from attackaudit.exact.cache import solve_subset, write_atomic
    from attackaudit.exact.command import exact_path

    status, start, nets = {}, time.perf_counter(), {}
    for model, norm in pairs:
        key = f"{model}__{norm}"
        try:
            if model not in nets:
                from attackaudit.sources.zoo import load_model

                nets[model] = load_model(model)
            left = max(0.0, budget_s - (time.perf_counter() - start))
            table, counts = solve_subset(model, norm, subset, sample_time_limit, net=nets[model], budget_s=left)
            write_atomic(table, exact_path(run_dir, model, norm))
            status[key] = {"samples": len(table), **counts, "statuses": table["status"].value_counts().to_dict()}
        except Exception as exc:  # one model × norm failing leaves the others
            status[key] = {"error": f"{type(exc).__name__}: {exc}".splitlines()[0][:500]}
    return status


def _write_status(run_dir: Path, status: dict) -> None:
    try:
        path = run_dir / "exact" / "status.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(status, indent=1, sort_keys=True, default=str) + "\n")
    except OSError:
        pass


def _say_status(status: dict, say: Callable[[str], None], quiet: bool) -> None:
    """A line each: failures and left-out samples always; what was solved unless ``quiet``
    (nothing when every sample was known)."""
    errors = [f"{k}: {v['error']}" for k, v in status.items() if isinstance(v, dict) and "error" in v]
    if "error" in status:
        errors.append(status["error"])
    left = sum(v.get("left_out", 0) for v in status.values() if isinstance(v, dict))
    done = [(k, v) for k, v in status.items() if isinstance(v, dict) and "samples" in v]
    if errors:
        say("exact minima failed (the run's results stand): " + "; ".join(errors))
    if left:
        say(f"exact minima: {left} samples left out once the time budget was spent "
            "(`attackaudit exact --out RUN` solves them)")
    solved = sum(v["solved"] for _, v in done)
    if solved and not quiet:
        cached = sum(v["cached"] for _, v in done)
        seconds = sum(v["seconds"] for _, v in done)
        say(f"exact minima: {', '.join(k for k, _ in done)} ({cached} known, {solved} solved in {seconds:.0f} s)")
