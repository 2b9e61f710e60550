"""The answer a report opens with, and the evidence each part of it rests on (no rendering).

One ``Answer`` per family and norm of ``ReportData.recommend``: the verdict in one word, the
trusted implementation(s), the top pick's ξ with its bootstrap interval, the implementations of
that family and norm that were flagged, and the comparison that decided the verdict (the
``tables.Pair`` of the top pick and its closest competitor). ``flag_evidence_rows`` gives, for each
flagged implementation and norm, the per-image result rows its flags rest on.

``verdict`` is what fidelity/recommend.py emits: "clear" / "tied" / "inconclusive" /
"only implementation" / "none" (fidelity/README.md, "Trust sets"); a report.json written before
those words ("untrusted", or no verdict) maps onto the same ``VERDICTS``.
"""
from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from attackaudit.fidelity.advice import Advice, advice_of, advice_sentence
from attackaudit.fidelity.defects import EPS_UNUSED_RATIO
from attackaudit.fidelity.flag_kinds import defects, evidence_twins, weaknesses
from attackaudit.fidelity.flags import LAST_NOT_BEST_RTOL  # 'returned worse': the last_not_best rule's margin
from attackaudit.fidelity.twins import differs_on_twin
from attackaudit.results.schema import SEED, Twin
from .tables import Pair, ReportData

#: the one-word verdicts an answer row can show, in the order a reader meets them
VERDICTS = ("clear", "tied", "inconclusive", "only implementation", "none")
#: columns of the per-image rows a flag rests on, in reading order
ROW_COLUMNS = ["model", "sample", "label", "status", "best_distance", "d_star", "returned_distance", "queries",
               "refused", "why", "error"]
#: result columns the defect rules read, with the value meaning "not recorded"
BALL_COLUMNS = {"ball_out": 0.0, "ball_worst_ratio": math.nan, "eps_fail_max": math.nan, "eps_fail_ratio": math.nan,
                "returned_class": -1.0, "target": -1.0, "best_dropped": 0.0, "returned_adversarial": 0.0}
#: rows shown per flagged implementation and norm (the standing-out ones; all rows are in the run)
MAX_FLAG_ROWS = 4


#: what a result row records of a best the end-of-job re-check dropped (harness/measure/best_keeper.py)
BOUNDARY_COLUMNS = ("best_dropped", "returned_adversarial", "returned_distance")


def boundary_text(row: dict) -> str:
    """Why a row is a failure although its attack found an adversarial: the end-of-job re-check
    (harness/measure/best_keeper.py) found its kept best not adversarial on its own, a point on the
    decision boundary (a tie is never a success: harness/measure/success.py), and dropped it; with
    the library's returned point where that was judged adversarial in its batch. "" for any row
    whose best stood or that dropped nothing."""
    try:
        dropped = float(row.get("best_dropped") or 0)
        best = float(row.get("distance", row.get("best_distance", math.nan)))
    except (TypeError, ValueError):
        return ""
    if not (dropped > 0 and math.isinf(best)):
        return ""
    ret, adv = row.get("returned_distance"), row.get("returned_adversarial")
    ret = float(ret) if isinstance(ret, (int, float, np.floating)) else math.nan
    returned = adv in (True, 1) and math.isfinite(ret)
    where = f"; the library's returned point, at {ret:.4g}, was judged adversarial in its batch" if returned else ""
    return (f": the end-of-job re-check dropped its kept best ({dropped:.0f} dropped), not adversarial on its own "
            f"(a point on the decision boundary: a tie is never a success), and nothing else it found was{where}")


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
    answer: str = ""                                     # against the top pick: "equivalent" / "inconclusive"
    estimate: float = float("nan")                       # per-image log(d_member / d_top), Hodges–Lehmann
    p_equivalent: float = float("nan")                   # TOST, Holm-adjusted over the members (NaN: top pick)
    images_to_decide: float = float("nan")               # inconclusive: images at which the test would decide
    decision: str = ""                                   # what would decide it (fidelity.sample_size.decision_text)
    yardstick: str = "none"                              # fidelity/yardstick.py: "exact", "envelope" or "none"
    ratio: float = float("nan")                          # median per-image ratio to that yardstick's reference

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
    flagged: dict[tuple[str, str], list[str]]             # (implementation, version) -> defect flags, this norm
    summary: str                                          # the recommendation's one-line "what to do"
    pair: Pair | None = None                              # the comparison that decided the verdict
    implementations: list[tuple[str, str]] = field(default_factory=list)  # every one of the family and norm
    weaker: dict[tuple[str, str], list[str]] = field(default_factory=dict)  # -> weakness flags (no defect)

    @property
    def id(self) -> str:
        return anchor("answer", self.family, self.norm)

    @property
    def trusted(self) -> bool:
        return self.verdict not in ("none",)

    @property
    def deciding(self) -> Member | None:
        """Of an inconclusive verdict, the member whose comparison needs the most images to decide
        (its ``images_to_decide`` and ``decision``), else None."""
        need = [m for m in self.members[1:] if math.isfinite(m.images_to_decide)]
        if self.verdict != "inconclusive" or not need:
            return None
        return max(need, key=lambda m: m.images_to_decide)

    @property
    def rerun_advice(self) -> Advice | None:
        """The advice that would decide an inconclusive verdict (rerun with that many images), None
        where none would (the dataset is too small) or the verdict is not inconclusive."""
        most = self.deciding
        if most is None:
            return None
        if not most.decision:  # a member without a decision's words is advised by its number of images alone
            return Advice("samples", round(most.images_to_decide))
        held = advice_of([most.decision])
        return held[0] if held else None

    @property
    def rerun(self) -> str:
        """What would decide an inconclusive verdict (the advice "rerun with --samples N", an
        ``Advised`` that keeps its value for each view), else ""."""
        most = self.deciding
        if most is None:
            return ""
        # the recommendation's own words: "cannot be decided on this dataset" when it is too small
        return most.decision or advice_sentence(self.rerun_advice)


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
    """The verdict of a recommendation row as one of ``VERDICTS``: fidelity.recommend's own word,
    else (an older report.json) "untrusted" is "none" and a trusted sole implementation "only
    implementation"."""
    word = str(row.get("verdict") or "").strip().lower()
    if word in VERDICTS:
        return word
    if word == "untrusted" or not bool(row.get("trusted", True)):
        return "none"
    members = row.get("trust_set") or []
    if int(_float(row.get("candidates"), 0) or 0) <= 1:
        return "only implementation"
    return "clear" if len(members) <= 1 else "tied"


def _decision(value: object) -> str:
    """A member's decision as its text, keeping the advice fidelity's ``Advised`` holds."""
    return value if isinstance(value, str) else str(value or "")


def _members(row: dict) -> list[Member]:
    out = []
    for m in row.get("trust_set") or []:
        if not isinstance(m, dict):
            continue
        out.append(Member(str(m.get("implementation", "")), str(m.get("library_version", "") or ""),
                          _float(m.get("optimality")), _interval(m.get("optimality_ci")), str(m.get("answer") or ""),
                          _float(m.get("estimate")), _float(m.get("p_equivalent", m.get("p_adjusted"))),
                          _float(m.get("images_to_decide", m.get("samples_to_separate"))),
                          _decision(m.get("decision")), str(m.get("yardstick") or "none"), _float(m.get("ratio"))))
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
                -p.effect_size, p.wins_b, p.wins_a, p.dist_b, p.dist_a, p.models, p.answer, p.better, -p.estimate,
                p.images_to_decide)


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
        own = {k: sorted(marks[(k[0], k[1], norm)]) for k in impls if (k[0], k[1], norm) in marks}
        # flagged: a defect, never trusted; weaker: only weaknesses (fidelity/flag_kinds.py)
        flagged = {k: defects(f) for k, f in own.items() if defects(f)}
        weaker = {k: weaknesses(f) for k, f in own.items() if k not in flagged}
        runner = row.get("runner_up")
        runner = str(runner) if isinstance(runner, str) else ""
        out.append(Answer(family, norm, verdict_word(row), members, top, _float(row.get("optimality")),
                          _interval(row.get("optimality_ci")), int(_float(row.get("candidates"), 1)), flagged,
                          str(row.get("summary") or row.get("note") or ""),
                          _deciding_pair(data, family, norm, top, members, runner, impls), impls, weaker))
    return out


def flag_anchor(implementation: str, version: str, norm: str) -> str:
    """The id of the block of rows the flags of one implementation and norm rest on."""
    return anchor("flag-rows", implementation, version, norm)


def _models_of(flags: pd.DataFrame, models: dict[str, Twin]) -> list[str]:
    """The models whose rows a set of findings rests on: each finding's model (every real model for
    a finding about all models), with its metamorphic twin for a twin-based flag. ``models``: the
    table's models, each as its ``Twin``."""
    real = [m for m, twin in models.items() if not twin.is_twin]
    out: list[str] = []
    for model, flag in zip(flags["model"].astype(str).tolist(), flags["flag"].astype(str).tolist()):
        named = real if model in ("*", "all models") else [model]
        for m in named:
            out.append(m)
            twin = models.get(m, Twin(m))
            for kind in evidence_twins(flag) if not twin.is_twin else ():  # the twins that raise it, and ~seed
                if twin.of(kind).name in models:
                    out.append(twin.of(kind).name)
            if twin.is_twin:
                out.append(twin.base_model)
    return [m for m in dict.fromkeys(out) if m in models]


def _why(rows: list[dict]) -> list[tuple[str, float]]:
    """Why each row stands out, and a priority to sort by (higher first): a failed status, a
    difference from the metamorphic twin, refused queries, a returned point worse than the best,
    then how far behind the envelope it is."""
    base = {(r["model"], r["sample"]): r["best_distance"] for r in rows if not r["twin"]}
    out = []
    for r in rows:
        d, ref, ret = r["best_distance"], r["d_star"], r["returned_distance"]
        why, score = [], 0.0
        if r["status"] != "ok":
            why.append(r["status"])
            score += 8
        other = base.get((r["base_model"], r["sample"])) if r["twin"] else None
        if other is not None and differs_on_twin(d, other):  # fidelity's evidence rule (1%, not the flag's)
            # a second seed's difference is the noise floor, shown beside the twin it judges
            seed = r["twin"] == SEED
            why.append("differs with another seed (noise)" if seed else "differs on the twin")
            score += 0 if seed else 4
        why_ball, score_ball = _ball_why(r)
        why += why_ball
        score += score_ball
        if r["refused"] > 0:
            why.append("queries refused")
            score += 2
        if math.isfinite(d) and not math.isnan(ret) and (math.isinf(ret) or ret > (1 + LAST_NOT_BEST_RTOL) * d):
            why.append("returned worse")
            score += 2
        if math.isfinite(ref) and ref > 0 and d > ref * (1 + 1e-9):
            ratio = d / ref
            why.append(f"{ratio:.2f}× d*" if math.isfinite(ratio) else "failed, others broke it"
                       + (" (its kept best was a boundary point, dropped at the re-check)"
                          if boundary_text(r) else ""))
            score += min(ratio - 1.0, 1.0) if math.isfinite(ratio) else 1.5
        out.append((", ".join(why), score))
    return out


def _ball_why(r: dict) -> tuple[list[str], float]:
    """What the minimal-ε search recorded of a fixed-ε attack's calls (``ball_*``, ``eps_fail_*``)
    and the class a targeted output reached, where it stands out: rows outside the ε-ball, an ε left
    unused, a third class instead of the target (fidelity/defects.py)."""
    why, score = [], 0.0
    if r.get("ball_out", 0) > 0:
        why.append(f"{r['ball_out']:.0f} calls outside the ball (d/ε up to {r.get('ball_worst_ratio', math.nan):.3g})")
        score += 3
    ratio = r.get("eps_fail_ratio", math.nan)
    if math.isinf(r["best_distance"]) and math.isfinite(ratio) and ratio < EPS_UNUSED_RATIO:
        why.append(f"failed at ε {r.get('eps_fail_max', math.nan):.3g} moving {ratio:.2g} of ε")
        score += 3
    reached, target, label = r.get("returned_class", -1), r.get("target", -1), r.get("label", math.nan)
    if target >= 0 and reached >= 0 and reached not in (target, label):
        why.append(f"reached class {reached:.0f}, not the target {target:.0f}")
        score += 3
    return why, score


def _flagged_job_rows(data: ReportData) -> dict[tuple[str, str, str], list[dict]]:
    """The result rows of every flagged implementation and norm as plain dicts (``ROW_COLUMNS``
    but ``why``), the last row of a (model, sample) winning; one pass over the table."""
    t = data.table
    flagged = set(zip(data.flags["implementation"].astype(str), data.flags["library_version"].astype(str),
                      data.flags["norm"].astype(str)))
    key = list(zip(t["implementation"].astype(str), t["library_version"].astype(str), t["norm"].astype(str)))
    keep = np.fromiter((k in flagged for k in key), bool, len(key))
    t = t[keep]
    d_star = {(c.model, c.norm): dict(zip(c.samples.tolist(), c.d_star.tolist())) for c in data.curves}
    n = len(t)

    def col(name: str, default: float) -> list[float]:
        if name not in t:
            return [default] * n
        return pd.to_numeric(t[name], errors="coerce").fillna(default).astype(float).tolist()

    text = {c: (t[c].fillna("").astype(str).tolist() if c in t else [""] * n) for c in ("status", "error")}
    queries = [a + b for a, b in zip(col("forwards", 0.0), col("backwards", 0.0))]
    # defect columns (absent in older runs: then nothing stands out for them)
    extra = {c: col(c, default) for c, default in BALL_COLUMNS.items()}
    twins = list(zip(t["base_model"].astype(str), t["twin"].astype(str)))
    out: dict[tuple[str, str, str], dict[tuple[str, int], dict]] = {}
    for i, (k, model, sample, label, best, ret, refused) in enumerate(zip(
            [x for x, kept in zip(key, keep) if kept], t["model"].astype(str).tolist(), t["sample"].tolist(),
            col("label", math.nan), col("best_distance", math.inf), col("returned_distance", math.nan),
            col("refused", 0.0))):
        error = text["error"][i]
        out.setdefault(k, {})[(model, sample)] = {
            "model": model, "base_model": twins[i][0], "twin": twins[i][1], "sample": sample, "label": label,
            "status": text["status"][i] or "ok",
            "best_distance": best, "d_star": d_star.get((model, k[2]), {}).get(sample, math.nan),
            "returned_distance": ret, "queries": queries[i], "refused": refused,
            "error": error.splitlines()[0][:120] if error else "", **{c: v[i] for c, v in extra.items()}}
    return {k: list(v.values()) for k, v in out.items()}


def flag_evidence_rows(data: ReportData, limit: int = MAX_FLAG_ROWS) -> dict[tuple[str, str, str], tuple[pd.DataFrame, int]]:
    """``{(implementation, version, norm): (rows, n)}``: for each flagged implementation and norm,
    the per-image rows (``ROW_COLUMNS``, ``d_star`` the envelope, ``why`` what stands out) of the
    models its flags name that stand out most, at most ``limit`` of the ``n`` such rows (a flag on a
    twin compares with its model, so the model's row of an image comes with the twin's)."""
    if data.flags.empty:
        return {}
    pairs = data.table[["model", "base_model", "twin"]].astype(str).drop_duplicates("model")
    models = {m: Twin(b, k) for m, b, k in sorted(pairs.itertuples(index=False))}
    jobs = _flagged_job_rows(data)
    out = {}
    for (impl, version, norm), f in data.flags.groupby(["implementation", "library_version", "norm"], sort=True):
        named = set(_models_of(f, models))
        rows = [r for r in jobs.get((str(impl), str(version), str(norm)), []) if r["model"] in named]
        why = _why(rows)
        ranked = sorted((i for i, (_, score) in enumerate(why) if score > 0),
                        key=lambda i: (-why[i][1], rows[i]["sample"]))[:limit]
        # a twin's row is read against its model's row of the same image and the seed twin's (the
        # noise floor): show them together
        partners = {(rows[i]["base_model"], rows[i]["sample"]) for i in ranked if rows[i]["twin"]}
        chosen = set(ranked)
        picked = sorted((i for i, r in enumerate(rows)
                         if i in chosen or (r["base_model"], r["sample"]) in partners),
                        key=lambda i: (rows[i]["sample"], rows[i]["model"]))
        frame = pd.DataFrame([{**rows[i], "why": why[i][0]} for i in picked], columns=ROW_COLUMNS)
        out[(str(impl), str(version), str(norm))] = (frame, sum(score > 0 for _, score in why))
    return out
