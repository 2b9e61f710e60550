"""Class-conditional failure: label evidence without a twin (fidelity/README.md, "Flags").

Counted in images, not image × model: an image is *failed* by an implementation when, on every
real model where another implementation of its family broke it, this one did not (and its row
there is ``ok``). A class is tested when at least ``CLASS_MIN_IMAGES`` of its images were broken
by the others. Only the implementation's own family (same family and norm) is read, so that no
implementation of another family, added to a run or left out, moves the verdict (issue 36); a
sole implementation of its family is not judged here (the perm twin still is its label evidence).

The null is a weak but correct attack, whose failures follow difficulty. Each image's difficulty
is how far the other implementations of its family had to go: the mean over them and the models
of the percentile of their distance among the model's images (a failure is the hardest). The chance
that the attack fails image i is estimated from the images of the *other* classes at least as
hard as i (their failure rate, with a half-count so that few comparable images do not give 0);
the chance that it fails every image of class c is the product over c's images. Holm over the
classes tested gives one p-value per implementation and norm, never adjusted over the other
implementations of the report (q = p): q < ``ALPHA`` and budget left on the failures (an attack out
of queries is weak there, not confused) make a ``label_bug``.
A class failed entirely that difficulty explains is a note (``class_notes``), not a flag.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from ._table import IMPL_KEY, is_twin
from .stats import ALPHA, holm

#: a class is tested with at least this many images that other implementations broke
CLASS_MIN_IMAGES = 2
#: the failures must have stopped with budget left (median queries below this fraction)
LABEL_BUG_BUDGET_FRACTION = 0.95


def _difficulty(rows: pd.DataFrame, impl: tuple[str, str]) -> pd.Series:
    """Per image: mean percentile (within its model) of the other implementations' distances
    (``rows``: its family's)."""
    others = rows[(rows["implementation"] != impl[0]) | (rows["library_version"] != impl[1])]
    pct = others.groupby(["model", *IMPL_KEY])["best_distance"].rank(pct=True, method="average")
    return pct.groupby(others["sample"]).mean()


def _judge_one(rows: pd.DataFrame, g: pd.DataFrame) -> dict | None:
    """Per-image outcome and the Holm-adjusted p of the most suspicious class, or None."""
    impl = (g["implementation"].iat[0], g["library_version"].iat[0])
    per_image = g.groupby("sample").agg(broke=("broke", "any"), label=("label", "first"),
                                        queries=("queries", "median"), budget=("budget", "max"))
    fails = ~per_image["broke"]
    if not fails.any() or fails.all():
        return None  # it must break other classes: failing everywhere is weakness, not a class
    hard = _difficulty(rows[rows["live"] & np.isfinite(rows["d_star_family"])], impl)
    hard = hard.reindex(per_image.index).fillna(1.0)
    classes, sizes = np.unique(per_image["label"], return_counts=True)
    tested = [c for c, s in zip(classes, sizes) if s >= CLASS_MIN_IMAGES]
    if not tested:
        return None
    p_raw = []
    for c in tested:
        mine = per_image["label"] == c
        other_h, other_f = hard[~mine].to_numpy(), fails[~mine].to_numpy()
        p = 1.0
        for h in hard[mine]:
            comparable = other_h >= h
            p *= (other_f[comparable].sum() + 0.5) / (comparable.sum() + 1.0)
        p_raw.append(p if fails[mine].all() else 1.0)
    p_adj = holm(p_raw)
    k = int(np.argmin(p_adj))
    c = tested[k]
    dead = per_image[per_image["label"] == c]
    return {"class": c, "p": float(p_adj[k]), "all_failed": bool(fails[per_image["label"] == c].all()),
            "size": len(dead), "queries": float(dead["queries"].median()), "budget": float(dead["budget"].max()),
            "others": f"{int(per_image['broke'][per_image['label'] != c].sum())} of "
                      f"{int((per_image['label'] != c).sum())}", "n_classes": len(tested),
            "n_models": g["model"].nunique()}


def judge(rows: pd.DataFrame) -> pd.DataFrame:
    """Per (norm, implementation): the class judged, its p (Holm over its classes; ``q`` repeats it:
    the implementation is its own family), whether it is a finding. ``rows``: prepared rows with
    ``d_star_family`` (the envelope of the row's family, ``_table.with_envelope``) and ``live``."""
    cols = ["norm", *IMPL_KEY, "class", "p", "q", "flagged", "all_failed", "evidence"]
    if "label" not in rows.columns:
        return pd.DataFrame(columns=cols)
    if "d_star_family" not in rows.columns:
        return pd.DataFrame(columns=cols)
    # the images the implementation's family broke; the family's rows give the difficulty
    target = rows[~is_twin(rows) & rows["live"] & np.isfinite(rows["d_star_family"])]
    target = target.assign(broke=np.isfinite(target["best_distance"]) & (target["status"] == "ok"),
                           queries=target["forwards"] + target["backwards"])
    out = []
    for (norm, impl, version), g in target.groupby(["norm", *IMPL_KEY], sort=True):
        if (g["status"] != "ok").all():
            continue
        family = target[(target["norm"] == norm) & (target["family"] == g["family"].iat[0])]
        if family[IMPL_KEY].drop_duplicates().shape[0] < 2:
            continue  # no other implementation of its family: nothing to compare its classes with
        res = _judge_one(family, g[g["status"] == "ok"])
        if res is not None and res["all_failed"]:
            out.append({"norm": norm, "implementation": impl, "library_version": version, **res})
    if not out:
        return pd.DataFrame(columns=cols)
    df = pd.DataFrame(out)
    # one test per implementation (the min over its classes, Holm-adjusted): its own family, so q = p;
    # never adjusted over the other implementations of the report
    df["q"] = df["p"].astype(float)
    stopped_early = (df["budget"] <= 0) | (df["queries"] < LABEL_BUG_BUDGET_FRACTION * df["budget"])
    df["flagged"] = (df["q"] < ALPHA) & stopped_early
    df["evidence"] = [
        f"class-conditional failure: broke none of the {r['size']} images of class {r['class']} that other implementations "
        f"of its family broke (over {r.n_models} model{'s' * (r.n_models != 1)}; median {r.queries:.0f} queries, budget {r.budget:.0f}) but {r.others} images "
        f"of the other classes; the chance that a correct attack whose failures follow difficulty fails them all: "
        f"p = {r.p:.2g} (Holm over {r.n_classes} classes)"
        for _, r in df.iterrows()]
    return df[cols]


def class_findings(rows: pd.DataFrame) -> list[dict]:
    """``label_bug`` findings (``model == "*"``)."""
    j = judge(rows)
    return [{"model": "*", "norm": r.norm, "implementation": r.implementation, "library_version": r.library_version,
             "flag": "label_bug", "evidence": r.evidence} for r in j[j["flagged"]].itertuples(index=False)]


def class_notes(rows: pd.DataFrame) -> list[dict]:
    """Classes failed entirely that are no finding (difficulty explains them, or budget ran out)."""
    return _notes(judge(rows))


def _notes(j: pd.DataFrame) -> list[dict]:
    return [{"norm": r.norm, "implementation": r.implementation, "library_version": r.library_version,
             "note": "fails every image of a class others broke, which is not label evidence here: "
                     + r.evidence.split(": ", 1)[1]}
            for r in j[~j["flagged"].astype(bool)].itertuples(index=False)]


def judge_table(table: pd.DataFrame) -> pd.DataFrame:
    """``judge`` of a raw result table (prepared here, with its envelope)."""
    from ._table import prepare, with_envelope

    return judge(with_envelope(prepare(table)))


def class_notes_of(table: pd.DataFrame) -> list[dict]:
    """``class_notes`` of a raw result table."""
    return _notes(judge_table(table))
