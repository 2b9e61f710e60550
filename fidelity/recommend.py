"""Trust sets: per family and norm, every implementation a user may trust, with its uncertainty.

The rule (fidelity/README.md, "Trust sets"):

1. Candidates are the implementations without any flag (``flags``; ``below_expected_strength``
   included, so an implementation of a strong family far from its norm's envelope is never
   trusted). The top pick is the candidate with the highest global ξ (within ``TIE_TOLERANCE``
   the cheaper one).
2. Every other candidate is compared with the top pick sample by sample (Wilcoxon signed-rank on
   the live samples of all models both ran on, ``stats.paired_comparison``), Holm-adjusted over
   those comparisons; it joins the ``trust_set`` unless it is significantly worse
   (``stats.significant``). One member: "clear"; more: "tied".
3. ``optimality_ci``: a 95% percentile bootstrap interval of each member's global ξ, resampling
   samples within each model (the same resamples for every implementation, so the envelope and
   ε₀ move with them). ``top_share``: how often the top pick has the highest ξ in a resample;
   ``top_in_set``: how often it is still in the resample's trust set (the same rule, with the
   normal-approximation Wilcoxon of ``stats.wilcoxon_batch``).
4. ``samples_to_separate``: for a tie, the samples per model a test would need to tell the top
   pick from its closest rival if the observed effect were real (``stats.samples_to_separate``).
"""
from __future__ import annotations

from typing import Mapping

import numpy as np
import pandas as pd

from ._table import IMPL_KEY, long_distances, prepare, without_twins
from .flags import flagged
from .leaderboard import leaderboard
from .stats import (ALPHA, holm, paired_comparison, samples_to_separate, significant, tie_aware_diff,
                    wilcoxon_batch)
from .strength import expectations, expected, is_strong, strength_findings

RECOMMEND_COLUMNS = ["family", "norm", "verdict", "implementation", "library", "library_version", "optimality",
                     "optimality_ci", "queries", "wall_s", "trusted", "trust_set", "top_share", "top_in_set",
                     "samples_to_separate", "samples_per_model", "expected_optimality", "best_in_norm",
                     "candidates", "flagged", "runner_up", "note", "weak", "summary"]
#: optimality values closer than this count as tied when choosing the top pick; cost breaks the tie
TIE_TOLERANCE = 1e-3
#: bootstrap resamples (vectorised; a few hundred give the 2.5/97.5 percentiles to about ±0.01)
N_BOOTSTRAP = 400
BOOTSTRAP_SEED = 0
#: an implementation with global ξ below this fraction of the best attack of its norm gets a
#: weakness note (weak here, correct as far as the label evidence goes)
WEAK_FRACTION = 0.5
#: flags that say "weaker", not "wrong": an implementation carrying only these gets a weakness note
WEAKNESS_FLAGS = frozenset({"optimality_gap"})


# ------------------------------------------------------------------------------------ arrays
class _Family:
    """Per-sample distances of one family and norm: per model, a (k, n_m) matrix (NaN where an
    implementation did not run there) and the envelope d* (n_m,)."""

    def __init__(self, long: pd.DataFrame, keys: list[tuple[str, str]]):
        self.keys = keys
        self.models: list[str] = []
        self.dist: list[np.ndarray] = []
        self.d_star: list[np.ndarray] = []
        index = pd.MultiIndex.from_tuples(keys).get_indexer(pd.MultiIndex.from_frame(long[IMPL_KEY]))
        models = long["model"].to_numpy()
        samples, dist, ref = long["sample"].to_numpy(), long["distance"].to_numpy(float), long["d_star"].to_numpy(float)
        for model in sorted(set(models)):
            at = (models == model) & (index >= 0)
            if not at.any():
                continue  # none of this family's implementations ran on that model
            uniq, col = np.unique(samples[at], return_inverse=True)
            mat = np.full((len(keys), len(uniq)), np.nan)
            mat[index[at], col] = dist[at]
            d_star = np.full(len(uniq), np.inf)
            d_star[col] = ref[at]
            self.models.append(str(model))
            self.dist.append(mat)
            self.d_star.append(d_star)

    def pooled(self, i: int, j: int) -> tuple[np.ndarray, np.ndarray]:
        """Live distances of implementations i and j on the models both ran on, concatenated."""
        a, b = [], []
        for mat, ref in zip(self.dist, self.d_star):
            if np.isnan(mat[i]).all() or np.isnan(mat[j]).all():
                continue
            live = ref > 0
            a.append(mat[i, live])
            b.append(mat[j, live])
        cat = (lambda xs: np.concatenate(xs) if xs else np.zeros(0))
        return cat(a), cat(b)


def _xi(dist: np.ndarray, ref: np.ndarray, eps_max: float | None) -> np.ndarray:
    """ξ of (..., k, n) distances against (..., n) references, vectorised over leading axes:
    Σ(ε₀ − d)₊ / Σ(ε₀ − d*)₊ over samples with d* > 0, ε₀ = ``eps_max`` or the largest finite d*.
    NaN where the envelope breaks nothing inside (0, ε₀) (degenerate) or the implementation did
    not run."""
    finite = np.where(np.isfinite(ref), ref, -np.inf)
    eps0 = np.full(ref.shape[:-1], float(eps_max)) if eps_max is not None else finite.max(axis=-1, initial=-np.inf)
    eps0 = np.where(np.isfinite(eps0), eps0, 0.0)[..., None]
    live = ref > 0
    gain_ref = np.where(live, np.clip(eps0 - ref, 0.0, None), 0.0).sum(axis=-1)
    gain = np.where(live[..., None, :], np.clip(eps0[..., None, :] - dist, 0.0, None), 0.0).sum(axis=-1)
    gain = np.where(np.isnan(dist).all(axis=-1), np.nan, gain)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(gain_ref[..., None] > 0, np.clip(gain / gain_ref[..., None], 0.0, 1.0), np.nan)


def _bootstrap(fam: _Family, eps_max: float | None, n_boot: int, seed: int) -> tuple[np.ndarray, list]:
    """(global ξ per resample (B, k), per model the resampled (B, n_m) index arrays)."""
    rng = np.random.default_rng(seed)
    per_model, idx_all = [], []
    for mat, ref in zip(fam.dist, fam.d_star):
        idx = rng.integers(0, ref.size, size=(n_boot, ref.size))
        idx_all.append(idx)
        d = mat[:, idx].transpose(1, 0, 2)            # (B, k, n)
        per_model.append(_xi(d, ref[idx], eps_max))   # (B, k)
    stack = np.stack(per_model)                        # (M, B, k)
    with np.errstate(invalid="ignore"):
        import warnings
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN: no model measured it
            return np.nanmean(stack, axis=0), idx_all


def _resampled_tests(fam: _Family, idx_all: list, cands: list[int]) -> dict[tuple[int, int], tuple[np.ndarray, np.ndarray]]:
    """Per pair (i, j) of candidates: (p-values (B,), effects (B,), + = i smaller) on the resamples."""
    out = {}
    for x, i in enumerate(cands):
        for j in cands[x + 1:]:
            parts = []
            for mat, ref, idx in zip(fam.dist, fam.d_star, idx_all):
                if np.isnan(mat[i]).all() or np.isnan(mat[j]).all():
                    continue
                live = (ref > 0)[idx]
                diff = tie_aware_diff(mat[i][idx], mat[j][idx])
                parts.append(np.where(live, diff, 0.0))
            if parts:
                out[(i, j)] = wilcoxon_batch(np.concatenate(parts, axis=1))
    return out


def _stability(xi_boot: np.ndarray, tests: dict, cands: list[int], top: int) -> tuple[float, float]:
    """(share of resamples whose best candidate is ``top``, share whose trust set contains it)."""
    if len(cands) == 1:
        return 1.0, 1.0
    sub = np.nan_to_num(xi_boot[:, cands], nan=-1.0)
    best = np.asarray(cands)[np.argmax(sub, axis=1)]
    in_set = np.zeros(len(best), dtype=bool)
    for b, bb in enumerate(best):
        if bb == top:
            in_set[b] = True
            continue
        others = [c for c in cands if c != bb]
        p, worse = [], []
        for c in others:
            pv, eff = tests[(bb, c)] if (bb, c) in tests else tests[(c, bb)]
            e = eff[b] if (bb, c) in tests else -eff[b]   # + = bb smaller (better)
            p.append(pv[b])
            worse.append(e > 0)
        p_adj = holm(np.asarray(p))
        k = others.index(top)
        in_set[b] = not (p_adj[k] < ALPHA and worse[k])
    return float(np.mean(best == top)), float(np.mean(in_set))


# ------------------------------------------------------------------------------------ words
def _ci_text(ci: tuple[float, float]) -> str:
    lo, hi = ci
    return "n/a" if not (np.isfinite(lo) and np.isfinite(hi)) else f"{lo:.3f}–{hi:.3f}"


def _summary(family: str, norm: str, verdict: str, members: list[dict], top_share: float, top_in_set: float,
             separate: float, per_model: int, n_models: int, note: str, n_candidates: int = 1) -> str:
    if verdict == "untrusted":
        return note
    names = ", ".join(m["implementation"] for m in members)
    if verdict == "clear":
        m = members[0]
        why = ("the only unflagged implementation" if n_candidates == 1 else
               "every other unflagged implementation is significantly worse")
        return (f"clear: {names} (ξ {m['optimality']:.3f}, 95% CI {_ci_text(m['optimality_ci'])}); {why}; "
                f"it has the best ξ in {top_share:.0%} of resamples")
    top = members[0]["implementation"]
    relations, undecided = [], []
    for m in members[1:]:
        p = m.get("p_adjusted")
        if p is not None and np.isfinite(p) and p < ALPHA:
            # in the set because it is not worse: it is closer on more samples, yet its ξ is lower
            relations.append(f"{m['implementation']} is closer on more samples ({m['wins_member']} against "
                             f"{m['wins_top']}, Holm-adjusted p = {p:.2g}) but has the lower ξ: neither dominates")
        else:
            undecided.append(m["implementation"])
    if undecided:
        relations.insert(0, f"{', '.join(undecided)}: no significant difference from {top} "
                            f"(Holm-adjusted p ≥ {ALPHA})")
    text = f"tied: {names}; use any of them. {'; '.join(relations)}. {top} has the best ξ in {top_share:.0%} of " \
           f"resamples and stays in the set in {top_in_set:.0%}"
    if members[1]["implementation"] in undecided:
        if np.isfinite(separate):
            need = int(np.ceil(separate / max(n_models, 1)))
            text += (f"; about {need} samples per model (now {per_model}) would separate {top} from "
                     f"{members[1]['implementation']} if their observed difference is real")
        else:
            text += (f"; no number of samples would separate {top} from {members[1]['implementation']}: they do "
                     "not differ systematically")
    return text


# ------------------------------------------------------------------------------------ main
def recommend(table: pd.DataFrame, flags_df: pd.DataFrame | None, *,
              eps_max: Mapping[str, float] | None = None, n_boot: int = N_BOOTSTRAP,
              seed: int = BOOTSTRAP_SEED, board: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per (family, norm): the trust set. ``RECOMMEND_COLUMNS``, one row per family and norm.

    ``verdict`` is "clear" (one member), "tied" (several) or "untrusted" (no unflagged
    implementation; ``note`` says why and, for a strong family whose implementations all fall
    below their expected strength, names the best attack of the norm instead). ``trust_set`` is a
    list of ``{implementation, library_version, optimality, optimality_ci: [lo, hi], p_adjusted,
    wins_top, wins_member, samples_to_separate}`` (top pick first); ``optimality_ci`` of the row
    is the top pick's. ``weak`` lists weakness notes (weak here, no label evidence). ``board``:
    ``leaderboard(table, eps_max=eps_max)`` when the caller has it already.
    """

    board = leaderboard(table, eps_max=eps_max) if board is None else board
    if board.empty:
        return pd.DataFrame(columns=RECOMMEND_COLUMNS)
    long = long_distances(without_twins(prepare(table)))
    marks = flagged(flags_df)
    board = board.assign(queries=board["forwards"] + board["backwards"],
                         flags=[marks.get((r.implementation, r.library_version, r.norm), [])
                                for r in board.itertuples(index=False)])
    strength = strength_findings(board[["norm", *IMPL_KEY, "family", "optimality", "n_models"]])
    best_of_norm = strength.drop_duplicates("norm").set_index("norm")
    by_norm = dict(tuple(long.groupby("norm", sort=False)))
    rows = []
    for (family, norm), g in board.groupby(["family", "norm"], sort=True):
        rows.append(_one(family, norm, g, by_norm.get(norm, long.iloc[0:0]), best_of_norm.loc[norm],
                         (eps_max or {}).get(norm), n_boot, seed))
    return pd.DataFrame(rows, columns=RECOMMEND_COLUMNS)


def _one(family: str, norm: str, g: pd.DataFrame, long: pd.DataFrame, norm_best: pd.Series,
         eps_max: float | None, n_boot: int, seed: int) -> dict:
    g = g.assign(clean=g["flags"].map(len) == 0,
                 tier=(g["optimality"].fillna(-1.0) / TIE_TOLERANCE).round())
    g = g.sort_values(["clean", "tier", "queries", "wall_s", "implementation"],
                      ascending=[False, False, True, True, True], kind="stable").reset_index(drop=True)
    keys = list(zip(g["implementation"], g["library_version"]))
    fam = _Family(long, keys)
    cands = [i for i in range(len(g)) if g.at[i, "clean"] and np.isfinite(g.at[i, "optimality"])]
    e = expected(family, norm)
    strong = is_strong(family, norm)
    n_models = int(g["n_models"].max())
    per_model = int(round(np.mean([r.size for r in fam.d_star]))) if fam.d_star else 0
    xi_norm = float(norm_best["best_in_norm"])
    best_norm = f"{norm_best['best_in_norm_impl']} (ξ {xi_norm:.3f})" if np.isfinite(xi_norm) else "none (ξ n/a)"
    xi_boot, idx_all = _bootstrap(fam, eps_max, n_boot, seed) if fam.models else (np.full((0, len(g)), np.nan), [])
    ci = [(float(np.nanpercentile(xi_boot[:, i], 2.5)), float(np.nanpercentile(xi_boot[:, i], 97.5)))
          if len(xi_boot) and np.isfinite(xi_boot[:, i]).any() else (float("nan"), float("nan")) for i in range(len(g))]
    flagged_note = "; ".join(f"{r.implementation} ({', '.join(r.flags)})" for r in g[~g["clean"]].itertuples(index=False))
    base = {"family": family, "norm": norm, "expected_optimality": e if e is not None else float("nan"),
            "best_in_norm": norm_best["best_in_norm_impl"], "candidates": len(g), "flagged": int((~g["clean"]).sum()),
            "samples_per_model": per_model}
    if not cands:
        top = g.iloc[0]
        if strong and any("below_expected_strength" in f for f in g["flags"]):
            note = (f"no implementation reaches the expected strength of {family} under {norm} here (AttackBench "
                    f"publishes {e:.3f}); use the best attack of {norm} instead: {best_norm}")
        else:
            note = f"every implementation is flagged ({flagged_note}); none is trusted"
        return base | {"verdict": "untrusted", "implementation": top["implementation"], "library": top["library"],
                       "library_version": top["library_version"], "optimality": float(top["optimality"]),
                       "optimality_ci": list(ci[0]), "queries": float(top["queries"]), "wall_s": float(top["wall_s"]),
                       "trusted": False, "trust_set": [], "top_share": float("nan"), "top_in_set": float("nan"),
                       "samples_to_separate": float("nan"), "runner_up": g["implementation"].iloc[1] if len(g) > 1 else "",
                       "note": note, "weak": _weak(g, [], norm_best, {}), "summary": note}
    top = cands[0]
    tests, members, excluded = [], [], {}
    for c in cands[1:]:
        res = paired_comparison(*fam.pooled(top, c))
        tests.append((c, res))
    p_adj = holm([r["p_value"] for _, r in tests]) if tests else np.zeros(0)
    k = len(tests)
    top_row = g.iloc[top]
    members.append({"implementation": top_row["implementation"], "library_version": top_row["library_version"],
                    "optimality": float(top_row["optimality"]), "optimality_ci": list(ci[top]), "p_adjusted": None,
                    "wins_top": None, "wins_member": None, "samples_to_separate": None})
    for (c, res), pa in zip(tests, p_adj):
        r = g.iloc[c]
        if significant(pa, res["wins_a"], res["wins_b"]):
            excluded[c] = (pa, res)
            continue
        n_nontied = res["wins_a"] + res["wins_b"]
        members.append({"implementation": r["implementation"], "library_version": r["library_version"],
                        "optimality": float(r["optimality"]), "optimality_ci": list(ci[c]), "p_adjusted": float(pa),
                        "wins_top": int(res["wins_a"]), "wins_member": int(res["wins_b"]),
                        "samples_to_separate": samples_to_separate(res["effect_size"], n_nontied, res["n_samples"], k)})
    boot_tests = _resampled_tests(fam, idx_all, cands) if len(cands) > 1 and idx_all else {}
    top_share, top_in_set = _stability(xi_boot, boot_tests, cands, top) if len(xi_boot) else (float("nan"),) * 2
    verdict = "clear" if len(members) == 1 else "tied"
    separate = members[1]["samples_to_separate"] if len(members) > 1 else float("nan")
    notes = [f"flagged, not considered: {flagged_note}"] if flagged_note else []
    summary = _summary(family, norm, verdict, members, top_share, top_in_set, separate, per_model, n_models, "",
                       len(cands))
    return base | {"verdict": verdict, "implementation": top_row["implementation"], "library": top_row["library"],
                   "library_version": top_row["library_version"], "optimality": float(top_row["optimality"]),
                   "optimality_ci": list(ci[top]), "queries": float(top_row["queries"]),
                   "wall_s": float(top_row["wall_s"]), "trusted": True, "trust_set": members,
                   "top_share": top_share, "top_in_set": top_in_set, "samples_to_separate": separate,
                   "runner_up": g["implementation"].iloc[cands[1]] if len(cands) > 1 else "",
                   "note": "; ".join(notes), "weak": _weak(g, cands, norm_best, excluded), "summary": summary}


def _weak(g: pd.DataFrame, cands: list[int], norm_best: pd.Series, excluded: dict) -> list[str]:
    """Weakness notes, for implementations whose only flag (if any) is one of ``WEAKNESS_FLAGS``:
    those significantly worse than the top pick, flagged ``optimality_gap``, or far below the
    best attack of their norm. Weak is not a label bug: without label evidence (perm twin,
    class-conditional failure) nothing says the labels are wrong."""
    out = []
    top = g.iloc[cands[0]] if cands else None
    for i, r in g.iterrows():
        if set(r["flags"]) - WEAKNESS_FLAGS or (top is not None and r["implementation"] == top["implementation"]
                                                 and r["library_version"] == top["library_version"]):
            continue
        xi = float(r["optimality"])
        if i in excluded:
            pa, res = excluded[i]
            why = (f"weaker than {top['implementation']} (ξ {xi:.3f} vs {float(top['optimality']):.3f}; smaller "
                   f"perturbation on {res['wins_b']} vs {res['wins_a']} samples, Holm-adjusted p = {pa:.2g})")
        elif "optimality_gap" in r["flags"]:
            why = f"weaker than the best of its family on some models (ξ {xi:.3f}; see its optimality_gap flags)"
        elif np.isfinite(xi) and xi < WEAK_FRACTION * float(norm_best["best_in_norm"]):
            why = (f"weak here (ξ {xi:.3f}, under half of the best attack of {r['norm']}, "
                   f"{norm_best['best_in_norm_impl']} at {norm_best['best_in_norm']:.3f})")
        else:
            continue
        out.append(f"{r['implementation']}: {why}; no label evidence against it")
    return out


def expectation_source() -> str:
    """One line naming where the expected strengths come from (for reports)."""
    doc = expectations()
    return f"{doc['citation']} Data: {doc['data']}."
