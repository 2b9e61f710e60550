"""Diff of two runs of the same grid (two library releases, or two configs): the release audit.

Both runs are measured against one joint envelope (the per-sample minimum over every
implementation of both runs), so a change in one implementation does not move the yardstick of
the others. Implementations are matched by ``implementation`` (library/name[:variant]) and norm;
their ``library_version`` may differ, which is the point.

Verdict (``VERDICT_RULE``, fidelity/README.md "Diff"): the evidence is weighed, not vetoed.
Each implementation and norm gets a score from three parts:

- performance: the paired Wilcoxon test on per-sample best distances, Holm-adjusted over every
  implementation compared (``stats.significant``), in the same direction as a material change:
  Δξ of at least ``min_delta`` or ΔASR of at least ``MIN_DELTA_ASR``. Worth ``PERFORMANCE_WEIGHT``
  (``LARGE_WEIGHT`` when |Δξ| ≥ ``LARGE_DELTA``), + when better, − when worse;
- flags that disappeared (+) and appeared (−), each worth its ``SEVERITY``.

``improved`` when the score is positive, ``regressed`` when negative, ``mixed`` when evidence
points both ways and cancels, ``unchanged`` when there is none; ``new`` / ``removed`` when the
implementation ran in only one run. ``reason`` shows every part, e.g. "ξ 0.00 → 1.00,
26 better / 0 worse (p = 1e-05), crash gone; new: last_not_best".
"""
from __future__ import annotations

from typing import Mapping

import numpy as np
import pandas as pd

from ._table import long_distances, prepare, without_twins
from .flags import flags as compute_flags
from .optimality import optimality
from .stats import ALPHA, holm, paired_comparison, significant
from .summary import REF_EPS

#: how much each flag weighs in a verdict when it appears (−) or disappears (+): results that
#: are wrong or missing (3) outweigh a suspect objective or strength (2), which outweighs an
#: inefficiency (1), so a crash that disappears outweighs a new last_not_best
SEVERITY: dict[str, int] = {"crash": 3, "timeout": 3, "invalid": 3, "out_of_box": 3, "label_bug": 3,
                            "silent_failure": 3, "below_exact": 3, "shift_sensitivity": 2,
                            "below_expected_strength": 2, "last_not_best": 1, "budget_overrun": 1,
                            "nondeterminism": 1, "optimality_gap": 1}
#: flags that count in a verdict (every flag with a severity)
VERDICT_FLAGS = frozenset(SEVERITY)
#: a significant paired change with a material ξ or ASR change weighs this much ...
PERFORMANCE_WEIGHT = 2
#: ... and this much when ξ moved by at least LARGE_DELTA (a large change is as serious as a crash)
LARGE_WEIGHT = 3
LARGE_DELTA = 0.1
#: an ASR change (at the reference ε) this large is material even when ξ moved less than min_delta
MIN_DELTA_ASR = 0.05
VERDICT_RULE = ("score = ±performance (Holm-adjusted paired Wilcoxon p < alpha with more samples on that side, and "
                f"|Δξ| ≥ min_delta or |ΔASR| ≥ {MIN_DELTA_ASR}; weight {PERFORMANCE_WEIGHT}, {LARGE_WEIGHT} when "
                f"|Δξ| ≥ {LARGE_DELTA}) + severity of flags gone − severity of flags new (3: crash, timeout, invalid, "
                "out_of_box, label_bug, silent_failure, below_exact; 2: shift_sensitivity, below_expected_strength; "
                "1: last_not_best, budget_overrun, nondeterminism, optimality_gap); improved if > 0, regressed if < 0, "
                "mixed if evidence both ways cancels, unchanged if none")
DIFF_COLUMNS = ["implementation", "library", "family", "norm", "model", "version_a", "version_b",
                "optimality_a", "optimality_b", "delta_optimality", "asr_a", "asr_b", "n_models", "n_samples",
                "n_better", "n_worse", "ties", "statistic", "p_value", "effect_size", "flags_a", "flags_b",
                "p_adjusted", "flags_appeared", "flags_disappeared", "score", "verdict", "reason"]
_KEY = ["norm", "implementation"]


def _flag_sets(fl: pd.DataFrame, by_model: bool) -> dict[tuple, set[str]]:
    out: dict[tuple, set[str]] = {}
    for r in fl.itertuples(index=False):
        key = (r.norm, r.implementation) + ((r.model,) if by_model else ())
        out.setdefault(key, set()).add(r.flag)
    return out


def _side_values(part: pd.DataFrame, models: list[str], eps_max, ref: float) -> tuple[float, float, np.ndarray]:
    """Mean ξ and ASR over ``models`` and the concatenated live distances, for one side."""
    xs, asr, live = [], [], []
    for _, g in part[part["model"].isin(models)].groupby("model", sort=True):
        d, ds = g["distance"].to_numpy(), g["d_star"].to_numpy()
        xs.append(optimality(d, ds, (eps_max or {}).get(g["norm"].iloc[0])))
        asr.append(float(np.mean(d <= ref)))
        live.append(d[g["live"].to_numpy()])
    if not xs:
        return float("nan"), float("nan"), np.zeros(0)
    return float(np.mean(xs)), float(np.mean(asr)), np.concatenate(live)


def _pct(v: float) -> str:
    return "—" if not np.isfinite(v) else f"{v:.0%}"


def _num(v: float) -> str:
    return "n/a" if not np.isfinite(v) else f"{v:.2f}"


def weigh(stat: dict, p_adj: float, xi: tuple[float, float], asr: tuple[float, float], appeared: set[str],
            gone: set[str], min_delta: float, alpha: float = ALPHA) -> tuple[str, str, int]:
    """(verdict, reason, score) of one implementation present in both runs: ``VERDICT_RULE``.
    ``stat``: ``paired_comparison(b, a)`` (``wins_a``: samples better in b)."""
    better, worse = stat["wins_a"], stat["wins_b"]
    d_xi = xi[1] - xi[0] if np.isfinite(xi[0]) and np.isfinite(xi[1]) else 0.0
    d_asr = asr[1] - asr[0] if np.isfinite(asr[0]) and np.isfinite(asr[1]) else 0.0
    weight = LARGE_WEIGHT if abs(d_xi) >= LARGE_DELTA else PERFORMANCE_WEIGHT
    perf = 0
    if significant(p_adj, better, worse, alpha) and (d_xi >= min_delta or d_asr >= MIN_DELTA_ASR):
        perf = weight
    elif significant(p_adj, worse, better, alpha) and (d_xi <= -min_delta or d_asr <= -MIN_DELTA_ASR):
        perf = -weight
    new, fixed = sorted(appeared & VERDICT_FLAGS), sorted(gone & VERDICT_FLAGS)
    plus = perf * (perf > 0) + sum(SEVERITY[f] for f in fixed)
    minus = -perf * (perf < 0) + sum(SEVERITY[f] for f in new)
    score = plus - minus
    parts = [f"ξ {_num(xi[0])} → {_num(xi[1])}"]
    if abs(d_asr) >= 0.005:
        parts.append(f"ASR {_pct(asr[0])} → {_pct(asr[1])}")
    p_text = f"p = {p_adj:.2g}" if p_adj >= 1e-4 else "p < 1e-4"
    parts.append(f"{better} better / {worse} worse ({p_text}"
                 + (", significant" if perf else (", not significant" if not (p_adj < alpha) else ", immaterial"))
                 + ")")
    parts += [f"{f} gone" for f in fixed]
    reason = ", ".join(parts) + (f"; new: {', '.join(new)}" if new else "")
    if score > 0:
        word = "improved"
    elif score < 0:
        word = "regressed"
    else:
        word = "mixed" if plus else "unchanged"
    return word, reason, score


def diff(table_a: pd.DataFrame, table_b: pd.DataFrame, *, alpha: float = ALPHA, min_delta: float = 0.02,
         by_model: bool = False, eps_max: Mapping[str, float] | None = None,
         ref_eps: Mapping[str, float] | None = None, flags_a: pd.DataFrame | None = None,
         flags_b: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per (norm, implementation) — and per model when ``by_model`` (``model`` is "*" otherwise):
    ``DIFF_COLUMNS``. ``*_a`` is before (``table_a``), ``*_b`` after; ``n_better`` counts samples
    where b found a smaller perturbation than a, ``effect_size`` the rank-biserial correlation in
    favour of b; the test pools the live samples of the models both ran on. ξ and ASR of the side
    that did not run a ``new``/``removed`` implementation are NaN. Flags are ``flags`` of each
    table unless given; twins only contribute through them. ``p_adjusted`` is Holm's over every
    row present in both runs (the audit is one family of tests); ``score``, ``verdict`` and
    ``reason`` follow ``VERDICT_RULE`` at family-wise level ``alpha``.
    """
    sides = {"a": prepare(table_a), "b": prepare(table_b)}
    fl = {s: (f if f is not None else compute_flags(sides[s])) for s, f in (("a", flags_a), ("b", flags_b))}
    fsets = {s: _flag_sets(fl[s], by_model) for s in fl}
    both = pd.concat([without_twins(t).drop_duplicates(["model", "norm", "implementation", "sample"], keep="last")
                      .assign(_side=s) for s, t in sides.items()], ignore_index=True)
    if both.empty:
        return pd.DataFrame(columns=DIFF_COLUMNS)
    long = long_distances(both, keys=["implementation", "_side"])
    meta = both.groupby(_KEY + ["_side"])[["library", "family", "library_version"]].agg(
        lambda s: ",".join(sorted(set(s.astype(str)) - {""})))
    refs = {**REF_EPS, **(ref_eps or {})}
    group_keys = _KEY + (["model"] if by_model else [])
    rows = []
    for key, part in long.groupby(group_keys, sort=True):
        norm, impl = key[0], key[1]
        models = {s: sorted(part.loc[part["_side"] == s, "model"].unique()) for s in ("a", "b")}
        shared = sorted(set(models["a"]) & set(models["b"]))
        present = [s for s in ("a", "b") if models[s]]
        use = {s: shared if shared else models[s] for s in ("a", "b")}
        ref = float(refs.get(norm, np.inf))
        vals = {s: _side_values(part[part["_side"] == s], use[s], eps_max, ref) for s in ("a", "b")}
        fkey = (norm, impl) + ((key[2],) if by_model else ())
        # a finding about all models (model "*": class-conditional label_bug, strength) counts on each
        every = (norm, impl, "*") if by_model else fkey
        fa = fsets["a"].get(fkey, set()) | fsets["a"].get(every, set())
        fb = fsets["b"].get(fkey, set()) | fsets["b"].get(every, set())
        stat = paired_comparison(vals["b"][2], vals["a"][2]) if shared else paired_comparison([], [])
        delta = vals["b"][0] - vals["a"][0]
        verdict = "" if len(present) == 2 else ("new" if present == ["b"] else "removed")
        reason = "" if verdict == "" else f"only in run {present[0]}"
        m = meta.loc[(norm, impl, present[-1])]
        rows.append({"implementation": impl, "library": m["library"], "family": m["family"], "norm": norm,
                     "model": key[2] if by_model else "*",
                     "version_a": meta.loc[(norm, impl, "a"), "library_version"] if models["a"] else "",
                     "version_b": meta.loc[(norm, impl, "b"), "library_version"] if models["b"] else "",
                     "optimality_a": vals["a"][0], "optimality_b": vals["b"][0], "delta_optimality": delta,
                     "asr_a": vals["a"][1], "asr_b": vals["b"][1], "n_models": len(shared),
                     "n_samples": stat["n_samples"], "n_better": stat["wins_a"], "n_worse": stat["wins_b"],
                     "ties": stat["ties"], "statistic": stat["statistic"], "p_value": stat["p_value"],
                     "effect_size": stat["effect_size"], "flags_a": ",".join(sorted(fa)),
                     "flags_b": ",".join(sorted(fb)), "flags_appeared": ",".join(sorted(fb - fa)),
                     "flags_disappeared": ",".join(sorted(fa - fb)), "verdict": verdict, "reason": reason,
                     "_fa": fa, "_fb": fb})
    out = pd.DataFrame(rows)
    both = out["verdict"] == ""
    out["p_adjusted"] = np.nan
    out.loc[both, "p_adjusted"] = holm(out.loc[both, "p_value"].to_numpy())  # one family: the whole audit
    out["score"] = 0
    for i in np.flatnonzero(both.to_numpy()):
        r = out.iloc[i]
        stat = {"wins_a": int(r["n_better"]), "wins_b": int(r["n_worse"])}
        word, reason, score = weigh(stat, float(r["p_adjusted"]), (r["optimality_a"], r["optimality_b"]),
                                    (r["asr_a"], r["asr_b"]), r["_fb"] - r["_fa"], r["_fa"] - r["_fb"], min_delta,
                                    alpha)
        out.iloc[i, out.columns.get_loc("verdict")] = word
        out.iloc[i, out.columns.get_loc("reason")] = reason
        out.iloc[i, out.columns.get_loc("score")] = score
    return out[DIFF_COLUMNS]
