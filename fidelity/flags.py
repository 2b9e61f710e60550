"""Flags: one row per finding (job or implementation), with human-readable evidence.

Definitions, thresholds and the measured noise behind them are in fidelity/README.md ("Flags").
``label_bug`` rests on label evidence only: the class-permutation twin ``M~perm`` changes the
result beyond the attack's own seed noise (``twins.py``), or the attack fails on every image of
one class while breaking the others, beyond what those images' difficulty explains
(``class_failure.py``). An attack that is merely weak is never a label bug (``recommend`` gives it
a weakness note instead). Each statistical rule (those two, ``shift_sensitivity``,
``optimality_gap``, ``last_not_best``) is Benjamini–Hochberg adjusted over the implementation's own
jobs (its models), a family fixed before the data are seen: a verdict about one implementation never
depends on which other implementations the report holds.
"""
from __future__ import annotations

from typing import Mapping

import numpy as np
import pandas as pd
from scipy import stats as sps

from attackaudit.results.schema import SEED

from ._table import IMPL_KEY, JOB_KEY, impl_meta, prepare, sample_list, twins_of, with_envelope, without_twins
from attackaudit.results.schema import OUT_OF_BOX, with_invalid_reason
from .alignment import pairwise
from .class_failure import class_findings
from .defects import defect_findings
from .equivalence import DELTA, benjamini_hochberg
from .flag_kinds import FLAG_KINDS, OPTIMALITY_GAP
from .stats import ALPHA
from .twins import twin_findings
from .strength import strength_flags
from .known_defects import known_defect_findings
from .yardstick import yardstick_findings

#: every flag, in the order tables list them: the registry's (flag_kinds.py ``FLAG_KINDS``)
FLAGS = tuple(FLAG_KINDS)
FLAG_COLUMNS = ["model", "library", "library_version", "attack", "implementation", "family", "norm",
                "flag", "evidence"]

#: returned distance worse than the tracked best by more than this (relative) counts; above the
#: minimal-ε search's 1/64 bisection precision so fixed-ε attacks are not flagged for it
LAST_NOT_BEST_RTOL = 0.05
#: null rate per attack kind: the share of the images it broke on which a *sound* attack's returned
#: output is that much worse than the best it queried (fidelity/README.md, "Flags"). A minimal
#: attack returns its best: sound ones measured 0 of about 2,500 (job, image) cases on the demo.
#: A fixed-ε attack answers "is there an adversarial within ε", not "which is closest": under the
#: minimal-ε search an early iterate at ε* can be adversarial well inside the ball while the
#: attack goes on to its loss-best point on the sphere; sound APGDs measured 1.5–10.7% per image
#: (84 images each, pooled over the demo's models), the seed twin of adv_lib apgd L2 3 of 16.
#: Each rate is the largest one-sided 95% upper confidence bound of a measured sound rate: fixed,
#: the demo's 9 of 84 (0.177; the noise corpus's worst, ART L1 PGD 4 of 60, 0.146); minimal, the
#: corpus's 1 of 188 (adv_lib fab, fmn L∞: 0.025) (benchmarks/real_noise.py ``not_best``); and at
#: least ``null_rates.NULL_MARGIN`` above the bound of every sound rate measured at 512 digits
#: (benchmarks/noise/null_edge.csv, tests/test_null_edge.py): minimal, torchattacks DeepFool 0 of 138
#: (bound 0.022 + 0.02), FMN L1 of adv_lib and foolbox 1 of 291, adv_lib FAB L1 and FMN L∞ 3 of 499
#: (0.016 + 0.02): 5% (0.025 before, below them); fixed, ART L1 PGD 8 of 164 and adv_lib apgd:ce L2
#: 30 of 499 (0.086 + 0.02): 0.18 stays
LAST_NOT_BEST_NULL_RATE = {"minimal": 0.05, "fixed": 0.18}
#: ... and per family where a sound algorithm queries points it never keeps as candidates: EAD's
#: FISTA steps from the extrapolated slack point y_k and keeps the best iterate x_k, so a queried
#: y_k can be adversarial and closer than anything it returns (ART's ElasticNet L1, decision rule
#: L1, on 6 of the held-out calibration's 70 threshold images: bound 0.162, plus the 2-point margin
#: of fidelity/null_rates.py; its held-out images and model measured apart, fidelity/README.md
#: "Held-out calibration"). foolbox's EAD L1 (elastic-net decision rule) stays far above it
LAST_NOT_BEST_FAMILY_NULL_RATE = {"ead": 0.18}
#: ... and never on fewer images than this (one stray image is not a pattern)
LAST_NOT_BEST_MIN_IMAGES = 2
#: silent failure's floor: a working attack breaks at least this share of the images other
#: implementations break (the weakest measured on the demo without a defect flag broke 38%, adv_lib
#: C&W L2; the budget-starved adv_lib fmn L2 16%). Breaking none of m such images, counted once over
#: all the models it ran on, is flagged when (1 - floor)^m ≤ ``ALPHA``: 11 images or more
SILENT_FAILURE_FLOOR = 0.25
#: the twin checks (``twins.py``: label_bug from ``~perm``, shift_sensitivity from ``~shift``,
#: judged against the seed twin ``~seed`` or a null rate) and the class-conditional rule
#: (``class_failure.py``) live in their own modules
#: two seeded runs disagree on a sample beyond this relative difference (float noise is below)
NONDETERMINISM_RTOL = 1e-4
#: optimality gap: different from and worse than a sibling (beyond the margin δ, image by image),
#: Bonferroni over the siblings, Benjamini–Hochberg over the implementation's models, AND at least this much lower ξ
#: (against the family's own envelope, which no implementation of another family can move)
GAP_MIN_DELTA = 0.05
#: families that legitimately run without backward passes (no-backward is not a failure there)
GRADIENT_FREE_FAMILIES = frozenset({"boundary", "hsja", "square", "simba", "sparse_rs", "spatial",
                                    "gaussian_noise", "uniform_noise", "salt_pepper", "dataset",
                                    "zoo", "nes", "random"})


def _causes(errors: pd.Series, limit: int = 2) -> str:
    uniq = [e for e in dict.fromkeys(errors.astype(str)) if e]
    text = "; ".join(e[:160] for e in uniq[:limit])
    return (text + (f" (+{len(uniq) - limit} more)" if len(uniq) > limit else "")) or "no error recorded"


def _kept(bad: pd.DataFrame) -> str:
    """What survives of failed rows, as the rows show it: a job killed from outside (timeout, a
    dead worker) has no tracker left and its rows are all failures."""
    broke = int(np.isfinite(bad["best_distance"]).sum())
    if broke or bad[["forwards", "backwards"]].to_numpy().sum() > 0:
        return f"the tracker's results before it are kept ({broke} of these samples broken)"
    return "no tracker results survive: every one of these samples counts as not broken"


def _status_flags(g: pd.DataFrame) -> list[tuple[str, str]]:
    n, out = len(g), []
    if (g["status"] == "ok").all() and not (g["refused"] > 0).any():
        return out
    for status, what in (("crash", "in batches that raised"), ("timeout", "in a job that timed out")):
        bad = g[g["status"] == status]
        if len(bad):
            out.append((status, f"{len(bad)} of {n} samples {what}: {_causes(bad['error'])}; {_kept(bad)}"))
    invalid = g[g["status"] == "invalid"]
    box = invalid["invalid_reason"] == OUT_OF_BOX
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


def _last_not_best(g: pd.DataFrame) -> dict | None:
    """The job's ``last_not_best`` test, before the adjustment over the implementation's own jobs: among the ``ok``
    images it broke, those whose returned output is worse than the tracked best by more than
    ``LAST_NOT_BEST_RTOL`` (or not adversarial at all), against a binomial with the null rate of
    the attack's kind. None when the job broke nothing it could be judged on."""
    elig = g[(g["status"] == "ok") & g["live"] & np.isfinite(g["best_distance"])]
    if elig.empty:
        return None
    best, ret = elig["best_distance"].to_numpy(), elig["returned_distance"].to_numpy()
    with np.errstate(invalid="ignore"):
        is_worse = ret > best * (1 + LAST_NOT_BEST_RTOL) + 1e-9
    k, n = int(is_worse.sum()), len(elig)
    kind = str(g["kind"].iat[0]) if "kind" in g.columns else "minimal"
    rate = LAST_NOT_BEST_FAMILY_NULL_RATE.get(str(g["family"].iat[0]) if "family" in g.columns else "",
                                              LAST_NOT_BEST_NULL_RATE.get(kind, LAST_NOT_BEST_NULL_RATE["minimal"]))
    p = float(sps.binom.sf(k - 1, n, rate)) if k else 1.0
    return {"p": p, "k": k, "n": n, "rate": rate, "kind": kind, "worse": elig[is_worse]}


def _last_not_best_evidence(c: dict, q: float, n_jobs: int) -> str:
    worse = c["worse"]
    lost = int((~np.isfinite(worse["returned_distance"])).sum())
    both = worse[np.isfinite(worse["returned_distance"])]
    ratio = f"; median returned/best {np.median(both['returned_distance'] / both['best_distance']):.2f}" \
        if len(both) else ""
    return (f"returned output worse than the best it had queried on {c['k']} of {c['n']} images it broke "
            f"({lost} returned no adversarial at all{ratio}); null rate {c['rate']:.0%} for a sound {c['kind']} "
            f"attack, p = {c['p']:.2g}, BH q = {q:.2g} over its {n_jobs} job{'s' * (n_jobs != 1)}: images {sample_list(worse['sample'])}")


def _effort(g: pd.DataFrame, anywhere: dict) -> list[tuple[str, str]]:
    """Did the attack run at all (``silent_failure``)? A gradient attack without any backward
    pass; about one query per sample and nothing broken; or none of the images other
    implementations of its family broke was broken (ASR = clean error rate) on this model nor on any other it
    ran on (``anywhere``: per implementation and norm, the images others broke and those it broke,
    over every model), with (1 - ``SILENT_FAILURE_FLOOR``)^images ≤ ``ALPHA``. An attack whose
    outputs left [0, 1] in any batch of the job ran, and is named for that (``out_of_box``) rather
    than for not running."""
    ok = (g["status"] == "ok").to_numpy()
    if not ok.any():
        return []
    invalid = g["status"] == "invalid"
    if invalid.any() and (g.loc[invalid, "invalid_reason"] == OUT_OF_BOX).any():
        return []
    live, d_star = g["live"].to_numpy()[ok], g["d_star_family"].to_numpy(float)[ok]
    best = g["best_distance"].to_numpy()[ok]
    forwards, backwards = g["forwards"].to_numpy()[ok], g["backwards"].to_numpy()[ok]
    gradient = str(g["family"].iat[0]) not in GRADIENT_FREE_FAMILIES
    target = live & np.isfinite(d_star)  # samples some implementation of its family broke
    m = int(target.sum())
    success = int(np.isfinite(best[target]).sum())
    rates = (f"ASR {float((~live | np.isfinite(best)).mean()):.2f} vs clean error rate "
             f"{float((~live).mean()):.2f}")
    if gradient and backwards.sum() == 0:
        return [("silent_failure", f"no backward pass on any of {ok.sum()} samples for a gradient attack; {rates}")]
    if m and success == 0 and (forwards + backwards).sum() <= ok.sum():
        return [("silent_failure", f"at most one query per sample and none of the {m} samples other "
                                   f"implementations broke was broken; {rates}")]
    targets, broken, n_models = anywhere[(g["implementation"].iat[0], g["library_version"].iat[0], g["norm"].iat[0])]
    p = (1 - SILENT_FAILURE_FLOOR) ** len(targets)
    if m and not broken and p <= ALPHA:  # ``broken`` holds this job's successes too
        where = f" on any of its {n_models} models (and their twins)" if n_models > 1 else ""
        return [("silent_failure", f"broke none of the {len(targets)} images other implementations broke{where} "
                                   f"({forwards.mean():.0f} forwards, {backwards.mean():.0f} backwards per sample "
                                   f"here); a working attack breaks at least {SILENT_FAILURE_FLOOR:.0%} of them "
                                   f"(p = {p:.2g}); {rates}")]
    return []


def _anywhere(rows: pd.DataFrame) -> dict:
    """Per (implementation, library_version, norm): the images (sample ids) its family's
    implementations broke where it ran ``ok``, those it broke, over every model, and how many models it ran on."""
    ok = rows[rows["status"] == "ok"]
    out = {}
    for key, g in ok.groupby(["implementation", "library_version", "norm"], sort=False):
        target = g["live"].to_numpy(bool) & np.isfinite(g["d_star_family"].to_numpy(float))
        hit = target & np.isfinite(g["best_distance"].to_numpy(float))
        out[key] = (set(g["sample"].to_numpy()[target]), set(g["sample"].to_numpy()[hit]),
                    g["base_model"].nunique())
    return out


def _per_job(rows: pd.DataFrame) -> list[dict]:
    """``rows``: prepared rows with ``d_star`` and ``live``. The facts of each job's own rows, and
    ``last_not_best``, a test per job, Benjamini–Hochberg adjusted over the implementation's own jobs
    (never over the report: fidelity/README.md, "Report-wide false flags")."""
    out, tested, anywhere = [], [], _anywhere(rows)
    for key, g in rows.groupby(JOB_KEY, sort=True):
        for flag, evidence in _status_flags(g) + _effort(g, anywhere):
            out.append(dict(zip(JOB_KEY, key)) | {"flag": flag, "evidence": evidence})
        lnb = _last_not_best(g)
        if lnb is not None:
            tested.append((key, lnb))
    # the multiplicity family: the implementation's own jobs (its models), never the report
    families: dict[tuple, list] = {}
    for key, c in tested:
        families.setdefault(tuple(key[1:]), []).append((key, c))
    for members in families.values():
        q = benjamini_hochberg([c["p"] for _, c in members])
        for (key, c), qv in zip(members, q):
            if qv < ALPHA and c["k"] >= LAST_NOT_BEST_MIN_IMAGES:
                out.append(dict(zip(JOB_KEY, key)) | {"flag": "last_not_best",
                                                      "evidence": _last_not_best_evidence(c, qv, len(members))})
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
    """``other``: a second seeded run of some of ``t``'s jobs (``run --repeat 2``). Rows pair up by
    job and sample; with ``job_id`` in both, only the same job's (a stale repeat of an older
    config, e.g. an edited plugin of the same version, is not this job)."""
    o = prepare(other)
    key = JOB_KEY + ["sample"] + (["job_id"] if "job_id" in t.columns and "job_id" in o.columns else [])
    both = t[key + ["best_distance", "status"]].merge(o[key + ["best_distance", "status"]], on=key,
                                                       suffixes=("", "_other"))
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


def _optimality_gap(t: pd.DataFrame) -> list[dict]:
    """``t``: a prepared table without twins. Per model, family and norm, every implementation
    against every sibling (no best is picked first): its p-value on that model is the smallest
    difference-test p (``equivalence.pair_test``: either endpoint beyond its margin, image by image)
    against a sibling shown better (not a ``mixed`` pair), times the number of siblings
    (Bonferroni); 1 without one. The multiplicity family is the implementation's own models,
    declared before the data are seen: Benjamini–Hochberg over them, and a model with q < ``ALPHA``
    is flagged when that sibling's ξ is at least ``GAP_MIN_DELTA`` higher."""
    pairs = pairwise(t, pooled=False)
    if pairs.empty:
        return []
    tests: dict[tuple, dict[str, tuple]] = {}
    for (model, norm, family), g in pairs.groupby(["model", "norm", "family"], sort=True):
        if not family:
            continue
        impls = set(zip(g["implementation_a"], g["library_version_a"])) | set(zip(g["implementation_b"],
                                                                                g["library_version_b"]))
        best: dict[tuple, tuple] = {i: (1.0, None, np.nan, np.nan, None) for i in impls}
        for r in g.itertuples(index=False):
            a, b = (r.implementation_a, r.library_version_a), (r.implementation_b, r.library_version_b)
            if r.direction == 0 or r.mixed:
                continue
            # ξ against the family's own envelope: an implementation of another family cannot move it
            worse, better, xi_w, xi_b = (b, a, r.family_optimality_b, r.family_optimality_a) if r.direction < 0 \
                else (a, b, r.family_optimality_a, r.family_optimality_b)
            p = min(1.0, r.p_different * (len(impls) - 1))
            if p < best[worse][0]:
                best[worse] = (p, better, xi_w, xi_b, r)
        for w, v in best.items():
            tests.setdefault((norm, *w), {})[model] = (*v, len(impls) - 1)
    out = []
    for (norm, *worse), per_model in tests.items():
        models = sorted(per_model)
        q = benjamini_hochberg([per_model[m][0] for m in models])
        for model, qv in zip(models, q):
            p, better, xi_w, xi_b, r, siblings = per_model[model]
            if r is None or not qv < ALPHA or not (np.isfinite(xi_b - xi_w) and xi_b - xi_w >= GAP_MIN_DELTA):
                continue
            wins_w, wins_b = (r.wins_a, r.wins_b) if worse[0] == r.implementation_a else (r.wins_b, r.wins_a)
            fail_w, fail_b = (r.fail_a, r.fail_b) if worse[0] == r.implementation_a else (r.fail_b, r.fail_a)
            out.append({"model": model, "norm": norm, "implementation": worse[0], "library_version": worse[1],
                        "flag": OPTIMALITY_GAP, "evidence": (
                            f"optimality against its family's envelope {xi_w:.3f} vs {xi_b:.3f} for {better[0]} "
                            f"{better[1]}".rstrip()
                            + f"; failure rates {fail_w:.0%} vs {fail_b:.0%}; on the {r.n_both} images both broke "
                              f"typically {np.expm1(abs(r.estimate)):.0%} "
                              f"{'farther' if (r.estimate > 0) == (worse[0] == r.implementation_a) else 'closer'} "
                              f"per image (pseudo-median), smaller perturbation on {wins_w} vs {wins_b}; different "
                              f"beyond the margins with p = {r.p_different:.2g} (×{siblings} "
                              f"siblings: {p:.2g}; BH q = {qv:.2g} over its {len(models)} models) on "
                              f"{r.n_samples} images")})
    return out


def optimality_gap(table: pd.DataFrame) -> list[dict]:
    """The ``optimality_gap`` findings alone (BH over each implementation's own models), for a raw table."""
    return _optimality_gap(without_twins(prepare(table)))


def _drop_twin_repeats(found: pd.DataFrame, twins: dict[str, tuple[str, str]]) -> pd.DataFrame:
    """A twin is the same network: a finding on ``M~shift`` that ``M`` has too is a repeat.

    The seed twin ``M~seed`` is moreover the same model *and* the same images, attacked with another
    seed: it is the noise floor, never a model under judgement. A finding of its own (e.g.
    ``last_not_best`` on 3 of 16 images where ``M`` had 2, under the 3-image minimum) is evidence
    about the attack on ``M``, so it is reported on ``M``, its evidence saying it came from the seed
    twin, and a seed twin is never flagged itself. ``twins``: {model: (base model, twin kind)}
    (``_table.twins_of``); a model absent from it (``"*"``) is no twin."""
    if found.empty:
        return found

    def base_of(model: str) -> str:
        return twins.get(model, (model, ""))[0]

    def is_twin(model: str) -> bool:
        return twins.get(model, (model, ""))[1] != ""

    seed = found["model"].map(lambda m: twins.get(m, (m, ""))[1] == SEED).to_numpy(bool)
    if seed.any():  # the model's own findings first, so that one the model has too is the one kept
        from_seed = found[seed].assign(
            evidence=[f"on its seed twin {m} (the same model and images, another seed): {e}"
                      for m, e in zip(found.loc[seed, "model"], found.loc[seed, "evidence"])],
            model=found.loc[seed, "model"].map(base_of))
        found = pd.concat([found[~seed], from_seed], ignore_index=True).drop_duplicates(
            subset=["model", "norm", "implementation", "library_version", "flag"])
    twin = found["model"].map(is_twin)
    on_base = set(zip(found.loc[~twin, "model"], found.loc[~twin, "norm"], found.loc[~twin, "implementation"],
                      found.loc[~twin, "library_version"], found.loc[~twin, "flag"]))
    repeat = [bool(tw) and (base_of(m), n, i, v, f) in on_base
              for tw, m, n, i, v, f in zip(twin, found["model"], found["norm"], found["implementation"],
                                           found["library_version"], found["flag"])]
    return found[~np.asarray(repeat, dtype=bool)]


def flags(table: pd.DataFrame, other: pd.DataFrame | None = None, *,
          exact: pd.DataFrame | None = None, eps_max: Mapping[str, float] | None = None,
          settings: Mapping[str, float] | None = None, assessed: pd.DataFrame | None = None) -> pd.DataFrame:
    """All findings for ``table``: ``FLAG_COLUMNS``, ``flag`` one of ``FLAGS``.

    ``other``: a second seeded run of the same config (``nondeterminism``); ``exact``: exact
    distances from ``attackaudit exact`` (``below_exact``); ``eps_max``: ε₀ per norm for the
    optimality behind ``below_expected_strength``; ``settings``: the run's ``steps_scale`` and
    ``budget`` (its manifest's config), which pick the measured yardstick of
    ``worse_than_yardstick`` (``yardstick.py``: against the exact minimum where ``exact`` covers
    the model, else the strong envelope; inferred from the rows' parameters when absent;
    ``assessed``: the yardstick's ``assess`` of ``table``, ``exact`` and ``settings``, made already:
    ``findings.findings`` shares it with the standing). A
    finding on a twin model that its base model has too is dropped as a repeat; others keep the
    twin's name, and the twin checks name the base model. Findings about an implementation over all models (class-conditional ``label_bug``,
    ``below_expected_strength``) have ``model == "*"``.
    """
    t = with_invalid_reason(prepare(table))  # a table made without the column: read once
    if t.empty:  # no rows, no findings (a run whose jobs all were skipped, or a filtered table)
        return pd.DataFrame(columns=FLAG_COLUMNS)
    rows = with_envelope(t)
    real = without_twins(t)
    found = (_per_job(rows) + twin_findings(t) + class_findings(rows) + _optimality_gap(real)
             + strength_flags(real, eps_max) + defect_findings(t) + known_defect_findings(t)
             + yardstick_findings(t, exact, settings, assessed=assessed))
    if other is not None:
        found += _nondeterminism(t, other)
    out = _drop_twin_repeats(pd.DataFrame(found, columns=JOB_KEY + ["flag", "evidence"]), twins_of(t))
    out = out.merge(impl_meta(t), on=IMPL_KEY, how="left")
    if exact is not None:
        from .true_optimality import below_exact_flags  # the MILP module is only needed with exact distances
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
