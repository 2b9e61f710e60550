"""The answer a report opens with, and the evidence each part of it rests on (no rendering).

One ``Answer`` per family and norm of ``ReportData.recommend``: the verdict in one word, the
trusted implementation(s), the top pick's ξ with its bootstrap interval, the implementations of
that family and norm that were flagged, and the comparison that decided the verdict (the
``tables.Pair`` of the top pick and its closest competitor). ``flag_evidence_rows`` gives, for each
flagged implementation and norm, the per-image result rows its flags rest on.

The recommendation's fields are read defensively: ``verdict`` may be today's
"clear" / "tied" / "untrusted" or the richer "clear" / "tied" / "inconclusive" /
"only implementation" / "none" (fidelity/README.md, "Trust sets"); both map onto ``VERDICTS``.
"""
from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from .tables import Pair, ReportData

#: the one-word verdicts an answer row can show, in the order a reader meets them
VERDICTS = ("clear", "tied", "inconclusive", "only implementation", "none")
#: flags whose evidence compares a model with its metamorphic twin: their rows show both
TWIN_FLAGS = {"label_bug": "~perm", "shift_sensitivity": "~shift"}
#: columns of the per-image rows a flag rests on, in reading order
ROW_COLUMNS = ["model", "sample", "label", "status", "best_distance", "d_star", "returned_distance", "queries",
               "refused", "why", "error"]
#: rows shown per flagged implementation and norm (the standing-out ones; all rows are in the run)
MAX_FLAG_ROWS = 4


def anchor(*parts: object) -> str:
    """A short, stable, HTML-safe id for ``parts`` (names from libraries never reach markup)."""
    raw = "\x1f".join(str(p) for p in parts)
    return "e" + hashlib.sha1(raw.encode()).hexdigest()[:10]


@dataclass
class Member:
    """One implementation of a trust set."""

    implementation: str
    library_version: str
    optimality: float
    ci: tuple[float, float]
    p_adjusted: float = float("nan")                     # against the top pick (NaN for the top pick)
    samples_to_separate: float = float("nan")

    @property
    def key(self) -> tuple[str, str]:
        return self.implementation, self.library_version


@dataclass
class Answer:
    """The answer for one family and norm and what it rests on."""

    family: str
    norm: str
    verdict: str                                          # one of VERDICTS
    members: list[Member]                                 # trusted implementations, top pick first
    top: tuple[str, str]                                  # top pick (trusted or not)
    optimality: float                                     # the top pick's global ξ
    ci: tuple[float, float]
    candidates: int
    flagged: dict[tuple[str, str], list[str]]             # (implementation, version) -> flags, this norm
    summary: str                                          # the recommendation's one-line "what to do"
    pair: Pair | None = None                              # the comparison that decided the verdict
    implementations: list[tuple[str, str]] = field(default_factory=list)  # every one of the family and norm

    @property
    def id(self) -> str:
        return anchor("answer", self.family, self.norm)

    @property
    def trusted(self) -> bool:
        return self.verdict not in ("none",)


def _float(value: object, default: float = float("nan")) -> float:
    try:
        f = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return default
    return f


def _interval(value: object) -> tuple[float, float]:
    if isinstance(value, (list, tuple, np.ndarray)) and len(value) == 2:
        return _float(value[0]), _float(value[1])
    return float("nan"), float("nan")


def verdict_word(row: dict) -> str:
    """The verdict of a recommendation row as one of ``VERDICTS`` (today's "untrusted" is "none";
    a trusted sole implementation is "only implementation")."""
    word = str(row.get("verdict") or "").strip().lower()
    if word in VERDICTS:
        return word
    if word == "untrusted" or not bool(row.get("trusted", True)):
        return "none"
    members = row.get("trust_set") or []
    if int(_float(row.get("candidates"), 0) or 0) <= 1:
        return "only implementation"
    return "clear" if len(members) <= 1 else "tied"


def _members(row: dict) -> list[Member]:
    out = []
    for m in row.get("trust_set") or []:
        if not isinstance(m, dict):
            continue
        out.append(Member(str(m.get("implementation", "")), str(m.get("library_version", "") or ""),
                          _float(m.get("optimality")), _interval(m.get("optimality_ci")),
                          _float(m.get("p_adjusted")), _float(m.get("samples_to_separate"))))
    return out


def _find_pair(pairs: list[Pair], family: str, norm: str, a: tuple[str, str], b_name: str,
               b_version: str | None) -> Pair | None:
    for p in pairs:
        if p.family != family or p.norm != norm:
            continue
        for x, y in ((p.a, p.b), (p.b, p.a)):
            if x == a and y[0] == b_name and (b_version is None or y[1] == b_version):
                return p if x == p.a else _swapped(p)
    return None


def _swapped(p: Pair) -> Pair:
    """``p`` with its sides exchanged, so that the top pick is always on the x axis."""
    return Pair(p.family, p.norm, p.b, p.a, p.library_b, p.library_a, p.optimality_b, p.optimality_a, p.p_value,
                -p.effect_size, p.wins_b, p.wins_a, p.dist_b, p.dist_a, p.models)


def _deciding_pair(data: ReportData, family: str, norm: str, top: tuple[str, str], members: list[Member],
                   runner_up: str, others: list[tuple[str, str]]) -> Pair | None:
    """The comparison a verdict rests on: the top pick against the second member of its set (tied,
    inconclusive) or against its closest competitor (clear, none; the recommendation's runner-up,
    else the next of ``others``, the family's implementations best first)."""
    if len(members) > 1:
        return _find_pair(data.all_pairs, family, norm, top, members[1].implementation, members[1].library_version)
    found = _find_pair(data.all_pairs, family, norm, top, runner_up, None) if runner_up else None
    for other in others:
        if found is not None:
            break
        if other != top:
            found = _find_pair(data.all_pairs, family, norm, top, other[0], other[1])
    return found


def answers(data: ReportData) -> list[Answer]:
    """One ``Answer`` per row of ``data.recommend``, families with a real choice first (the
    order of ``text.recommendation_rows``)."""
    from .text import recommendation_rows

    rec = recommendation_rows(data)
    if rec.empty:
        return []
    marks: dict[tuple[str, str, str], set[str]] = {}
    for r in data.flags.itertuples(index=False) if len(data.flags) else []:
        marks.setdefault((str(r.implementation), str(r.library_version), str(r.norm)), set()).add(str(r.flag))
    by_family: dict[tuple[str, str], list[tuple[str, str]]] = {}
    if len(data.leaderboard):
        for r in data.leaderboard.itertuples(index=False):
            by_family.setdefault((str(r.family), str(r.norm)), []).append((str(r.implementation), str(r.library_version)))
    out = []
    for row in rec.to_dict(orient="records"):
        family, norm = str(row["family"]), str(row["norm"])
        members = _members(row)
        top = (str(row.get("implementation", "")), str(row.get("library_version", "") or ""))
        if members:
            top = members[0].key
        impls = by_family.get((family, norm), [top])
        flagged = {k: sorted(marks[(k[0], k[1], norm)]) for k in impls if (k[0], k[1], norm) in marks}
        runner = row.get("runner_up")
        runner = str(runner) if isinstance(runner, str) else ""
        out.append(Answer(family, norm, verdict_word(row), members, top, _float(row.get("optimality")),
                          _interval(row.get("optimality_ci")), int(_float(row.get("candidates"), 1)), flagged,
                          str(row.get("summary") or row.get("note") or ""),
                          _deciding_pair(data, family, norm, top, members, runner, impls), impls))
    return out


def flag_anchor(implementation: str, version: str, norm: str) -> str:
    """The id of the block of rows the flags of one implementation and norm rest on."""
    return anchor("flag-rows", implementation, version, norm)


def _models_of(flags: pd.DataFrame, models: list[str]) -> list[str]:
    """The models whose rows a set of findings rests on: each finding's model (every real model for
    a finding about all models), with its metamorphic twin for a twin-based flag."""
    real = [m for m in models if "~" not in m]
    out: list[str] = []
    for r in flags.itertuples(index=False):
        model = str(r.model)
        named = real if model in ("*", "all models") else [model]
        for m in named:
            out.append(m)
            suffix = TWIN_FLAGS.get(str(r.flag))
            if suffix and "~" not in m and f"{m}{suffix}" in models:
                out.append(f"{m}{suffix}")
            if "~" in m:
                out.append(m.split("~", 1)[0])
    return [m for m in dict.fromkeys(out) if m in models]


def _why(frame: pd.DataFrame) -> tuple[list[str], np.ndarray]:
    """Why each row stands out, and a priority to sort by (higher first): a failed status, a
    difference from the metamorphic twin, refused queries, a returned point worse than the best,
    then how far behind the envelope it is."""
    d = frame["best_distance"].to_numpy(dtype=float)
    ref = frame["d_star"].to_numpy(dtype=float)
    ret = frame["returned_distance"].to_numpy(dtype=float)
    base_of = {(m.split("~", 1)[0], s): d_ for m, s, d_ in zip(frame["model"], frame["sample"], d) if "~" not in m}
    reasons, score = [], np.zeros(len(frame))
    for i, (model, sample, status, refused) in enumerate(zip(frame["model"], frame["sample"], frame["status"],
                                                             frame["refused"])):
        why = []
        if status != "ok":
            why.append(status)
            score[i] += 8
        if "~" in model:
            other = base_of.get((model.split("~", 1)[0], sample))
            if other is not None and (np.isfinite(other) != np.isfinite(d[i]) or (
                    np.isfinite(other) and abs(d[i] - other) > 0.01 * max(abs(other), 1e-12))):
                why.append("differs on the twin")
                score[i] += 4
        if refused > 0:
            why.append("queries refused")
            score[i] += 2
        if np.isfinite(d[i]) and (not np.isfinite(ret[i]) or ret[i] > 1.05 * d[i]) and not np.isnan(ret[i]):
            why.append("returned worse")
            score[i] += 2
        if np.isfinite(ref[i]) and ref[i] > 0 and d[i] > ref[i] * (1 + 1e-9):
            ratio = d[i] / ref[i]
            why.append("failed, others broke it" if not np.isfinite(ratio) else f"{ratio:.2f}× d*")
            score[i] += min(ratio - 1.0, 1.0) if np.isfinite(ratio) else 1.5
        reasons.append(", ".join(why))
    return reasons, score


def flag_evidence_rows(data: ReportData, limit: int = MAX_FLAG_ROWS) -> dict[tuple[str, str, str], tuple[pd.DataFrame, int]]:
    """``{(implementation, version, norm): (rows, n)}``: for each flagged implementation and norm,
    the per-image rows (``ROW_COLUMNS``, ``d_star`` the envelope, ``why`` what stands out) of the
    models its flags name that stand out most, at most ``limit`` of the ``n`` such rows (a flag on a
    twin compares with its model, so the model's row of an image comes with the twin's)."""
    if data.flags.empty:
        return {}
    t = data.table
    keys = ["model", "norm", "implementation", "library_version", "sample"]
    d_star = {(c.model, c.norm): dict(zip(c.samples.tolist(), c.d_star.tolist())) for c in data.curves}
    models = sorted(t["model"].astype(str).unique())
    by_job = dict(tuple(t.groupby(["implementation", "library_version", "norm"], sort=False)))
    out = {}
    for (impl, version, norm), f in data.flags.groupby(["implementation", "library_version", "norm"], sort=True):
        rows = by_job.get((impl, version, norm))
        if rows is None:
            continue
        rows = rows.drop_duplicates(keys, keep="last")
        rows = rows[rows["model"].isin(_models_of(f, models))]
        frame = pd.DataFrame({
            "model": rows["model"].astype(str).to_numpy(), "sample": rows["sample"].to_numpy(),
            "label": rows["label"].to_numpy() if "label" in rows else np.nan,
            "status": rows["status"].fillna("ok").astype(str).to_numpy() if "status" in rows else "ok",
            "best_distance": pd.to_numeric(rows["best_distance"], errors="coerce").fillna(math.inf).to_numpy(),
            "d_star": [d_star.get((m, norm), {}).get(s, math.nan) for m, s in zip(rows["model"], rows["sample"])],
            "returned_distance": _column(rows, "returned_distance", math.nan),
            "queries": _column(rows, "forwards", 0.0) + _column(rows, "backwards", 0.0),
            "refused": _column(rows, "refused", 0.0),
            "error": rows["error"].fillna("").astype(str).map(lambda e: e.splitlines()[0][:120] if e else "").to_numpy()
            if "error" in rows else "",
        })
        frame["why"], score = _why(frame)
        top = frame.assign(_s=score)[score > 0].sort_values(["_s", "sample"], ascending=[False, True],
                                                           kind="stable").head(limit)
        # a twin's row is read against its model's row of the same image: show both
        partners = {(m.split("~", 1)[0], smp) for m, smp in zip(top["model"], top["sample"]) if "~" in m}
        partner = pd.Series([(m, smp) in partners for m, smp in zip(frame["model"], frame["sample"])], index=frame.index)
        picked = frame[frame.index.isin(top.index) | partner].sort_values(["sample", "model"], kind="stable")
        out[(str(impl), str(version), str(norm))] = (picked[ROW_COLUMNS], int((score > 0).sum()))
    return out


def _column(rows: pd.DataFrame, name: str, default: float) -> np.ndarray:
    if name not in rows:
        return np.full(len(rows), default)
    return pd.to_numeric(rows[name], errors="coerce").fillna(default).to_numpy(dtype=float)
