"""Defect classes that say what is wrong, not merely "weaker than a sibling" (fidelity/README.md, "Defects").

- ``out_of_ball``: a fixed-ε attack returns rows outside the ε-ball it was called with.
- ``eps_unused``: a fixed-ε attack fails at ε while its returned rows stay far inside the ball,
  where other implementations found adversarials within that ε, and no larger ε made it succeed.
- ``batch_dependence``: on the batch-split twin ``M~split`` (one image per call) the results
  differ from ``M``'s beyond the attack's own noise (the seed twin ``M~seed``; a null rate for a
  deterministic attack).
- ``label_bug`` (targets ignored): in a targeted run, the output is misclassified but not as the
  target on a large share of the images another implementation brought to the target.
- ``label_bug`` (success test ignores the target): in a targeted run, the attack's own queries
  reached the target but it returned a non-target output, on more images than a sound attack of
  its kind does (binomial against ``TARGET_KEPT_NULL_RATE``, BH over the implementation's own models).
- ``fallback_output``: the attack returned a default output (an all-zero or constant image, one
  output shared by several images) that would have counted as broken; the harness never counted
  it (harness/measure/fallback.py, the ``returned_fallback`` column).

The first two read what the minimal-ε search recorded of every call (harness/measure/minimal.py
``BallRecord``: the ``ball_*`` and ``eps_fail_*`` columns), the last the ``returned_class``
column; tables without those columns (older runs) are not judged by them. Pure functions over a
``prepare``d table, each returning findings ``{model, norm, implementation, library_version,
flag, evidence}``.
"""
from __future__ import annotations


import numpy as np
import pandas as pd

from scipy import stats as sps

from ._table import JOB_KEY, SAMPLE_KEY, long_distances, sample_list
from .equivalence import benjamini_hochberg
from .stats import ALPHA
from .twins import twin_findings

#: out_of_ball: rows (image × call) returned outside the ball, beyond the minimal-ε search's own
#: tolerance (d > ε·(1 + 1e-3) + 1e-6, harness/measure/minimal.py ``inside_ball``). Sound built-in
#: attacks returned none (README table); a finding needs at least this many such rows ...
OUT_OF_BALL_MIN_ROWS = 2
#: ... making at least this share of the implementation's rows on the model
OUT_OF_BALL_MIN_SHARE = 0.05
#: eps_unused: a failed row "leaves the ball unused" when its distance is below this share of ε
#: (sound built-in attacks' failed rows measured at ≥ 0.47 of ε, README table)
EPS_UNUSED_RATIO = 0.25
#: ... on at least this many images ...
EPS_UNUSED_MIN_IMAGES = 2
#: ... and this share of the images it failed on where an adversarial existed within the ε tried
EPS_UNUSED_MIN_FRACTION = 0.5
#: targets ignored: at least this many images misclassified as a third class ...
TARGET_MIN_IMAGES = 3
#: ... making at least this share of the images another implementation brought to the target
TARGET_MIN_FRACTION = 0.5
#: success test ignores the target: null rate per attack kind of images whose queries reached the
#: target while the returned output is not in it, for a sound attack. Sound minimal attacks return
#: their best (measured 0 of 16 images per job, README table); a fixed-ε attack's returned row at
#: the widest ε is its last iterate, which can leave the target it passed through (measured ≤ 2 of
#: 16 per job). At 512 targeted digits every sound job measured 0 of 509 (adv_lib DDN L2 and FMN L∞;
#: ART L2 PGD, cleverhans and torchattacks L∞ PGD): the minimal rate sits ``null_rates.NULL_MARGIN``
#: above that bound (0.006 + 0.02; 2% before, below it), the fixed rate far above (tests/test_null_edge.py)
TARGET_KEPT_NULL_RATE = {"minimal": 0.03, "fixed": 0.15}
#: ... and never on fewer images than this
TARGET_KEPT_MIN_IMAGES = 3
#: fallback_output: images whose default output would have counted as broken (a default output is
#: deterministic evidence: sound built-ins of the five libraries returned none, README table)
FALLBACK_MIN_IMAGES = 1


def _finding(key: tuple, flag: str, evidence: str) -> dict:
    return dict(zip(JOB_KEY, key)) | {"flag": flag, "evidence": evidence}


def _has(t: pd.DataFrame, *columns: str) -> bool:
    return all(c in t.columns for c in columns) and bool(t[list(columns)].notna().any().all())


def _enough(k: int, n: int, minimum: int, share: float) -> bool:
    """A rule's evidence gate: ``k`` cases of ``n`` are at least ``minimum`` and at least ``share`` of ``n``."""
    return k >= minimum and k >= share * n


def out_of_ball(t: pd.DataFrame) -> list[dict]:
    """Per job of a fixed-ε attack: rows returned outside the ε-ball it was called with on at least
    ``OUT_OF_BALL_MIN_ROWS`` rows and ``OUT_OF_BALL_MIN_SHARE`` of its rows (image × call)."""
    if not _has(t, "ball_calls", "ball_out", "ball_worst_ratio"):
        return []
    fixed = t[(t["kind"] == "fixed") & (pd.to_numeric(t["ball_calls"], errors="coerce").fillna(0) > 0)]
    out = []
    for key, g in fixed.groupby(JOB_KEY, sort=True):
        calls, bad = int(g["ball_calls"].sum()), int(g["ball_out"].fillna(0).sum())
        if not _enough(bad, calls, OUT_OF_BALL_MIN_ROWS, OUT_OF_BALL_MIN_SHARE):
            continue
        worst = g.loc[g["ball_worst_ratio"].astype(float).idxmax()]
        ratio, eps = float(worst["ball_worst_ratio"]), float(worst["ball_worst_eps"])
        out.append(_finding(key, "out_of_ball", (
            f"returned rows outside the ε-ball it was called with on {bad} of {calls} calls (image × ε) on "
            f"{int((g['ball_out'] > 0).sum())} of {len(g)} images; worst distance/ε = {ratio:.3g}: image "
            f"{sample_list([worst['sample']])} called at ε = {eps:.4g} got a row at distance {ratio * eps:.4g}")))
    return out


def eps_unused(t: pd.DataFrame) -> list[dict]:
    """Per job of a fixed-ε attack: images it never broke at any ε although, at the largest ε it
    failed at, another implementation found an adversarial within that ε (d* ≤ ε), while its
    returned row there moved less than ``EPS_UNUSED_RATIO`` of ε; on at least
    ``EPS_UNUSED_MIN_IMAGES`` images and ``EPS_UNUSED_MIN_FRACTION`` of those failures."""
    if not _has(t, "eps_fail_max", "eps_fail_ratio"):
        return []
    fixed = t[(t["kind"] == "fixed") & t["eps_fail_max"].notna()]
    if fixed.empty:
        return []
    d_star = long_distances(t)[SAMPLE_KEY + ["d_star"]].drop_duplicates(SAMPLE_KEY)
    fixed = fixed.merge(d_star, on=SAMPLE_KEY, how="left")
    out = []
    for key, g in fixed.groupby(JOB_KEY, sort=True):
        eps, ratio = g["eps_fail_max"].astype(float), g["eps_fail_ratio"].astype(float)
        failed = ((g["status"] == "ok") & (g["d_star"] > 0) & (g["d_star"] <= eps)
                  & ~g["returned_adversarial"].astype(bool))
        unused = failed & (ratio < EPS_UNUSED_RATIO)
        k, m = int(unused.sum()), int(failed.sum())
        if not _enough(k, m, EPS_UNUSED_MIN_IMAGES, EPS_UNUSED_MIN_FRACTION):
            continue
        u = g[unused]
        reached = (u["eps_fail_max"] * u["eps_fail_ratio"]).astype(float)
        out.append(_finding(key, "eps_unused", (
            f"on {k} of the {m} images it failed on at an ε within which another implementation found an "
            f"adversarial, its returned row moved at most {float(u['eps_fail_ratio'].max()):.2g} of ε (ε tried up "
            f"to {float(u['eps_fail_max'].max()):.4g}, largest distance reached {float(reached.max()):.4g}) "
            f"and no larger ε made it succeed: images {sample_list(u['sample'])}")))
    return out


def batch_dependence(t: pd.DataFrame) -> list[dict]:
    """``M~split`` (one image per call, a few images) and ``M~batch`` (every image, another batch
    arrangement) against ``M`` per implementation, beyond its own noise (``twins.judge``): with a
    seed twin that differs from ``M``, the images that differ on the twin but not between the seeds
    against the reverse (exact one-sided McNemar); without one (a deterministic attack, measured:
    no seed twin and ``rng_used`` false, or a seed twin equal to ``M``), the count of differing
    images against a binomial with ``twins.NULL_RATE``. Images whose best sits at an exact decision
    boundary on either side are left out (``twins.BOUNDARY_MARGIN``); an attack that moved a global
    random state and has no seed twin is not judged. Benjamini–Hochberg per implementation and
    kind; a finding needs q < ``ALPHA`` and at least ``twins.MIN_IMAGES`` differing images. One
    finding per job: both twins' evidence joined."""
    out: dict[tuple, dict] = {}
    for f in twin_findings(t, kinds=("split", "batch")):
        key = tuple(f[k] for k in JOB_KEY)
        if key in out:
            out[key]["evidence"] += f"; {f['evidence']}"
        else:
            out[key] = f
    return list(out.values())


def targets_ignored(t: pd.DataFrame) -> list[dict]:
    """Targeted runs: per job, the images another implementation brought to the target on which
    this one did not reach it and its output (``returned_class``) is misclassified as a third
    class; a ``label_bug`` on at least ``TARGET_MIN_IMAGES`` images and ``TARGET_MIN_FRACTION``
    of those images."""
    if not (len(t) and t["targeted"].any() and _has(t, "returned_class", "label")):
        return []
    reached = np.isfinite(t["best_distance"].to_numpy())
    per_image = pd.Series(reached, index=t.index).groupby([t[c] for c in SAMPLE_KEY]).transform("sum")
    d_star = long_distances(t)[SAMPLE_KEY + ["d_star"]].drop_duplicates(SAMPLE_KEY)
    rows = t.assign(others=per_image.to_numpy() - reached, reached=reached).merge(d_star, on=SAMPLE_KEY, how="left")
    cls = pd.to_numeric(rows["returned_class"], errors="coerce").fillna(-1).astype(int)
    rows["third"] = (~rows["reached"] & (cls >= 0) & (cls != rows["label"].astype(int))
                     & (cls != rows["target"].astype(int)))
    rows["cls"] = cls
    judged = rows[(rows["status"] == "ok") & (rows["d_star"] > 0) & (rows["others"] > 0) & ~_fallback(rows)]
    out = []
    for key, g in judged.groupby(JOB_KEY, sort=True):
        bad = g[g["third"]]
        if not _enough(len(bad), len(g), TARGET_MIN_IMAGES, TARGET_MIN_FRACTION):
            continue
        examples = "; ".join(f"image {sample_list([r.sample])}: class {r.cls}, target {int(r.target)}"
                             for r in bad.head(3).itertuples(index=False))
        out.append(_finding(key, "label_bug", (
            f"targets ignored: misclassified as another class, not the target, on {len(bad)} of {len(g)} images "
            f"that another implementation brought to the target ({int(g['reached'].sum())} reached it here): "
            f"{examples}")))
    return out


def _fallback(t: pd.DataFrame) -> pd.Series:
    """Rows whose returned output was a default output the harness did not count (``returned_fallback``)."""
    if "returned_fallback" not in t.columns:
        return pd.Series(False, index=t.index)
    return t["returned_fallback"].fillna("").astype(str) != ""


def fallback_output(t: pd.DataFrame) -> list[dict]:
    """Per job: the images whose returned output was a default output (``returned_fallback``: an
    all-zero or constant image, one output shared by several images) that would have counted as
    broken, on at least ``FALLBACK_MIN_IMAGES`` images. Those rows were never counted: the best
    from the attack's own queries stands."""
    if not _has(t, "returned_fallback"):
        return []
    out = []
    for key, g in t[_fallback(t)].groupby(JOB_KEY, sort=True):
        if len(g) < FALLBACK_MIN_IMAGES:
            continue
        n = int(((t["model"] == key[0]) & (t["norm"] == key[1]) & (t["implementation"] == key[2])
                 & (t["library_version"] == key[3])).sum())
        kinds = g["returned_fallback"].astype(str).value_counts()
        what = "; ".join(f"{k} (counted on none of its {v} images here)" for k, v in kinds.head(3).items())
        target = " (a targeted run: not a target it ignored, a default it returned)" if bool(g["targeted"].any()) else ""
        out.append(_finding(key, "fallback_output", (
            f"returned a default output instead of a search result on {len(g)} of {n} images, one the model "
            f"misclassifies{target}: {what}; the best of its own queries stands: "
            f"images {sample_list(g['sample'])}")))
    return out


def success_ignores_target(t: pd.DataFrame) -> list[dict]:
    """Targeted runs, per job: the images on which the attack's own queries reached the target
    (a finite best) but its returned output is not the target (``returned_class``, whatever class
    it is; a fallback output is ``fallback_output``'s), against a binomial with the sound rate of
    its kind (``TARGET_KEPT_NULL_RATE``); BH over the implementation's own models, q < ``ALPHA`` and at least
    ``TARGET_KEPT_MIN_IMAGES`` images make a ``label_bug``."""
    if not (len(t) and t["targeted"].any() and _has(t, "returned_class")):
        return []
    rows = t[(t["status"] == "ok") & np.isfinite(t["best_distance"]) & (t["best_distance"] > 0) & ~_fallback(t)]
    cls = pd.to_numeric(rows["returned_class"], errors="coerce").fillna(-1).astype(int)
    rows = rows.assign(cls=cls, kept=cls != rows["target"].astype(int))
    tested = []
    for key, g in rows.groupby(JOB_KEY, sort=True):
        k, n = int(g["kept"].sum()), len(g)
        rate = TARGET_KEPT_NULL_RATE.get(str(g["kind"].iat[0]), TARGET_KEPT_NULL_RATE["minimal"])
        tested.append((key, g, k, n, rate, float(sps.binom.sf(k - 1, n, rate)) if k else 1.0))
    out = []
    # the multiplicity family is the implementation's own jobs (its models), never the report's
    q = np.ones(len(tested))
    impl_of = [tuple(c[0][1:]) for c in tested]  # JOB_KEY without the model
    for impl in set(impl_of):
        at = [i for i, x in enumerate(impl_of) if x == impl]
        q[at] = benjamini_hochberg([tested[i][-1] for i in at])
    for (key, g, k, n, rate, p), qv in zip(tested, q):
        if not (qv < ALPHA and k >= TARGET_KEPT_MIN_IMAGES):
            continue
        bad = g[g["kept"]]
        at_label = int((bad["cls"] == bad["label"].astype(int)).sum())
        examples = "; ".join(f"image {sample_list([r.sample])}: returned class {r.cls}, target {int(r.target)}"
                             for r in bad.head(3).itertuples(index=False))
        out.append(_finding(key, "label_bug", (
            f"success test ignores the target: its queries reached the target on {n} images, but it returned an "
            f"output outside the target on {k} of them ({at_label} still at the label); a sound {g['kind'].iat[0]} "
            f"attack does on {rate:.0%}, p = {p:.2g}, BH q = {qv:.2g} over its own models: {examples}")))
    return out


def defect_findings(t: pd.DataFrame) -> list[dict]:
    """All four rules on a ``prepare``d table. Where batch_dependence names an implementation on
    a model, its eps_unused finding there is a symptom of the same cause (a step normalised over
    the batch leaves each image's ε unused in the batch): it joins the batch_dependence evidence
    instead of being a finding of its own."""
    batch = batch_dependence(t)
    causes = {tuple(f[k] for k in JOB_KEY): f for f in batch}
    unused = []
    for f in eps_unused(t):
        cause = causes.get(tuple(f[k] for k in JOB_KEY))
        if cause is None:
            unused.append(f)
        else:
            cause["evidence"] += f"; in the batch it also leaves ε unused: {f['evidence']}"
    return out_of_ball(t) + unused + batch + targets_ignored(t) + success_ignores_target(t) + fallback_output(t)
