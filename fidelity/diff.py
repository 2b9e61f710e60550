"""Diff of two runs of the same grid (two library releases, or two configs): the release audit.

Implementations are matched by ``implementation`` (library/name[:variant]) and norm; their
``library_version`` may differ, which is the point. ξ and ASR before/after are shown against one
joint envelope (the per-sample minimum over every implementation of both runs).

The verdict (``VERDICT_RULE``, fidelity/README.md "Diff") rests on the implementation's own rows
only, so that it never depends on its siblings or on how many the audit holds:

- **identical rows** (same distance within ``IDENTICAL_RTOL`` = 1e-6 relative, a few float32 ulps, and the same status on every image of
  every shared model, and the same ``OWN_RESULT_COLUMNS`` and twin rows that its own-result flags
  read) are ``unchanged``, whatever happened around them;
- **performance**: per image (its rows on every shared model one block, ``equivalence``), the log
  two endpoints of ``equivalence.pair_test`` (failure rate, and the log ratio new/old on the images
  both runs broke), on the images that ran (status ``ok``) in both runs; "different" beyond either
  margin, adjusted only over the implementation's own tests (its models with ``by_model``),
  counts ``PERFORMANCE_WEIGHT`` (``LARGE_WEIGHT`` when ξ on those images, measured against the
  implementation's own two runs, moved by ``LARGE_DELTA``), + when better, − when worse;
- **flags** of the implementation's own results that disappeared (+) and appeared (−), each worth
  its ``SEVERITY``; flags that compare with siblings (``RELATIVE_FLAGS``) are listed, not weighed.

``improved`` / ``regressed`` by the sign of the score; ``mixed`` when there is material evidence
both ways (each side worth at least ``PERFORMANCE_WEIGHT``: "crash gone; ξ 1.00 → 0.93 on the
images that ran") or when it cancels; ``inconclusive`` when the rows changed but neither a
difference nor an equivalence is shown and no flag moved; ``unchanged`` otherwise; ``new`` /
``removed`` when the implementation ran in one run only; ``could not run`` when every row of a
side is ``unsupported`` (the adapter's limitation, never the library's failure).
"""
from __future__ import annotations

from typing import Mapping

import numpy as np
import pandas as pd

from attackaudit.results.schema import DEFECT_COLUMNS, with_implementation
from ._table import UNSUPPORTED, is_twin, long_distances, prepare, without_twins
from .sample_size import images_to_decide
from .equivalence import DELTA, answer, pair_test, log_ratios, pair_values
from .headline import SHARE_DELTA
from .evidence_text import shown_text
from .sample_size import decision_text
from . import eps_use
from .flags import flags as compute_flags
from .optimality import optimality
from .stats import ALPHA, holm
from .summary import REF_EPS
from attackaudit.errors import InputError

#: how much each flag weighs in a verdict when it appears (−) or disappears (+): results that
#: are wrong or missing (3) outweigh a suspect objective or strength (2), which outweighs an
#: inefficiency (1), so a crash that disappears outweighs a new last_not_best. The defect rules
#: (defects.py) sit by what they say about the results: ``out_of_ball`` returns rows that break
#: the ε the attack was called with — results that are wrong, as ``out_of_box`` — (3); ``eps_unused``
#: (a step rule that leaves the ball unused: valid results, a weaker attack, as a shift-sensitive
#: objective) and ``batch_dependence`` (valid results that depend on the rest of the batch: a
#: systematic fault, unlike the 1 of ``nondeterminism``'s unseeded noise) (2)
SEVERITY: dict[str, int] = {"crash": 3, "timeout": 3, "invalid": 3, "out_of_box": 3, "out_of_ball": 3,
                            "label_bug": 3, "fallback_output": 3, "silent_failure": 3, "below_exact": 3, "shift_sensitivity": 2,
                            "eps_unused": 2, "batch_dependence": 2, "below_expected_strength": 2,
                            "last_not_best": 1, "budget_overrun": 1, "nondeterminism": 1, "optimality_gap": 1}
#: flags that count in a verdict (every flag with a severity) ...
VERDICT_FLAGS = frozenset(SEVERITY)
#: ... except these, which compare an implementation with its siblings: listed, never weighed
RELATIVE_FLAGS = frozenset({"optimality_gap", "below_expected_strength"})
#: a performance change shown different beyond δ weighs this much ...
PERFORMANCE_WEIGHT = 2
#: ... and this much when ξ moved by at least LARGE_DELTA (a large change is as serious as a crash)
LARGE_WEIGHT = 3
LARGE_DELTA = 0.1


def _severity_text() -> str:
    """"3: crash, timeout, …; 2: …; 1: …" over the weighed flags, from ``SEVERITY``."""
    tiers = sorted({SEVERITY[f] for f in VERDICT_FLAGS - RELATIVE_FLAGS}, reverse=True)
    return "; ".join(f"{w}: " + ", ".join(f for f in SEVERITY if SEVERITY[f] == w and f not in RELATIVE_FLAGS)
                     for w in tiers)


VERDICT_RULE = (f"identical rows: unchanged. Else score = ±performance (the headline new/old on the robustness curve, "
                f"on the images that ran in both: the share of images worse beyond ±25% or failing, beside failure rate "
                f"(±5 points) and the typical per-image log ratio (±{np.expm1(DELTA):.0%}), adjusted over "
                f"the implementation's own tests only; weight {PERFORMANCE_WEIGHT}, {LARGE_WEIGHT} when ξ moved by ≥ {LARGE_DELTA}) + severity "
                f"of own-result flags gone − severity of own-result flags new ({_severity_text()}); mixed if both "
                "sides weigh ≥ 2 or cancel, improved if > 0, regressed if < 0, inconclusive if the rows changed and "
                "nothing was shown, unchanged otherwise")
DIFF_COLUMNS = ["implementation", "library", "family", "norm", "model", "version_a", "version_b",
                "optimality_a", "optimality_b", "delta_optimality", "asr_a", "asr_b", "failure_a", "failure_b",
                "n_models", "n_samples",
                "n_better", "n_worse", "ties", "statistic", "p_value", "effect_size", "flags_a", "flags_b",
                "p_adjusted", "answer", "estimate", "images_to_decide", "identical", "flags_appeared",
                "flags_disappeared", "score", "verdict", "reason"]
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


#: "identical" rows: distances are float32, and a refactor that reorders a sum moves them by a few
#: ulps (6e-8 relative each): adv-lib's FMN 0.2.2 → 0.2.6 moved 0.55057406 to 0.55057412, which
#: at 1e-9 was a "change" that no test could decide ("inconclusive: rerun with --samples 313")
IDENTICAL_RTOL = 1e-6
#: the same for ``best_margin`` in logit units (0.2.2 → 0.2.6: 2.0164e-5 against 2.0127e-5)
MARGIN_ATOL = 1e-6


def _own_rows(part_a: pd.DataFrame, part_b: pd.DataFrame, share_delta: float = SHARE_DELTA) -> dict:
    """``share_delta``: the share endpoint's per-image threshold (a wider materiality margin widens it).
    The implementation's own rows in both runs (``prepare``d rows of one implementation and
    norm, maybe one model): ``identical``, the per-image log ratios new/old on the images that ran
    in both (``x``), and ξ before/after on those images against the implementation's own two runs
    (so that no sibling moves it)."""
    cols = ["model", "sample", "best_distance", "status"]
    j = part_a[cols].merge(part_b[cols], on=["model", "sample"], suffixes=("_a", "_b"))
    a, b = j["best_distance_a"].to_numpy(float), j["best_distance_b"].to_numpy(float)
    same = (log_ratios(b, a, IDENTICAL_RTOL) == 0) & (j["status_a"].to_numpy() == j["status_b"].to_numpy())
    identical = bool(len(j)) and bool(same.all()) and len(j) == len(part_a) == len(part_b)
    ran = (j["status_a"] == "ok").to_numpy() & (j["status_b"] == "ok").to_numpy()
    r = j[ran]
    if len(r):
        grid = {c: r.pivot_table(index="model", columns="sample", values=c, aggfunc="first")
                for c in ("best_distance_a", "best_distance_b")}
        old, new = (grid[c].to_numpy(float) for c in ("best_distance_a", "best_distance_b"))
        # an image at 0 in both runs (misclassified clean) needed no attack
        live = ~np.isnan(old) & ~np.isnan(new) & ~((old == 0) & (new == 0))
        x = pair_values(new, old, live, share_delta=share_delta)
    else:
        x = np.zeros((3, 0))
    xi_a, xi_b = [], []
    for _, g in r.groupby("model"):
        da, db = g["best_distance_a"].to_numpy(float), g["best_distance_b"].to_numpy(float)
        ref = np.minimum(da, db)
        xi_a.append(optimality(da, ref))
        xi_b.append(optimality(db, ref))
    mean = (lambda v: float(np.nanmean(v)) if len(v) and np.isfinite(v).any() else float("nan"))
    return {"identical": identical, "x": x, "n_ran": int(ran.sum()), "n_rows": len(j),
            "own_xi": (mean(xi_a), mean(xi_b))}


#: what an implementation's own-result flags read besides its best distances and statuses
#: (last_not_best, budget_overrun, out_of_ball, eps_unused, targets ignored): rows are identical
#: only when these agree too, and its rows on the twins both runs hold (batch_dependence,
#: label_bug, shift_sensitivity) agree in best distance and status
OWN_RESULT_COLUMNS = ["returned_distance", "returned_adversarial", "refused", *DEFECT_COLUMNS]


def _same_results(rows_a: pd.DataFrame, rows_b: pd.DataFrame, models: list[str]) -> bool:
    """Whether one implementation's ``prepare``d rows (twins included) in two runs agree, on
    ``models`` and on their twins present in both runs, in best distance, status and
    ``OWN_RESULT_COLUMNS`` (numbers within ``IDENTICAL_RTOL``)."""
    a, b = (t[t["base_model"].isin(models)] for t in (rows_a, rows_b))
    twins = set(a["model"][is_twin(a)]) & set(b["model"][is_twin(b)])
    a, b = (t[~is_twin(t) | t["model"].isin(twins)] for t in (a, b))
    cols = [c for c in ["best_distance", "status", *OWN_RESULT_COLUMNS] if c in a.columns and c in b.columns]
    j = a[["model", "sample", *cols]].merge(b[["model", "sample", *cols]], on=["model", "sample"], suffixes=("_a", "_b"))
    if not len(j) == len(a) == len(b):
        return False
    for c in cols:
        x, y = j[f"{c}_a"], j[f"{c}_b"]
        if c == "status":
            same = x.astype(str).to_numpy() == y.astype(str).to_numpy()
        else:
            fx, fy = (pd.to_numeric(v.astype(object), errors="coerce").to_numpy(float) for v in (x, y))
            # a logit margin near a boundary is a difference of two logits: its rounding is absolute
            atol = MARGIN_ATOL if c == "best_margin" else 0.0
            same = np.isclose(fx, fy, rtol=IDENTICAL_RTOL, atol=atol, equal_nan=True) | (fx == fy)
        if not same.all():
            return False
    return True


def weigh(res: dict, word: str, p_adj: float, own_xi: tuple[float, float], appeared: set[str], gone: set[str],
          n_ran: int, n_rows: int, decision: str, delta: float = DELTA) -> tuple[str, str, int]:
    """(verdict, reason, score) of one implementation whose rows changed: ``VERDICT_RULE``.
    ``res``: ``equivalence.pair_test`` of the per-image values new against old (``a`` is the new
    run); ``word``: its answer at the level adjusted over the implementation's own tests;
    ``decision``: what would decide an inconclusive change."""
    # an image only the new run broke is better, one only the old run broke worse
    better, worse = res["wins_a"] + res["broke_only_a"], res["wins_b"] + res["broke_only_b"]
    d_xi = own_xi[1] - own_xi[0] if np.isfinite(own_xi[0]) and np.isfinite(own_xi[1]) else 0.0
    weight = LARGE_WEIGHT if abs(d_xi) >= LARGE_DELTA else PERFORMANCE_WEIGHT
    up = down = 0
    if word == "different" and res["mixed"]:      # breaks more images but farther, or the reverse
        up = down = PERFORMANCE_WEIGHT
    elif word == "different":
        up, down = (weight, 0) if res["direction"] < 0 else (0, weight)
    weighed = VERDICT_FLAGS - RELATIVE_FLAGS
    new, fixed = sorted(appeared & weighed), sorted(gone & weighed)
    plus = up + sum(SEVERITY[f] for f in fixed)
    minus = down + sum(SEVERITY[f] for f in new)
    score = plus - minus
    where = "" if n_ran == n_rows else f" on the {n_ran} of {n_rows} (model, image) rows that ran in both"
    parts = [f"{f} gone" for f in fixed]
    shown = shown_text(res, word, p_adj, delta, a="new", b="old")
    parts.append(f"ξ {_num(own_xi[0])} → {_num(own_xi[1])}{where}, {better} better / {worse} worse images "
                 f"({shown}{': ' + decision if word == 'inconclusive' and decision else ''})")
    reason = ", ".join(parts) + (f"; new: {', '.join(new)}" if new else "")
    changed = better + worse
    if plus >= PERFORMANCE_WEIGHT and minus >= PERFORMANCE_WEIGHT or (score == 0 and plus):
        verdict = "mixed"
    elif score:
        verdict = "improved" if score > 0 else "regressed"
    else:
        verdict = "inconclusive" if word == "inconclusive" and changed else "unchanged"
    return verdict, f"{verdict}: {reason}" if verdict == "mixed" else reason, score


def _unsupported(table: pd.DataFrame) -> set[tuple[str, str]]:
    """(norm, implementation) whose every row in ``table`` is ``unsupported``."""
    if "status" not in table.columns or table.empty:
        return set()
    t = with_implementation(table.assign(_u=table["status"].astype(str) == UNSUPPORTED))
    agg = t.groupby(["norm", "implementation"])["_u"].all()
    return {k for k, v in agg.items() if v}


def diff(table_a: pd.DataFrame, table_b: pd.DataFrame, *, alpha: float = ALPHA, min_delta: float | None = None,
         by_model: bool = False, eps_max: Mapping[str, float] | None = None,
         ref_eps: Mapping[str, float] | None = None, flags_a: pd.DataFrame | None = None,
         flags_b: pd.DataFrame | None = None, dataset_images: int | None = None,
         eps: Mapping[str, float] | None = None) -> pd.DataFrame:
    """Per (norm, implementation) — and per model when ``by_model`` (``model`` is "*" otherwise):
    ``DIFF_COLUMNS``. ``*_a`` is before (``table_a``), ``*_b`` after. ξ and ASR are against the
    joint envelope (NaN on the side that did not run a ``new``/``removed`` implementation); the
    test fields (``n_samples``: images, ``failure_a``/``failure_b``: failure rates before/after,
    ``n_better`` / ``n_worse``: images where b did better / worse (a smaller / larger perturbation
    on an image both broke, or an image only b / only a broke), ``ties``,
    ``effect_size`` in favour of b, ``estimate``: the per-image log ratio new/old, ``answer``,
    ``images_to_decide``) come from the implementation's own rows on the images that ran in both.
    ``p_adjusted`` is Holm's over the implementation's own tests only (its models with
    ``by_model``), so that its verdict never depends on how many others the audit holds. Flags are ``flags`` of
    each table unless given. ``min_delta``: the materiality margin δ of a performance change, as a
    relative per-image difference (None: ``equivalence.DELTA``, 5%; it widens the share endpoint's 25% when wider); an implementation's change is
    *different* only beyond it and *equivalent* only inside it.
    """
    if min_delta is not None and not (np.isfinite(min_delta) and min_delta > 0):
        raise InputError(f"min_delta must be a positive relative difference (e.g. 0.05), not {min_delta!r}")
    delta = DELTA if min_delta is None else float(np.log1p(min_delta))
    unsupported = {"a": _unsupported(table_a), "b": _unsupported(table_b)}
    sides = {"a": prepare(table_a), "b": prepare(table_b)}
    fl = {s: (f if f is not None else compute_flags(sides[s])) for s, f in (("a", flags_a), ("b", flags_b))}
    fsets = {s: _flag_sets(fl[s], by_model) for s in fl}
    both = pd.concat([without_twins(t).assign(_side=s) for s, t in sides.items()], ignore_index=True)
    if both.empty:
        return pd.DataFrame(columns=DIFF_COLUMNS)
    long = long_distances(both, keys=["implementation", "_side"])
    meta = both.groupby(_KEY + ["_side"])[["library", "family", "library_version"]].agg(
        lambda s: ",".join(sorted(set(s.astype(str)) - {""})))
    rows_of = {k: g for k, g in both.groupby(["_side", *_KEY] + (["model"] if by_model else []), sort=False)}
    with_twins = {s: dict(tuple(t.groupby(_KEY, sort=False))) for s, t in sides.items()}
    refs = {**REF_EPS, **(ref_eps or {})}
    group_keys = _KEY + (["model"] if by_model else [])
    rows = []
    for key, part in long.groupby(group_keys, sort=True):
        key = key if isinstance(key, tuple) else (key,)
        norm, impl = key[0], key[1]
        models = {s: sorted(part.loc[part["_side"] == s, "model"].unique()) for s in ("a", "b")}
        shared = sorted(set(models["a"]) & set(models["b"]))
        present = [s for s in ("a", "b") if models[s]]
        use = {s: shared if shared else models[s] for s in ("a", "b")}
        vals = {s: _side_values(part[part["_side"] == s], use[s], eps_max, float(refs.get(norm, np.inf)))
                for s in ("a", "b")}
        fkey = (norm, impl) + ((key[2],) if by_model else ())
        every = (norm, impl, "*") if by_model else fkey  # a finding about all models counts on each
        fa = fsets["a"].get(fkey, set()) | fsets["a"].get(every, set())
        fb = fsets["b"].get(fkey, set()) | fsets["b"].get(every, set())
        own = {"identical": False, "x": np.zeros((3, 0)), "n_ran": 0, "n_rows": 0, "own_xi": (np.nan, np.nan)}
        if len(present) == 2:
            own = _own_rows(*(rows_of[(s, *key)].pipe(lambda g: g[g["model"].isin(shared)]) for s in ("a", "b")),
                            share_delta=max(SHARE_DELTA, delta))
            own["identical"] = own["identical"] and _same_results(
                with_twins["a"][(norm, impl)], with_twins["b"][(norm, impl)], shared)
        res = pair_test(own["x"], delta)
        verdict = "" if len(present) == 2 else ("new" if present == ["b"] else "removed")
        reason = "" if verdict == "" else f"only in run {present[0]}"
        for s, other in (("a", "b"), ("b", "a")):
            if (norm, impl) in unsupported[s] and verdict in ("new", "removed"):
                verdict, reason = "could not run", f"could not run in run {s} (unsupported by the adapter for that release)"
        m = meta.loc[(norm, impl, present[-1])]
        rows.append({"implementation": impl, "library": m["library"], "family": m["family"], "norm": norm,
                     "model": key[2] if by_model else "*",
                     "version_a": meta.loc[(norm, impl, "a"), "library_version"] if models["a"] else "",
                     "version_b": meta.loc[(norm, impl, "b"), "library_version"] if models["b"] else "",
                     "optimality_a": vals["a"][0], "optimality_b": vals["b"][0],
                     "delta_optimality": vals["b"][0] - vals["a"][0], "asr_a": vals["a"][1], "asr_b": vals["b"][1],
                     "failure_a": res["fail_b"], "failure_b": res["fail_a"],
                     "n_models": len(shared), "n_samples": res["n_images"], "n_better": res["wins_a"] + res["broke_only_a"],
                     "n_worse": res["wins_b"] + res["broke_only_b"], "ties": res["ties"], "statistic": 0.0, "p_value": res["p_value"],
                     "effect_size": res["effect_size"], "estimate": res["estimate"], "identical": own["identical"],
                     "flags_a": ",".join(sorted(fa)), "flags_b": ",".join(sorted(fb)),
                     "flags_appeared": ",".join(sorted(fb - fa)), "flags_disappeared": ",".join(sorted(fa - fb)),
                     "verdict": verdict, "reason": reason, "_fa": fa, "_fb": fb, "_res": res, "_own": own})
    out = _verdicts(pd.DataFrame(rows), alpha, delta, dataset_images)
    # ε use of fixed-ε attacks (fidelity/eps_use.py; ``eps``: the ε per norm it reads robust
    # accuracy at, default the reference ε): computed apart, its material changes merged
    return eps_use.merge(out, eps_use.eps_use(sides["a"], sides["b"], eps_use.at(refs, eps), alpha=alpha))


def _verdicts(out: pd.DataFrame, alpha: float, delta: float = DELTA,
              dataset_images: int | None = None) -> pd.DataFrame:
    """Fill p_adjusted, answer, score, verdict and reason of the rows present in
    both runs. The multiplicity family of a verdict is the implementation's own tests, fixed before
    the data are seen: one pooled test (no adjustment), or its models' tests with ``by_model``
    (Holm over them); never the other implementations of the audit."""
    out["p_adjusted"], out["answer"], out["images_to_decide"], out["score"] = np.nan, "", np.nan, 0
    both = (out["verdict"] == "").to_numpy()
    changed = both & ~out["identical"].to_numpy(bool)
    for _, part in out[changed].groupby(["norm", "implementation"], sort=False):
        at = [out.index.get_loc(i) for i in part.index]
        p_diff = holm([r["p_different"] for r in out["_res"].iloc[at]])
        p_eq = holm([r["p_equivalent"] for r in out["_res"].iloc[at]])
        for i, pd_, pe in zip(at, p_diff, p_eq):
            r = out.iloc[i]
            word = answer(pd_, pe, alpha)
            own = r["_own"]
            need = images_to_decide(own["x"], alpha / len(at), delta) if word == "inconclusive" else float("nan")
            verdict, reason, score = weigh(r["_res"], word, float(pd_), own["own_xi"], r["_fb"] - r["_fa"],
                                           r["_fa"] - r["_fb"], own["n_ran"], own["n_rows"],
                                           decision_text(need, dataset_images), delta)
            for col, v in (("p_adjusted", float(pd_)), ("answer", word), ("images_to_decide", need),
                           ("score", score), ("verdict", verdict), ("reason", reason)):
                out.iloc[i, out.columns.get_loc(col)] = v
    for i in np.flatnonzero(both & ~changed):
        r = out.iloc[i]
        moved = sorted((r["_fa"] ^ r["_fb"]) & VERDICT_FLAGS)
        note = f"; flags moved because other implementations changed: {', '.join(moved)}" if moved else ""
        out.iloc[i, out.columns.get_loc("verdict")] = "unchanged"
        out.iloc[i, out.columns.get_loc("answer")] = "identical"
        out.iloc[i, out.columns.get_loc("reason")] = f"identical results on every image{note}"
    return out[DIFF_COLUMNS]
