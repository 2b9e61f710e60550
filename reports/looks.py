"""The verdicts of a run that extended until decided (``attackaudit run --until-decided``): each
family × norm row is answered by its last look, at the α that look spent (``fidelity/sequential.py``).

The run directory holds the first look (every row, its first images); a row extended to a later
look is judged again here from that look's own directory (``OUT/looks/n<images>``, an ordinary run
of its specs on more images), by the same function the runner judged it with, so that the report
says what the looks decided. The rest of the report (leaderboard, alignment, plots) shows the first
look's images; a row's note names the directory that holds its evidence on its last look's images.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from attackaudit import fidelity
from attackaudit.fidelity.sequential import judge_look, row_key, twins_findings
from attackaudit.fidelity.stats import ALPHA
from attackaudit.fidelity.yardstick_verdicts import annotate
from attackaudit.results.looks import read_look
from attackaudit.sources.dataset_images import dataset_images


def recommend_looks(table: pd.DataFrame, flags_df: pd.DataFrame, board: pd.DataFrame, runs: list[Path],
                    manifests: list[dict], stand: pd.DataFrame | None = None) -> tuple[pd.DataFrame, list[str]]:
    """(``fidelity.recommend`` of the report's rows at the α the runs' manifests record
    (``look_alpha``), annotated with the implementations' yardstick ``stand``ing, every row a later
    look answered replaced by its last look's verdict (``final_verdicts``, annotated on that look's
    images as the runner judged it); notes on the looks)."""
    rec = fidelity.recommend(table, flags_df, board=board, dataset_images=dataset_images(manifests),
                             alpha=look_alpha(manifests))
    return final_verdicts(annotate(rec, stand), runs, manifests)


def look_alpha(manifests: list[dict]) -> float:
    """The level the runs' own verdicts are made at: the α their manifests record (the first look
    of a run that extends until decided, or one of its later looks) when they all record one, else
    ``ALPHA``."""
    recorded = {m.get("alpha") for m in manifests}
    one = next(iter(recorded)) if len(recorded) == 1 else None
    return float(one) if isinstance(one, (int, float)) and 0 < one <= 1 else ALPHA


def last_looks(runs: list[Path], manifests: list[dict]) -> list[tuple[dict, list[str]]]:
    """(look, the rows it answers last) for every look after the first of the one run directory
    given (several merged runs are judged on the rows given, their looks left out)."""
    looks = (manifests[0].get("looks") or []) if len(runs) == 1 and len(manifests) == 1 else []
    out = []
    for i, look in enumerate(looks[1:], start=1):
        later = {r for after in looks[i + 1:] for r in after.get("rows", {})}
        mine = [r for r in look.get("rows", {}) if r not in later]
        if mine:
            out.append((look, mine))
    return out


def final_verdicts(rec: pd.DataFrame, runs: list[Path], manifests: list[dict]) -> tuple[pd.DataFrame, list[str]]:
    """(``rec`` with every row a later look answered replaced by that look's verdict, notes on the
    looks). A look directory that is missing or holds no results leaves its rows as the first look
    judged them, with a note."""
    found = last_looks(runs, manifests)
    if not found:
        return rec, []
    looks = manifests[0]["looks"]
    notes = ["This run extended until decided: " + ", then ".join(
        f"{lk['images']} images at α {lk['alpha']:.4g} ({len(lk.get('rows', {}))} row"
        f"{'s' * (len(lk.get('rows', {})) != 1)})" for lk in looks)
        + f"; each row's verdict is its last look's. Every other table shows the first {looks[0]['images']} images."]
    replaced: dict[str, dict] = {}
    carried = None  # the first look's twin findings, read once for every later look
    for look, rows in found:
        where = Path(runs[0]) / look["directory"]
        try:
            carried = twins_findings(read_look(Path(runs[0]))) if carried is None else carried
            later = judge_look(read_look(where), float(look["alpha"]), carried)
        except (ValueError, FileNotFoundError) as exc:
            notes.append(f"Look {look['look']} ({where}) cannot be judged ({exc}): rows {', '.join(rows)} show the "
                         "first look's verdict")
            continue
        for _, row in later.iterrows():
            if (key := row_key(row["family"], row["norm"])) in rows:
                said = (f"judged last on look {look['look']}: {look['images']} images at α {look['alpha']:.4g} "
                        f"(its evidence: attackaudit report {where})")
                replaced[key] = row.to_dict() | {"note": "; ".join(x for x in (str(row.get("note") or ""), said) if x)}
    return pd.DataFrame([replaced.get(row_key(r["family"], r["norm"]), r.to_dict()) for _, r in rec.iterrows()],
                        columns=rec.columns), notes
