"""ε use of fixed-ε attacks across two runs: the part of a release audit that minimal distances miss.

A fixed-ε attack is made minimal by the harness's ε search (harness/measure/minimal.py), so a
release whose attack stops at a fraction of the ε it is given (its returned rows end at half the
ball) reaches the same minimal distances at a larger ε: the distances, and so ξ, can stay identical
while every robust accuracy its users publish at a fixed ε rises. Two measures, from what the
search records of every call (``ball_mean_ratio``: the mean returned-row distance / ε over its
calls; ``eps_success``: the smallest ε it was called with whose returned row was adversarial inside
the ball), per (norm, implementation) of kind ``fixed`` that ran in both runs, on the images that
ran (status ``ok``) in both, an image's rows on several models one block:

- **ε use**: the per-image mean distance / ε, new against old: a Wilcoxon signed-rank test on the
  per-image differences, and the shift of the median;
- **robust accuracy at ε** (the ε the user names, ``--eps``; default the report's reference ε per
  norm, ``summary.REF_EPS``): an image is broken at ε when the attack succeeded at a call ε ≤ ε (or
  the clean input already is adversarial); per image the share of its models broken, new against
  old, an exact sign test on the images that changed (McNemar with one model).

A change is **material** when it is significant at ``alpha`` and at least ``RATIO_DELTA`` (median ε
use) or ``RA_DELTA`` (robust accuracy) large. Less ε use or a higher robust accuracy is
``regressed``, the reverse ``improved``, both ways ``mixed``. ``merge`` folds that into the diff's
verdicts (fidelity/diff.py): an implementation otherwise ``unchanged`` or ``inconclusive`` takes
it, one whose verdict says the opposite becomes ``mixed``; the evidence is appended to the reason.
"""
from __future__ import annotations

from typing import Mapping

import math

import numpy as np
import pandas as pd
from scipy import stats as sps

from ._table import without_twins
from attackaudit.errors import InputError

#: how the evidence of an ε-use change begins (what a reader of an audit's reason looks for)
EVIDENCE_PREFIX = "ε use: returned rows"
#: a material change of ε use: the per-image median of distance / ε moved by at least this
RATIO_DELTA = 0.1
#: a material change of robust accuracy at the named ε: at least this many points (share of images)
RA_DELTA = 0.05
EPS_USE_COLUMNS = ["norm", "implementation", "eps", "n_images", "ratio_a", "ratio_b", "p_ratio", "ra_a", "ra_b",
                   "p_ra", "direction", "evidence"]


def _per_image(j: pd.DataFrame, column: str) -> np.ndarray:
    """(images,) the mean of ``column`` over an image's models (one block per image)."""
    return j.groupby("sample")[column].mean().to_numpy(float)


def _sign_p(diff: np.ndarray) -> float:
    """Two-sided exact sign test of per-image differences (zeros carry no evidence)."""
    up, down = int((diff > 0).sum()), int((diff < 0).sum())
    return float(sps.binomtest(up, up + down, 0.5).pvalue) if up + down else 1.0


def _wilcoxon_p(diff: np.ndarray) -> float:
    nz = diff[np.abs(diff) > 1e-12]
    if len(nz) < 1:
        return 1.0
    return float(sps.wilcoxon(nz, zero_method="wilcox", method="auto").pvalue) if len(nz) > 1 else 1.0


def _joined(a: pd.DataFrame, b: pd.DataFrame) -> pd.DataFrame:
    cols = ["model", "sample", "status", "best_distance", "ball_mean_ratio", "eps_success"]
    j = a[cols].merge(b[cols], on=["model", "sample"], suffixes=("_a", "_b"))
    return j[(j["status_a"] == "ok") & (j["status_b"] == "ok")]


def _one(j: pd.DataFrame, eps: float, alpha: float) -> dict:
    """The two measures of one implementation's joined rows (``_joined``) at ``eps``."""
    has = j["ball_mean_ratio_a"].notna() & j["ball_mean_ratio_b"].notna()
    ratio = j[has].assign(d=j["ball_mean_ratio_b"] - j["ball_mean_ratio_a"])
    r_a, r_b = _per_image(ratio, "ball_mean_ratio_a"), _per_image(ratio, "ball_mean_ratio_b")
    broken = j.assign(**{f"broken_{s}": ((j[f"best_distance_{s}"] == 0)
                                        | (pd.to_numeric(j[f"eps_success_{s}"], errors="coerce") <= eps)).astype(float)
                         for s in "ab"})
    b_a, b_b = _per_image(broken, "broken_a"), _per_image(broken, "broken_b")
    out = {"n_images": int(j["sample"].nunique()),
           "ratio_a": float(np.median(r_a)) if len(r_a) else np.nan,
           "ratio_b": float(np.median(r_b)) if len(r_b) else np.nan,
           "p_ratio": _wilcoxon_p(r_b - r_a), "ra_a": float(1 - b_a.mean()) if len(b_a) else np.nan,
           "ra_b": float(1 - b_b.mean()) if len(b_b) else np.nan, "p_ra": _sign_p(b_b - b_a)}
    less_use = out["ratio_a"] - out["ratio_b"] >= RATIO_DELTA and out["p_ratio"] < alpha
    more_use = out["ratio_b"] - out["ratio_a"] >= RATIO_DELTA and out["p_ratio"] < alpha
    weaker = out["ra_b"] - out["ra_a"] >= RA_DELTA and out["p_ra"] < alpha
    stronger = out["ra_a"] - out["ra_b"] >= RA_DELTA and out["p_ra"] < alpha
    worse, better = less_use or weaker, more_use or stronger
    out["direction"] = "mixed" if worse and better else "regressed" if worse else "improved" if better else ""
    out["evidence"] = (f"{EVIDENCE_PREFIX} at a median {out['ratio_a']:.2f} → {out['ratio_b']:.2f} of ε per call "
                       f"(Wilcoxon p = {out['p_ratio']:.2g}), robust accuracy at ε = {eps:.4g} "
                       f"{out['ra_a']:.0%} → {out['ra_b']:.0%} (sign test p = {out['p_ra']:.2g}) on {out['n_images']} images")
    return out


def eps_use(table_a: pd.DataFrame, table_b: pd.DataFrame, eps: Mapping[str, float], *,
            alpha: float = 0.05) -> pd.DataFrame:
    """``EPS_USE_COLUMNS``, one row per (norm, implementation) of kind ``fixed`` in both
    ``prepare``d tables (real models only) that recorded ``ball_mean_ratio`` and ``eps_success``;
    ``eps``: the ε per norm robust accuracy is read at (a norm absent from it is skipped)."""
    a, b = without_twins(table_a), without_twins(table_b)
    need = ["ball_mean_ratio", "eps_success", "kind"]
    if any(c not in t.columns for t in (a, b) for c in need):
        return pd.DataFrame(columns=EPS_USE_COLUMNS)
    a, b = a[a["kind"] == "fixed"], b[b["kind"] == "fixed"]
    rows = []
    for (norm, impl), ga in a.groupby(["norm", "implementation"], sort=True):
        gb = b[(b["norm"] == norm) & (b["implementation"] == impl)]
        if gb.empty or norm not in eps:
            continue
        j = _joined(ga, gb)
        if j.empty or j["ball_mean_ratio_a"].isna().all() or j["ball_mean_ratio_b"].isna().all():
            continue
        rows.append({"norm": norm, "implementation": impl, "eps": float(eps[norm]), **_one(j, float(eps[norm]), alpha)})
    return pd.DataFrame(rows, columns=EPS_USE_COLUMNS)


#: verdicts ``merge`` may replace by the ε-use direction, and those it may turn into ``mixed``
_REPLACEABLE = {"unchanged", "inconclusive"}
_OPPOSITE = {"regressed": "improved", "improved": "regressed"}


def merge(diff: pd.DataFrame, found: pd.DataFrame) -> pd.DataFrame:
    """``diff`` (fidelity/diff.py ``DIFF_COLUMNS``, ``model`` "*" or per model) with the material
    ε-use changes of ``found`` (``eps_use``) folded into ``verdict`` and ``reason``."""
    if found.empty or diff.empty:
        return diff
    out = diff.copy()
    material = found[found["direction"] != ""].set_index(["norm", "implementation"])
    for i, r in out.iterrows():
        key = (r["norm"], r["implementation"])
        if key not in material.index:
            continue
        m = material.loc[key]
        direction, verdict = str(m["direction"]), str(r["verdict"])
        if verdict in _REPLACEABLE:
            new = direction
        elif verdict == _OPPOSITE.get(direction) or (direction == "mixed" and verdict in _OPPOSITE):
            new = "mixed"
        elif verdict in _OPPOSITE or verdict == "mixed":
            new = verdict
        else:  # new, removed, could not run: one side only, nothing to compare
            continue
        out.at[i, "verdict"] = new
        reason = str(r["reason"] or "")
        out.at[i, "reason"] = f"{reason}; {m['evidence']}" if reason else str(m["evidence"])
    return out


def parse_eps(values: list[str] | None) -> dict[str, float]:
    """``--eps`` values (``0.1`` for every norm, or ``linf=0.03``, ``l2=0.5``) as {norm: ε}; a bare
    value applies to every norm (key "*"). ValueError (one line) naming the bad value."""
    out: dict[str, float] = {}
    for text in values or []:
        norm, _, value = text.rpartition("=")
        norm = norm.strip().lower() or "*"
        if norm not in ("*", "l0", "l1", "l2", "linf"):
            raise InputError(f"--eps {text!r}: the norm must be l0, l1, l2 or linf (e.g. --eps linf=0.03)", "eps")
        try:
            eps = float(value)
        except ValueError:
            eps = float("nan")
        if not (math.isfinite(eps) and eps > 0):
            raise InputError(f"--eps {text!r}: ε must be a positive number (e.g. --eps linf=0.03)", "eps")
        out[norm] = eps
    return out



def at(refs: Mapping[str, float], eps: Mapping[str, float] | None) -> dict[str, float]:
    """The ε per norm robust accuracy is read at: ``eps`` (``parse_eps``: a norm's own, else the
    bare "*" value for every norm) over the reference ε ``refs``."""
    eps = eps or {}
    return {n: eps.get(n, eps.get("*", refs[n])) for n in set(refs) | (set(eps) - {"*"})}
