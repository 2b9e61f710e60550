"""Leaderboard: one row per implementation and norm. The recommendation per family and norm (the
trust sets), which reads the leaderboard, is ``recommend.py``."""
from __future__ import annotations

from typing import Mapping

import pandas as pd

from ._table import IMPL_KEY, long_distances, prepare, without_twins
from .summary import across_models, model_stats

__all__ = ["LEADERBOARD_COLUMNS", "leaderboard"]

LEADERBOARD_COLUMNS = ["norm", "rank", "implementation", "library", "library_version", "attack", "family",
                       "kind", "n_models", "optimality", "optimality_min", "optimality_attackbench",
                       "asr_at_ref", "ref_eps", "median_distance", "forwards", "backwards", "refused", "wall_s"]


def leaderboard(table: pd.DataFrame, *, eps_max: Mapping[str, float] | None = None,
                ref_eps: Mapping[str, float] | None = None) -> pd.DataFrame:
    """One row per (norm, implementation, library_version) over real models (twins excluded).

    Columns: ``LEADERBOARD_COLUMNS`` then ``opt_<model>`` per model (local optimality; NaN where
    the implementation did not run on that model). ``optimality`` is the model-averaged (global)
    one, ``optimality_attackbench`` AttackBench's published variant averaged the same way,
    ``rank`` 1 = best within the norm; costs are means per sample (``wall_s`` per job).
    """
    t = without_twins(prepare(table))
    long = long_distances(t)
    stats = model_stats(t, ref_eps, eps_max, long=long)
    if stats.empty:
        return pd.DataFrame(columns=LEADERBOARD_COLUMNS)
    board = across_models(stats, long, ["norm", *IMPL_KEY, "library", "attack", "family", "kind"])
    per_model = stats.pivot_table(index=["norm", *IMPL_KEY], columns="model", values="optimality", aggfunc="first")
    per_model.columns = [f"opt_{m}" for m in per_model.columns]
    board = board.merge(per_model.reset_index(), on=["norm", *IMPL_KEY], how="left")
    board = board.sort_values(["norm", "optimality", "forwards", "implementation"],
                              ascending=[True, False, True, True], kind="stable")
    board["rank"] = board.groupby("norm").cumcount() + 1
    return board[LEADERBOARD_COLUMNS + list(per_model.columns)].reset_index(drop=True)
