"""Metamorphic twin checks, each judged against the attack's own noise (fidelity/README.md, "Flags").

A twin ``M~<kind>`` is the model ``M`` changed in a way a sound attack must not notice: ``~perm``
renames the classes (a difference is label evidence: ``label_bug``), ``~shift`` shifts the logits
per sample (``shift_sensitivity``), ``~split`` calls the attack on one image at a time
(``batch_dependence``, reported by defects.py). ``~seed`` is the same model and images attacked
with another seed: its differences are the attack's own noise, the floor every other twin is
judged against.

Per (model, norm, implementation) an image *differs* when success differs or the best distances
differ by more than the check's relative tolerance. Only **informative** images count: those that
at least one of the twins broke (the base model, the twin, or the seed twin where there is one; a
distance finite and above 0). An image that none of them broke (or that every one found
misclassified already) cannot differ, so counting it only dilutes the rate a null is tested
against: torchattacks' CW L2 broke 3 of 8 digits on digits-cnn and none of them on the shift twin,
3 of 8 against the then 15% null (p = 0.1), while 3 of the 3 informative images is p = 0.003. The
evidence names how many images were informative. The test (a p-value per judged job):

- with a seed twin: per image, the twin's |log ratio| to the base against the second seed's (a
  one-sided signed-rank test): a difference beyond the attack's own noise; on the split twin,
  whose one-image calls draw the attack's random numbers afresh (another seed in effect), only
  whether an image differs is compared: the images that differ on the twin but not between the
  seeds against the reverse (an exact one-sided McNemar test);
- without one (a deterministic attack): the count of differing images against a binomial with the
  check's null rate (``NULL_RATE``, above the measured noise of sound attacks); on the split twin
  the differing images must also lean one way (``one_way_p``, an exact sign test; the larger of the
  two p-values is the job's): a deterministic attack has no seed twin to measure its float noise,
  and a long search amplifies the rounding a batch and a single image do differently into
  differences with no side, where a batch-wide step, stop or constant has one (alone, every image
  is free of the batch the same way). Not on the batch twin: there a batch-wide stop on the summed
  loss can move either way with the companions' losses (foolbox's EAD in half batches: 7 images
  farther, 5 closer), and the rearranged batch leaves a long search's rounding about as it was.

The p-values of one check are Benjamini–Hochberg adjusted over the implementation's own twins of
that kind (its models), a family fixed in advance, never over the report;
a finding needs q < ``ALPHA`` (and, on the perm twin, at least two differing images). What stays
below that but differs is named for what it is likely to be (``twin_notes``): tie-breaking by
class index for a deterministic attack, a random choice tied to class indices (e.g. a random
target) when the seed twin differs as much.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy import stats as sps

from typing import Iterable

from attackaudit.results.schema import BATCH, PERM, SHIFT, SPLIT

from .flag_kinds import flag_of_twin

from ._table import IMPL_KEY, is_twin, sample_list
from .equivalence import benjamini_hochberg, log_ratios, signed_rank_p
from .stats import ALPHA

#: relative tolerance per kind: permuting logits is exact in float arithmetic (measured ≤ 1.1e-6);
#: a shift changes float32 log-softmax values (measured ≤ 2.7% for sound non-sign attacks)
#: a batch of one changes a sound deterministic attack by float noise only (≤ 1e-6 relative)
RTOL = {"perm": 0.01, "shift": 0.05, "split": 0.01, "seed": 0.01, "batch": 0.01}
#: null share of differing images per kind without a seed twin: at least ``null_rates.NULL_MARGIN``
#: above the upper bound of the largest share a sound deterministic built-in showed at 256 or 512
#: digits (benchmarks/noise/null_edge.csv, tests/test_null_edge.py), so that no sound attack is
#: flagged as the images grow. perm: 16 of 497 (cleverhans' L2 FGM on the adversarially trained
#: digits-cnn-at-linf, the other FGMs there 8–11 of 505; bound 0.049; 5% before); shift: 100 of
#: 500 (the one-step FGMs of foolbox, ART, torchattacks and cleverhans on digits-cnn, every norm:
#: the float32 log-softmax rounding of a near-zero gradient component; bound 0.252; 15% before, which
#: flagged all of them at 512 images, p 0.002); batch: 0 of 499 (bound 0.026). split: the count is not
#: the guard: a long deterministic search differs one image per call on 30–39% of the images (adv_lib
#: ALMA L1 at 512 digits: 195 of 497 on digits-mlp, 181 of 500 on digits-cnn) with no side (100 and 90
#: of them farther alone: sign p 0.77 and 1.0), and the split rule also asks the differences to lean
#: one way (``one_way_p``; fidelity/README.md, "Null rates that hold at every n", on why ½ stays)
NULL_RATE = {"perm": 0.07, "shift": 0.26, "split": 0.05, "batch": 0.05}
#: the flag each kind raises, and the families a kind says nothing about
FLAG_OF = {kind: flag for kind in (PERM, SHIFT, SPLIT, BATCH) if (flag := flag_of_twin(kind))}  # flag_kinds.py
EXEMPT = {"perm": frozenset(), "shift": frozenset({"jsma"}), "split": frozenset(), "batch": frozenset()}
MIN_IMAGES = {"perm": 2, "shift": 1, "split": 2, "batch": 2}
#: batch and shift twins: an image whose best sits at an exact decision boundary on either side
#: (``best_margin``, the success margin over the largest |logit|, at most this) is left out:
#: which side of the boundary float rounding puts it depends on the summation order (the batch)
#: and on the logits' offset (the shift twin's float32 log-softmax): ART's DeepFool steps exactly
#: onto the boundary of a ReLU network and overshoots after; torchattacks' DeepFool's bests on
#: digits-mlp succeed on one twin and not the other on 7 of 63 images of the noise corpus. The
#: perm twin permutes floats exactly: nothing rounds differently there
BOUNDARY_MARGIN = 1e-5
BATCH_KINDS = frozenset({"split", "batch"})
BOUNDARY_KINDS = BATCH_KINDS | {"shift"}
WHAT = {"perm": "same network with its classes renamed, labels and targets mapped alike: the result depends on "
                "class indices, i.e. on how the attack handles labels",
        "shift": "same decisions, logits shifted per sample",
        "split": "the same attack called on one image at a time: the result depends on the rest of the batch",
        "batch": "the same images in another batch arrangement (reversed, other images beside them): the result "
                 "depends on the rest of the batch"}
#: how an example image's two distances are named per kind (base, twin)
EXAMPLE_WORDS = {"split": ("in the batch", "alone"), "batch": ("in the batch", "rearranged")}


#: the relative gap at which a twin's row is shown as differing from its model's row of the same
#: image in a flag's evidence (``differs_on_twin``): 1% for every kind, the shift twin included
#: (whose flag rule, ``RTOL["shift"]``, tolerates 5%), because it picks rows for a reader to look
#: at, not a verdict: a flag's evidence lists the images that differ at all beyond float noise
#: (≤ 1e-6 relative on the perm, split and batch twins) and the reader sees how far
EVIDENCE_RTOL = 0.01


def differs_on_twin(distance: float, base_distance: float) -> bool:
    """Whether a twin's best distance on one image differs from its model's on the same image, as
    a flag's evidence rows mark it ("differs on the twin"): one succeeded and the other did not,
    or both did and they are more than ``EVIDENCE_RTOL`` apart relative to the model's distance.
    Not ``differs``: that is the flag's decision at the kind's ``RTOL`` (5% on the shift twin),
    relative to the larger of the two; unifying them changes which rows a report shows, so the
    evidence keeps its own rule."""
    if math.isfinite(base_distance) != math.isfinite(distance):
        return True
    return math.isfinite(base_distance) and abs(distance - base_distance) > EVIDENCE_RTOL * max(
        abs(base_distance), 1e-12)


def differs(a: np.ndarray, b: np.ndarray, rtol: float) -> np.ndarray:
    """(n,) bool: success differs, or both succeeded and differ by more than ``rtol`` (relative)."""
    fa, fb = np.isfinite(a), np.isfinite(b)
    both = fa & fb
    ca, cb = np.where(both, a, 0.0), np.where(both, b, 0.0)
    gap = np.abs(ca - cb) > rtol * np.maximum(np.abs(ca), np.abs(cb)) + 1e-12
    return (fa != fb) | (both & gap)


def _pairs(t: pd.DataFrame) -> pd.DataFrame:
    """Rows of every twin joined to its base model's rows: base, twin, kind, norm, impl key,
    family, sample, best_distance (base), best_distance_twin."""
    t = t.assign(**{c: t[c] if c in t.columns else v for c, v in (
        ("best_margin", np.nan), ("rng_used", False), ("returned_fallback", ""))})
    twins = t[is_twin(t)]
    cols = ["norm", *IMPL_KEY, "sample", "best_distance", "best_margin", "rng_used", "returned_fallback"]
    if twins.empty:
        return pd.DataFrame(columns=["base", "model", "kind", "family", *cols,
                                     *[f"{c}_twin" for c in cols[-4:]]])
    twins = twins.assign(base=twins["base_model"], kind=twins["twin"])
    base = t[~is_twin(t)][["model", *cols]].rename(columns={"model": "base"})
    return twins[["base", "model", "kind", "family", *cols]].merge(base, on=["base", *cols[:-4]],
                                                                   suffixes=("_twin", ""))


def at_boundary(g: pd.DataFrame) -> np.ndarray:
    """(n,) bool over a ``_pairs`` group: the base's or the twin's best is an exact
    decision-boundary point (|``best_margin``| ≤ ``BOUNDARY_MARGIN``; NaN: no best, or an old run)."""
    m = np.abs(pd.to_numeric(g["best_margin"], errors="coerce").to_numpy(float))
    mt = np.abs(pd.to_numeric(g["best_margin_twin"], errors="coerce").to_numpy(float))
    return (m <= BOUNDARY_MARGIN) | (mt <= BOUNDARY_MARGIN)


def with_default_output(g: pd.DataFrame) -> np.ndarray:
    """(n,) bool over a ``_pairs`` group: the attack returned a default output for the image on the
    base or the twin (``returned_fallback``, the ``fallback_output`` evidence). Such an image's
    result is the default's, not a search's, and whether the tracker credits it depends on how the
    attack re-checks its outputs in that batch (foolbox's C&W L2 evaluates its all-zero default
    itself, which counts alone and not where the default is shared): a batch twin would read the
    harness's bookkeeping as the attack's batch dependence. ``fallback_output`` names the defect."""
    words = lambda c: (g[c].notna() & (g[c].astype(str).str.len() > 0)).to_numpy()  # noqa: E731
    return words("returned_fallback") | words("returned_fallback_twin")


def twin_farther(base: np.ndarray, twin: np.ndarray) -> np.ndarray:
    """(n,) bool: the twin's result is worse than the base's: it failed where the base broke the
    image, or both broke it and the twin's best is farther."""
    return np.isfinite(base) & (~np.isfinite(twin) | (twin > base))


def one_way_p(farther: int, n: int) -> float:
    """Two-sided exact sign test that ``n`` differing images lean one way: the twin worse on
    ``farther`` of them (``twin_farther``), better on the rest, against ½ each. Float rounding
    that a long search amplifies has no side: a batched and a one-image computation are two
    rounding paths, neither privileged. A batch-wide step or stop mostly has one: torchattacks' CW
    (early stop on the batch's summed cost) 21 of 21 images closer in the batch, foolbox's EAD 25
    of 26, torchattacks' EADs 7 of 8. Not every batch dependence has a side: cleverhans' C&W L2 (the
    batch's mean constant, 10 farther alone and 7 closer on 32 digits), which this test was first
    read to show as rounding, and adv_lib's C&W L∞ (a stop when every image is done) pass it
    (fidelity/README.md, "Open")."""
    return float(sps.binomtest(farther, n, 0.5).pvalue) if n else 1.0


def _farther_than_seed(base: np.ndarray, twin: np.ndarray, seed: np.ndarray, d: np.ndarray,
                       d_seed: np.ndarray) -> float:
    """p that the twin is farther from the base than a second seed is, per image (|log ratio|,
    one-sided signed rank); all arguments (n,) over the same images."""
    u, v = np.abs(log_ratios(twin, base)), np.abs(log_ratios(seed, base))
    return signed_rank_p(u - v, "greater")


def _differs_more_than_seed(base: np.ndarray, twin: np.ndarray, seed: np.ndarray, d: np.ndarray,
                            d_seed: np.ndarray) -> float:
    """p that more images differ on the twin than between the seeds: the images that differ on
    the twin only (``d & ~d_seed``) against the reverse, exact one-sided McNemar."""
    only_twin, only_seed = int((d & ~d_seed).sum()), int((d_seed & ~d).sum())
    return float(sps.binom.sf(only_twin - 1, only_twin + only_seed, 0.5)) if only_twin else 1.0


#: the test against the seed twin per kind (module docstring)
AGAINST_SEED = {"perm": _farther_than_seed, "shift": _farther_than_seed, "split": _differs_more_than_seed,
                "batch": _differs_more_than_seed}


def informative(base: np.ndarray, twin: np.ndarray, seed: np.ndarray) -> np.ndarray:
    """(n,) bool: images at least one of the twins broke (a finite distance above 0); ``seed`` is
    NaN where there is no seed twin. All arguments (n,) over the same images."""
    broke = lambda d: np.isfinite(d) & (d > 0)  # noqa: E731
    return broke(base) | broke(twin) | broke(seed)


def _floor(g: pd.DataFrame, floor: pd.Series | None, kind: str) -> tuple[pd.Series | None, bool]:
    """(the seed twin's distances to judge ``g`` against, or None: a null rate; whether not to
    judge at all). A seed twin that equals the model on every image it ran measured a deterministic
    attack (``M~seed`` is then the model again): no floor. On the batch twins an attack that moved a
    global random state (``rng_used``, measured by the job whatever its spec declares) and has no
    seed twin is not judged: its draws depend on the batch, and nothing says how much that moves it."""
    if floor is not None:
        s = floor.reindex(g["sample"].to_numpy()).to_numpy(float)
        ran = ~np.isnan(s)
        if not differs(g["best_distance"].to_numpy()[ran], s[ran], RTOL["seed"]).any():
            return None, False
        return floor, False
    randomised = bool(g["rng_used"].fillna(False).astype(bool).any() or g["rng_used_twin"].fillna(False).astype(bool).any())
    return None, kind in BATCH_KINDS and randomised


def judge(t: pd.DataFrame, kinds: Iterable[str] = tuple(FLAG_OF)) -> pd.DataFrame:
    """One row per (base, twin, kind, norm, implementation) of a prepared table, for the twin
    ``kinds`` asked: ``n`` informative images (``informative``) of the ``n_images`` both ran,
    ``n_differ`` among them, the seed twin's ``n_differ_seed`` (NaN without one), ``p_value``,
    ``q_value`` (BH over the kind's rows), ``flagged``, ``examples``."""
    pairs = _pairs(t)
    keys = ["base", "model", "kind", "norm", *IMPL_KEY]
    seed = {}
    for key, g in pairs[pairs["kind"] == "seed"].groupby(["base", "norm", *IMPL_KEY], sort=True):
        seed[key] = g.set_index("sample")["best_distance_twin"]
    rows = []
    for (b, twin, kind, norm, impl, version), g in pairs.groupby(keys, sort=True):
        if kind not in FLAG_OF or kind not in kinds or str(g["family"].iloc[0]) in EXEMPT[kind]:
            continue
        g = g.sort_values("sample")
        floor, skip = _floor(g, seed.get((b, norm, impl, version)), kind)
        if skip:
            continue
        s_all = (floor.reindex(g["sample"].to_numpy()).to_numpy(float) if floor is not None
                 else np.full(len(g), np.nan))
        keep = informative(g["best_distance"].to_numpy(), g["best_distance_twin"].to_numpy(), s_all)
        if kind in BOUNDARY_KINDS:
            keep &= ~at_boundary(g)
        if kind in BATCH_KINDS:
            keep &= ~with_default_output(g)
        n_all, g, s_all = len(g), g[keep], s_all[keep]
        base, other = g["best_distance"].to_numpy(), g["best_distance_twin"].to_numpy()
        d = differs(base, other, RTOL[kind])
        farther = int(twin_farther(base[d], other[d]).sum())
        if floor is not None:
            s = s_all
            d_seed = differs(base, s, RTOL[kind]) & ~np.isnan(s)  # an image the seed twin lacks is no noise
            p = AGAINST_SEED[kind](base, other, s, d, d_seed) if d.size else 1.0
            n_seed = int(d_seed.sum())
        else:
            p = float(sps.binom.sf(int(d.sum()) - 1, d.size, NULL_RATE[kind])) if d.any() else 1.0
            if kind == "split":  # and the differences lean one way (intersection-union: max of the two)
                p = max(p, one_way_p(farther, int(d.sum())))
            n_seed = np.nan
        rows.append({"base": b, "model": twin, "kind": kind, "norm": norm, "implementation": impl,
                     "library_version": version, "n": int(d.size), "n_images": n_all, "n_differ": int(d.sum()),
                     "n_twin_farther": farther,
                     "n_differ_seed": n_seed, "p_value": p, "examples": g[d]})
    out = pd.DataFrame(rows, columns=keys + ["n", "n_images", "n_differ", "n_twin_farther", "n_differ_seed",
                                             "p_value", "examples"])
    out["q_value"] = np.nan
    # the multiplicity family: one implementation's twins of one kind (its models), fixed in advance
    for _, part in out.groupby(["kind", "norm", *IMPL_KEY]):
        out.loc[part.index, "q_value"] = benjamini_hochberg(part["p_value"].to_numpy())
    out["flagged"] = (out["q_value"] < ALPHA) & (out["n_differ"] >= out["kind"].map(MIN_IMAGES))
    return out


def _examples(part: pd.DataFrame, kind: str, limit: int = 3) -> str:
    on_base, on_twin = EXAMPLE_WORDS.get(kind, ("", ""))
    return "; ".join(f"image {sample_list([r.sample])}: {r.best_distance:.4g}{' ' * bool(on_base)}{on_base} vs "
                     f"{r.best_distance_twin:.4g}{' ' * bool(on_twin)}{on_twin}"
                     for r in part.head(limit).itertuples(index=False))


def _uninformative(r) -> str:
    """How many images the test left out, and why (evidence wording)."""
    left = int(r.n_images) - int(r.n)
    seed = " nor its seed twin" if np.isfinite(r.n_differ_seed) else ""
    return (f"{left} that neither it nor the twin{seed} broke carry no evidence" if left
            else "every one broken by at least one of them")


def twin_findings(t: pd.DataFrame, kinds: Iterable[str] = ("perm", "shift")) -> list[dict]:
    """Findings (on the base model) of a prepared table for the twin ``kinds`` asked:
    ``label_bug`` (perm), ``shift_sensitivity`` (shift), ``batch_dependence`` (split)."""
    out = []
    judged = judge(t, kinds)
    for r in judged[judged["flagged"]].itertuples(index=False):
        noise = (f"a second seed differs on {int(r.n_differ_seed)}" if np.isfinite(r.n_differ_seed)
                 else f"null rate {NULL_RATE[r.kind]:.0%} for a deterministic attack")
        if r.kind == "split" and not np.isfinite(r.n_differ_seed):
            noise += (f", and the differences lean one way: {r.n_twin_farther} of {r.n_differ} worse alone, "
                      f"{r.n_differ - r.n_twin_farther} better (float rounding has no side)")
        out.append({"model": r.base, "norm": r.norm, "implementation": r.implementation,
                    "library_version": r.library_version, "flag": FLAG_OF[r.kind], "evidence": (
                        f"best distances differ beyond {RTOL[r.kind]:.0%} on {r.n_differ} of {r.n} informative images "
                        f"(of {r.n_images}; {_uninformative(r)}) between "
                        f"{r.base} and its twin {r.model} ({WHAT[r.kind]}); {noise}; p = {r.p_value:.2g}, "
                        f"BH q = {r.q_value:.2g} over its own twins: {_examples(r.examples, r.kind)}")})
    return out


def twin_notes(t: pd.DataFrame) -> list[dict]:
    """Differences on the perm twin too weak or too noisy to be label evidence, named for what
    they likely are: ``{norm, implementation, library_version, note}``."""
    judged = judge(t, ("perm",))
    out = []
    for r in judged[(~judged["flagged"]) & (judged["kind"] == "perm") & (judged["n_differ"] > 0)].itertuples():
        if np.isfinite(r.n_differ_seed):
            note = (f"its class-permuted twin {r.model} differs on {r.n_differ} of {r.n} informative images, no more than a "
                    f"second seed does ({int(r.n_differ_seed)}): a random choice tied to class indices (e.g. of a "
                    "target class or a restart), not a label bug")
        else:
            note = (f"its class-permuted twin {r.model} differs on {r.n_differ} of {r.n} informative images, too few to be "
                    f"label evidence (p = {r.p_value:.2g}): consistent with tie-breaking by class index")
        out.append({"norm": r.norm, "implementation": r.implementation, "library_version": r.library_version,
                    "note": note})
    return out


def seed_twin_check(t: pd.DataFrame) -> pd.DataFrame:
    """Per seed twin (``M~seed``) and implementation: images that differ between the two seeds
    and the largest relative difference: the noise floor the report shows. Columns: model, norm,
    implementation, library_version, n, n_differ, largest_relative_difference."""
    pairs = _pairs(t)
    pairs = pairs[pairs["kind"] == "seed"]
    rows = []
    for (b, norm, impl, version), g in pairs.groupby(["base", "norm", *IMPL_KEY], sort=True):
        a, s = g["best_distance"].to_numpy(), g["best_distance_twin"].to_numpy()
        both = np.isfinite(a) & np.isfinite(s) & (np.maximum(a, s) > 0)
        rel = np.abs(a[both] - s[both]) / np.maximum(a[both], s[both])  # both finite: no inf - inf
        rows.append({"model": b, "norm": norm, "implementation": impl, "library_version": version, "n": len(g),
                     "n_differ": int(differs(a, s, RTOL["seed"]).sum()),
                     "largest_relative_difference": float(rel.max()) if rel.size else 0.0})
    return pd.DataFrame(rows, columns=["model", "norm", "implementation", "library_version", "n", "n_differ",
                                       "largest_relative_difference"])
