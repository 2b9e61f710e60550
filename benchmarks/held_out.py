"""Held-out calibration (fidelity/README.md, "Held-out calibration"): the data-set thresholds of the
flag rules recomputed on one part of the noise corpus only, and which implementations each pool
leaves out, and why.

    .venv/bin/python benchmarks/calibration.py --held-out [--reps R] [--save]

The corpus's images are split by a fixed hash of their sample id (``real_noise.held_out``); the
``threshold`` part is the threshold images on ``real_noise.THRESHOLD_MODELS`` (and their twins),
the ``held-out`` part the other images on those models, the ``held-out model`` part every image of
``real_noise.HELD_OUT_MODEL``, which sets no threshold. ``thresholds(part)`` gives, per threshold
that is "the largest upper bound of a measured sound rate" (or the smallest lower bound, for a
floor), the value the part alone gives beside the shipped one; ``calibration.py --held-out`` then
measures every rule's false-positive rate on the two held-out parts (``real_nulls.calibrate_real``
with ``part``, pools and worst specs from the threshold part; ``report_wide.measure`` on the sound
built-ins) and ``--save`` stores the tables in ``benchmarks/noise/held_out.csv`` (read by
``tests/test_calibration.py``).
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats as sps

import real_noise as rn

HERE = Path(__file__).resolve().parent
#: the stored held-out tables (``calibration.py --held-out --save``)
STORED = HERE / "noise" / "held_out.csv"
#: a measured rate needs this many cases to bound a null rate (pools: the same minimum)
MIN_CASES = 30


def lcb(k: int, n: int, level: float = rn.UCB_LEVEL) -> float:
    """One-sided Clopper–Pearson lower confidence bound of a rate seen ``k`` times in ``n``."""
    return 0.0 if n == 0 or k == 0 else float(sps.beta.ppf(1 - level, k, n - k + 1))


def dropped(c: pd.DataFrame) -> dict[tuple[str, str], list[str]]:
    """Per (implementation, norm) of the corpus: why it is not a *sound* built-in (empty: sound).
    A known defect of a rule (``real_noise.KNOWN_DEFECTS``, ``real_nulls.SHIFT_DEFECTS``), a case of
    the defect corpus run untargeted (``benchmarks/defects/``) or an entry of
    ``fidelity/known_defects.json``, or a fact its corpus rows record (a crash, an invalid batch, a
    refused query): each reason written out."""
    import real_nulls
    from defect_cases import load_cases

    out: dict[tuple[str, str], list[str]] = {k: [] for k in zip(c["implementation"], c["norm"])}
    for rule, keys in rn.KNOWN_DEFECTS.items():
        for k in keys & out.keys():
            out[k].append(f"known {rule} defect")
    for k in real_nulls.SHIFT_DEFECTS & out.keys():
        out[k].append("known shift_sensitivity defect")
    for case in load_cases():
        k = (case.implementation, case.norm)
        if k in out and not case.run.get("targeted", False):
            out[k].append(f"defect corpus case {case.id}")
    known = json.loads((HERE.parent / "fidelity" / "known_defects.json").read_text(encoding="utf-8"))
    for d in known["defects"]:
        k = (d["implementation"], d["norm"])
        if k in out and f"defect corpus case {d['case']}" not in out[k]:
            out[k].append(f"known_defect {d['case']}")
    facts = c[(c["status"] != "ok") | (c["refused"].fillna(0) > 0)]
    for (impl, norm), g in facts.groupby(["implementation", "norm"], observed=True):
        what = sorted(set(g["status"]) - {"ok"}) + (["refused queries"] if (g["refused"] > 0).any() else [])
        out[(impl, norm)].append(f"{', '.join(what)} in its corpus rows ({', '.join(sorted(set(g['model'])))})")
    return out


def sound(c: pd.DataFrame) -> list[tuple[str, str]]:
    """The corpus's sound built-ins: those ``dropped`` gives no reason for, sorted."""
    return sorted(k for k, why in dropped(c).items() if not why)


def _row(name: str, shipped: float, measured: float, bound: float, side: str, spec: str, cases: str) -> dict:
    """``side`` ">=": the shipped threshold must be at or above the bound (a null rate); "<=": at or
    below it (a floor)."""
    holds = shipped >= bound if side == ">=" else shipped <= bound
    return {"threshold": name, "shipped": shipped, "measured": measured, "bound": bound, "side": side,
            "holds": bool(holds), "from": spec, "cases": cases}


def _worst_rate(df: pd.DataFrame, k: str, n: str) -> tuple[float, float, str, str]:
    """(rate, UCB, spec, "k of n") of the row with the largest UCB among those with ≥ MIN_CASES."""
    df = df[df[n] >= MIN_CASES]
    if df.empty:
        return np.nan, np.nan, "", ""
    ucbs = np.array([rn.ucb(int(a), int(b)) for a, b in zip(df[k], df[n])])
    r = df.iloc[int(np.argmax(ucbs))]
    return float(r[k] / r[n]), float(ucbs.max()), f"{r['implementation']} {r['norm']}", f"{int(r[k])} of {int(r[n])}"


def thresholds(c: pd.DataFrame) -> pd.DataFrame:
    """The data-set thresholds recomputed on ``c`` (a part of the corpus, ``real_noise.part``),
    beside the shipped ones: one row per threshold with the measured worst rate, its one-sided 95%
    bound, the spec it comes from and whether the shipped value is on the safe side of the bound."""
    from attackaudit.fidelity import defects, strength, twins
    from attackaudit.fidelity.flags import LAST_NOT_BEST_FAMILY_NULL_RATE, LAST_NOT_BEST_NULL_RATE, SILENT_FAILURE_FLOOR
    import real_nulls

    why = dropped(c)
    ok = {k for k, v in why.items() if not v}
    rows = []
    nb = rn.not_best(c)
    nb = nb[~nb["known"]]
    own = nb["family"].astype(str).isin(LAST_NOT_BEST_FAMILY_NULL_RATE)  # families with a null of their own
    for kind in ("fixed", "minimal"):
        rate, bound, spec, cases = _worst_rate(nb[(nb["kind"] == kind) & ~own], "k", "n")
        rows.append(_row(f"flags.LAST_NOT_BEST_NULL_RATE[{kind}]", LAST_NOT_BEST_NULL_RATE[kind], rate, bound,
                         ">=", spec, cases))
    for family, null in LAST_NOT_BEST_FAMILY_NULL_RATE.items():
        rate, bound, spec, cases = _worst_rate(nb[nb["family"].astype(str) == family], "k", "n")
        rows.append(_row(f"flags.LAST_NOT_BEST_FAMILY_NULL_RATE[{family}]", null, rate, bound, ">=", spec, cases))
    base = c[(c["twin"] == "") & (c["status"] == "ok") & (c["best_distance"] > 0)]
    base = base[[k in ok for k in zip(base["implementation"], base["norm"])]]
    # below_expected_strength's failure arm: a sound minimal attack of a strong family, per model
    mini = base[(base["kind"] == "minimal")
                & np.array([strength.is_strong(f, n) for f, n in zip(base["family"], base["norm"])], bool)]
    fails = mini.assign(k=np.isinf(mini["best_distance"])).groupby(["implementation", "norm", "model"],
                                                                    observed=True)["k"].agg(["sum", "size"])
    rate, bound, spec, cases = _worst_rate(fails.reset_index().rename(columns={"sum": "k", "size": "n"}), "k", "n")
    rows.append(_row("strength.MINIMAL_FAILURE_NULL", strength.MINIMAL_FAILURE_NULL, rate, bound, ">=", spec, cases))
    # silent_failure's floor: the weakest sound attack's share of the images its family broke
    fam = base.assign(hit=np.isfinite(base["best_distance"]))
    fam["family_broke"] = fam.groupby(["family", "norm", "model", "sample"], observed=True)["hit"].transform("any")
    share = fam[fam["family_broke"]].groupby(["implementation", "norm"], observed=True)["hit"].agg(["sum", "size"])
    share = share[share["size"] >= MIN_CASES].reset_index()
    lcbs = np.array([lcb(int(a), int(b)) for a, b in zip(share["sum"], share["size"])])
    w = share.iloc[int(np.argmin(lcbs))]
    rows.append(_row("flags.SILENT_FAILURE_FLOOR", SILENT_FAILURE_FLOOR, float(w["sum"] / w["size"]),
                     float(lcbs.min()), "<=", f"{w['implementation']} {w['norm']}",
                     f"{int(w['sum'])} of {int(w['size'])}"))
    # eps_unused: a sound fixed-ε job's failed images whose rows moved under EPS_UNUSED_RATIO of ε,
    # against the share the rule needs (EPS_UNUSED_MIN_FRACTION of the failed images)
    fx = base[(base["kind"] == "fixed") & base["eps_fail_ratio"].notna()]
    fx = fx[[k not in rn.KNOWN_DEFECTS["eps_unused"] for k in zip(fx["implementation"], fx["norm"])]]
    low = fx.assign(k=fx["eps_fail_ratio"] < defects.EPS_UNUSED_RATIO).groupby(
        ["implementation", "norm", "model"], observed=True)["k"].agg(["sum", "size"]).reset_index()
    rate, bound, spec, cases = _worst_rate(low.rename(columns={"sum": "k", "size": "n"}), "k", "n")
    least = f"; smallest ratio {fx['eps_fail_ratio'].min():.2f} of {len(fx)} failed rows" if len(fx) else ""
    rows.append(_row(f"defects.EPS_UNUSED_MIN_FRACTION (rows < {defects.EPS_UNUSED_RATIO} of ε)",
                     defects.EPS_UNUSED_MIN_FRACTION, rate, bound, ">=", spec, cases + least))
    # out_of_ball: the largest returned distance / ε of a sound attack's calls
    ball = base[base["ball_worst_ratio"].notna()]
    top = ball.loc[ball["ball_worst_ratio"].idxmax()] if len(ball) else None
    rows.append(_row("out_of_ball tolerance (1 + 1e-3)", 1 + 1e-3, float(ball["ball_worst_ratio"].max()),
                     float(ball["ball_worst_ratio"].max()), ">=",
                     f"{top['implementation']} {top['norm']}" if top is not None else "", f"{len(ball)} rows"))
    # the twins' null rates for a deterministic attack: sound specs' differing images off a boundary
    family = c.drop_duplicates("implementation").set_index("implementation")["family"].astype(str)
    for kind in ("split", "batch", "shift"):
        d = rn.twin_differences(c, kind)
        if d.empty:
            continue
        d = d[~d["randomised"].to_numpy(bool) & np.array([k in ok for k in zip(d["implementation"], d["norm"])], bool)]
        if kind == "shift":
            d = d[~d["implementation"].map(family).isin(twins.EXEMPT["shift"]).to_numpy(bool)
                  & ~np.array([k in real_nulls.SHIFT_DEFECTS for k in zip(d["implementation"], d["norm"])], bool)]
        rate, bound, spec, cases = _worst_rate(d, "beyond", "images")
        rows.append(_row(f"twins.NULL_RATE[{kind}]", twins.NULL_RATE[kind], rate, bound, ">=", spec, cases))
    return pd.DataFrame(rows)


def split_sizes(c: pd.DataFrame) -> dict[str, int]:
    """Images per part (sample ids), and whether the two image halves are disjoint and cover the corpus."""
    ids = np.unique(c["sample"].to_numpy())
    ho = rn.held_out(ids)
    return {"images": len(ids), "threshold": int((~ho).sum()), "held-out": int(ho.sum())}


def pool_drops(part: str | None = None) -> pd.DataFrame:
    """What each pool of ``real_nulls.pools`` (and the report-wide sound pool) leaves out of the
    corpus's specs, and why: one row per (pool, implementation, norm, reason)."""
    import real_nulls
    from attackaudit.fidelity.flags import SILENT_FAILURE_FLOOR
    from attackaudit.fidelity.twins import EXEMPT

    R, P = real_nulls.resampler(part=part), real_nulls.pools(part=part)
    c, m = R.c, P["measure"]
    keys = sorted(set(zip(c["implementation"], c["norm"])))
    rows = []

    def drop(pool: str, k: tuple[str, str], why: str) -> None:
        rows.append({"pool": pool, "implementation": k[0], "norm": k[1], "why": why})
    seed = m["seed"].set_index(["implementation", "norm"])
    for k in seed.index:
        if k not in P["seed"]:
            drop("seed", k, f"both seeds broke {int(seed.loc[k, 'both_broke'])} live images (< 30)"
                 if seed.loc[k, "both_broke"] < 30 else "no seed twin on every model")
    nb = m["not_best"]
    for r in nb.itertuples(index=False):
        if r.known:
            drop("last_not_best", (r.implementation, r.norm), "known last_not_best defect (real_noise.KNOWN_DEFECTS)")
        elif r.n < MIN_CASES:
            drop("last_not_best", (r.implementation, r.norm), f"broke {r.n} ok live images (< {MIN_CASES})")
    base = c[(c["twin"] == "") & (c["best_distance"] > 0)]
    rate = base.assign(hit=np.isfinite(base["best_distance"])).groupby(["implementation", "norm"], observed=True)["hit"].mean()
    for k, v in rate.items():
        if v < SILENT_FAILURE_FLOOR:
            drop("weakest", k, f"breaks {v:.0%} of the live images, below the floor {SILENT_FAILURE_FLOOR:.0%}")
    fixed = set(zip(base.loc[base["kind"] == "fixed", "implementation"], base.loc[base["kind"] == "fixed", "norm"]))
    for k in sorted(fixed - set(P["fixed"])):
        drop("fixed", k, "known eps_unused defect (real_noise.KNOWN_DEFECTS)"
             if k in rn.KNOWN_DEFECTS["eps_unused"] else "not on every model")
    for kind in ("split", "batch"):
        d = m[kind]
        for r in d.itertuples(index=False):
            k = (r.implementation, r.norm)
            if k in P[kind]:
                continue
            why = ("known batch_dependence defect (real_noise.KNOWN_DEFECTS)" if r.known else
                   "randomised (the split grid runs deterministic specs)" if kind == "split" and r.randomised else
                   "randomised without a seed twin" if kind == "batch" and r.randomised else "no twin on every model")
            drop(kind, k, why)
    family = c.drop_duplicates("implementation").set_index("implementation")["family"].astype(str)
    for r in m["shift"].itertuples(index=False):
        k = (r.implementation, r.norm)
        if k in P["shift_det"] or k in P["shift_rand"]:
            continue
        drop("shift", k, "known shift_sensitivity defect (real_nulls.SHIFT_DEFECTS)" if k in real_nulls.SHIFT_DEFECTS
             else f"family {family[k[0]]} exempt from the shift rule" if family[k[0]] in EXEMPT["shift"] else "?")
    for k, why in dropped(c).items():
        if why:
            drop("report-wide sound", k, "; ".join(why))
    return pd.DataFrame(rows, columns=["pool", "implementation", "norm", "why"])
