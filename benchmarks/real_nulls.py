"""The calibration's nulls (and a few defects) on real attack noise: tables resampled per image
from the noise corpus (``real_noise.py``), judged by the project's public table-level functions
(``fidelity.recommend``, ``fidelity.flags``, ``fidelity.flags.optimality_gap``, ``fidelity.diff``).

Three tables per repetition, each on ``n`` images drawn with replacement (one block per image over
the models):

- **pair** (``pair_checks``): a randomised built-in (drawn per repetition from every randomised
  spec the corpus ran with two seeds; ``worst`` fixes the noisiest) against its own seed twin
  renamed as a second implementation of its family: any exclusion, "different" direction, gap or
  audit change is a false positive, "tied" is the power; the seed twin 20% farther is the defect.
- **report** (``report_checks``): real rows of the implementations that sit at the edge of each
  per-job rule's null (the sound fixed-ε and minimal attacks with the highest measured share of
  returned-worse-than-best images; the weakest attack that works; a sound fixed-ε attack's
  minimal-ε search columns) beside the strongest minimal attack of each norm, through ``flags``.
  The class-conditional ``label_bug`` is judged on every one of them (no built-in has a label bug).
- **split**, **batch**, **shift** (``twin_checks``; ``twins`` names split and shift together): a
  sound deterministic attack with its batch-split twin (drawn, and the one with the most measured
  differences); an attack not known to be batch-dependent with its batch-composition twin
  (``M~batch``: the same images reversed, with companions in the call; drawn from every such spec, randomised
  or not, and the deterministic one with the most measured differences); a deterministic attack
  with its shift twin (the same two ways) and a randomised one with its shift and seed twins,
  through ``flags``, whatever ``m``: the split twin on ``digits-mlp`` and ``digits-cnn`` (64
  images each, ``SPLIT_MODELS``), the batch and shift twins on ``digits-mlp``, the one model whose
  batch and shift twins the corpus has. The table holds the attack's seed twin wherever the corpus
  has one on those models (as
  ``--metamorphic`` gives one to every randomised or random-state-moving built-in): the batch
  twins judge a randomised attack against it, and do not judge one that moved a random state
  without it.

Each check returns True (fired), False, or None (no null of that kind in this repetition).
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np
import pandas as pd

import noise_corpus
import real_noise as rn

EMPTY_FLAGS = pd.DataFrame(columns=["model", "norm", "implementation", "library_version", "flag"])
#: the models whose batch-split twin (64 images each) and batch-composition twin the corpus has:
#: noise_corpus.py's grids
SPLIT_MODELS = tuple(noise_corpus.SPLIT_MODELS)
BATCH_MODELS = tuple(noise_corpus.BATCH_MODELS)
TWIN_MODELS = {"split": SPLIT_MODELS, "batch": BATCH_MODELS}
SHIFT_MODEL = "digits-mlp"
#: known shift-twin defects (fidelity/README.md: torchattacks EAD 6 of 16, torchattacks CW 13 of 16)
SHIFT_DEFECTS = frozenset({("torchattacks/EADL1", "l1"), ("torchattacks/EADEN", "l1"), ("torchattacks/CW", "l2")})


#: the part of the corpus (``real_noise.part``) the checks draw their images and models from
#: (``draw``), and the part their pools and worst specs are measured on (``pools``): the whole
#: corpus (None) unless ``calibrate_real(part=...)`` runs a held-out part, whose pools are then the
#: threshold part's, so that no spec is picked as the worst on the images it is judged on
SCOPE: dict[str, str | None] = {"draw": None, "pools": None}


@lru_cache(maxsize=4)
def resampler(path: str = str(rn.CORPUS), part: str | None = None) -> rn.Resampler:
    return rn.Resampler(rn.part(rn.load(path), part))


def _scope() -> tuple[rn.Resampler, dict]:
    return resampler(part=SCOPE["draw"]), pools(part=SCOPE["pools"])


@lru_cache(maxsize=4)
def pools(path: str = str(rn.CORPUS), part: str | None = None) -> dict:
    """The implementations each null draws from, with the measured worst of each kind (on the
    batch twins: the most images differing where the rule looks, off a decision boundary and
    without a default output), on the corpus or one ``part`` of it."""
    R = resampler(path, part)
    c = R.c
    m = rn.measure(c)
    seed = m["seed"][m["seed"]["both_broke"] >= 30].copy()
    seed_pool = [(r.implementation, r.norm) for r in seed.itertuples()
                 if all(R.has(rn.Job(r.implementation, r.norm, b + s)) for b in R.base_models for s in ("", "~seed"))]
    worst_seed = tuple(seed.sort_values("sd_log_ratio").iloc[-1][["implementation", "norm"]])
    nb = m["not_best"][~m["not_best"]["known"] & (m["not_best"]["n"] >= 30)]
    # the worst against its own null (a family's where flags has one: EAD's FISTA slack queries)
    from attackaudit.fidelity.flags import LAST_NOT_BEST_FAMILY_NULL_RATE as FAMILY, LAST_NOT_BEST_NULL_RATE as KIND
    nb = nb.assign(excess=nb["rate"] - [FAMILY.get(str(f), KIND.get(k, KIND["minimal"]))
                                        for f, k in zip(nb["family"], nb["kind"])])
    nb_worst = {k: tuple(g.sort_values(["excess", "n"]).iloc[-1][["implementation", "norm"]])
                for k, g in nb.groupby("kind")}
    broke = c[(c["twin"] == "") & (c["best_distance"] > 0)].assign(hit=lambda d: np.isfinite(d["best_distance"]))
    rate = broke.groupby(["implementation", "norm"])["hit"].mean()
    from attackaudit.fidelity.flags import SILENT_FAILURE_FLOOR
    # the weakest attack at or above the floor silent_failure assumes of a working attack
    working = rate[(rate >= SILENT_FAILURE_FLOOR)
                   & rate.index.map(lambda k: all(R.has(rn.Job(*k, b)) for b in R.base_models))]
    weakest = tuple(working.sort_values().index[0])
    strongest = {norm: tuple(g.sort_values().index[-1]) for norm, g in
                 rate[rate.index.map(lambda k: c.loc[(c["implementation"] == k[0]), "kind"].iat[0] == "minimal")]
                 .groupby(level="norm")}
    fixed = c[(c["twin"] == "") & (c["kind"] == "fixed")]
    fixed_pool = sorted({(i, n) for i, n in zip(fixed["implementation"], fixed["norm"])
                         if (i, n) not in rn.KNOWN_DEFECTS["eps_unused"]
                         and all(R.has(rn.Job(i, n, b)) for b in R.base_models)})
    split = m["split"].loc[~m["split"]["known"].to_numpy(bool) & ~m["split"]["randomised"].to_numpy(bool)]
    split = split.loc[np.array([all(R.has(rn.Job(i, n, b + "~split")) for b in SPLIT_MODELS)
                            for i, n in zip(split["implementation"], split["norm"])], dtype=bool)]
    batch = m["batch"].loc[~m["batch"]["known"].to_numpy(bool)]
    # a randomised spec is judged against its seed twin: only those the corpus has one of
    batch = batch.loc[np.array([all(R.has(rn.Job(i, n, b + "~batch")) and (not r or R.has(rn.Job(i, n, b + "~seed")))
                                    for b in BATCH_MODELS)
                                for i, n, r in zip(batch["implementation"], batch["norm"], batch["randomised"])],
                               dtype=bool)]
    batch_det = batch.loc[~batch["randomised"].to_numpy(bool)]
    shift = m["shift"]
    known = np.array([(i, nm) in SHIFT_DEFECTS for i, nm in zip(shift["implementation"], shift["norm"])], dtype=bool)
    # a family the shift rule exempts (JSMA) is never judged on the twin: drawing it, or naming it
    # the worst, would measure nothing
    from attackaudit.fidelity.twins import EXEMPT

    family = c.drop_duplicates("implementation").set_index("implementation")["family"].astype(str)
    exempt = shift["implementation"].map(family).isin(EXEMPT["shift"]).to_numpy(bool)
    shift_det = shift.loc[~shift["randomised"].to_numpy(bool) & ~known & ~exempt]
    shift_rand = shift.loc[shift["randomised"].to_numpy(bool)]
    return {"measure": m, "seed": seed_pool, "seed_worst": worst_seed, "not_best_worst": nb_worst,
            "weakest": weakest, "strongest": strongest, "fixed": fixed_pool,
            "split": _keys(split),
            "split_worst": tuple(split.sort_values(["beyond", "largest_rel"]).iloc[-1][["implementation", "norm"]])
            if len(split) else None,
            "batch": _keys(batch),
            "batch_worst": tuple(batch_det.sort_values(["beyond", "largest_rel"]).iloc[-1][["implementation", "norm"]])
            if len(batch_det) else None,
            "shift_det": _keys(shift_det),
            "shift_det_worst": tuple(shift_det.sort_values(["rate", "largest_rel"]).iloc[-1][["implementation", "norm"]])
            if len(shift_det) else None,
            "shift_rand": _keys(shift_rand)}


def _keys(df: pd.DataFrame) -> list[tuple[str, str]]:
    return list(zip(df["implementation"], df["norm"]))


def _images(R: rn.Resampler, rng: np.random.Generator, n: int, jobs: list[rn.Job]) -> np.ndarray:
    return rng.choice(R.common(jobs), n, replace=True)


def _pair_table(R, impl, norm, models, images, scale: float = 1.0) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(seed 0's rows, the seed twin's rows renamed ``<impl>:seed1`` on the same models)."""
    a = pd.concat([R.rows(rn.Job(impl, norm, b), images) for b in models], ignore_index=True)
    b = pd.concat([R.rows(rn.Job(impl, norm, b + "~seed"), images, as_model=b, as_impl=f"{impl}:seed1",
                          scale=scale) for b in models], ignore_index=True)
    return a, b


def _verdict(table: pd.DataFrame) -> tuple[str, str]:
    from attackaudit.fidelity import recommend
    r = recommend(table, EMPTY_FLAGS, n_boot=2).iloc[0]
    return str(r["verdict"]), str(r["implementation"])


def _audit(a: pd.DataFrame, b: pd.DataFrame, impl: str) -> str:
    from attackaudit.fidelity import diff
    after = b.assign(implementation=impl, library_version=b["library_version"] + "+1")
    d = diff(a, after, flags_a=EMPTY_FLAGS, flags_b=EMPTY_FLAGS)
    return str(d.set_index("implementation").loc[impl, "verdict"])


def pair_checks(rng: np.random.Generator, n: int, m: int, worst: bool = False, power: bool = True) -> dict:
    """One repetition of the seed-twin pair: trust exclusion, direction, gap, audit (nulls), tied
    (power) and, with ``power``, the twin 20% farther (trust exclusion power, tied false positive)."""
    from attackaudit.fidelity.flags import optimality_gap
    R, P = _scope()
    impl, norm = P["seed_worst"] if worst else P["seed"][rng.integers(len(P["seed"]))]
    models = rn.draw_models(rng, m, R.base_models)
    images = _images(R, rng, n, [rn.Job(impl, norm, b + s) for b in models for s in ("", "~seed")])
    a, b = _pair_table(R, impl, norm, models, images)
    t = pd.concat([a, b], ignore_index=True)
    verdict, _ = _verdict(t)
    out = {"trust exclusion": verdict == "clear", "tied (equivalence)": verdict == "tied",
           "optimality_gap": bool(len(optimality_gap(t))),
           "audit regressed/improved": _audit(a, b, impl) in ("regressed", "improved")}
    if power:
        _, far = _pair_table(R, impl, norm, models, images, scale=1.2)
        v_far, top = _verdict(pd.concat([a, far], ignore_index=True))
        out["trust exclusion far20"] = v_far == "clear" and top == impl
        out["tied (equivalence) far20"] = v_far == "tied"
    return out


def _fired(found: pd.DataFrame, flag: str, impl: str, norm: str) -> bool:
    f = found[(found["flag"] == flag) & (found["implementation"] == impl) & (found["norm"] == norm)]
    return bool(len(f))


def report_checks(rng: np.random.Generator, n: int, m: int) -> dict:
    """One repetition of the per-job report: last_not_best on the worst sound fixed-ε and minimal
    attacks, silent_failure on the weakest working one, eps_unused and out_of_ball on a sound
    fixed-ε attack drawn per repetition, class-conditional label_bug on all of them."""
    from attackaudit.fidelity import flags
    R, P = _scope()
    models = rn.draw_models(rng, m, R.base_models)
    fixed = P["fixed"][rng.integers(len(P["fixed"]))]
    roles = {"last_not_best fixed": P["not_best_worst"].get("fixed"),
             "last_not_best minimal": P["not_best_worst"].get("minimal"),
             "silent_failure": P["weakest"], "fixed": fixed}
    # a pool measured on another part of the corpus (held-out runs) may name a spec this part lacks
    roles = {k: v if v is not None and all(R.has(rn.Job(*v, b)) for b in models) else None for k, v in roles.items()}
    chosen = {k: v for k, v in roles.items() if v is not None}
    siblings = {P["strongest"][norm] for _, norm in chosen.values() if norm in P["strongest"]}
    impls = sorted(set(chosen.values()) | siblings)
    images = _images(R, rng, n, [rn.Job(i, nm, b) for i, nm in impls for b in models])
    t = pd.concat([R.rows(rn.Job(i, nm, b), images) for i, nm in impls for b in models], ignore_index=True)
    found = flags(t)
    out = {"last_not_best fixed": _fired(found, "last_not_best", *roles["last_not_best fixed"])
           if roles["last_not_best fixed"] else None,
           "last_not_best minimal": _fired(found, "last_not_best", *roles["last_not_best minimal"])
           if roles["last_not_best minimal"] else None,
           "silent_failure weakest": _fired(found, "silent_failure", *roles["silent_failure"])
           if roles["silent_failure"] else None,
           "eps_unused": _fired(found, "eps_unused", *fixed) if roles["fixed"] else None,
           "out_of_ball": _fired(found, "out_of_ball", *fixed) if roles["fixed"] else None}
    label = found[(found["flag"] == "label_bug") & (found["model"] == "*")]
    out["label_bug (class)"] = bool(len(label))
    return out


def _draw(rng: np.random.Generator, pool: list) -> tuple[str, str] | None:
    return pool[rng.integers(len(pool))] if pool else None


#: columns that name a row's place in the grid, not what the attack returned: kept by ``exchange``
PLACE_COLUMNS = ("model", "sample", "job_id", "implementation", "library", "grid", "run", "dataset",
                 "subset_hash", "params_hash", "params", "base", "twin")


def exchange(tables: dict, a: rn.Job, b: rn.Job, swap: np.ndarray) -> None:
    """Swap the results of jobs ``a`` and ``b`` on the images where ``swap`` is True (in place).

    The split cells' null: a deterministic attack whose source has no batch-wide step, stop or
    constant (every null spec: the known batch defects are out of the pool) returns, batched and
    one image per call, two results that differ only by where float rounding sent a long search,
    so which of the two ran batched is exchangeable per image. Resampling the corpus's images as
    they are instead keeps the lean its 125 images happen to have (adv_lib's ALMA L1: 27 farther
    alone, 17 closer, sign p 0.17) and, at 64 resampled images, tests a world where that chance
    lean is the truth. A random swap per image keeps the real counts and sizes of the differences
    and removes only their side, the one thing the null says is absent."""
    if a not in tables or b not in tables:
        return
    ta, tb = tables[a], tables[b]
    cols = [c for c in ta.columns if c not in PLACE_COLUMNS and c in tb.columns]
    rows = np.flatnonzero(swap)
    va, vb = ta.iloc[rows][cols].to_numpy(copy=True), tb.iloc[rows][cols].to_numpy(copy=True)
    ta.iloc[rows, [ta.columns.get_loc(c) for c in cols]] = vb
    tb.iloc[rows, [tb.columns.get_loc(c) for c in cols]] = va


def twin_checks(rng: np.random.Generator, n: int, m: int, kind: str = "split") -> dict:
    """One repetition of one twin rule on real twins (``kind``): batch_dependence of a sound
    deterministic attack on the batch-split twin (drawn, and the most-differing one, ``split``),
    or on the batch-composition twin (an attack not known to be batch-dependent, randomised or
    not, drawn, and the most-differing deterministic one, ``batch``); shift_sensitivity of a
    deterministic attack (drawn, and the most-differing sound one) and of a randomised one beside
    its seed twin (``shift``)."""
    from attackaudit.fidelity import flags
    R, P = _scope()
    if kind == "split":
        roles = {"batch_dependence": _draw(rng, P["split"]), "batch_dependence worst": P["split_worst"]}
    elif kind == "batch":
        roles = {"batch_dependence": _draw(rng, P["batch"]), "batch_dependence worst": P["batch_worst"]}
    else:
        roles = {"shift_sensitivity": _draw(rng, P["shift_det"]), "shift_sensitivity worst": P["shift_det_worst"],
                 "shift_sensitivity seeds": _draw(rng, P["shift_rand"])}
    jobs: list[rn.Job] = []
    for key, v in roles.items():
        if v is None:
            continue
        if kind in ("split", "batch"):
            for b in TWIN_MODELS[kind]:
                # the seed twin where the corpus has one, as --metamorphic gives it (module docstring)
                jobs += [rn.Job(*v, b + s) for s in ("", f"~{kind}", "~seed") if R.has(rn.Job(*v, b + s))]
        else:
            jobs += [rn.Job(*v, SHIFT_MODEL + s) for s in ("", "~shift") + (("~seed",) if key.endswith("seeds") else ())
                     if R.has(rn.Job(*v, SHIFT_MODEL + s))]
    jobs = list(dict.fromkeys(jobs))
    if not jobs:  # a corpus without twins
        return {key: None for key in roles}
    images = _images(R, rng, n, jobs)
    tables = {j: R.rows(j, images) for j in jobs}
    if kind == "split":
        swap = rng.random(n) < 0.5
        for v in {v for v in roles.values() if v is not None}:
            for b in TWIN_MODELS[kind]:
                exchange(tables, rn.Job(*v, b), rn.Job(*v, b + "~split"), swap)
    found = flags(pd.concat(list(tables.values()), ignore_index=True))
    out = {}
    for key, v in roles.items():
        flag = "batch_dependence" if key.startswith("batch") else "shift_sensitivity"
        out[key] = _fired(found, flag, *v) if v is not None else None
    return out


# ------------------------------------------------------------------ cells
#: check key → (rule, scenario) of the calibration table, per group of checks
NAMES = {
    "pair": {"trust exclusion": ("trust exclusion", "real seeds"),
             "tied (equivalence)": ("tied (equivalence)", "real seeds"),
             "optimality_gap": ("optimality_gap", "real seeds"),
             "audit regressed/improved": ("audit regressed/improved", "real seeds"),
             "trust exclusion far20": ("trust exclusion", "real far20"),
             "tied (equivalence) far20": ("tied (equivalence)", "real far20")},
    "pair worst": {"trust exclusion": ("trust exclusion", "real seeds, noisiest"),
                   "tied (equivalence)": ("tied (equivalence)", "real seeds, noisiest"),
                   "optimality_gap": ("optimality_gap", "real seeds, noisiest"),
                   "audit regressed/improved": ("audit regressed/improved", "real seeds, noisiest")},
    "report": {"last_not_best fixed": ("last_not_best", "real fixed, worst"),
               "last_not_best minimal": ("last_not_best", "real minimal, worst"),
               "silent_failure weakest": ("silent_failure", "real weakest"),
               "eps_unused": ("eps_unused", "real fixed"), "out_of_ball": ("out_of_ball", "real fixed"),
               "label_bug (class)": ("label_bug (class)", "real report")},
    "split": {"batch_dependence": ("batch_dependence", "real split"),
              "batch_dependence worst": ("batch_dependence", "real split, worst")},
    "batch": {"batch_dependence": ("batch_dependence", "real batch"),
              "batch_dependence worst": ("batch_dependence", "real batch, worst")},
    "shift": {"shift_sensitivity": ("shift_sensitivity", "real shift"),
              "shift_sensitivity worst": ("shift_sensitivity", "real shift, worst"),
              "shift_sensitivity seeds": ("shift_sensitivity", "real seeds")},
}
#: group names that stand for several groups (``twins``: the split and shift twins, as before the
#: batch-composition twin had its own)
ALIASES = {"twins": ("split", "shift")}
#: (rule, scenario) cells of real noise that measure power
POWER = frozenset({("tied (equivalence)", "real seeds"), ("tied (equivalence)", "real seeds, noisiest"),
                   ("trust exclusion", "real far20")})


def _run_group(group: str, rng: np.random.Generator, n: int, m: int, power: bool) -> dict:
    if group == "pair":
        return pair_checks(rng, n, m, power=power)
    if group == "pair worst":
        return pair_checks(rng, n, m, worst=True, power=False)
    if group == "report":
        return report_checks(rng, n, m)
    return twin_checks(rng, n, m, kind=group)


def calibrate_real(reps: int, images: list[int], n_models: list[int], seed: int = 0,
                   groups: tuple[str, ...] = tuple(NAMES), power: bool = True, part: str | None = None
                   ) -> pd.DataFrame:
    """One row per (rule, scenario, images, models) of real noise: ``fired`` of ``reps``
    repetitions where the null (or defect) was present (``evaluated``), and their ``rate``.
    ``groups``: keys of ``NAMES`` or ``ALIASES``. ``part``: draw from one part of the corpus
    (``real_noise.part``: "held-out", "held-out model"), with the pools and worst specs measured on
    the "threshold" part; a cell the part cannot hold (no twin of the held-out model) is absent."""
    SCOPE.update(draw=part, pools=None if part is None else "threshold")
    try:
        return _calibrate(reps, images, n_models, seed, groups, power)
    finally:
        SCOPE.update(draw=None, pools=None)


def _calibrate(reps: int, images: list[int], n_models: list[int], seed: int, groups: tuple[str, ...],
               power: bool) -> pd.DataFrame:
    groups = tuple(dict.fromkeys(g for name in groups for g in ALIASES.get(name, (name,))))
    rows = []
    for n in images:
        for m in n_models:
            for group in groups:
                rng = np.random.default_rng([seed, n, m, list(NAMES).index(group)])
                hits = [_run_group(group, rng, n, m, power) for _ in range(reps)]
                for key, (rule, scenario) in NAMES[group].items():
                    vals = [h[key] for h in hits if h.get(key) is not None]
                    if vals:
                        rows.append({"rule": rule, "scenario": scenario, "images": n, "models": m,
                                     "fired": int(np.sum(vals)), "evaluated": len(vals),
                                     "rate": float(np.mean(vals)), "reps": len(vals)})
    return pd.DataFrame(rows)
