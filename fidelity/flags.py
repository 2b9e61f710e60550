"""Flags: one row per finding (job or implementation), with human-readable evidence.

Definitions, thresholds and their reasons are in fidelity/README.md ("Flags"). The table has no
column for a library's own success claim or the returned output's class, so ``label_bug`` and
``silent_failure`` are behavioural: what the attack did (queries, backward passes) against what
it achieved on samples other implementations broke.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ._table import (IMPL_KEY, JOB_KEY, SAMPLE_KEY, base_of, impl_meta, is_twin, long_distances, prepare,
                     sample_list, without_twins)
from .alignment import pairwise

FLAGS = ("crash", "timeout", "invalid", "label_bug", "silent_failure", "budget_overrun", "out_of_box",
         "last_not_best", "nondeterminism", "optimality_gap", "shift_sensitivity", "below_exact")
FLAG_COLUMNS = ["model", "library", "library_version", "attack", "implementation", "family", "norm",
                "flag", "evidence"]

#: returned distance worse than the tracked best by more than this (relative) counts; above the
#: minimal-ε search's 1/64 bisection precision so fixed-ε attacks are not flagged for it
LAST_NOT_BEST_RTOL = 0.05
#: ... on at least this fraction of the samples it broke (one stray sample is not a pattern)
LAST_NOT_BEST_MIN_FRACTION = 0.1
#: label bug / silent failure judge an implementation on at least this many samples that other
#: implementations broke
MIN_EVIDENCE_SAMPLES = 3
#: label bug: broke at most this fraction of them on every model it ran on ...
LABEL_BUG_MAX_SUCCESS = 0.15
#: ... while giving up with budget left (failing samples' median queries below this fraction)
LABEL_BUG_BUDGET_FRACTION = 0.95
#: twins disagree on a sample when success differs or distances differ by more than this
SHIFT_RTOL = 0.05
#: ... and the flag needs at least this fraction of the samples to disagree. Sound attacks still
#: disagree on a few samples: the twins' float rounding differs, and where success is not
#: monotone in ε the minimal-ε search's bisection takes another path (seen on 2-3 of 16 samples
#: for FGM/PGD in the demo); real shift bugs disagree on most samples (torchattacks CW: 13 of 16).
SHIFT_MIN_FRACTION = 0.25
#: families whose objective is not invariant to a per-sample logit shift by construction (JSMA's
#: saliency map uses each class output's own gradient), so the twin check says nothing about them
SHIFT_VARIANT_FAMILIES = frozenset({"jsma"})
#: two seeded runs disagree on a sample beyond this relative difference (float noise is below)
NONDETERMINISM_RTOL = 1e-4
#: optimality gap: significantly worse than the best sibling AND at least this much lower ξ
GAP_MIN_DELTA = 0.05
#: families that legitimately run without backward passes (no-backward is not a failure there)
GRADIENT_FREE_FAMILIES = frozenset({"boundary", "hsja", "square", "simba", "sparse_rs", "spatial",
                                    "gaussian_noise", "uniform_noise", "salt_pepper", "dataset",
                                    "zoo", "nes", "random"})
#: the harness's wording for an output outside the box (harness/job.py ``output_problem``)
BOX_ERROR = "outside the [0, 1] box"


def _causes(errors: pd.Series, limit: int = 2) -> str:
    uniq = [e for e in dict.fromkeys(errors.astype(str)) if e]
    text = "; ".join(e[:160] for e in uniq[:limit])
    return (text + (f" (+{len(uniq) - limit} more)" if len(uniq) > limit else "")) or "no error recorded"


def _status_flags(g: pd.DataFrame) -> list[tuple[str, str]]:
    n, out = len(g), []
    for status, what in (("crash", "in batches that raised"), ("timeout", "in a job that timed out")):
        bad = g[g["status"] == status]
        if len(bad):
            out.append((status, f"{len(bad)} of {n} samples {what}: {_causes(bad['error'])}; "
                                f"tracker results before it are kept"))
    invalid = g[g["status"] == "invalid"]
    box = invalid["error"].str.contains(BOX_ERROR, regex=False)
    for flag, part in (("out_of_box", invalid[box]), ("invalid", invalid[~box])):
        if len(part):
            out.append((flag, f"{len(part)} of {n} samples returned an invalid batch: {_causes(part['error'])}"))
    refused = g[g["refused"] > 0]
    if len(refused):
        worst = refused.loc[refused["refused"].idxmax()]
        budget = f" of {int(g['budget'].max())}" if g["budget"].max() > 0 else ""
        out.append(("budget_overrun", f"{len(refused)} of {n} samples made queries past the budget{budget}: "
                                      f"{int(refused['refused'].sum())} refused in total, {int(worst['refused'])} "
                                      f"on sample {sample_list([worst['sample']])}"))
    return out


def _last_not_best(g: pd.DataFrame) -> list[tuple[str, str]]:
    elig = g[(g["status"] == "ok") & g["live"] & np.isfinite(g["best_distance"])]
    if elig.empty:
        return []
    best, ret = elig["best_distance"], elig["returned_distance"]
    worse = elig[ret > best * (1 + LAST_NOT_BEST_RTOL) + 1e-9]
    if len(worse) < max(1, math.ceil(LAST_NOT_BEST_MIN_FRACTION * len(elig))):
        return []
    lost = int((~np.isfinite(worse["returned_distance"])).sum())
    both = worse[np.isfinite(worse["returned_distance"])]
    ratio = f"; median returned/best {np.median(both['returned_distance'] / both['best_distance']):.2f}" \
        if len(both) else ""
    return [("last_not_best", f"returned output worse than the best it had queried on {len(worse)} of "
                              f"{len(elig)} samples it broke ({lost} returned no adversarial at all{ratio}): "
                              f"samples {sample_list(worse['sample'])}")]


def _effort(g: pd.DataFrame) -> tuple[list[tuple[str, str]], str, str, float | None]:
    """Did the attack work at all? Returns (definite silent failures, label-bug evidence if this
    job looks like one, silent-failure evidence if it broke nothing, its success rate on the
    samples other implementations broke or None). ``_per_job`` settles label bug vs silent
    failure across models: a label convention is wrong on every model."""
    ok = g[g["status"] == "ok"]
    if ok.empty:
        return [], "", "", None
    gradient = str(ok["family"].iloc[0]) not in GRADIENT_FREE_FAMILIES
    target = ok[ok["live"] & np.isfinite(ok["d_star"])]  # samples some implementation broke
    m = len(target)
    success = int(np.isfinite(target["best_distance"]).sum())
    rate = success / m if m else None
    asr = float((~ok["live"] | np.isfinite(ok["best_distance"])).mean())
    rates = f"ASR {asr:.2f} vs clean error rate {float((~ok['live']).mean()):.2f}"
    if gradient and ok["backwards"].sum() == 0:
        return [("silent_failure", f"no backward pass on any of {len(ok)} samples for a gradient attack; {rates}")], \
            "", "", rate
    queries = ok["forwards"] + ok["backwards"]
    if m and success == 0 and queries.sum() <= len(ok):
        return [("silent_failure", f"at most one query per sample and none of the {m} samples other "
                                   f"implementations broke was broken; {rates}")], "", "", rate
    if m < MIN_EVIDENCE_SAMPLES:
        return [], "", "", rate
    zero = (f"broke none of the {m} samples other implementations broke ({ok['forwards'].mean():.0f} forwards, "
            f"{ok['backwards'].mean():.0f} backwards per sample); {rates}") if success == 0 else ""
    if success > LABEL_BUG_MAX_SUCCESS * m:
        return [], "", zero, rate
    failing = target[~np.isfinite(target["best_distance"])]
    budget = float(ok["budget"].max())
    used = float(np.median(failing["forwards"] + failing["backwards"])) if len(failing) else 0.0
    if budget > 0 and used >= LABEL_BUG_BUDGET_FRACTION * budget:
        return [], "", zero, rate  # it ran out of queries: weak or expensive, not confused about labels
    label = (f"broke {success} of {m} samples other implementations broke although it worked "
             f"({ok['forwards'].mean():.0f} forwards, {ok['backwards'].mean():.0f} backwards per sample) and "
             f"stopped with budget left (median {used:.0f} queries on failures), and fails like this on every "
             f"model; {int((~target['returned_adversarial']).sum())} returned outputs keep the true label. "
             f"The pattern of a label-convention bug (shifted, inverted or one-hot labels) or of a loss that "
             f"cannot succeed; {rates}")
    return [], label, zero, rate


def _per_job(t: pd.DataFrame) -> list[dict]:
    d_star = long_distances(t)[SAMPLE_KEY + ["d_star"]].drop_duplicates(SAMPLE_KEY)
    rows = t.merge(d_star, on=SAMPLE_KEY, how="left")
    rows["live"] = rows["d_star"] > 0
    out, efforts = [], {}
    for key, g in rows.groupby(JOB_KEY, sort=True):
        for flag, evidence in _status_flags(g) + _last_not_best(g):
            out.append(dict(zip(JOB_KEY, key)) | {"flag": flag, "evidence": evidence})
        efforts[key] = _effort(g)
    # a model on which the implementation does break samples clears it of a label-convention bug
    cleared = {key[1:] for key, (_, _, _, rate) in efforts.items()
               if rate is not None and rate > LABEL_BUG_MAX_SUCCESS}
    for key, (definite, label, zero, _) in efforts.items():
        found = definite + ([("label_bug", label)] if label and key[1:] not in cleared
                            else [("silent_failure", zero)] if zero else [])
        out += [dict(zip(JOB_KEY, key)) | {"flag": flag, "evidence": evidence} for flag, evidence in found]
    return out


def _disagree(a: pd.Series, b: pd.Series, rtol: float) -> pd.Series:
    fa, fb = np.isfinite(a), np.isfinite(b)
    both = fa & fb
    gap = (a - b).abs().where(both, 0.0) > rtol * np.maximum(a.abs(), b.abs()).where(both, 0.0) + 1e-12
    return (fa != fb) | (both & gap)


def _examples(part: pd.DataFrame, a: str, b: str, limit: int = 3) -> str:
    return "; ".join(f"sample {sample_list([r['sample']])}: {r[a]:.4g} vs {r[b]:.4g}"
                     for _, r in part.head(limit).iterrows())


def _nondeterminism(t: pd.DataFrame, other: pd.DataFrame) -> list[dict]:
    o = prepare(other)[JOB_KEY + ["sample", "best_distance", "status"]]
    both = t[JOB_KEY + ["sample", "best_distance", "status"]].merge(o, on=JOB_KEY + ["sample"], suffixes=("", "_other"))
    both["differs"] = _disagree(both["best_distance"], both["best_distance_other"], NONDETERMINISM_RTOL) \
        | (both["status"] != both["status_other"])
    out = []
    for key, g in both.groupby(JOB_KEY, sort=True):
        bad = g[g["differs"]]
        if len(bad):
            out.append(dict(zip(JOB_KEY, key)) | {"flag": "nondeterminism", "evidence": (
                f"{len(bad)} of {len(g)} samples differ between two seeded runs of the same config "
                f"(best distance or status): {_examples(bad, 'best_distance', 'best_distance_other')}")})
    return out


def _shift(t: pd.DataFrame) -> list[dict]:
    t = t[~t["family"].isin(SHIFT_VARIANT_FAMILIES)]
    twins = t[t["model"].map(is_twin)]
    if twins.empty:
        return []
    cols = ["norm", *IMPL_KEY, "sample", "best_distance"]
    twins = twins.assign(base=twins["model"].map(base_of))
    base = t[~t["model"].map(is_twin)][["model", *cols]].rename(columns={"model": "base"})
    pairs = twins[["base", "model", *cols]].merge(base, on=["base", *cols[:-1]], suffixes=("_twin", ""))
    pairs["differs"] = _disagree(pairs["best_distance"], pairs["best_distance_twin"], SHIFT_RTOL)
    out = []
    for (b, twin, norm, impl, version), g in pairs.groupby(["base", "model", "norm", *IMPL_KEY], sort=True):
        bad = g[g["differs"]]
        if len(bad) >= max(1, math.ceil(SHIFT_MIN_FRACTION * len(g))):
            broke = (int(np.isfinite(g["best_distance"]).sum()), int(np.isfinite(g["best_distance_twin"]).sum()))
            out.append({"model": b, "norm": norm, "implementation": impl, "library_version": version,
                        "flag": "shift_sensitivity", "evidence": (
                            f"best distances differ beyond {SHIFT_RTOL:.0%} on {len(bad)} of {len(g)} samples "
                            f"between {b} and its twin {twin} (same decisions, logits shifted per sample); "
                            f"broken {broke[0]} vs {broke[1]}: {_examples(bad, 'best_distance', 'best_distance_twin')}")})
    return out


def _optimality_gap(t: pd.DataFrame, gap_alpha: float) -> list[dict]:
    """``t``: a prepared table without twins."""
    pairs = pairwise(t, alpha=gap_alpha, pooled=False)
    if pairs.empty:
        return []
    out = []
    for (model, norm, family), g in pairs.groupby(["model", "norm", "family"], sort=True):
        if not family:
            continue
        opt = {**dict(zip(zip(g["implementation_a"], g["library_version_a"]), g["optimality_a"])),
               **dict(zip(zip(g["implementation_b"], g["library_version_b"]), g["optimality_b"]))}
        best = sorted(opt, key=lambda k: (-opt[k], k))[0]
        for r in g.itertuples(index=False):
            ka, kb = (r.implementation_a, r.library_version_a), (r.implementation_b, r.library_version_b)
            if best not in (ka, kb):
                continue
            worse = kb if best == ka else ka
            wins_best, wins_worse = (r.wins_a, r.wins_b) if best == ka else (r.wins_b, r.wins_a)
            median = r.median_difference if best == kb else -r.median_difference
            if r.p_value < gap_alpha and wins_best > wins_worse and opt[best] - opt[worse] >= GAP_MIN_DELTA:
                out.append({"model": model, "norm": norm, "implementation": worse[0], "library_version": worse[1],
                            "flag": "optimality_gap", "evidence": (
                                f"optimality {opt[worse]:.3f} vs {opt[best]:.3f} for {best[0]} {best[1]}".rstrip()
                                + f"; Wilcoxon p={r.p_value:.2g} over {r.n_samples} samples, smaller perturbation "
                                  f"on {wins_worse} vs {wins_best}; median excess {median:.4g} where both succeed")})
    return out


def _drop_twin_repeats(found: pd.DataFrame) -> pd.DataFrame:
    """A twin is the same network: a finding on ``M~shift`` that ``M`` has too is a repeat."""
    if found.empty:
        return found
    twin = found["model"].map(is_twin)
    on_base = set(zip(found.loc[~twin, "model"], found.loc[~twin, "norm"], found.loc[~twin, "implementation"],
                      found.loc[~twin, "library_version"], found.loc[~twin, "flag"]))
    repeat = [bool(tw) and (base_of(m), n, i, v, f) in on_base
              for tw, m, n, i, v, f in zip(twin, found["model"], found["norm"], found["implementation"],
                                           found["library_version"], found["flag"])]
    return found[~np.asarray(repeat, dtype=bool)]


def flags(table: pd.DataFrame, other: pd.DataFrame | None = None, gap_alpha: float = 0.01, *,
          exact: pd.DataFrame | None = None) -> pd.DataFrame:
    """All findings for ``table``: ``FLAG_COLUMNS``, ``flag`` one of ``FLAGS``.

    ``other``: a second seeded run of the same config (``nondeterminism``); ``gap_alpha``: the
    significance level of ``optimality_gap`` (paired Wilcoxon against the family's best
    implementation on the same model, which must also be ``GAP_MIN_DELTA`` higher in ξ);
    ``exact``: exact distances from ``fidelity.exact`` (``below_exact``). A finding on a twin
    model that its base model has too is dropped as a repeat; others keep the twin's name, and
    ``shift_sensitivity`` names the base model.
    """
    t = prepare(table)
    found = _per_job(t) + _shift(t) + _optimality_gap(without_twins(t), gap_alpha)
    if other is not None:
        found += _nondeterminism(t, other)
    out = _drop_twin_repeats(pd.DataFrame(found, columns=JOB_KEY + ["flag", "evidence"]))
    out = out.merge(impl_meta(t), on=IMPL_KEY, how="left")
    if exact is not None:
        from .exact import below_exact_flags  # the MILP module is only needed with exact distances
        out = pd.concat([out, below_exact_flags(t, exact)], ignore_index=True)
    if out.empty:
        return pd.DataFrame(columns=FLAG_COLUMNS)
    out["_order"] = out["flag"].map({f: i for i, f in enumerate(FLAGS)})
    out = out.sort_values(["model", "norm", "implementation", "library_version", "_order"], kind="stable")
    return out[FLAG_COLUMNS].reset_index(drop=True)


def flagged(flags_df: pd.DataFrame | None) -> dict[tuple[str, str, str], list[str]]:
    """``{(implementation, library_version, norm): flag names}`` over all models, in ``FLAGS`` order."""
    if flags_df is None or flags_df.empty:
        return {}
    out: dict[tuple[str, str, str], set[str]] = {}
    for r in flags_df.itertuples(index=False):
        out.setdefault((str(r.implementation), str(r.library_version), str(r.norm)), set()).add(str(r.flag))
    rank = {f: i for i, f in enumerate(FLAGS)}
    return {k: sorted(v, key=lambda f: (rank.get(f, len(rank)), f)) for k, v in out.items()}
