"""What a yardstick verdict says (fidelity/README.md, "Yardsticks"): each implementation's standing
against its absolute yardstick (``yardstick.assess``), and the words and columns a trust set
carries: its ratio to the exact minimum (or the strong envelope), and for a sole implementation
whether it met its yardstick ("only implementation" is trusted only then).
"""
from __future__ import annotations

from typing import Mapping

import numpy as np
import pandas as pd
from scipy import stats as sps

from ._table import IMPL_KEY, prepare
from .advice import Advice
from .stats import ALPHA
from .yardstick import MIN_IMAGES, assess, log_ratios, pct_text

STANDING_COLUMNS = ["norm", "implementation", "library_version", "yardstick", "ratio", "expected_ratio", "bound_ratio",
                    "who", "n_images", "flagged", "status", "samples_needed", "reason", "shortfall",
                    "norm_expected_ratio"]

#: the column of ``annotate``'s rows that keeps the advice its words give (a tuple of ``Advice``):
#: each view words it from these values (reports/wording.py ``report_advice``)
ADVICE = "advice"


def images_needed(beyond: int, n: int, alpha: float = ALPHA, power: float = 0.8, cap: int = 4096) -> int | None:
    """The fewest images at which the sign test would show a job's median beyond its bound with
    ``power``, were each image beyond it as often as here (``beyond`` of ``n``, a plug-in share);
    None when at most half are (more images would not show it) or beyond ``cap``."""
    share = beyond / n if n else 0.0
    if share <= 0.5:
        return None
    m = max(n, MIN_IMAGES)
    while m <= cap:
        critical = int(sps.binom.isf(alpha, m, 0.5)) + 1       # the smallest count with p < alpha
        if sps.binom.sf(critical - 1, m, share) >= power:
            return m
        m = int(np.ceil(m * 1.25))
    return None


def standing(table: pd.DataFrame, exact: pd.DataFrame | None = None,
             settings: Mapping[str, float] | None = None, assessed: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per (norm, implementation, library_version): the yardstick its verdict used ("exact" where
    any of its models has exact minima, else "envelope", else "none"), its median per-image
    ``ratio`` to that reference over those models' images, the ``expected_ratio`` and
    ``bound_ratio`` of its yardstick (as ratios), ``who`` sets it, whether it is ``flagged``, and
    its ``status``: "worse" (flagged), "undecided" (a judged model's median lies beyond the bound,
    not shown: ``samples_needed`` per model would show it with 80% power at the share seen),
    "meets" (every judged model's median within the bound) or "none"; ``shortfall``: its family is
    weak at these settings (its sound members land far beyond the norm's strong families, whose
    expected ratio is ``norm_expected_ratio``). ``STANDING_COLUMNS``."""
    a = assess(table, exact, settings) if assessed is None else assessed
    if a.empty:
        return pd.DataFrame(columns=STANDING_COLUMNS)
    lr = log_ratios(table, exact)
    per_model = prepare(table).groupby(["model", "norm"])["sample"].nunique()
    rows = []
    for (norm, impl, version), g in a.groupby(["norm", *IMPL_KEY], sort=True):
        used = [k for k in ("exact", "envelope") if (g["yardstick"] == k).any()]
        kind = used[0] if used else "none"
        mask = (lr["norm"] == norm) & (lr["implementation"] == impl) & (lr["library_version"] == version) \
            if len(lr) else np.zeros(0, bool)
        if kind == "none":
            have = [k for k in ("exact", "envelope") if len(lr) and (mask & (lr["yardstick"] == k)).any()]
            mine = lr[mask & (lr["yardstick"] == have[0])] if have else lr.iloc[0:0]
            rows.append({"norm": norm, "implementation": impl, "library_version": version, "yardstick": "none",
                         "ratio": float(np.exp(np.nanmedian(mine["log_ratio"]))) if len(mine) else np.nan,
                         "expected_ratio": np.nan, "bound_ratio": np.nan, "who": "",
                         "n_images": int(len(mine)), "flagged": False, "status": "none", "samples_needed": np.nan,
                         "reason": str(g["reason"].iat[0]), "shortfall": False, "norm_expected_ratio": np.nan})
            continue
        jobs = g[g["yardstick"] == kind]
        mine = lr[mask & (lr["yardstick"] == kind) & lr["model"].isin(set(jobs["model"]))]
        values = mine["log_ratio"].to_numpy(float)
        judged = g[g["yardstick"] != "none"]
        flagged = bool(g["flagged"].any())
        over = judged[(judged["median_log_ratio"] > judged["bound"]) & ~judged["flagged"]]
        need = [images_needed(int(r.beyond), int(r.n_images)) for r in over.itertuples(index=False)]
        samples = [np.ceil(m * per_model.get((r.model, norm), r.n_images) / max(int(r.n_images), 1))
                   for m, r in zip(need, over.itertuples(index=False)) if m is not None]
        status = "worse" if flagged else "undecided" if len(over) else "meets"
        rows.append({"norm": norm, "implementation": impl, "library_version": version, "yardstick": kind,
                     "ratio": float(np.exp(np.nanmedian(values))) if len(values) else np.nan,
                     "expected_ratio": float(np.exp(jobs["expected_log_ratio"].iat[0])),
                     "bound_ratio": float(np.exp(jobs["bound"].iat[0])), "who": str(jobs["who"].iat[0]),
                     "n_images": int(len(values)), "flagged": flagged, "status": status,
                     "samples_needed": float(max(samples)) if samples and status == "undecided" else np.nan,
                     "reason": "", "shortfall": bool(jobs["shortfall"].astype(bool).any()),
                     "norm_expected_ratio": float(np.exp(jobs["norm_expected_log_ratio"].astype(float).iat[0]))})
    return pd.DataFrame(rows, columns=STANDING_COLUMNS)


def verdict_text(s: Mapping) -> str:
    """"not trusted: N% farther than the exact minimum where sound <family> get M%" (or the
    envelope's words) for a flagged standing row; "" otherwise."""
    if not s or not s.get("flagged"):
        return ""
    ref = "the exact minimum" if s["yardstick"] == "exact" else "the strong envelope of its norm"
    expected = pct_text(np.log(s["expected_ratio"]))
    bound = f"(bound {s['bound_ratio']:.2f}×)"
    if not np.isfinite(np.log(s["ratio"])):
        # a median of ∞ is no distance "farther than" anything: most images found no adversarial
        return (f"not trusted: it finds no adversarial on most images, where {s['who']} get {expected} "
                f"than {ref} (median per image) {bound}")
    return (f"not trusted: {pct_text(np.log(s['ratio']))} than {ref} (median per image) where {s['who']} get "
            f"{expected} {bound}")


def ratio_text(s: Mapping) -> str:
    """A trusted pick's distance to its yardstick's reference, short: "1.01× exact",
    "1.03× strong envelope", "" without a yardstick."""
    if not s or s.get("yardstick") not in ("exact", "envelope") or not np.isfinite(s.get("ratio", np.nan)):
        return ""
    return f"{s['ratio']:.2f}× {'exact' if s['yardstick'] == 'exact' else 'strong envelope'}"


def manifest_settings(manifests: list[dict] | None) -> dict | None:
    """The ``steps_scale`` and ``budget`` the run(s) were made with (their manifests' config), or
    None when no manifest says or merged runs disagree (``run_settings`` then infers them)."""
    seen = {(float(c.get("steps_scale", 1.0)), float(c.get("budget", 2000)))
            for m in manifests or [] for c in [m.get("config") or {}] if c}
    if len(seen) != 1:
        return None
    scale, budget = seen.pop()
    return {"steps_scale": scale, "budget": budget}


def annotate(rec: pd.DataFrame, stand: pd.DataFrame) -> pd.DataFrame:
    """``recommend``'s rows with each implementation's yardstick (``standing``): the row's
    ``yardstick``, ``ratio`` (the top pick's median per-image ratio to the exact minimum, or to the
    strong envelope) and ``expected_ratio`` (sound implementations of its yardstick's basis), the
    same three on every trust-set member, and in the words: a "none" whose named implementation
    failed its yardstick says by how much; an "only implementation" says whether a yardstick
    judged it."""
    if rec is None or rec.empty:
        return rec
    by = {(str(r["implementation"]), str(r["library_version"]), str(r["norm"])): r
          for r in stand.to_dict(orient="records")} if stand is not None and len(stand) else {}
    out = rec.copy()
    for col in ("yardstick", "ratio", "expected_ratio"):
        if col not in out.columns:
            out[col] = np.nan
    out["yardstick"] = out["yardstick"].astype(object)
    advised: dict = {}  # row → the advice its words give, kept as values (``ADVICE``)
    for i, row in out.iterrows():
        norm = str(row["norm"])
        members = []
        for m in row["trust_set"] if isinstance(row["trust_set"], list) else []:
            s = by.get((str(m.get("implementation")), str(m.get("library_version") or ""), norm), {})
            members.append(m | {"yardstick": s.get("yardstick", "none"), "ratio": _num(s.get("ratio")),
                                "expected_ratio": _num(s.get("expected_ratio"))})
        if isinstance(row["trust_set"], list):
            out.at[i, "trust_set"] = members
        s = by.get((str(row["implementation"]), str(row["library_version"] or ""), norm), {})
        out.at[i, "yardstick"] = s.get("yardstick", "none")
        out.at[i, "ratio"] = _num(s.get("ratio"))
        out.at[i, "expected_ratio"] = _num(s.get("expected_ratio"))
        words = verdict_text(s)
        if s.get("shortfall") and row["trusted"]:  # a family weak at these settings gets no trusted pick
            for col, value in weak_family(row, s).items():
                out.at[i, col] = value
        elif row["verdict"] == "none" and words:
            out.at[i, "note"] = f"{row['implementation']} {words}; {row['note']}".rstrip("; ")
            out.at[i, "summary"] = f"{row['implementation']} {words}. {row['summary']}"
        elif s.get("status") == "undecided" and row["trusted"]:
            need = s.get("samples_needed")
            advice = (Advice("samples", int(need)) if np.isfinite(_num(need))  # worded: str(advice)
                      else "more images would not decide it")
            if isinstance(advice, Advice):
                advised[i] = (advice,)
            words = (f"{row['implementation']}'s median per-image distance, {ratio_text(s)}, lies beyond its "
                     f"yardstick ({s['bound_ratio']:.2f}×, where {s['who']} get {s['expected_ratio']:.2f}×), "
                     f"not shown on these images: {advice}")
            if row["verdict"] == "only implementation":  # trusted alone only when it meets its yardstick
                out.at[i, "verdict"] = "inconclusive"
                out.at[i, "images_to_decide"] = _num(need)
                out.at[i, "samples_to_separate"] = _num(need)
                out.at[i, "summary"] = f"inconclusive: {words}. {row['summary']}"
            else:
                out.at[i, "summary"] = f"{row['summary']}. {words}"
            out.at[i, "note"] = "; ".join(x for x in (str(row["note"] or ""), words) if x)
        elif row["verdict"] == "only implementation":
            if s.get("status") == "meets":
                extra = (f"it meets its yardstick: {ratio_text(s)} (median per image) where {s['who']} get "
                         f"{s['expected_ratio']:.2f}× (bound {s['bound_ratio']:.2f}×)")
            else:
                extra = f"no yardstick judged it ({s.get('reason') or 'no exact minimum or strong envelope'})"
            out.at[i, "summary"] = f"{row['summary']}; {extra}"
    out[ADVICE] = [advised.get(i, ()) for i in out.index]
    return out


def weak_family(row: Mapping, s: Mapping) -> dict:
    """The "none" verdict of a family in shortfall whose pick would otherwise be trusted: its
    members are not defects (each is within its sound family's bound), but sound members of the
    family land far beyond the norm's strong families at these settings, so no member is a pick."""
    ref = "the exact minimum" if s["yardstick"] == "exact" else "the strong envelope"
    words = (f"{row['family']} is weak under {row['norm']} at these settings: {row['implementation']} lands "
             f"{s['ratio']:.2f}× {ref} (median per image) where sound {row['family']} get {s['expected_ratio']:.2f}× "
             f"and the norm's strong families {s['norm_expected_ratio']:.2f}×; none is trusted (more steps or "
             "budget, or another family of the norm)")
    return {"verdict": "none", "trusted": False, "trust_set": [], "note": "; ".join(
        x for x in (words, str(row["note"] or "")) if x), "summary": f"none: {words}. {row['summary']}"}


def _num(x) -> float:
    try:
        return float(x)
    except (TypeError, ValueError):
        return float("nan")


def annotated(rec: pd.DataFrame, table: pd.DataFrame, exact: pd.DataFrame | None = None,
              settings: Mapping[str, float] | None = None) -> pd.DataFrame:
    """``rec`` annotated with its table's yardsticks (``annotate``, ``standing``) when ``exact`` or
    ``settings`` is given; as it is (the yardstick columns empty) otherwise."""
    if exact is None and settings is None:
        return rec
    return annotate(rec, standing(table, exact, settings))


__all__ = ["STANDING_COLUMNS", "annotate", "annotated", "images_needed", "manifest_settings", "ratio_text", "standing",
           "verdict_text", "weak_family"]
