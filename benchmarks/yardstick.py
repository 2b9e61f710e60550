"""Yardsticks (fidelity/README.md, "Yardsticks"): the expected per-image log ratio of sound
implementations to the exact minimum (and to the strong envelope), per family × norm × settings,
measured on real runs of the built-ins, and the false-positive rate and planted recall of the
``worse_than_yardstick`` rule on held-out images.

    .venv/bin/python benchmarks/yardstick.py [--runs runs/ys/tiny_demo runs/ys/mlp_demo]
        [--exact DIR ...] [--reps 200] [--save]
    .venv/bin/python benchmarks/yardstick.py --stored [--save]   # from the stored ratios, no runs
    .venv/bin/python benchmarks/yardstick.py --stored --runs DIR ... [--save]   # and these runs as new sources

Sources (each a setting, from its manifest or the corpus's documented one):

| source | setting | models (seed twins give the second seed of the randomised specs) |
|---|---|---|
| ``benchmarks/noise/corpus.parquet`` | steps 0.25, budget 1000 | ``digits-mlp`` (exact), ``digits-cnn``, ``digits-cnn-at-linf`` (envelope), 64 images |
| each ``--runs`` directory | its manifest's ``steps_scale`` and ``budget`` | its models, e.g. ``digits-mlp-tiny`` and ``digits-mlp`` at the demo's steps 0.5, budget 2000 |

The stored data (2026-12-05) came from the corpus and three runs at the demo's settings, made with
``attackaudit run --models M M~seed --samples N --steps-scale 0.5 --budget 2000 --seed 0 --out
runs/ys/<name>`` for ``digits-mlp-tiny`` (64 images, ``tiny_demo``, 2,032 s), ``digits-mlp`` (64,
``mlp_demo``, 1,943 s) and ``digits-cnn`` (32, ``cnn_demo``, 1,094 s; every built-in spec, 140 jobs
each, on this shared 2-core machine under a load of 5-15), then ``benchmarks/yardstick.py --runs
runs/ys/tiny_demo runs/ys/mlp_demo runs/ys/cnn_demo --reps 200 --save`` (the exact minima: the
shipped tables of ``harness/exact/shipped``). C&W L2 at all of its steps was measured on 2026-12-06
(``--attacks`` the five C&W L2 specs, ``--steps-scale 1.0``, ``digits-mlp-tiny`` and ``digits-mlp``,
64 images, about 30 s each) and is *not* a source: every built-in is unsound there (``optimality_gap``
beside cleverhans' warm-started search, 1.17-1.20x the exact minimum, where adv-lib's, foolbox's and
torchattacks' land 1.41-1.45x), so the family's bound at 1.0 would be one corpus twin's (1.10x) and
would flag those three, which have no documented distance defect, for our 100-iteration schedule.
Twice the steps with budget 8000 was added as a third setting on 2026-12-06 (``runs/ys/mlp-tiny_2x``,
104 s, and ``runs/ys/mlp_2x``, 117 s: ``--models M M~seed --samples 64 --steps-scale 2.0 --budget 8000``
with ``--attacks`` the thirteen L1 specs of adv-lib, foolbox and ART that take steps and ten L2 specs:
adv-lib's ddn, apgd, apgd:ce, apgd_targeted, fmn, alma and df, foolbox's DDN and L2 FMN, torchattacks'
APGDT), then ``--stored --runs runs/ys/mlp-tiny_2x runs/ys/mlp_2x --save``: the corpus cases recorded
there (the two L1 PGD rescaling cases, DDN's annealing, APGD-T's step size) are judged at it, and their
patched twins are sources there. A family it does not measure is judged at the demo's setting.

Exact minima: every ``exact/<model>__<norm>.parquet`` under the ``--exact`` directories and the run
directories (``attackaudit exact``). A model with exact minima of a norm is read against them
(``yardstick: exact``), every other one against the strong envelope (``envelope``), as
``fidelity.yardstick.log_ratios`` does for a report.

**Sound**: an implementation (and norm) is sound when no flag of ``fidelity.flags`` names it in any
source (every rule, ``optimality_gap`` included; ``worse_than_yardstick`` itself excluded) and
``held_out.dropped`` gives no reason (a known defect of a rule, a defect-corpus case, a
``known_defects.json`` entry, a crash, an invalid batch or a refused query in its corpus rows). The
defect corpus's patched twins (``patched_twins``) are candidates too, judged on their own flags. An
implementation the corpus documents as farther than sound is never sound (``documented``): every
untargeted case of the distance class (``worse_than_yardstick`` among its ``flags``) whose wrong line
is in the installed release excludes its (implementation, norm), whatever the measurement's stored
reasons say (``--stored`` reads reasons written before later cases existed), and a patched twin that
still carries another distance-class case's defect of the same implementation and norm (that case's
wrong line and every text its patch replaces still in the twin's source) is not sound either: one
patch does not make a release with two documented distance defects sound. Cases of the other classes
(a crash, a fallback output, a batch or shift effect, ...) do not exclude an implementation here:
where such a defect acts, its flag names the implementation in that source's rows and ``unsound``
drops it already; where it does not act (foolbox's C&W L2 returns its input only where no constant
succeeds, adv-lib's divides by zero only on a degenerate image) the distances measured are the
implementation's own, and dropping them would leave a family with no bound and judge our settings'
weakness against the norm's bound as the library's defect.

**Bounds.** A run is one (source, model, seed, implementation, norm) on at least ``MIN_RUN_IMAGES``
images; its ``ucb`` the one-sided 95% upper confidence bound of its median per-image log ratio. The
family's ``expected`` is the pooled median over its sound runs, its ``worst`` the largest sound
``ucb``, its ``bound`` = worst + ``margin`` (per yardstick kind). A strong family (``strength.is_strong``) whose
``expected`` lies more than ``SHORTFALL`` (ln 1.25, the share endpoint's material per-image
difference) beyond the median ``expected`` of the norm's strong families is in ``shortfall``: its
implementations keep their family's bound (a member worse than its sound siblings is a defect, the
family's weakness at these settings is not) and the family gets no trusted pick. The norm's bound
(plugins, families with no usable measurement) is the loosest bound of its strong families not in
shortfall. ``--save`` writes ``fidelity/yardsticks.json`` with bounds from *all*
images (the held-out split measures the rule's error rates, the shipped bounds use every image),
``benchmarks/noise/yardstick.csv`` (one row per run), ``benchmarks/noise/yardstick_images.parquet``
(the per-image log ratios the bounds are computed from: ``tests/test_yardstick.py`` recomputes the
stored bounds from them) and ``benchmarks/noise/yardstick_fpr.csv``.

**Error rates** (per margin of ``MARGINS``; the shipped margin is the smallest whose held-out
false-positive rates pass): images split by ``real_noise.held_out`` (a fixed hash of the sample id),
every sound run's held-out images judged against the threshold images' bound (the sign test at α, as one job); ``held-out`` at all its held-out images and resampled to
16 (the demo's size), ``held-out seed`` the seed twins against bounds from seed 0 alone, ``held-out
model`` each model against bounds from the others. Recall: the same held-out images made 12% and
25% farther, or failing on a quarter of the images.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
ROOT = HERE.parent
OUT_JSON = ROOT / "fidelity" / "yardsticks.json"
OUT_RUNS = HERE / "noise" / "yardstick.csv"
OUT_FPR = HERE / "noise" / "yardstick_fpr.csv"
OUT_IMAGES = HERE / "noise" / "yardstick_images.parquet"
#: the per-image table's columns (categorical where they repeat)
IMAGE_COLUMNS = ["yardstick", "setting", "source", "model", "seed", "implementation", "library", "family", "norm",
                 "sample", "log_ratio"]
CORPUS_SETTING = {"steps_scale": 0.25, "budget": 1000}
#: margins tried on the threshold part; the shipped one is the smallest whose held-out rates pass
MARGINS = (0.0, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1)
#: a held-out false-positive rate passes when at most this (per sound job, before BH over models)
FPR_TARGET = 0.05
SHORTFALL = float(np.log(1.25))
RUN_COLUMNS = ["yardstick", "setting", "source", "model", "seed", "implementation", "library", "family", "norm",
               "strong", "sound", "why", "n_images", "median", "ucb", "n_threshold", "median_threshold",
               "ucb_threshold", "n_held_out", "median_held_out"]
#: a run on fewer images sets no bound (the upper confidence bound of a median of 8 is its maximum)
MIN_RUN_IMAGES = 12
#: one-sided level of a run's upper confidence bound of its median (an order statistic)
UCB_LEVEL = 0.95


def setting_name(steps_scale: float, budget: float) -> str:
    return f"steps {steps_scale:g}, budget {int(budget)}"


# ------------------------------------------------------------------ sources
def _corpus() -> tuple[pd.DataFrame, dict]:
    import real_noise as rn
    c = rn.load()
    return c.drop(columns=["base", "twin"]), dict(CORPUS_SETTING)


def _run_dir(path: Path) -> tuple[pd.DataFrame, dict]:
    from attackaudit.results.store import read_manifest
    from attackaudit.reports.run_files import load_runs
    table, _, _ = load_runs([Path(path)])
    config = (read_manifest(Path(path)) or {}).get("config", {})
    return table, {"steps_scale": float(config.get("steps_scale", 1.0)), "budget": float(config.get("budget", 2000))}


def _source_name(path: Path) -> str:
    """A run directory's name in the stored tables (its last part: no machine's paths)."""
    return Path(path).name


def load_exact(dirs: list[Path]) -> pd.DataFrame | None:
    """Exact minima from ``attackaudit exact`` tables (``DIR/exact/<model>__<norm>.parquet``) and
    from tables named ``<model>__<norm>.parquet`` directly in a directory (the shipped ones of
    ``harness/exact/shipped``, whose rows name no model: the file does); solved rows win."""
    parts = []
    for d in dirs:
        for p in sorted((Path(d) / "exact").glob("*.parquet")) + sorted(Path(d).glob("*__*.parquet")):
            e = pd.read_parquet(p)
            if "model" not in e.columns:
                e = e.assign(model=p.stem.split("__")[0])
            parts.append(e[[c for c in ("model", "dataset", "sample", "norm", "status", "exact_distance",
                                        "lower_bound") if c in e.columns]])
    if not parts:
        return None
    e = pd.concat(parts, ignore_index=True)
    e = e.assign(_solved=(e["status"] == "optimal").astype(int)).sort_values("_solved", kind="stable")
    return e.drop_duplicates(["model", "norm", "sample"], keep="last").drop(columns="_solved")


def seeds(table: pd.DataFrame) -> list[tuple[int, pd.DataFrame]]:
    """(seed, a table of real models) per seed: seed 0 the run's own rows; seed 1 the seed twins'
    rows (``M~seed``) renamed to ``M``, in place of the same implementations' seed-0 rows (the
    others kept, so the envelope is a whole run's)."""
    from attackaudit.results.schema import SEED, Twin, with_models, with_twin_columns
    # model names as strings (the corpus stores a category); a table read before the twin columns: read once
    t = with_twin_columns(table.astype({"model": str}))
    real = t[t["twin"] == ""]
    seed = t[t["twin"] == SEED]
    seed = with_models(seed, [Twin(b) for b in seed["base_model"]])  # standing in for their base model's rows
    out = [(0, real)]
    if len(seed):
        swapped = set(zip(seed["model"], seed["implementation"].astype(str), seed["norm"].astype(str)))
        keep = [(m, i, n) not in swapped for m, i, n in zip(real["model"], real["implementation"].astype(str),
                                                            real["norm"].astype(str))]
        out.append((1, pd.concat([real[np.asarray(keep, bool)], seed], ignore_index=True)))
    return out


def images(table: pd.DataFrame, exact: pd.DataFrame | None, setting: str, source: str) -> pd.DataFrame:
    """Per-image log ratios of every (seed, model, implementation, norm) of one source."""
    from attackaudit.fidelity.yardstick import log_ratios
    from attackaudit.results.schema import SEED, with_twin_columns
    out = []
    for seed, t in seeds(table):
        lr = log_ratios(t, exact, everywhere=True)
        if seed == 1:
            twins = with_twin_columns(table)
            ran = twins[twins["twin"] == SEED]  # the seed twins' own jobs, on their base models
            mine = set(zip(ran["base_model"].astype(str), ran["implementation"].astype(str), ran["norm"].astype(str)))
            lr = lr[[(m, i, n) in mine for m, i, n in zip(lr["model"], lr["implementation"], lr["norm"])]]
        out.append(lr.assign(seed=seed))
    lr = pd.concat(out, ignore_index=True)
    meta = table.drop_duplicates(["implementation", "norm"])[["implementation", "norm", "library", "family"]]
    meta = meta.astype(str)
    return lr.merge(meta, on=["implementation", "norm"], how="left").assign(setting=setting, source=source)


def patched_twins(exact: pd.DataFrame | None, measured: list[dict]) -> tuple[pd.DataFrame, dict]:
    """The defect corpus's patched twins as sound candidates (``benchmarks/defects/rows/*.fix.parquet``
    beside their case's siblings, as ``defect_corpus.fix_table`` judges them): (per-image ratios,
    why each is not sound). A twin is named ``<implementation> [patched <case>]`` so that its
    soundness is its own flags', not the defective release's (and not carrying another case's
    defect: ``carried``); it is filed under the measured setting that is its case's (steps within
    ``fidelity.yardstick.SETTINGS_RTOL``, the same budget). A twin run at other settings is left
    out: a run with more steps or budget than a measured setting would set that setting's bound
    tighter than sound runs there land (foolbox's patched L1 PGD lands 1.63× the exact minimum at
    2.0 of the steps and budget 8000, its case's, but 2.99× at the demo's 0.5), and one with fewer
    would judge runs at the setting by a weaker run than theirs."""
    import defect_corpus as dc
    from defect_cases import load_cases
    from attackaudit.fidelity import flags
    from attackaudit.fidelity.yardstick import FLAG, SETTINGS_RTOL
    imgs, why = [], {}
    for case in load_cases():
        try:
            defect, fix = dc.recorded(case)
        except FileNotFoundError:
            continue
        if not len(fix) or case.run.get("targeted", False):
            continue
        scale, budget = float(case.run.get("steps_scale", 1.0)), float(case.run.get("budget", 2000))
        fits = [m for m in measured if abs(m["steps_scale"] - scale) <= SETTINGS_RTOL * scale and m["budget"] == budget]
        if not fits:
            continue
        (setting,) = fits
        table, impl, version = dc.fix_table(case, defect, fix)
        name = f"{impl} [patched {case.id}]"
        found = flags(table)
        mine = found[(found["implementation"] == impl) & (found["library_version"].astype(str) == version)
                     & (found["flag"] != FLAG)]
        lr = images(table, exact, setting_name(setting["steps_scale"], setting["budget"]), f"patched {case.id}")
        lr = lr[(lr["implementation"] == impl) & (lr["library_version"].astype(str) == version)]
        imgs.append(lr.assign(implementation=name))
        if len(mine):
            why[(name, case.norm)] = ["flags: " + ", ".join(sorted(set(mine["flag"])))]
        kept = [f"keeps defect corpus case {other.id}" for other in carried(case)]
        if kept:
            why.setdefault((name, case.norm), []).extend(kept)
    return (pd.concat(imgs, ignore_index=True) if imgs else pd.DataFrame()), why


def _installed(case, files: dict | None = None) -> dict[str, str] | None:
    """The installed release's text of the files ``case``'s defect lives in ([source] and every
    patch's file), with ``files`` (path -> text) standing in where given; None when its
    distribution is not installed."""
    from defect_cases import package_root
    try:
        root, _ = package_root(None, case.dist)
    except Exception:  # noqa: BLE001 - not installed: nothing of it was measured
        return None
    out = {}
    for f in {case.source_file, *(p.file for p in case.patches)}:
        if files is not None and f in files:
            out[f] = files[f]
        else:
            out[f] = (root / f).read_text() if (root / f).is_file() else ""
    return out


def defect_in(case, files: dict[str, str]) -> bool:
    """Whether ``case``'s defect is in a source whose files read ``files`` (path -> text): its
    wrong [source] line is there and every text its patch would replace is still there once."""
    return (case.source_line in files.get(case.source_file, "")
            and all(files.get(p.file, "").count(p.old) == 1 for p in case.patches))


def distance_class(case) -> bool:
    """Whether ``case`` documents a defect of the distance class (``worse_than_yardstick`` among
    its ``flags``): the only class that makes an implementation unsound for bound-setting by the
    corpus's word alone. A defect of another class (a crash, a fallback output, a batch or shift
    effect) is excluded where it acts, since ``unsound`` drops any implementation that any flag
    names in a source's rows; where it does not act, the distances measured are sound ones."""
    from attackaudit.fidelity.yardstick import FLAG
    return FLAG in case.flags and not case.run.get("targeted", False)


def documented() -> dict[tuple[str, str], list[str]]:
    """(implementation, norm) -> the untargeted distance-class defect-corpus cases
    (``distance_class``) whose defect is in the installed release (``defect_in`` its files): those
    implementations are not sound. Cases of the other classes are left to ``unsound``."""
    from defect_cases import load_cases
    out: dict[tuple[str, str], list[str]] = {}
    for case in load_cases():
        if not distance_class(case):
            continue
        files = _installed(case)
        if files is not None and defect_in(case, files):
            out.setdefault((case.implementation, case.norm), []).append(f"defect corpus case {case.id}")
    return out


def carried(case) -> list:
    """The other untargeted distance-class defect-corpus cases (``distance_class``) of ``case``'s
    implementation and norm whose defect is still in ``case``'s patched twin (the installed release
    with ``case``'s patches applied). A kept defect of another class counts only where its flag
    names the twin in the twin's own rows (``patched_twins`` reads them)."""
    from defect_cases import load_cases
    if not case.patches:
        return []
    base = _installed(case)
    if base is None:
        return []
    out = []
    for other in load_cases():
        if other.id == case.id or not distance_class(other) or \
                (other.implementation, other.norm) != (case.implementation, case.norm):
            continue
        files = _installed(other)
        if files is None:
            continue
        patched = {**files, **{f: base[f] for f in base if f in files}}
        for p in case.patches:
            if p.file in patched:
                patched[p.file] = patched[p.file].replace(p.old, p.new)
        if defect_in(other, patched):
            out.append(other)
    return out


# ------------------------------------------------------------------ soundness
def unsound(table: pd.DataFrame, corpus_rows: bool) -> dict[tuple[str, str], list[str]]:
    """(implementation, norm) -> why it is not sound in this source: its flags (all but the
    yardstick's own) and, for the corpus, ``held_out.dropped``'s reasons but its defect-corpus cases.
    The corpus is ``documented``'s alone (``main`` adds it for every source): the distance-class
    cases whose defect is in the installed release, so a release that fixed one (foolbox 3.3.4's
    DDN, the fix of foolbox-ddn-recursive-annealing) stays a source, and a case of another class
    makes its implementation unsound through the flag that names it where it acts."""
    from attackaudit.fidelity import flags
    from attackaudit.fidelity.yardstick import FLAG
    out: dict[tuple[str, str], list[str]] = {}
    found = flags(table)
    found = found[found["flag"] != FLAG]
    for (impl, norm), g in found.groupby(["implementation", "norm"]):
        out.setdefault((str(impl), str(norm)), []).append("flags: " + ", ".join(sorted(set(g["flag"]))))
    if corpus_rows:
        import held_out
        import real_noise as rn
        c = rn.load()
        for k, why in held_out.dropped(c).items():
            why = [w for w in why if not w.startswith("defect corpus case ")]
            if why:
                out.setdefault((str(k[0]), str(k[1])), []).extend(why)
    else:
        for rule, keys in __import__("real_noise").KNOWN_DEFECTS.items():
            for k in keys:
                out.setdefault(k, []).append(f"known {rule} defect")
    return out


# ------------------------------------------------------------------ runs and bounds
def runs_table(img: pd.DataFrame, why: dict[tuple[str, str], list[str]]) -> pd.DataFrame:
    """One row per (yardstick, setting, source, model, seed, implementation, norm)."""
    import real_noise as rn
    from attackaudit.fidelity.strength import is_strong
    from attackaudit.fidelity.yardstick import BUILTIN_LIBRARIES
    img = img.assign(held=rn.held_out(img["sample"].to_numpy()))
    rows = []
    keys = ["yardstick", "setting", "source", "model", "seed", "implementation", "library", "family", "norm"]
    for key, g in img.groupby(keys, sort=True):
        r = dict(zip(keys, key))
        reasons = why.get((r["implementation"], r["norm"]), [])
        if r["library"] not in BUILTIN_LIBRARIES:
            reasons = reasons + ["not a built-in"]
        v, h = g["log_ratio"].to_numpy(float), g["held"].to_numpy(bool)
        if len(v) < MIN_RUN_IMAGES:
            reasons = reasons + [f"{len(v)} images: too few to bound its median"]
        rows.append(r | {"strong": is_strong(r["family"], r["norm"]), "sound": not reasons,
                         "why": "; ".join(dict.fromkeys(reasons)), "n_images": len(v), "median": _median(v),
                         "ucb": median_ucb(v), "n_threshold": int((~h).sum()), "median_threshold": _median(v[~h]),
                         "ucb_threshold": median_ucb(v[~h]), "n_held_out": int(h.sum()),
                         "median_held_out": _median(v[h])})
    return pd.DataFrame(rows, columns=RUN_COLUMNS)


def median_ucb(v: np.ndarray, level: float = UCB_LEVEL) -> float:
    """The distribution-free one-sided ``level`` upper confidence bound of the median of ``v``: the
    order statistic v₍ₖ₎ with k − 1 the ``level`` quantile of Binomial(n, ½) (NaN left out; inf
    where k exceeds n)."""
    from scipy import stats as sps
    v = np.sort(v[~np.isnan(v)])
    if not len(v):
        return float("nan")
    k = int(sps.binom.ppf(level, len(v), 0.5)) + 1
    return float(v[k - 1]) if k <= len(v) else float("inf")


def _median(v: np.ndarray) -> float:
    v = v[~np.isnan(v)]
    return float(np.median(v)) if len(v) else float("nan")


def bounds(runs: pd.DataFrame, pooled: pd.DataFrame, margin: float | dict, column: str = "ucb") -> tuple[list, list]:
    """(family entries, norm entries) from the sound runs: per (yardstick, setting, family, norm)
    ``expected`` (pooled median of the sound runs' images in ``pooled``), ``worst`` (largest run
    ``column``), ``bound`` = worst + margin (``margin`` per yardstick kind, or one for all; None
    where the worst run fails most images: no usable measurement), ``shortfall``; per (yardstick,
    setting, norm) the norm's bound."""
    from attackaudit.fidelity.strength import is_strong
    fams = []
    sound = runs[runs["sound"] & runs[column].notna()]
    pk = ["yardstick", "setting", "family", "norm"]
    for key, g in sound.groupby(pk, sort=True):
        r = dict(zip(pk, key))
        mine = pooled.merge(g[["yardstick", "setting", "source", "model", "seed", "implementation", "norm"]],
                            on=["yardstick", "setting", "source", "model", "seed", "implementation", "norm"])
        worst = g.loc[g[column].idxmax()]
        m = margin[r["yardstick"]] if isinstance(margin, dict) else margin
        usable = bool(np.isfinite(worst[column]))
        fams.append(r | {"implementations": sorted(set(g["implementation"])), "models": sorted(set(g["model"])),
                         "runs": len(g), "images": int(len(mine)), "expected": _median(mine["log_ratio"].to_numpy(float)),
                         "worst": float(worst[column]), "worst_run": f"{worst['implementation']} on {worst['model']} "
                                                                     f"seed {int(worst['seed'])}",
                         "bound": float(worst[column]) + m if usable else None, "usable": usable,
                         "strong": is_strong(r["family"], r["norm"]), "shortfall": False})
    norms = []
    by = {}
    for f in fams:
        by.setdefault((f["yardstick"], f["setting"], f["norm"]), []).append(f)
    for (ys, setting, norm), fs in sorted(by.items()):
        strong = [f for f in fs if f["strong"]]
        if not strong:
            continue
        typical = float(np.median([f["expected"] for f in strong if np.isfinite(f["expected"])] or [np.inf]))
        for f in strong:
            f["shortfall"] = bool(not np.isfinite(f["expected"]) or f["expected"] > typical + SHORTFALL)
        used = [f for f in strong if f["usable"] and not f["shortfall"]]
        if not used:
            continue
        top = max(used, key=lambda f: f["bound"])
        norms.append({"yardstick": ys, "setting": setting, "norm": norm, "families": sorted(f["family"] for f in used),
                      "typical": typical, "expected": float(np.median([f["expected"] for f in used])),
                      "bound": top["bound"], "loosest": top["family"],
                      "shortfall": sorted(f["family"] for f in strong if f["shortfall"]),
                      "unusable": sorted(f["family"] for f in strong if not f["usable"])})
    return fams, norms


# ------------------------------------------------------------------ error rates
def _judge(values: np.ndarray, bound: float, alpha: float) -> bool:
    from attackaudit.fidelity.yardstick import MIN_IMAGES, sign_test
    k, n, p = sign_test(values, bound)
    return n >= MIN_IMAGES and p < alpha


def _bound_of(fams: list, norms: list, r: pd.Series) -> tuple[float | None, str]:
    """(the bound ``fidelity.yardstick.expectation`` would use for a built-in run ``r``, "family" /
    "norm" / "" for none): its family's wherever usable, in shortfall too."""
    for f in fams:
        if (f["yardstick"], f["setting"], f["family"], f["norm"]) == (r["yardstick"], r["setting"], r["family"],
                                                                       r["norm"]) and f["usable"]:
            return f["bound"], "family"
    for n in norms:
        if (n["yardstick"], n["setting"], n["norm"]) == (r["yardstick"], r["setting"], r["norm"]):
            return n["bound"], "norm"
    return None, ""


def error_rates(img: pd.DataFrame, runs: pd.DataFrame, kind: str, margin: float, reps: int, seed: int = 0,
                alpha: float = 0.05) -> list[dict]:
    """Held-out false-positive rates and planted recall of the ``kind`` yardstick at ``margin``
    (module docstring). Sound runs judged against their family's bound are the false-positive
    cases (a family in shortfall included: it keeps its own bound); sound runs of a family with no
    usable measurement meet the norm's bound by design and are counted apart (``by_design``: how
    many of them it flags)."""
    import real_noise as rn
    rng = np.random.default_rng(seed)
    img = img[img["yardstick"] == kind]
    runs = runs[runs["yardstick"] == kind]
    img = img.assign(held=rn.held_out(img["sample"].to_numpy()))
    keys = ["yardstick", "setting", "source", "model", "seed", "implementation", "norm"]
    held = {k: g["log_ratio"].to_numpy(float)[g["held"].to_numpy(bool)] for k, g in img.groupby(keys, sort=False)}
    every = {k: g["log_ratio"].to_numpy(float) for k, g in img.groupby(keys, sort=False)}
    thr_img = img[~img["held"]]
    out = []
    for part, r_thr, i_thr, judged, values in (
            ("held-out", runs, thr_img, runs[runs["sound"]], held),
            # bounds from seed 0's threshold images alone, judged on the seed twins' held-out images
            ("held-out seed", runs[runs["seed"] == 0], thr_img[thr_img["seed"] == 0],
             runs[runs["sound"] & (runs["seed"] == 1)], held)):
        fams, norms = bounds(r_thr, i_thr, margin, "ucb_threshold")
        out.append(_rates(part, kind, judged, values, fams, norms, margin, reps, rng, alpha))
    # each model's runs (every image) against bounds from the other models' images
    for model in sorted(set(runs["model"])):
        others = runs[runs["model"] != model]
        fams, norms = bounds(others, img[img["model"] != model], margin, "ucb")
        out.append(_rates(f"held-out model {model}", kind, runs[runs["sound"] & (runs["model"] == model)], every,
                          fams, norms, margin, reps, rng, alpha))
    return out


def _rates(part: str, kind: str, judged: pd.DataFrame, groups: dict, fams: list, norms: list, margin: float,
           reps: int, rng: np.random.Generator, alpha: float) -> dict:
    keys = ["yardstick", "setting", "source", "model", "seed", "implementation", "norm"]
    res: dict[str, list] = {"all": [], "16": [], "12%": [], "25%": [], "fail25": [], "12% at 16": [], "design": []}
    worst = (0.0, "")
    for _, r in judged.iterrows():
        b, basis = _bound_of(fams, norms, r)
        v = groups.get(tuple(r[k] for k in keys))
        if b is None or v is None or len(v) < 6:
            continue
        if basis == "norm":  # a family measured unusable: judged on its norm's bound by design
            res["design"].append(_judge(v, b, alpha))
            continue
        res["all"].append(_judge(v, b, alpha))
        hits = float(np.mean([_judge(v[rng.integers(0, len(v), 16)], b, alpha) for _ in range(reps)]))
        res["16"].append(hits)
        if hits > worst[0]:
            worst = (hits, f"{r['implementation']} {r['norm']} on {r['model']} seed {r['seed']}")
        res["12%"].append(_judge(v + np.log(1.12), b, alpha))
        res["25%"].append(_judge(v + np.log(1.25), b, alpha))
        f = v.copy()
        f[rng.permutation(len(f))[: len(f) // 4]] = np.inf
        res["fail25"].append(_judge(f, b, alpha))
        res["12% at 16"].append(float(np.mean([_judge(v[rng.integers(0, len(v), 16)] + np.log(1.12), b, alpha)
                                                for _ in range(max(1, reps // 4))])))
    mean = (lambda x: float(np.mean(x)) if len(x) else float("nan"))
    return {"yardstick": kind, "part": part, "margin": margin, "jobs": len(res["all"]), "fpr_all": mean(res["all"]),
            "fpr_16": mean(res["16"]), "fpr_16_worst": worst[0], "fpr_16_worst_job": worst[1],
            "recall_12pct": mean(res["12%"]), "recall_25pct": mean(res["25%"]),
            "recall_fail_quarter": mean(res["fail25"]), "recall_12pct_at_16": mean(res["12% at 16"]),
            "by_design_jobs": len(res["design"]), "by_design_flagged": mean(res["design"])}


def choose_margin(rates: pd.DataFrame, kind: str) -> float:
    """The smallest margin whose false-positive rates (every image and 16 resampled, every
    held-out part) are at most ``FPR_TARGET`` for the ``kind`` yardstick; the largest tried if none."""
    r = rates[(rates["yardstick"] == kind) & (rates["jobs"] > 0)]
    good = r.groupby("margin").apply(lambda g: bool((g["fpr_all"] <= FPR_TARGET).all()
                                                    and (g["fpr_16"] <= FPR_TARGET).all()))
    return float(min([m for m, ok in good.items() if ok] or [max(MARGINS)]))


# ------------------------------------------------------------------ steps
def default_steps() -> dict[str, list]:
    """``"implementation|norm" -> [steps_param, default]`` for every built-in spec with a step count
    (``fidelity.yardstick`` infers a run's steps_scale from its rows' parameters)."""
    from attackaudit.adapters import catalogue
    out = {}
    for entry in catalogue(None):
        if entry.plugin is not None:
            continue
        for spec in entry.specs:
            if spec.steps_param and isinstance(spec.params.get(spec.steps_param), (int, float)):
                out[f"{spec.implementation}|{spec.norm}"] = [spec.steps_param, spec.params[spec.steps_param]]
    return dict(sorted(out.items()))


# ------------------------------------------------------------------ main
def measure(run_dirs: list[Path], exact_dirs: list[Path], use_corpus: bool = True) -> tuple[pd.DataFrame, dict]:
    """(per-image log ratios over every source, why each unsound (implementation, norm) is not sound)."""
    exact = load_exact(list(exact_dirs) + list(run_dirs))
    imgs, why = [], {}
    sources = ([("corpus", *_corpus())] if use_corpus else []) + [(_source_name(d), *_run_dir(d)) for d in run_dirs]
    for name, table, s in sources:
        t0 = time.time()
        setting = setting_name(s["steps_scale"], s["budget"])
        imgs.append(images(table, exact, setting, name))
        for k, v in unsound(table, name == "corpus").items():
            why.setdefault(k, []).extend(v)
        print(f"{name}: {setting}, {len(imgs[-1])} image ratios, {time.time() - t0:.0f} s", file=sys.stderr)
    why = {k: list(dict.fromkeys(v)) for k, v in why.items()}
    return pd.concat(imgs, ignore_index=True), why


def stored_measurement() -> tuple[pd.DataFrame, dict]:
    """What ``measure`` returned when the stored tables were written: the per-image ratios of
    ``OUT_IMAGES`` and, from ``OUT_RUNS``, why each (implementation, norm) is not sound (its flags
    and ``held_out`` reasons; the per-run reasons that ``runs_table`` adds itself are left out, and
    so are the stored defect-corpus cases: ``main`` adds ``documented``'s, the corpus as it stands)."""
    img = pd.read_parquet(OUT_IMAGES)
    for col in ("yardstick", "setting", "source", "model", "implementation", "library", "family", "norm"):
        img[col] = img[col].astype(str)
    runs = pd.read_csv(OUT_RUNS)
    why: dict[tuple[str, str], list[str]] = {}
    for r in runs[~runs["source"].astype(str).str.startswith("patched ")].itertuples(index=False):
        reasons = [x for x in str(r.why if isinstance(r.why, str) else "").split("; ")
                   if x and x != "not a built-in" and not x.endswith("too few to bound its median")
                   and not x.startswith("defect corpus case ")]  # ``documented`` adds the corpus as it stands
        why.setdefault((str(r.implementation), str(r.norm)), []).extend(reasons)
    return img, {k: list(dict.fromkeys(v)) for k, v in why.items() if v}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", nargs="*", type=Path, default=[])
    p.add_argument("--exact", nargs="*", type=Path, default=[ROOT / "harness" / "exact" / "shipped"],
                   help="directories of exact tables (default: the shipped ones); the run directories' own are read too")
    p.add_argument("--no-corpus", action="store_true")
    p.add_argument("--reps", type=int, default=200)
    p.add_argument("--save", action="store_true")
    p.add_argument("--cache", type=Path, default=None,
                   help="a pickle of the measured ratios: read when present, else written (to rerun the error rates)")
    p.add_argument("--stored", action="store_true", help="the stored per-image ratios and soundness (OUT_IMAGES, "
                   "OUT_RUNS) instead of measuring the sources again; the patched twins are read from their rows; "
                   "with --runs, those run directories are measured and added as sources")
    args = p.parse_args(argv)
    if args.stored:
        img, why = stored_measurement()
        if args.runs:  # new sources beside the stored ones (a stored source of the same name is replaced)
            new, new_why = measure(args.runs, args.exact, False)
            img = pd.concat([img[~img["source"].isin(set(new["source"]))], new], ignore_index=True)
            for k, v in new_why.items():
                why[k] = list(dict.fromkeys(why.get(k, []) + v))
    elif args.cache is not None and args.cache.is_file():
        img, why = pd.read_pickle(args.cache)
    else:
        img, why = measure(args.runs, args.exact, not args.no_corpus)
        if args.cache is not None:
            pd.to_pickle((img, why), args.cache)
    measured = [{"steps_scale": float(x.split()[1].rstrip(",")), "budget": float(x.split()[-1])}
                for x in sorted(set(img["setting"]))]
    twins, twin_why = patched_twins(load_exact(args.exact), measured)
    if len(twins):
        img = pd.concat([img[~img["source"].str.startswith("patched ")], twins], ignore_index=True)
        why = {**why, **twin_why}
    for k, cases in documented().items():  # the corpus as it stands, not as it stood when measured
        why[k] = list(dict.fromkeys(why.get(k, []) + cases))
    runs = runs_table(img, why)
    kinds = sorted(set(runs["yardstick"]))
    rates = pd.DataFrame([r for k in kinds for m in MARGINS for r in error_rates(img, runs, k, m, args.reps)])
    pd.set_option("display.width", 250)
    print(rates.round(3).to_string(index=False))
    margin = {k: choose_margin(rates, k) for k in kinds}
    fams, norms = bounds(runs, img, margin)
    print(f"margin {margin}")
    print(pd.DataFrame(fams)[["yardstick", "setting", "family", "norm", "implementations", "expected", "worst", "bound",
                              "shortfall"]].round(3).to_string(index=False))
    print(pd.DataFrame(norms).round(3).to_string(index=False))
    if args.save:
        settings = sorted({s for s in runs["setting"]},
                          key=lambda s: (float(s.split()[1].rstrip(",")), float(s.split()[-1])))
        doc = {"about": "Expected per-image log ratio of sound built-in implementations to the exact minimum "
                        "('exact') and to the strong envelope ('envelope'), per family, norm and settings "
                        "(fidelity/README.md, 'Yardsticks'). Made by benchmarks/yardstick.py --save; the runs "
                        "are in benchmarks/noise/yardstick.csv, the error rates in benchmarks/noise/yardstick_fpr.csv.",
               "margin": margin, "shortfall": SHORTFALL,
               "builtin_libraries": sorted(__import__("attackaudit.fidelity.yardstick",
                                                      fromlist=["x"]).BUILTIN_LIBRARIES),
               "settings": [{"name": s, "steps_scale": float(s.split()[1].rstrip(",")), "budget": int(s.split()[-1])}
                            for s in settings],
               "families": _plain(fams), "norms": _plain(norms), "steps": default_steps()}
        OUT_JSON.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        runs.to_csv(OUT_RUNS, index=False, float_format="%.6g")
        stored = img[IMAGE_COLUMNS].copy()
        for col in ("yardstick", "setting", "source", "model", "implementation", "library", "family", "norm"):
            stored[col] = stored[col].astype("category")
        stored.to_parquet(OUT_IMAGES, index=False)
        rates.to_csv(OUT_FPR, index=False, float_format="%.4g")
        print(f"wrote {OUT_JSON}, {OUT_RUNS}, {OUT_IMAGES}, {OUT_FPR}", file=sys.stderr)
    return 0


def _plain(x):
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_plain(v) for v in x]
    if isinstance(x, (np.floating, float)):
        return None if not np.isfinite(x) else round(float(x), 6)
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, np.bool_):
        return bool(x)
    return x


if __name__ == "__main__":
    raise SystemExit(main())
