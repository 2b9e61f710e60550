"""Absolute yardsticks: how far an implementation lands from the exact minimum, against how far a
sound implementation of its family lands at the same settings (fidelity/README.md, "Yardsticks").

Every other verdict is relative: an implementation is compared with its siblings in the run. A
defect whose only symptom is a worse distance is invisible when no sound sibling ran. A yardstick
does not depend on which siblings ran:

- **exact**: on a model with exact minimal distances (``attackaudit exact``, the MILP of
  ``harness/exact``), per image the log ratio ``l = log(d / d_exact)`` of the implementation's
  best distance to the proven minimum (images the solver proved optimal, ``d_exact > 0``; an image
  it failed to break counts as worse than any ratio, ``l = +inf``);
- **envelope**: elsewhere (CNNs, user models), per image the log ratio to the envelope of the
  *strong* families of the norm (AttackBench's, ``strength.is_strong``) among the built-in
  implementations of the run, itself left out (an image no such implementation broke counts as
  better where it broke it, and is no evidence where it did not either);
- **none**: neither (no exact minimum and no strong built-in beside it, a targeted run, or run
  settings weaker than every measured yardstick).

Each family × norm × settings has a measured **bound** (``yardsticks.json``, written by
``benchmarks/yardstick.py`` from the built-ins that pass every rule and the defect corpus's patched
twins, two seeds, two digits MLPs with exact minima and, for the envelope, the digits CNNs too): the
largest one-sided 95% upper confidence bound of the median per-image log ratio of a sound
implementation of the family on one model and seed, plus a margin set on held-out images. A job
(implementation × model) is **worse than its yardstick** when more than half of its
images lie beyond that bound: an exact one-sided sign test of "median ≤ bound" with the image as
the unit, Benjamini–Hochberg over the implementation's own models (the flag rules' family). Such
an implementation gets the defect flag ``worse_than_yardstick`` and is never trusted, "only
implementation" included.

**A family label cannot buy trust.** A plugin (a library that is not one of the five built-ins,
``BUILTIN_LIBRARIES``) is judged against its **norm's** yardstick whatever family it names: the
loosest bound of the norm's strong families that are measured and not in shortfall. So renaming
its family changes the siblings it is lined up with, never whether it is trusted. A built-in
family without a measured bound (none of its implementations is sound, e.g. C&W L∞ on the digits
MLPs: every one carries a documented distance defect or a flag) is judged against the norm's
yardstick too. A strong family whose sound members land far beyond the norm's other strong families
at these settings (``shortfall``: adv-lib's PDGD and PDPGD at 0.25 of their steps, C&W L2 at 0.25
and 0.5) keeps its own bound,
measured on those sound members: a member is a defect only when it is worse than they are (our
settings' weakness is not a library's defect), and the family gets no trusted pick
(``yardstick_verdicts.annotate`` says it is weak at these settings).

Pure pandas / numpy; the data file is read once (no other I/O).
"""
from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Mapping

import numpy as np
import pandas as pd
from scipy import stats as sps

from ._table import IMPL_KEY, JOB_KEY, prepare, without_twins
from .equivalence import benjamini_hochberg
from .stats import ALPHA
from .strength import is_strong

YARDSTICK_FILE = Path(__file__).with_name("yardsticks.json")
#: the flag this module raises (flag_kinds.py: a defect)
FLAG = "worse_than_yardstick"
#: the yardsticks a verdict can use
KINDS = ("exact", "envelope", "none")
#: the attack libraries attackaudit ships adapters for (``attackaudit.adapters.BUILTIN_LIBRARIES``;
#: a plugin may not take these names): their family labels are the adapters', never a user's choice
BUILTIN_LIBRARIES = frozenset({"adv_lib", "foolbox", "art", "torchattacks", "cleverhans"})
#: a job is judged on at least this many images (5 images beyond the bound give p = 0.031)
MIN_IMAGES = 6
#: exact minima judge a (model, norm) when they cover at least this share of its images (and
#: ``MIN_IMAGES``): a few solved images of a hard norm (digits-mlp's L2) leave it to the envelope
EXACT_COVERAGE = 0.5
#: run settings within this relative tolerance of a measured setting use it (the scaled step
#: counts are rounded to integers, so the inferred steps_scale is approximate)
SETTINGS_RTOL = 0.1
ASSESS_COLUMNS = ["model", "norm", "implementation", "library_version", "library", "family", "yardstick", "basis",
                  "who", "setting", "n_images", "beyond", "median_log_ratio", "expected_log_ratio", "bound", "p", "q",
                  "flagged", "reason", "shortfall", "norm_expected_log_ratio"]


@lru_cache(maxsize=1)
def yardsticks() -> dict:
    """The parsed ``yardsticks.json`` (empty tables when the file is absent)."""
    if not YARDSTICK_FILE.is_file():
        return {"settings": [], "families": [], "norms": [], "steps": {}, "margin": 0.0}
    return json.loads(YARDSTICK_FILE.read_text(encoding="utf-8"))


# ------------------------------------------------------------------------------------ settings
def _steps_scale(t: pd.DataFrame) -> float | None:
    """The run's ``--steps-scale`` from the built-in rows' recorded parameters: each spec's scaled
    step count over its default (``yardsticks.json`` ``steps``), the median over specs; None when no
    row says it (no built-in with a step parameter, or parameters not recorded)."""
    steps = yardsticks().get("steps", {})
    if not steps or "params" not in t.columns:
        return None
    ratios = []
    for (impl, norm, params), _ in t.groupby(["implementation", "norm", "params"], sort=False, observed=True):
        known = steps.get(f"{impl}|{norm}")
        if not known:
            continue
        try:
            value = json.loads(params).get(known[0]) if isinstance(params, str) else None
        except (ValueError, AttributeError):
            value = None
        if isinstance(value, (int, float)) and known[1] > 0:
            ratios.append(float(value) / float(known[1]))
    return float(np.median(ratios)) if ratios else None


def run_settings(t: pd.DataFrame, settings: Mapping[str, float] | None = None) -> dict:
    """``{"steps_scale", "budget", "source"}`` of a prepared table: ``settings`` where given (a run's
    manifest config), else inferred (budget: the rows' most common positive budget; steps_scale:
    ``_steps_scale``); a value that cannot be told is None."""
    given = dict(settings or {})
    budget = given.get("budget")
    if budget is None and "budget" in t.columns:
        b = pd.to_numeric(t["budget"], errors="coerce")
        b = b[b > 0]
        budget = float(b.mode().iloc[0]) if len(b) else None
    scale = given.get("steps_scale")
    source = "given" if "steps_scale" in given else "inferred"
    if scale is None:
        scale = _steps_scale(t)
    return {"steps_scale": None if scale is None else float(scale), "budget": None if budget is None else float(budget),
            "source": source}


def fitting_settings(settings: Mapping[str, float | None]) -> list[str]:
    """The measured settings a run may be judged at, strongest first: those no stronger than the
    run's (steps_scale within ``SETTINGS_RTOL``, budget at most the run's). Fewer steps or a smaller
    budget leave an attack farther from the minimum, so a yardstick measured there is laxer. Empty
    when the run's settings are unknown or weaker than every measured one."""
    scale, budget = settings.get("steps_scale"), settings.get("budget")
    if scale is None or budget is None:
        return []
    fits = [s for s in yardsticks().get("settings", [])
            if s["steps_scale"] <= scale * (1 + SETTINGS_RTOL) and s["budget"] <= budget]
    return [s["name"] for s in sorted(fits, key=lambda s: (s["steps_scale"], s["budget"]), reverse=True)]


def setting_for(settings: Mapping[str, float | None]) -> str | None:
    """The strongest measured setting a run is judged at (``fitting_settings``), or None."""
    fits = fitting_settings(settings)
    return fits[0] if fits else None


# ------------------------------------------------------------------------------------ expectations
def _tables() -> tuple[dict, dict]:
    data = yardsticks()
    fam = {(r["yardstick"], r["setting"], r["family"], r["norm"]): r for r in data.get("families", [])}
    norm = {(r["yardstick"], r["setting"], r["norm"]): r for r in data.get("norms", [])}
    return fam, norm


def _usable(entry: dict | None) -> bool:
    return entry is not None and entry.get("bound") is not None


def expectation(yardstick: str, settings: list[str] | str | None, family: str, norm: str,
                library: str) -> dict | None:
    """The bound an implementation is judged against: ``{"bound", "expected", "basis", "who",
    "setting"}`` (log ratios; ``basis`` "family" or "norm"), or None where nothing is measured.
    ``settings``: the fitting measured settings, strongest first (``fitting_settings``); the
    family's (or norm's) entry at the strongest setting that has one is used (its bound was
    calibrated at that setting; a run with more steps or budget lands no farther). A built-in
    family with a usable measurement meets its own family's bound, in shortfall too (``shortfall``
    True, ``norm_expected`` the norm's strong families' expected log ratio): a defect is an
    implementation worse than sound members of its own family at these settings, while a family
    weak at these settings loses its trusted pick (``yardstick_verdicts.annotate``), never each
    member's standing. A plugin (``library`` not built-in) always meets its norm's yardstick,
    whatever family it names; a built-in family with no sound member, or whose sound members fail
    too many images to set a bound, meets its norm's too."""
    fits = [settings] if isinstance(settings, str) else list(settings or [])
    if not fits or yardstick not in ("exact", "envelope"):
        return None
    fam, nrm = _tables()
    own = [(s, fam.get((yardstick, s, family, norm))) for s in fits]
    own = [(s, e) for s, e in own if e is not None]
    entries = [(s, nrm.get((yardstick, s, norm))) for s in fits]
    entries = [(s, e) for s, e in entries if e is not None and e.get("bound") is not None]
    if library in BUILTIN_LIBRARIES and own and _usable(own[0][1]):
        e = own[0][1]
        short = bool(e.get("shortfall", False))
        return {"bound": float(e["bound"]), "expected": float(e["expected"]), "basis": "family",
                "who": f"sound {family}", "setting": own[0][0], "shortfall": short,
                "norm_expected": float(entries[0][1]["expected"]) if short and entries else float("nan")}
    if not entries:
        return None
    s0, n = entries[0]
    mine = next((e for e in (fam.get((yardstick, s, family, norm)) for s in fits) if e is not None), None)
    if library not in BUILTIN_LIBRARIES:
        why = "a plugin: its family label buys no laxer yardstick"
    elif mine is None:
        why = f"no sound {family} measured"
    else:
        why = f"sound {family} fail too many images to set a bound"
    return {"bound": float(n["bound"]), "expected": float(n["expected"]), "basis": "norm",
            "who": f"sound strong {norm} attacks ({', '.join(n['families'])})", "setting": s0, "why_norm": why}


# ------------------------------------------------------------------------------------ per image
def _untargeted_real(table: pd.DataFrame) -> pd.DataFrame:
    t = prepare(table)
    return without_twins(t[~t["targeted"]]) if len(t) else t


def exact_log_ratios(t: pd.DataFrame, exact: pd.DataFrame | None) -> pd.DataFrame:
    """Per (model, norm, implementation, library_version, sample) of a prepared untargeted table:
    ``log_ratio`` = log(best distance / exact minimum) on the images the solver proved optimal
    with a positive minimum (+inf where the implementation broke none; samples it has no row for
    count as not broken, as everywhere in fidelity)."""
    cols = [*JOB_KEY, "sample", "log_ratio"]
    if exact is None or exact.empty or t.empty:
        return pd.DataFrame(columns=cols)
    e = exact[exact["status"].astype(str) == "optimal"]
    e = e.assign(reference=pd.to_numeric(e["exact_distance"], errors="coerce").astype(float))
    e = e[np.isfinite(e["reference"]) & (e["reference"] > 0)]
    keys = ["model", "norm", "sample"] + (["dataset"] if "dataset" in e.columns and "dataset" in t.columns else [])
    e = e.drop_duplicates(keys, keep="last")[keys + ["reference"]]
    jobs = t[[*JOB_KEY] + (["dataset"] if "dataset" in keys else [])].drop_duplicates(JOB_KEY)
    grid = jobs.merge(e, on=[k for k in keys if k != "sample"], how="inner")
    # the run's own images of each (model, norm): exact rows of images it did not attack are no evidence
    ran = t[["model", "norm", "sample"]].drop_duplicates()
    grid = grid.merge(ran, on=["model", "norm", "sample"], how="inner")
    if grid.empty:
        return pd.DataFrame(columns=cols)
    d = grid.merge(t[[*JOB_KEY, "sample", "best_distance"]], on=[*JOB_KEY, "sample"], how="left")
    dist = d["best_distance"].astype(float).fillna(np.inf).to_numpy()
    with np.errstate(divide="ignore"):
        d["log_ratio"] = np.log(dist / d["reference"].to_numpy(float))
    return d[cols]


def envelope_log_ratios(t: pd.DataFrame, skip: set[tuple[str, str]] | None = None) -> pd.DataFrame:
    """Per (model, norm, implementation, library_version, sample) of a prepared untargeted table,
    for the (model, norm) not in ``skip``: ``log_ratio`` = log(best distance / the smallest distance
    any *other* built-in implementation of a strong family of the norm found). +inf where only the
    envelope broke the image, −inf where only the implementation did, left out where neither did
    or the image needed no attack (clean misclassified). An implementation with no other strong
    built-in beside it on that model has no envelope: no rows."""
    cols = [*JOB_KEY, "sample", "log_ratio"]
    out = []
    for (model, norm), g in t.groupby(["model", "norm"], sort=True):
        if skip and (model, norm) in skip:
            continue
        wide = g.pivot_table(index=IMPL_KEY, columns="sample", values="best_distance", aggfunc="last").fillna(np.inf)
        meta = g.drop_duplicates(IMPL_KEY).set_index(IMPL_KEY)[["library", "family"]].reindex(wide.index)
        strong = np.array([lib in BUILTIN_LIBRARIES and is_strong(fam, norm)
                           for lib, fam in zip(meta["library"], meta["family"])], bool)
        if not strong.any():
            continue
        d = wide.to_numpy(float)
        s = np.where(strong[:, None], d, np.inf)
        # per image the smallest strong distance and the one after it: an implementation's envelope
        # is the first unless it is that first itself
        order = np.argsort(s, axis=0, kind="stable")
        first = np.take_along_axis(s, order[:1], axis=0)[0]
        second = np.take_along_axis(s, order[1:2], axis=0)[0] if len(s) > 1 else np.full(d.shape[1], np.inf)
        own = strong[:, None] & (np.arange(len(d))[:, None] == order[0][None, :])
        env = np.where(own, second[None, :], first[None, :])
        d_star = d.min(axis=0)
        with np.errstate(divide="ignore", invalid="ignore"):
            lr = np.log(d / env)
        lr = np.where(np.isinf(d) & np.isinf(env), np.nan, lr)
        lr = np.where(np.isfinite(d) & np.isinf(env), -np.inf, lr)
        lr = np.where(np.isinf(d) & np.isfinite(env), np.inf, lr)
        lr = np.where((d_star[None, :] > 0) & (env > 0), lr, np.nan)
        alone = strong & (strong.sum() == 1)               # no other strong implementation: no envelope
        lr[alone] = np.nan
        long = pd.DataFrame(lr, index=wide.index, columns=wide.columns).stack(future_stack=True).rename("log_ratio")
        long = long.reset_index().dropna(subset=["log_ratio"])
        out.append(long.assign(model=model, norm=norm))
    return pd.concat(out, ignore_index=True)[cols] if out else pd.DataFrame(columns=cols)


def log_ratios(table: pd.DataFrame, exact: pd.DataFrame | None = None, everywhere: bool = False) -> pd.DataFrame:
    """Every job's per-image log ratio with the yardstick it is read against: on a (model, norm)
    with exact minima ("exact"), else to the strong envelope ("envelope"; ``everywhere``: on every
    (model, norm) too, as the benchmark measures both). Columns: JOB_KEY, sample, log_ratio, yardstick."""
    t = _untargeted_real(table)
    ex = exact_log_ratios(t, exact).assign(yardstick="exact")
    if len(ex):  # exact minima that cover too few of a (model, norm)'s images leave it to the envelope
        have = ex.groupby(["model", "norm"])["sample"].nunique()
        ran = t.groupby(["model", "norm"])["sample"].nunique()
        enough = {k for k, n in have.items() if n >= max(MIN_IMAGES, EXACT_COVERAGE * ran.get(k, 0))}
        ex = ex[[k in enough for k in zip(ex["model"], ex["norm"])]]
    covered = set() if everywhere else set(zip(ex["model"], ex["norm"]))
    env = envelope_log_ratios(t, covered).assign(yardstick="envelope")
    return pd.concat([x for x in (ex, env) if len(x)], ignore_index=True) if len(ex) or len(env) else \
        pd.DataFrame(columns=[*JOB_KEY, "sample", "log_ratio", "yardstick"])


# ------------------------------------------------------------------------------------ the test
def sign_test(values: np.ndarray, bound: float) -> tuple[int, int, float]:
    """(images beyond ``bound``, images, one-sided exact p of "median ≤ bound"): the binomial
    tail of the count beyond it at one half (NaN values left out)."""
    v = np.asarray(values, float)
    v = v[~np.isnan(v)]
    n, k = len(v), int((v > bound).sum())
    return k, n, float(sps.binom.sf(k - 1, n, 0.5)) if k else 1.0


def _ratio_text(lr: float) -> str:
    """A log ratio as "1.23×" ("∞×" where most images failed)."""
    if not np.isfinite(lr):
        return "∞×" if lr > 0 else "n/a"
    return f"{float(np.exp(lr)):.2f}×"


def pct_text(lr: float) -> str:
    """A log ratio as "N% farther" (or "at it" within 0.5%)."""
    if not np.isfinite(lr):
        return "it fails on most images"
    x = float(np.expm1(lr))
    return f"{x:.0%} farther" if x >= 0.005 else ("at it" if x > -0.005 else f"{-x:.0%} closer")


def assess(table: pd.DataFrame, exact: pd.DataFrame | None = None,
           settings: Mapping[str, float] | None = None, alpha: float = ALPHA) -> pd.DataFrame:
    """Every job's yardstick verdict: ``ASSESS_COLUMNS``, one row per (model, norm, implementation,
    library_version) of the real untargeted rows. ``yardstick`` "exact", "envelope" or "none"
    (``reason`` says why none); ``basis`` "family" or "norm" (``shortfall``: its family, judged on
    its own bound, is weak at these settings; ``norm_expected_log_ratio`` what the norm's strong
    families get); ``median_log_ratio`` over the job's
    images; ``p`` the sign test's, ``q`` BH over the implementation's own judged jobs; ``flagged``
    q < ``alpha`` on at least ``MIN_IMAGES`` images. ``settings``: the run's ``steps_scale`` and
    ``budget`` (a manifest's config); inferred from the rows where absent."""
    prepared = prepare(table)
    targeted = bool(prepared["targeted"].any()) if len(prepared) else False
    t = without_twins(prepared[~prepared["targeted"]]) if len(prepared) else prepared
    if t.empty:
        return pd.DataFrame(columns=ASSESS_COLUMNS)
    run = run_settings(t, settings)
    fits = fitting_settings(run)
    setting = fits[0] if fits else None
    lr = log_ratios(t, exact)
    meta = t.drop_duplicates(IMPL_KEY).set_index(IMPL_KEY)[["library", "family"]]
    by_job = {k: g for k, g in lr.groupby(JOB_KEY, sort=False)} if len(lr) else {}
    rows = []
    for key in t[JOB_KEY].drop_duplicates().itertuples(index=False, name=None):
        model, norm, impl, version = key
        lib, fam = meta.loc[(impl, version), "library"], meta.loc[(impl, version), "family"]
        row = dict(zip(JOB_KEY, key)) | {"library": lib, "family": fam, "yardstick": "none", "basis": "", "who": "",
                                         "setting": setting or "", "n_images": 0, "beyond": 0,
                                         "median_log_ratio": np.nan, "expected_log_ratio": np.nan, "bound": np.nan,
                                         "p": np.nan, "q": np.nan, "flagged": False, "reason": "",
                                         "shortfall": False, "norm_expected_log_ratio": np.nan}
        g = by_job.get(key)
        if g is None or g["log_ratio"].notna().sum() == 0:
            row["reason"] = ("targeted run: exact minima are untargeted" if targeted else
                             "no exact minimum on this model and no strong built-in attack of the norm beside it")
            rows.append(row)
            continue
        kind = str(g["yardstick"].iat[0])
        values = g["log_ratio"].to_numpy(float)
        row |= {"median_log_ratio": float(np.nanmedian(values)), "n_images": int(np.isfinite(values).sum()
                                                                                   + np.isinf(values).sum())}
        want = expectation(kind, fits, fam, norm, lib)
        if want is None:
            row["reason"] = (f"run settings (steps_scale {run['steps_scale']}, budget {run['budget']}) weaker than "
                             "every measured yardstick or unknown" if setting is None
                             else f"no {kind} yardstick measured for {norm} at {setting}")
            row["yardstick"] = "none"
            rows.append(row)
            continue
        k, n, p = sign_test(values, want["bound"])
        row |= {"yardstick": kind, "basis": want["basis"], "who": want["who"], "n_images": n, "beyond": k,
                "expected_log_ratio": want["expected"], "bound": want["bound"], "p": p, "setting": want["setting"],
                "reason": want.get("why_norm", ""), "shortfall": bool(want.get("shortfall", False)),
                "norm_expected_log_ratio": want.get("norm_expected", np.nan)}
        rows.append(row)
    out = pd.DataFrame(rows, columns=ASSESS_COLUMNS)
    judged = out["yardstick"] != "none"
    for _, idx in out[judged].groupby(["norm", *IMPL_KEY], sort=False).groups.items():
        q = benjamini_hochberg(out.loc[idx, "p"].to_numpy(float))
        out.loc[idx, "q"] = q
        out.loc[idx, "flagged"] = (q < alpha) & (out.loc[idx, "n_images"].to_numpy() >= MIN_IMAGES)
    out["flagged"] = out["flagged"].astype(bool)
    return out


def evidence(row: Mapping, n_jobs: int) -> str:
    """The words of one flagged job."""
    ref = ("the exact minimum" if row["yardstick"] == "exact"
           else "the envelope of the strong built-in attacks of its norm")
    basis = ("its family's yardstick" if row["basis"] == "family"
             else f"its norm's yardstick ({row['reason']})" if row.get("reason") else "its norm's yardstick")
    return (f"median per-image distance {_ratio_text(row['median_log_ratio'])} {ref} "
            f"({pct_text(row['median_log_ratio'])}) where {row['who']} get {_ratio_text(row['expected_log_ratio'])}; "
            f"{row['beyond']} of {row['n_images']} images beyond {_ratio_text(row['bound'])} ({basis}: the largest 95% "
            f"upper bound of a sound implementation's median on one model and seed at {row['setting']}, plus the "
            f"margin), sign "
            f"test p = {row['p']:.2g}, BH q = {row['q']:.2g} over its {n_jobs} judged model{'s' * (n_jobs != 1)}; "
            f"yardstick: {row['yardstick']}")


def yardstick_findings(table: pd.DataFrame, exact: pd.DataFrame | None = None,
                       settings: Mapping[str, float] | None = None, alpha: float = ALPHA,
                       assessed: pd.DataFrame | None = None) -> list[dict]:
    """The ``worse_than_yardstick`` findings: one per flagged job (JOB_KEY, flag, evidence);
    ``assessed``: ``assess`` of the same arguments, made already (``findings.findings``)."""
    a = assess(table, exact, settings, alpha) if assessed is None else assessed
    if a.empty or not a["flagged"].any():
        return []
    judged = a[a["yardstick"] != "none"].groupby(["norm", *IMPL_KEY]).size()
    return [{k: r[k] for k in JOB_KEY}
            | {"flag": FLAG, "evidence": evidence(r, int(judged[(r["norm"], r["implementation"], r["library_version"])]))}
            for r in a[a["flagged"]].to_dict(orient="records")]


__all__ = ["ASSESS_COLUMNS", "BUILTIN_LIBRARIES", "EXACT_COVERAGE", "FLAG", "KINDS", "MIN_IMAGES", "assess",
           "envelope_log_ratios", "evidence", "exact_log_ratios", "expectation", "fitting_settings", "log_ratios",
           "pct_text", "run_settings", "setting_for", "sign_test", "yardstick_findings", "yardsticks"]
