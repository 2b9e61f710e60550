"""Real attack noise for the calibration: the stored corpus of ``benchmarks/noise_corpus.py``
(``benchmarks/noise/corpus.parquet``), what it measures, and result tables resampled from it.

A resampled table is built from real rows: ``n`` images drawn with replacement from the images
every job involved ran on, the same images on every model (an image's rows on all models stay
one block), renumbered ``0 … n−1`` so that a drawn-twice image is two samples. The rows keep what
the harness recorded (best and returned distances, statuses, queries, the minimal-ε search's
columns, labels), so the rules see heavy tails, failures, a hard model (``digits-cnn-at-linf``)
and class-dependent difficulty as they are.

``measure(corpus)`` gives the numbers behind the rules' null rates: per randomised attack the
spread of its per-image log ratio between two seeds; per implementation the share of images whose
returned output is worse than its best; per deterministic attack the images where one image per
call differs from the batch; per attack the images the batch-composition twin (reversed, half
batches) and the shift twin change.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats as sps

from attackaudit.results.schema import with_twin_columns

CORPUS = Path(__file__).resolve().parent / "noise" / "corpus.parquet"
BASE_MODELS = ("digits-mlp", "digits-cnn", "digits-cnn-at-linf")
#: the hard model: adversarially trained, where the corpus's attacks fail most
HARD_MODEL = "digits-cnn-at-linf"
#: δ of the per-image comparison (5% relative), and the tolerances of the twin and flag rules
DELTA = float(np.log(1.05))
SPLIT_RTOL, SHIFT_RTOL, NOT_BEST_RTOL = 0.01, 0.05, 0.05
#: one-sided level of the upper confidence bounds on measured rates
UCB_LEVEL = 0.95

#: implementations whose rows in the corpus are a known defect of that rule (fidelity/README.md:
#: the demo's findings, traced), so they are never used as a null of it
KNOWN_DEFECTS: dict[str, frozenset[tuple[str, str]]] = {
    # returns its last iterate / a non-best point (README "Flags", last_not_best); foolbox's L2 PGD
    # returns its last iterate as its L1 PGD does (this corpus: 46% of images at 0.25 of its steps,
    # the demo's 3 of 16 at 0.5), which the README's demo left under the rule's threshold
    "last_not_best": frozenset({("foolbox/EADAttack", "l1"), ("foolbox/L1ProjectedGradientDescentAttack", "l1"),
                                ("foolbox/L2ProjectedGradientDescentAttack", "l2"),
                                ("art/CarliniL2Method", "l2"), ("torchattacks/SparseFool", "l1"),
                                ("torchattacks/JSMA", "l0"), ("art/SaliencyMapMethod", "l0")}),
    # a step or stopping rule over the batch (README "Defects": EAD's summed loss, cleverhans' mean CE)
    # and torchattacks' CW, whose early stop reads the batch's summed cost (defect corpus:
    # torchattacks-cw-batch-early-stop), and cleverhans' C&W L2, whose (N, 1) constant broadcasts
    # against the (N,) margin loss: every image gets the batch's mean constant (defect corpus:
    # cleverhans-cw-l2-batch-mean-const; the split twin's rounding "worst" until the batch twin's
    # companions showed it one-sided), and adv_lib's C&W L∞, whose inner loop stops only when every
    # image's loss is small (`if abort_early and (loss < 0.0001 * c_).all(): break`) and keeps
    # optimising the images already done: in a batch they take steps they do not take alone (split
    # twin: 69 of 125 images differ, both ways; no rule names it: fidelity/README.md "Open"), and
    # foolbox's four Brendel-Bethge attacks, whose trust region grows with the batch size
    # (`np.prod(x.shape)` over the batch; defect corpus foolbox-bb-l0-batch-trust-region: L0 31 of
    # 125 images, all farther alone; the other norms share the line and differ on at most 1 here)
    "batch_dependence": frozenset({("foolbox/EADAttack", "l1"), ("torchattacks/EADL1", "l1"),
                                   ("torchattacks/EADEN", "l1"), ("cleverhans/fast_gradient_method", "l2"),
                                   ("torchattacks/CW", "l2"), ("cleverhans/carlini_wagner_l2", "l2"),
                                   ("adv_lib/carlini_wagner_linf", "linf"),
                                   ("foolbox/L0BrendelBethgeAttack", "l0"), ("foolbox/L1BrendelBethgeAttack", "l1"),
                                   ("foolbox/L2BrendelBethgeAttack", "l2"),
                                   ("foolbox/LinfinityBrendelBethgeAttack", "linf")}),
    # an L1 step on pixels the box clips (README "Defects", eps_unused)
    "eps_unused": frozenset({("art/FastGradientMethod", "l1"), ("art/ProjectedGradientDescent", "l1")}),
}

#: held-out calibration (fidelity/README.md, "Held-out calibration"): the images of the corpus are
#: split by a fixed hash of their sample id (the dataset index), never by what their rows say; the
#: thresholds are recomputed on the ``threshold`` images of ``THRESHOLD_MODELS`` (and their twins),
#: the false-positive rates measured on the ``held-out`` images of those models and on every image
#: of ``HELD_OUT_MODEL``, which sets no threshold
SPLIT_SALT = "attackaudit/held-out/v1"
THRESHOLD_MODELS = ("digits-mlp", "digits-cnn")
HELD_OUT_MODEL = "digits-cnn-at-linf"
PARTS = ("threshold", "held-out", "held-out model", "held-out seed")


def held_out(samples) -> np.ndarray:
    """Per sample id: True where the image belongs to the held-out half (the first byte of
    SHA-256 of ``SPLIT_SALT:<id>`` below 128), False where it sets thresholds."""
    return np.array([hashlib.sha256(f"{SPLIT_SALT}:{int(s)}".encode()).digest()[0] < 128 for s in samples], bool)


def swap_seeds(c: pd.DataFrame) -> pd.DataFrame:
    """``c`` with each model's rows and its seed twin's exchanged, for the specs the corpus ran with
    two seeds: the thresholds were set on the first seed's outputs, so rules judged on the second's
    meet a seed that set no threshold (the seed twin's role is symmetric)."""
    seeded = c[c["twin"] == "seed"]
    pairs = set(zip(seeded["base"], seeded["implementation"], seeded["norm"]))
    has = np.array([(b, i, n) in pairs for b, i, n in zip(c["base"], c["implementation"], c["norm"])], bool)
    swap = has & c["twin"].isin(["", "seed"]).to_numpy()
    out = c.copy()
    to_seed = swap & (c["twin"] == "").to_numpy()
    to_base = swap & (c["twin"] == "seed").to_numpy()
    out.loc[to_seed, "model"] = out.loc[to_seed, "base"] + "~seed"
    out.loc[to_seed, "twin"] = "seed"
    out.loc[to_base, "model"] = out.loc[to_base, "base"]
    out.loc[to_base, "twin"] = ""
    return out


def part(c: pd.DataFrame, name: str | None) -> pd.DataFrame:
    """The rows of one part of the corpus (``load``'s frame): ``threshold`` (the threshold images on
    ``THRESHOLD_MODELS`` and their twins), ``held-out`` (the other images on those models),
    ``held-out model`` (every image of ``HELD_OUT_MODEL`` and its twins), ``held-out seed`` (the
    held-out images with the two seeds' outputs exchanged, ``swap_seeds``); None: all of it."""
    if name is None:
        return c
    if name not in PARTS:
        raise ValueError(f"unknown corpus part {name!r}: one of {PARTS}")
    if name == "held-out model":
        return c[(c["base"] == HELD_OUT_MODEL).to_numpy()]
    if name == "held-out seed":  # the held-out images, the other seed's outputs judged as the run's
        return swap_seeds(part(c, "held-out"))
    ho = held_out(c["sample"].to_numpy())
    keep = c["base"].isin(THRESHOLD_MODELS).to_numpy() & (ho if name == "held-out" else ~ho)
    return c[keep]


FILL = {"run": "noise", "dataset": "digits", "subset_hash": "corpus", "params_hash": "p", "params": "{}",
        "targeted": False, "target": -1, "best_dropped": 0}


def load(path: Path = CORPUS) -> pd.DataFrame:
    """The corpus rows, with ``base`` (the model without its twin suffix) and ``twin`` ("", "seed",
    "split", "shift", "batch"). Raises FileNotFoundError naming the script that makes it."""
    if not Path(path).is_file():
        raise FileNotFoundError(f"{path} is missing; make it with `.venv/bin/python benchmarks/noise_corpus.py`")
    t = pd.read_parquet(path)
    for col in ("model", "library", "library_version", "attack", "implementation", "family", "norm", "kind",
                "status", "grid"):
        t[col] = t[col].astype(str)
    t = with_twin_columns(t)  # a corpus written before the twin columns: its model names read once
    return t.assign(base=t["base_model"], twin=t["twin"])


# ------------------------------------------------------------------ measurements
def _wide(c: pd.DataFrame, twin: str, value: str = "best_distance") -> pd.DataFrame:
    """(base, implementation, norm, sample) → value (and ``best_margin``, ``returned_fallback``:
    NaN where the corpus's rows predate them) on the base model and on its ``twin``."""
    key = ["base", "implementation", "norm", "sample"]
    cols = [value, "status"] + [x for x in ("best_margin", "returned_fallback") if x in c.columns and x != value]
    a = c[c["twin"] == ""].set_index(key)[cols]
    b = c[c["twin"] == twin].set_index(key)[cols]
    return a.join(b, how="inner", lsuffix="_a", rsuffix="_b").reset_index()


def _live(c: pd.DataFrame) -> pd.Series:
    """Per (base, sample): whether the image is correctly classified clean (d* > 0)."""
    return c[c["twin"] == ""].groupby(["base", "sample"])["best_distance"].min() > 0


def ucb(k: int, n: int, level: float = UCB_LEVEL) -> float:
    """One-sided Clopper–Pearson upper confidence bound of a rate seen ``k`` times in ``n``."""
    return 1.0 if n == 0 or k >= n else float(sps.beta.ppf(level, k + 1, n - k))


def seed_noise(c: pd.DataFrame) -> pd.DataFrame:
    """Per randomised attack and norm (``run_twins.randomised_builtins``: the harness also gives a seed twin
    to built-ins that only move a random state), over the base models: on the live images both seeds broke,
    the sd of the per-image log ratio and the share beyond ±5%; the share of live images where
    only one seed broke (the failure endpoint's discordance)."""
    from attackaudit.sources.run_twins import randomised_builtins
    w = _wide(c, "seed")
    w = w[w["implementation"].isin(randomised_builtins())]
    live = _live(c)
    w = w[live.reindex(pd.MultiIndex.from_frame(w[["base", "sample"]])).to_numpy(bool)]
    rows = []
    for (impl, norm), g in w.groupby(["implementation", "norm"], sort=True):
        a, b = g["best_distance_a"].to_numpy(float), g["best_distance_b"].to_numpy(float)
        fa, fb = np.isfinite(a), np.isfinite(b)
        both = fa & fb
        r = np.log(a[both] / b[both])
        rows.append({"implementation": impl, "norm": norm, "images": len(g), "both_broke": int(both.sum()),
                     "sd_log_ratio": float(np.std(r, ddof=1)) if both.sum() > 1 else np.nan,
                     "beyond_5pct": float(np.mean(np.abs(r) > DELTA)) if both.any() else np.nan,
                     "one_seed_broke": float(np.mean(fa != fb)), "broke": float(np.mean(fa))})
    return pd.DataFrame(rows)


def not_best(c: pd.DataFrame) -> pd.DataFrame:
    """Per implementation and norm over the base models: among the ``ok`` live images it broke,
    those whose returned output is > 5% worse than its best (or not adversarial), with the rate's
    upper confidence bound; ``known`` marks the README's traced last_not_best defects."""
    b = c[(c["twin"] == "") & (c["status"] == "ok") & (c["best_distance"] > 0) & np.isfinite(c["best_distance"])]
    worse = b["returned_distance"].fillna(np.inf) > b["best_distance"] * (1 + NOT_BEST_RTOL) + 1e-9
    g = b.assign(worse=worse).groupby(["implementation", "norm", "kind", "family"], sort=True, observed=True)["worse"]
    out = pd.DataFrame({"k": g.sum().astype(int), "n": g.size()}).reset_index()
    out["rate"] = out["k"] / out["n"]
    out["ucb"] = [ucb(k, n) for k, n in zip(out["k"], out["n"])]
    out["known"] = [(i, n) in KNOWN_DEFECTS["last_not_best"] for i, n in zip(out["implementation"], out["norm"])]
    return out


def _differs(a: np.ndarray, b: np.ndarray, rtol: float) -> np.ndarray:
    fa, fb = np.isfinite(a), np.isfinite(b)
    with np.errstate(invalid="ignore"):
        far = np.abs(a - b) > rtol * np.maximum(np.abs(a), np.abs(b)) + 1e-12
    return (fa != fb) | (fa & fb & far)


def twin_differences(c: pd.DataFrame, twin: str) -> pd.DataFrame:
    """Per implementation and norm: the live images whose best distance on the ``twin`` ("split",
    "batch" or "shift") differs from the base model's (success, or beyond the rule's tolerance),
    pooled over the models that have the twin, the largest relative difference, and the rate's UCB.
    ``at_boundary`` counts the differing images whose best sits at an exact decision boundary on
    either side (``twins.at_boundary``, on the twins of ``twins.BOUNDARY_KINDS``: shift, split,
    batch; an old row without ``best_margin`` is not at one), ``default_output`` the others whose
    returned output was a default on either side (``twins.with_default_output``, batch twins only),
    as the rule leaves both out, and ``beyond`` the rest; with a seed twin, ``seed_differ`` counts the
    images where the two seeds differ (NaN without one)."""
    from attackaudit.fidelity.twins import BATCH_KINDS, BOUNDARY_KINDS, at_boundary, with_default_output
    from attackaudit.sources.run_twins import randomised_builtins
    rand = randomised_builtins()
    rtol = SHIFT_RTOL if twin == "shift" else SPLIT_RTOL
    w = _wide(c, twin)
    live = _live(c)
    w = w[live.reindex(pd.MultiIndex.from_frame(w[["base", "sample"]])).to_numpy(bool)]
    seed = _wide(c, "seed").set_index(["base", "implementation", "norm", "sample"])["best_distance_b"]
    rows = []
    for (impl, norm), g in w.groupby(["implementation", "norm"], sort=True):
        a, b = g["best_distance_a"].to_numpy(float), g["best_distance_b"].to_numpy(float)
        d = _differs(a, b, rtol)
        both = np.isfinite(a) & np.isfinite(b)
        rel = np.abs(a[both] - b[both]) / np.maximum(a[both], b[both])
        # the rule's own exemptions (fidelity/twins.py), read on the base (_a) and twin (_b) columns
        pair = g.rename(columns={f"{c}_a": c for c in ("best_margin", "returned_fallback")}
                        | {f"{c}_b": f"{c}_twin" for c in ("best_margin", "returned_fallback")})
        edge, default = np.zeros(len(g), bool), np.zeros(len(g), bool)
        if twin in BOUNDARY_KINDS and "best_margin_a" in g.columns:
            edge = at_boundary(pair)
        if twin in BATCH_KINDS and "returned_fallback_a" in g.columns:
            default = with_default_output(pair) & ~edge
        s = seed.reindex(pd.MultiIndex.from_frame(g[["base", "implementation", "norm", "sample"]])).to_numpy(float)
        has_seed = bool((~np.isnan(s)).any())
        rows.append({"implementation": impl, "norm": norm, "randomised": impl in rand, "images": len(g),
                     "differ": int(d.sum()), "rate": float(d.mean()), "ucb": ucb(int(d.sum()), len(g)),
                     "largest_rel": float(rel.max()) if rel.size else 0.0,
                     "at_boundary": int((d & edge).sum()), "default_output": int((d & default).sum()),
                     "beyond": int((d & ~edge & ~default).sum()),
                     "seed_differ": int(_differs(a, s, SPLIT_RTOL)[~np.isnan(s)].sum()) if has_seed else np.nan,
                     "known": (impl, norm) in KNOWN_DEFECTS["batch_dependence"] if twin != "shift" else False})
    return pd.DataFrame(rows, columns=["implementation", "norm", "randomised", "images", "differ", "rate", "ucb",
                                       "largest_rel", "at_boundary", "default_output", "beyond", "seed_differ",
                                       "known"])


def measure(c: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """Everything the README's real-noise paragraph quotes."""
    return {"seed": seed_noise(c), "not_best": not_best(c), "split": twin_differences(c, "split"),
            "batch": twin_differences(c, "batch"), "shift": twin_differences(c, "shift")}


# ------------------------------------------------------------------ resampling
@dataclass(frozen=True)
class Job:
    """One real job's rows: ``implementation`` and ``norm`` on ``model`` (a base model, or its twin)."""
    implementation: str
    norm: str
    model: str


class Resampler:
    """Real rows by job, indexed for fast resampling."""

    def __init__(self, corpus: pd.DataFrame):
        self.c = corpus
        # each job's rows once, with every column a result row has, as plain objects: a draw is
        # then one positional take (pandas' Arrow strings and per-draw ``assign`` cost seconds)
        full = corpus.drop(columns=["base", "twin", "grid"], errors="ignore").assign(**FILL)
        for col in ("best_l0", "best_l1", "best_l2", "best_linf"):
            full[col] = full["best_distance"]
        for col in full.columns:
            if full[col].dtype == object or str(full[col].dtype) in ("str", "string", "category"):
                full[col] = full[col].astype(object)
        self._by_job = {k: g.sort_values("sample").reset_index(drop=True)
                        for k, g in full.groupby(["implementation", "norm", "model"], sort=False)}
        self._pos = {k: pd.Index(g["sample"].to_numpy()) for k, g in self._by_job.items()}
        self.n_images = int(corpus["sample"].nunique())
        #: the base models this corpus (or part of it, ``part``) holds, in ``BASE_MODELS`` order
        self.base_models = tuple(b for b in BASE_MODELS if b in set(corpus["base"]))

    def has(self, job: Job) -> bool:
        return (job.implementation, job.norm, job.model) in self._by_job

    def jobs(self, implementation: str, norm: str) -> list[Job]:
        """Every job of one implementation the corpus holds: its base models and their twins."""
        return [Job(i, n, m) for i, n, m in self._by_job if i == implementation and n == norm]

    def common(self, jobs: list[Job]) -> np.ndarray:
        """The sample ids every job in ``jobs`` ran on (a split twin ran on the first 32)."""
        ids = None
        for j in jobs:
            s = self._pos[(j.implementation, j.norm, j.model)].to_numpy()
            ids = s if ids is None else np.intersect1d(ids, s)
        return ids

    def rows(self, job: Job, images: np.ndarray, *, as_model: str | None = None, as_impl: str | None = None,
             version: str | None = None, scale: float | np.ndarray = 1.0) -> pd.DataFrame:
        """``job``'s rows on ``images`` (sample ids, repeats allowed) renumbered 0 … n−1, renamed
        to ``as_model`` / ``as_impl`` / ``version``; distances times ``scale`` (a planted defect)."""
        key = (job.implementation, job.norm, job.model)
        g = self._by_job[key].take(self._pos[key].get_indexer(images))
        g.index = pd.RangeIndex(len(images))
        g["sample"] = np.arange(len(images))
        if not np.all(np.asarray(scale) == 1.0):
            for col in ("best_distance", "returned_distance", "best_l0", "best_l1", "best_l2", "best_linf"):
                g[col] = g[col] * scale
        if as_model or as_impl:
            model, impl = as_model or job.model, as_impl or job.implementation
            g["model"], g["implementation"], g["library"] = model, impl, impl.partition("/")[0]
            g["job_id"] = f"{model}__{impl}__{job.norm}"
        else:
            g["job_id"] = f"{job.model}__{job.implementation}__{job.norm}"
        if version:
            g["library_version"] = version
        return g


def draw_models(rng: np.random.Generator, m: int, pool: tuple[str, ...] = BASE_MODELS) -> list[str]:
    """``m`` base models: all of ``pool`` when it has ``m`` or fewer, else a random choice."""
    return list(pool) if m >= len(pool) else list(rng.choice(pool, m, replace=False))
