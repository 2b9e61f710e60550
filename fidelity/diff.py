"""Diff of two runs of the same grid (two library releases, or two configs): the release audit.

Both runs are measured against one joint envelope (the per-sample minimum over every
implementation of both runs), so a change in one implementation does not move the yardstick of
the others. Implementations are matched by ``implementation`` (library/name[:variant]) and norm;
their ``library_version`` may differ, which is the point.

Verdict (``VERDICT_RULE``):
- ``new`` / ``removed``: the implementation and norm ran in only one of the runs;
- ``regressed``: the paired Wilcoxon test on per-sample best distances has ``p < alpha``, more
  samples got worse than better, and global optimality dropped by at least ``min_delta`` — or a
  flag of ``VERDICT_FLAGS`` appeared;
- ``improved``: the mirror image (significant, more better than worse, ξ up by ``min_delta``), or
  a ``VERDICT_FLAGS`` flag disappeared, and not regressed;
- ``unchanged`` otherwise. Both a significant test and a material ξ change are required because
  with many samples a 1% systematic shift is significant yet irrelevant, and a large ξ change on
  few samples may be noise.
"""
from __future__ import annotations

from typing import Mapping

import numpy as np
import pandas as pd

from ._table import long_distances, prepare, without_twins
from .flags import flags as compute_flags
from .optimality import optimality
from .stats import paired_comparison
from .summary import REF_EPS

#: flags whose appearance alone makes a release a regression (they make results or outputs wrong)
VERDICT_FLAGS = frozenset({"crash", "timeout", "invalid", "out_of_box", "label_bug", "silent_failure",
                           "last_not_best", "shift_sensitivity", "below_exact"})
VERDICT_RULE = ("regressed: p < alpha, n_worse > n_better and Δξ <= -min_delta, or a verdict flag appeared; "
                "improved: the mirror image, or a verdict flag disappeared; otherwise unchanged")
DIFF_COLUMNS = ["implementation", "library", "family", "norm", "model", "version_a", "version_b",
                "optimality_a", "optimality_b", "delta_optimality", "asr_a", "asr_b", "n_models", "n_samples",
                "n_better", "n_worse", "ties", "statistic", "p_value", "effect_size", "flags_a", "flags_b",
                "flags_appeared", "flags_disappeared", "verdict", "reason"]
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


def _verdict(p: float, better: int, worse: int, delta: float, appeared: set[str], gone: set[str],
             alpha: float, min_delta: float) -> tuple[str, str]:
    severe_new, severe_gone = sorted(appeared & VERDICT_FLAGS), sorted(gone & VERDICT_FLAGS)
    if p < alpha and worse > better and delta <= -min_delta:
        return "regressed", f"worse on {worse} samples vs better on {better} (p={p:.2g}), Δξ={delta:+.3f}"
    if severe_new:
        return "regressed", f"new flag(s): {', '.join(severe_new)}"
    if p < alpha and better > worse and delta >= min_delta:
        return "improved", f"better on {better} samples vs worse on {worse} (p={p:.2g}), Δξ={delta:+.3f}"
    if severe_gone:
        return "improved", f"flag(s) gone: {', '.join(severe_gone)}"
    return "unchanged", f"Δξ={delta:+.3f}, p={p:.2g}" if np.isfinite(delta) else "unchanged"


def diff(table_a: pd.DataFrame, table_b: pd.DataFrame, *, alpha: float = 0.01, min_delta: float = 0.02,
         by_model: bool = False, eps_max: Mapping[str, float] | None = None,
         ref_eps: Mapping[str, float] | None = None, flags_a: pd.DataFrame | None = None,
         flags_b: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per (norm, implementation) — and per model when ``by_model`` (``model`` is "*" otherwise):
    ``DIFF_COLUMNS``. ``*_a`` is before (``table_a``), ``*_b`` after; ``n_better`` counts samples
    where b found a smaller perturbation than a, ``effect_size`` the rank-biserial correlation in
    favour of b; the test pools the live samples of the models both ran on. ξ and ASR of the side
    that did not run a ``new``/``removed`` implementation are NaN. Flags are ``flags`` of each
    table unless given; twins only contribute through them.
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
        fa, fb = fsets["a"].get(fkey, set()), fsets["b"].get(fkey, set())
        stat = paired_comparison(vals["b"][2], vals["a"][2]) if shared else paired_comparison([], [])
        delta = vals["b"][0] - vals["a"][0]
        if len(present) == 2:
            verdict, reason = _verdict(stat["p_value"], stat["wins_a"], stat["wins_b"], delta, fb - fa, fa - fb,
                                       alpha, min_delta)
        else:
            verdict = "new" if present == ["b"] else "removed"
            reason = f"only in run {present[0]}"
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
                     "flags_disappeared": ",".join(sorted(fa - fb)), "verdict": verdict, "reason": reason})
    return pd.DataFrame(rows, columns=DIFF_COLUMNS)
