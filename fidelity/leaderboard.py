"""Leaderboard (one row per implementation and norm) and the recommendation per family and norm."""
from __future__ import annotations

from typing import Mapping

import pandas as pd

from ._table import IMPL_KEY, long_distances, prepare, without_twins
from .flags import flagged
from .summary import across_models, model_stats

LEADERBOARD_COLUMNS = ["norm", "rank", "implementation", "library", "library_version", "attack", "family",
                       "kind", "n_models", "optimality", "optimality_min", "optimality_attackbench",
                       "asr_at_ref", "ref_eps", "median_distance", "forwards", "backwards", "refused", "wall_s"]
RECOMMEND_COLUMNS = ["family", "norm", "implementation", "library", "library_version", "optimality",
                     "queries", "wall_s", "trusted", "candidates", "flagged", "runner_up", "note"]
#: optimality values closer than this count as tied; cost breaks the tie
TIE_TOLERANCE = 1e-3


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


def recommend(table: pd.DataFrame, flags_df: pd.DataFrame | None, *,
              eps_max: Mapping[str, float] | None = None) -> pd.DataFrame:
    """Per (family, norm): the implementation to trust. ``RECOMMEND_COLUMNS``.

    Among implementations without any flag (on any model, ``flags_df`` as ``flags`` returns it),
    the highest global optimality; optimality within ``TIE_TOLERANCE`` is a tie, broken by fewer
    queries (forwards + backwards per sample), then wall time, then name. When every candidate is
    flagged, the row names the best of them with ``trusted = False`` and its flags in ``note``.
    """
    board = leaderboard(table, eps_max=eps_max)
    if board.empty:
        return pd.DataFrame(columns=RECOMMEND_COLUMNS)
    marks = flagged(flags_df)
    board = board.assign(
        queries=board["forwards"] + board["backwards"],
        flags=[marks.get((r.implementation, r.library_version, r.norm), [])
               for r in board.itertuples(index=False)],
        tier=(board["optimality"] / TIE_TOLERANCE).round())
    rows = []
    for (family, norm), g in board.groupby(["family", "norm"], sort=True):
        g = g.assign(clean=g["flags"].map(len) == 0).sort_values(
            ["clean", "tier", "queries", "wall_s", "implementation"], ascending=[False, False, True, True, True],
            kind="stable")
        top, rest = g.iloc[0], g.iloc[1:]
        n_flagged = int((~g["clean"]).sum())
        note = "" if top["clean"] else f"every implementation is flagged; best has: {', '.join(top['flags'])}"
        if top["clean"] and n_flagged:
            note = "flagged, not considered: " + "; ".join(
                f"{r.implementation} ({', '.join(r.flags)})" for r in g[~g["clean"]].itertuples(index=False))
        rows.append({"family": family, "norm": norm, "implementation": top["implementation"],
                     "library": top["library"], "library_version": top["library_version"],
                     "optimality": float(top["optimality"]), "queries": float(top["queries"]),
                     "wall_s": float(top["wall_s"]), "trusted": bool(top["clean"]), "candidates": len(g),
                     "flagged": n_flagged, "runner_up": rest["implementation"].iloc[0] if len(rest) else "",
                     "note": note})
    return pd.DataFrame(rows, columns=RECOMMEND_COLUMNS)
