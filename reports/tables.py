"""Everything a report shows, computed once from the merged result table (no I/O, no rendering).

``run_files.load_runs`` reads the run directories; ``build`` turns the rows into a ``ReportData``: the summary, the leaderboard, the alignment, the flags, the
recommendation, crashes, and the per-sample distances the plots need. The numbers come from
``attackaudit.fidelity``'s public API; the few things it does not provide (per-implementation
distance arrays for curves and scatter plots, the crash list, the largest cross-library gaps)
are computed here from the table.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

import numpy as np
import pandas as pd

from attackaudit import fidelity
from attackaudit.fidelity.equivalence import DELTA
from attackaudit.fidelity.flag_kinds import FLAG_MEANINGS, defect_rows, with_severity
from attackaudit.fidelity.findings import findings
from attackaudit.fidelity.yardstick_verdicts import manifest_settings
from attackaudit.results.schema import with_implementation, with_twin_columns
from .looks import recommend_looks
from .seed_twins import declared_randomised, seed_twin_table
from attackaudit.errors import InputError

#: statuses a job can end with that are not a clean finish
FAILED_STATUSES = ("crash", "timeout", "invalid")



@dataclass
class Curve:
    """Per-sample distances of one (model, norm): the envelope, each implementation, and the exact
    reference when one exists. Samples broken at ε = 0 are 0 for everyone (as in fidelity)."""

    model: str
    norm: str
    samples: np.ndarray
    d_star: np.ndarray
    by_impl: dict[tuple[str, str], np.ndarray]          # (implementation, version) -> distances
    optimality: dict[tuple[str, str], float]
    exact: np.ndarray | None = None                      # exact reference distances (own samples)
    exact_unsolved: int = 0
    is_twin: bool = False                                # a metamorphic twin's (the same network as its model's)


@dataclass
class Pair:
    """Two implementations of one family and norm, and their per-sample distances (live samples,
    all shared models concatenated) for the scatter plot."""

    family: str
    norm: str
    a: tuple[str, str]
    b: tuple[str, str]
    library_a: str
    library_b: str
    optimality_a: float
    optimality_b: float
    p_value: float
    effect_size: float
    wins_a: int
    wins_b: int
    dist_a: np.ndarray
    dist_b: np.ndarray
    models: np.ndarray                                    # model of each point
    #: the image-by-image comparison (fidelity.align's pooled row): "different", "equivalent" or
    #: "inconclusive"; the closer one when different; the Hodges–Lehmann per-image log(a / b)
    answer: str = ""
    better: str = ""
    estimate: float = float("nan")
    images_to_decide: float = float("nan")

    @property
    def gap(self) -> float:
        return abs(self.optimality_a - self.optimality_b)


@dataclass
class ReportData:
    runs: list[Path]
    table: pd.DataFrame
    manifests: list[dict]
    summary: dict
    leaderboard: pd.DataFrame
    side: pd.DataFrame
    pairs: pd.DataFrame
    flags: pd.DataFrame
    recommend: pd.DataFrame
    local: pd.DataFrame
    crashes: pd.DataFrame
    implementations: pd.DataFrame
    curves: list[Curve]
    families: list[dict]                                  # per family and norm with ≥ 2 implementations
    gaps: list[Pair]                                      # cross-library pairs, largest ξ gap first
    exact: pd.DataFrame | None = None
    true_optimality: pd.DataFrame | None = None
    notes: list[str] = field(default_factory=list)
    #: implementation key -> colour index, the same in every plot
    colors: dict[tuple[str, str], int] = field(default_factory=dict)
    #: every pair of implementations of one family and norm (pooled over models), for evidence
    all_pairs: list[Pair] = field(default_factory=list)
    #: the seed twins as the noise floor (``seed_twins.seed_twin_table``); None without ``~seed`` rows
    seed_twins: pd.DataFrame | None = None
    _svgs: dict[str, object] = field(default_factory=dict, repr=False)

    def svg(self, key: str, render):
        """``render()``'s plot (``svg.Svg``), drawn once per report (Markdown and HTML share it)."""
        if key not in self._svgs:
            self._svgs[key] = render()
        return self._svgs[key]


# ------------------------------------------------------------------------------------ text
def _one_line(text: object, limit: int = 300) -> str:
    s = str(text if text is not None else "").strip()
    s = s.splitlines()[0] if s else ""
    return s if len(s) <= limit else s[: limit - 1] + "…"


# ------------------------------------------------------------------------------------ helpers
def sample_distances(table: pd.DataFrame) -> pd.DataFrame:
    """Per (model, norm, implementation, version, sample): best distance (NaN → inf) and the model's
    ``twin`` kind, last row wins."""
    t = with_implementation(table.copy())
    for col in ("implementation", "library_version", "model", "norm"):
        t[col] = t[col].fillna("").astype(str)
    t["best_distance"] = pd.to_numeric(t["best_distance"], errors="coerce").astype(float).fillna(np.inf)
    keys = ["model", "norm", "implementation", "library_version", "sample"]
    return t.drop_duplicates(keys, keep="last")[keys + ["best_distance", "twin"]]


def _curves(dist: pd.DataFrame, env: pd.DataFrame, local: pd.DataFrame, exact: pd.DataFrame | None) -> list[Curve]:
    """Per (model, norm) of the envelope ``env``, with ``dist`` (``sample_distances``) and the local ξ."""
    ref = None
    if exact is not None and {"status", "exact_distance", "lower_bound"} <= set(exact.columns):
        from attackaudit.fidelity.true_optimality import exact_reference
        ref = exact_reference(exact)
    opt = {(r.model, r.norm, r.implementation, r.library_version): float(r.optimality)
           for r in local.itertuples(index=False)}
    out = []
    by_model_norm = dict(tuple(dist.groupby(["model", "norm"], sort=False)))
    kinds = dict(zip(dist["model"], dist["twin"]))
    for (model, norm), e in env.groupby(["model", "norm"], sort=True):
        e = e.sort_values("sample")
        samples = e["sample"].to_numpy()
        d_star = e["d_star"].to_numpy(dtype=float)
        live = d_star > 0
        by_impl = {}
        part = by_model_norm.get((model, norm), dist.iloc[0:0])
        for (impl, version), g in part.groupby(["implementation", "library_version"], sort=True):
            d = g.set_index("sample")["best_distance"].reindex(samples).fillna(np.inf).to_numpy(dtype=float)
            by_impl[(impl, version)] = np.where(live, d, 0.0)
        exact_d, unsolved = None, 0
        if ref is not None:
            r = ref[(ref["model"] == model) & (ref["norm"] == norm)]
            if len(r):
                exact_d = r["reference"].to_numpy(dtype=float)
                unsolved = int(r["unsolved"].sum())
        out.append(Curve(model, norm, samples, d_star, by_impl,
                         {k: opt.get((model, norm, *k), float("nan")) for k in by_impl}, exact_d, unsolved,
                         bool(kinds.get(model, ""))))
    return out


def _crashes(table: pd.DataFrame) -> pd.DataFrame:
    cols = ["model", "norm", "implementation", "library_version", "status", "samples", "of", "cause"]
    keys = ["model", "norm", "implementation", "library_version"]
    t = table.copy()
    t["status"] = t.get("status", pd.Series("ok", index=t.index)).fillna("ok").astype(str)
    t["error"] = t.get("error", pd.Series("", index=t.index)).fillna("").astype(str)
    # only the few jobs with a failed row are looked at one by one; "of" counts all their rows
    sizes = t.groupby(keys, sort=True).size()
    rows = []
    for key, g in t[t["status"].isin(FAILED_STATUSES)].groupby(keys, sort=True):
        model, norm, impl, version = key
        for status in FAILED_STATUSES:
            bad = g[g["status"] == status]
            if len(bad):
                causes = [c for c in dict.fromkeys(bad["error"].map(_one_line)) if c]
                rows.append({"model": model, "norm": norm, "implementation": impl, "library_version": version,
                             "status": status, "samples": len(bad), "of": int(sizes[key]),
                             "cause": causes[0] if causes else "no error recorded"})
    return pd.DataFrame(rows, columns=cols)


def _implementations(table: pd.DataFrame) -> pd.DataFrame:
    cols = ["implementation", "library", "library_version", "attack", "family", "norm", "kind", "params"]
    t = table.copy()
    for c in cols:
        if c not in t.columns:
            t[c] = ""
        t[c] = t[c].fillna("").astype(str)
    return t.drop_duplicates(["implementation", "library_version", "norm"])[cols] \
        .sort_values(["family", "implementation", "library_version", "norm"]).reset_index(drop=True)


def _pairs_for_plots(pairs: pd.DataFrame, side: pd.DataFrame, dist: pd.DataFrame, env: pd.DataFrame) -> list[Pair]:
    """Every pooled (or single-model) pair of implementations with their live distances
    (``dist``: ``sample_distances``, ``env``: ``fidelity.envelope`` of the table)."""
    if pairs.empty:
        return []
    lib = {(r.implementation, r.library_version): r.library for r in side.itertuples(index=False)}
    dist = dist.merge(env[["model", "norm", "sample", "d_star"]], on=["model", "norm", "sample"], how="left")
    dist = dist[dist["d_star"] > 0]
    # one split of the live distances, looked up per pair (a pair's models are a few of them)
    samples = {key: sorted(set(g["sample"])) for key, g in dist.groupby(["model", "norm"], sort=False)}
    by_job = {key: g.set_index("sample")["best_distance"]
              for key, g in dist.groupby(["model", "norm", "implementation", "library_version"], sort=False)}
    empty = pd.Series(dtype=float)
    out = []
    for (family, norm, a, va, b, vb), g in pairs.groupby(
            ["family", "norm", "implementation_a", "library_version_a", "implementation_b", "library_version_b"],
            sort=True):
        row = g[g["model"] == fidelity.POOLED]
        row = row.iloc[0] if len(row) else g.iloc[0]
        models = [m for m in g["model"].unique() if m != fidelity.POOLED]
        da, db, ms = [], [], []
        for m in sorted(models):
            live = samples.get((m, norm), [])
            xa, xb = by_job.get((m, norm, a, va), empty), by_job.get((m, norm, b, vb), empty)
            da.append(xa.reindex(live).fillna(np.inf).to_numpy(dtype=float))
            db.append(xb.reindex(live).fillna(np.inf).to_numpy(dtype=float))
            ms.append(np.full(len(live), m, dtype=object))
        cat = (lambda xs: np.concatenate(xs) if xs else np.zeros(0))
        out.append(Pair(family, norm, (a, va), (b, vb), lib.get((a, va), ""), lib.get((b, vb), ""),
                        float(row["optimality_a"]), float(row["optimality_b"]), float(row["p_value"]),
                        float(row["effect_size"]), int(row["wins_a"]), int(row["wins_b"]),
                        cat(da), cat(db), cat(ms) if ms else np.zeros(0, dtype=object),
                        str(row.get("answer", "") or ""), str(row.get("better", "") or ""),
                        float(row.get("estimate", np.nan)), float(row.get("images_to_decide", np.nan))))
    return out


def _first(values: Iterable) -> list:
    return list(dict.fromkeys(v for v in values if v not in (None, "", [])))


def _summary(table: pd.DataFrame, manifests: list[dict], runs: list[Path], board: pd.DataFrame,
             flags_df: pd.DataFrame, crashes: pd.DataFrame) -> tuple[dict, list[str]]:
    notes = []
    models = sorted(table["model"].astype(str).unique())
    kinds = dict(zip(table["model"].astype(str), table["twin"].astype(str)))
    real = [m for m in models if not kinds[m]]
    twins = [m for m in models if kinds[m]]
    versions: dict[str, list[str]] = {}
    for lib, ver in table[["library", "library_version"]].astype(str).drop_duplicates().itertuples(index=False):
        versions.setdefault(lib, []).append(ver)
    for m in manifests:
        for lib, ver in (m.get("library_versions") or {}).items():
            if str(ver) not in versions.setdefault(str(lib), []):
                versions[str(lib)].append(str(ver))
    subset_hashes = _first(table.get("subset_hash", pd.Series(dtype=str)).astype(str).unique())
    if len(subset_hashes) > 1:
        notes.append(f"The merged runs use {len(subset_hashes)} different sample subsets; an implementation "
                     "is charged as failing on samples of a subset it did not run on.")
    budgets = sorted({int(b) for b in pd.to_numeric(table.get("budget", pd.Series(dtype=float)),
                                                     errors="coerce").dropna()})
    samples = table.groupby("model")["sample"].nunique().to_dict()
    impl_keys = table[["implementation", "library_version"]].astype(str).drop_duplicates()
    # flagged: a defect (fidelity/flag_kinds.py); weaker: only weaknesses
    defects = defect_rows(flags_df)
    flagged_keys = set(zip(defects["implementation"], defects["library_version"])) if len(defects) else set()
    weaker_keys = (set(zip(flags_df["implementation"], flags_df["library_version"])) - flagged_keys) if len(flags_df) \
        else set()
    unavailable, skipped = [], []
    for m in manifests:
        unavailable += [u for u in (m.get("unavailable") or []) if u not in unavailable]
        skipped += [s for s in (m.get("skipped") or []) if s not in skipped]
    targeted = bool(table.get("targeted", pd.Series([False])).fillna(False).astype(bool).any())
    summary = {
        "runs": [str(r) for r in runs],
        "run_names": _first(str(m.get("name", "")) for m in manifests) or [r.name for r in runs],
        "models": real, "twins": twins,
        "samples_per_model": {str(k): int(v) for k, v in samples.items()},
        "datasets": _first(table.get("dataset", pd.Series(dtype=str)).astype(str).unique()),
        "subset_hashes": subset_hashes,
        "budgets": budgets,
        "seeds": _first(m.get("seed") for m in manifests),
        "targeted": targeted,
        "norms": sorted(table["norm"].astype(str).unique()),
        "library_versions": versions,
        "torch_versions": _first(m.get("torch_version") for m in manifests),
        "devices": _first(m.get("device") for m in manifests),
        "n_implementations": int(len(impl_keys)),
        "n_jobs": int(len(table[["model", "norm", "implementation", "library_version"]].drop_duplicates())),
        "n_flagged": int(len(flagged_keys)),
        "n_weaker": int(len(weaker_keys)),
        "n_findings": int(len(flags_df)),
        "n_failed_jobs": int(len(crashes[["model", "norm", "implementation", "library_version"]]
                                 .drop_duplicates())) if len(crashes) else 0,
        "unavailable": unavailable, "skipped": skipped,
        "ref_eps": {str(r.norm): float(r.ref_eps) for r in board.drop_duplicates("norm").itertuples(index=False)}
        if len(board) else {},
    }
    return summary, notes


def measurement_notes(table: pd.DataFrame, local: pd.DataFrame) -> list[str]:
    """Report lines on the measurement itself: the bests the end-of-job re-check dropped (column
    ``best_dropped``; absent in runs made before it), and where ξ is n/a (a zero denominator)."""
    out = []
    if "best_dropped" in table.columns:
        dropped = table.assign(best_dropped=pd.to_numeric(table["best_dropped"], errors="coerce").fillna(0))
        per_job = dropped.groupby(["model", "implementation", "norm"])["best_dropped"].sum()
        worst = per_job[per_job > 0].sort_values(ascending=False)
        where = "; ".join(f"{m} {i} {n}: {int(v)}" for (m, i, n), v in worst.head(5).items())
        out.append(f"Re-checked bests: {int(worst.sum())} stored bests in {len(worst)} of {len(per_job)} jobs were "
                   "not adversarial on the model at the end of their job and gave way to the next kept one or "
                   "to none" + (f" ({where})." if where else "."))
    else:
        out.append("Re-checked bests: not recorded (these runs predate the end-of-job re-check).")
    na = local[local["optimality"].isna()][["model", "norm"]].drop_duplicates() if len(local) else local
    if len(na):
        pairs = ", ".join(f"{r.model} {r.norm}" for r in na.itertuples(index=False))
        out.append(f"ξ is n/a for {pairs}: the envelope breaks no sample at a distance inside (0, ε₀) there "
                   "(one live sample, or every envelope distance tied, as integer L0 distances often are), so "
                   "the denominator of ξ is 0. n/a is not 0, which means an attack that never succeeded.")
    return out


# ------------------------------------------------------------------------------------ build
def build(table: pd.DataFrame, manifests: list[dict] | None = None, runs: list[Path] | None = None,
          exact: pd.DataFrame | None = None, repeats: pd.DataFrame | None = None) -> ReportData:
    """All report content for a result table (``harness/run/job.py`` ``ROW_COLUMNS``); ``repeats``: a
    second seeded run of some of its jobs (``run --repeat 2``), for the ``nondeterminism`` flag."""
    manifests = manifests or []
    runs = [Path(r) for r in (runs or [])]
    if table.empty:
        raise InputError("the result table is empty: nothing to report")
    table = with_implementation(table)
    table = with_twin_columns(table)  # a table made before the twin columns: its model names read once
    for col in ("implementation", "library_version", "library", "attack", "family", "model", "norm", "base_model",
                "twin"):
        if col in table.columns:
            table[col] = table[col].fillna("").astype(str)
    notes: list[str] = []
    if "status" in table.columns and (ours := table["status"].astype(str) == "harness_error").any():
        # no result of the attack, and not the library's fault: left out, and said once
        jobs = table.loc[ours, "job_id"].nunique() if "job_id" in table.columns else int(ours.sum())
        notes.append(f"{jobs} job(s) did not run: their worker failed before the attack started (harness errors, "
                     "ours, not the libraries'; logs/<job_id>.log says why). Run the same command again to run them.")
        table = table[~ours]
        if table.empty:
            raise InputError("no job of this run has a result: every one failed before its attack started "
                             "(harness_error; logs/<job_id>.log says why); run the same command again")
    prepared = fidelity.prepare(table)  # once per report: every fidelity check below takes it as it is
    # the flags and the yardstick standing, one assessment for both; exact distances the rows cannot
    # use are left out (a note says why) rather than losing the report
    found = findings(prepared, repeats, exact=exact, settings=manifest_settings(manifests))
    if found.exact_untargeted:
        notes.append("Exact distances are untargeted; they are left out of this targeted run's report.")
    if found.exact_error is not None:
        notes.append(f"Exact distances could not be used ({_one_line(found.exact_error, 160)}).")
    flags_df, exact = found.flags, found.exact
    board = fidelity.leaderboard(prepared)
    side, pairs = fidelity.align(prepared)
    # each pick's ratio to its yardstick, on the first look's images; a later look's rows (--until-decided:
    # looks.py) come annotated on their own images, as the runner judged them
    rec, look_notes = recommend_looks(prepared, flags_df, board, runs, manifests, found.standing)
    flags_df, seeds = with_severity(flags_df), seed_twin_table(prepared, flags_df, declared_randomised(manifests))
    local = fidelity.local_optimality(prepared)
    crashes = _crashes(table)
    marks = fidelity.flagged(flags_df)
    board = board.assign(flags=[", ".join(marks.get((r.implementation, r.library_version, r.norm), []))
                                for r in board.itertuples(index=False)])
    side = side.assign(flags=[", ".join(marks.get((r.implementation, r.library_version, r.norm), []))
                              for r in side.itertuples(index=False)])
    true_opt = None
    if exact is not None:
        try:
            from attackaudit.fidelity.true_optimality import true_optimality
            true_opt = true_optimality(prepared, exact)
        except Exception as exc:
            notes.append(f"Optimality against the exact distances failed ({_one_line(exc, 160)}).")
    summary, more = _summary(table, manifests, runs, board, flags_df, crashes)
    notes += look_notes + more + measurement_notes(table, local)
    # the per-sample distances and the envelope, once for the curves and the scatter plots
    dist, env = sample_distances(table), fidelity.envelope(prepared)
    curves = _curves(dist, env, local, exact)
    all_pairs = _pairs_for_plots(pairs, side, dist, env)
    families = []
    for (family, norm), g in side.groupby(["family", "norm"], sort=True):
        if len(g) < 2:
            continue
        fam_pairs = [p for p in all_pairs if p.family == family and p.norm == norm]
        cross = [p for p in fam_pairs if p.library_a != p.library_b]
        widest = max(fam_pairs, key=lambda p: (p.gap, abs(p.effect_size)), default=None)
        families.append({"index": len(families), "family": family, "norm": norm, "side": g.reset_index(drop=True),
                         "pairs": pairs[(pairs["family"] == family) & (pairs["norm"] == norm)].reset_index(drop=True),
                         "libraries": sorted(set(g["library"])), "cross_library": bool(cross),
                         "widest": widest})
    gaps = sorted((p for p in all_pairs if p.library_a != p.library_b), key=lambda p: (-p.gap, p.family, p.norm))
    summary["largest_gap"] = _gap_dict(gaps[0]) if gaps else None
    within = sorted((p for p in all_pairs if p.library_a == p.library_b), key=lambda p: (-p.gap, p.family, p.norm))
    summary["largest_variant_gap"] = _gap_dict(within[0]) if within else None
    summary["shared_families"] = sorted({f"{f['family']}/{f['norm']}" for f in families if f["cross_library"]})
    keys = sorted(set(zip(board["implementation"], board["library_version"])) if len(board) else set())
    return ReportData(runs, table, manifests, summary, board, side, pairs, flags_df, rec, local, crashes,
                      _implementations(table), curves, families, gaps, exact, true_opt, notes,
                      {k: i for i, k in enumerate(keys)}, all_pairs, seeds)


def _gap_dict(p: Pair) -> dict:
    better, worse = (p.a, p.b) if p.optimality_a >= p.optimality_b else (p.b, p.a)
    return {"family": p.family, "norm": p.norm, "better": better[0], "better_version": better[1],
            "worse": worse[0], "worse_version": worse[1], "gap": p.gap,
            "optimality_better": max(p.optimality_a, p.optimality_b),
            "optimality_worse": min(p.optimality_a, p.optimality_b), "p_value": p.p_value,
            "answer": pair_answer(p)}


def pair_answer(p: Pair) -> str:
    """The pair's image-by-image answer in a few words, names included."""
    if p.answer == "different":
        closer = p.a if p.better == p.a[0] else p.b
        return f"different, {closer[0]} closer beyond ±{np.expm1(DELTA):.0%} per image"
    if p.answer == "inconclusive" and np.isfinite(p.images_to_decide):
        return f"inconclusive ({p.images_to_decide:.0f} images would decide)"
    return p.answer
