"""Trust sets: per family and norm, every implementation a user may trust, with its uncertainty.

The rule (fidelity/README.md, "Trust sets"):

1. Candidates are the implementations without a defect flag (every flag but the weakness flags
   ``WEAKNESS_FLAGS``; ``below_expected_strength`` included, so an implementation of a strong
   family far from its norm's envelope is never trusted).
2. Every two candidates are compared image by image on the robustness curve (``equivalence.pair_test``:
   the headline of ``headline.py``, the share of images each is worse on, with the failure and
   distance endpoints beneath; one image on all models one block). A candidate is excluded when
   some other candidate is shown *better* than it, with the difference test Holm-adjusted over all those pairs:
   no pick is made before testing, so the comparison with the best needs no selection
   correction. The top pick is the remaining candidate with the highest global ξ against the family's own envelope (within
   ``TIE_TOLERANCE`` the cheaper one).
3. The other members are compared with the top pick for equivalence (the share, failure and
   distance endpoints inside their margins; every member at α when all are, an intersection–union
   test for "tied", Holm over the members otherwise). ``verdict``: "clear" (one member), "tied" (every member equivalent to the
   top pick), "inconclusive" (a member neither different nor equivalent: ``images_to_decide``
   says how many images would decide), "only implementation" (one candidate), "none" (no
   candidate).
4. ``optimality_ci``: a 95% percentile bootstrap interval of each member's global ξ, resampling
   images (an image's rows on every model together; the envelope and ε₀ move with them).
   ``top_share``: how often the resample's own top pick (the same rule) is the top pick;
   ``top_in_set``: how often the top pick is not excluded in the resample (normal approximations
   of both endpoints' tests).
"""
from __future__ import annotations

from typing import Mapping

import numpy as np
import pandas as pd
from scipy import stats as sps

from ._table import IMPL_KEY, long_distances, prepare, without_twins
from . import paired_binary
from .equivalence import (DELTA, FAILURE_MARGIN, ImageBlocks, answer, pair_test, observed_rows, signed_rank_z,
                          swapped)
from .headline import SHARE_DELTA, SHARE_MARGIN, WEIGHTS
from .evidence_text import shown_text
from .sample_size import decision_text, images_to_decide
from .flags import flagged
from .flag_kinds import BELOW_EXPECTED_STRENGTH, OPTIMALITY_GAP, WEAKNESS_FLAGS  # the registry (flag_kinds.py)
from .leaderboard import leaderboard
from .stats import ALPHA, holm
from .class_failure import class_notes_of
from .strength import (expectations, expected, family_optimality, is_strong, is_weak, shortfall_note,
                       strength_findings)
from .twins import twin_notes

RECOMMEND_COLUMNS = ["family", "norm", "verdict", "implementation", "library", "library_version", "optimality",
                     "optimality_ci", "queries", "wall_s", "trusted", "trust_set", "top_share", "top_in_set",
                     "samples_to_separate", "images_to_decide", "samples_per_model", "expected_optimality",
                     "best_in_norm", "candidates", "flagged", "runner_up", "note", "weak", "summary",
                     "yardstick", "ratio", "expected_ratio"]  # yardstick_verdicts.annotate
VERDICTS = ("clear", "tied", "inconclusive", "only implementation", "none")
#: optimality values closer than this count as tied when choosing the top pick; cost breaks the tie
TIE_TOLERANCE = 1e-3
#: bootstrap resamples (vectorised; a few hundred give the 2.5/97.5 percentiles to about ±0.01)
N_BOOTSTRAP = 400
BOOTSTRAP_SEED = 0
#: a pair whose endpoints disagree in direction: shown different, but neither is better overall
MIXED_DECISION = ("the endpoints disagree (one breaks more images, the other is closer on the images both broke): "
                  "more images will not order them; choose by the endpoint your claim rests on (robust accuracy "
                  "at a fixed ε: failures; minimal distances: distance)")


# ------------------------------------------------------------------------------------ arrays
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


def _bootstrap(blocks: ImageBlocks, eps_max: float | None, n_boot: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(global ξ per resample (B, k), the (B, n) image indices): each resample draws images with
    replacement, every model's rows of a drawn image together."""
    rng = np.random.default_rng(seed)
    n = len(blocks.images)
    idx = rng.integers(0, n, size=(n_boot, n))
    d = blocks.dist[:, :, idx].transpose(0, 2, 1, 3)          # (M, B, k, n)
    per_model = _xi(d, blocks.d_star[:, idx], eps_max)         # (M, B, k)
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)       # all-NaN: no model measured it
        return np.nanmean(per_model, axis=0), idx


def _pick(xi: np.ndarray, excluded: np.ndarray) -> np.ndarray:
    """Index (into the candidate order) of the top pick per row of (B, c) ξ and exclusions: the
    highest ξ tier (``TIE_TOLERANCE``) among the not excluded, first in the cost order."""
    tier = np.where(excluded, -np.inf, np.round(np.nan_to_num(xi, nan=-1.0) / TIE_TOLERANCE))
    return np.argmax(tier == tier.max(axis=1, keepdims=True), axis=1)


def _excluded(p_diff: np.ndarray, better: np.ndarray, pairs: list[tuple[int, int]], c: int,
              alpha: float) -> np.ndarray:
    """(B, c) exclusions from (B, P) raw difference p-values of the candidate ``pairs`` and
    (B, P) ``better`` (True: the pair's first member better): Holm over the P pairs per row."""
    b = p_diff.shape[0]
    out = np.zeros((b, c), dtype=bool)
    if not pairs:
        return out
    adj = np.vstack([holm(row) for row in p_diff])
    for q, (i, j) in enumerate(pairs):
        sig = adj[:, q] < alpha
        out[:, j] |= sig & better[:, q]
        out[:, i] |= sig & ~better[:, q]
    return out


def _resampled_exclusions(values: list[np.ndarray], idx: np.ndarray, pairs: list[tuple[int, int]], c: int,
                          alpha: float) -> np.ndarray:
    """(B, c) exclusions in each bootstrap resample: per pair, the headline's difference tests on
    the resampled images (normal approximations: the share and failure endpoints' score tests, the
    distance endpoint's signed-rank test on the images both broke), weighted Bonferroni over the
    testable ones, in the direction of the smallest weighted p."""
    if not pairs:
        return np.zeros((idx.shape[0], c), dtype=bool)
    p_all, better_all = [], []
    for v in values:
        v = observed_rows(v)
        fa, fb, r, wa, wb = (v[k][idx] for k in range(5))        # (B, n), NaN: no comparison
        seen = np.isfinite(fa) & np.isfinite(fb)
        z_f_first, z_f_second, k_f, n = paired_binary.score_pair(fa, fb, seen, FAILURE_MARGIN)
        z_s_first, z_s_second, k_s, n_s = paired_binary.score_pair(wa, wb, seen & ~((fa == 1) & (fb == 1)),
                                                                   SHARE_MARGIN)
        both = np.isfinite(r)
        z_d_first = signed_rank_z(np.where(both, -r - DELTA, 0.0))  # first member smaller beyond δ
        z_d_second = signed_rank_z(np.where(both, r - DELTA, 0.0))
        firsts = np.stack([z_s_first, z_f_first, z_d_first])
        seconds = np.stack([z_s_second, z_f_second, z_d_second])
        # Tarone (headline.decide): the failure endpoint counts only when its discordant images
        # could pass the margin at all; weighted Bonferroni over those counted (headline.WEIGHTS)
        counted = np.stack([paired_binary.smallest_beyond_p(k_s, n_s, SHARE_MARGIN) < alpha,
                            paired_binary.smallest_beyond_p(k_f, n, FAILURE_MARGIN) < alpha, np.ones_like(n, bool)])
        w = np.where(counted, np.array([WEIGHTS["share"], WEIGHTS["failure rate"], WEIGHTS["distance"]])[:, None], 0.0)
        scaled = np.where(counted, 2 * sps.norm.sf(np.maximum(firsts, seconds)) * w.sum(0) / np.maximum(w, 1e-12), np.inf)
        at = np.argmin(scaled, axis=0)
        first = np.take_along_axis(firsts >= seconds, at[None], 0)[0]
        sig = sps.norm.isf(0.025)
        mixed = ((z_f_first > sig) & (z_d_second > sig)) | ((z_f_second > sig) & (z_d_first > sig))
        better_all.append(first)
        p_all.append(np.where(mixed, 1.0, np.minimum(1.0, scaled.min(axis=0))))
    return _excluded(np.stack(p_all, axis=1), np.stack(better_all, axis=1), pairs, c, alpha)


# ------------------------------------------------------------------------------------ words
def _ci_text(ci: tuple[float, float] | list[float]) -> str:
    lo, hi = ci
    return "n/a" if not (np.isfinite(lo) and np.isfinite(hi)) else f"{lo:.3f}–{hi:.3f}"


def what_happened(blocks: ImageBlocks, i: int, eps_max: float | None) -> str:
    """Why implementation i has ξ = 0, from its rows: it broke no image, or every image it broke
    lies beyond ε₀ (where ξ gives no credit)."""
    live = blocks.d_star > 0
    d = blocks.dist[:, i]
    ran = ~np.isnan(d).all(axis=1)
    need = int((live & ran[:, None]).sum())
    broke = int((np.isfinite(d) & live & ran[:, None]).sum())
    if broke == 0:
        return f"it broke none of the {need} (model, image) cases that needed an attack"
    return (f"it broke {broke} of {need} (model, image) cases, every one beyond ε₀ (the largest distance of the "
            f"envelope{'' if eps_max is None else ' or the given ε_max'}), where ξ gives no credit")


def _tie_text(top: str, m: dict) -> str:
    res = m["result"]
    if m["answer"] == "equivalent":
        return f"{m['implementation']} vs {top}: " + shown_text(res, "equivalent", m["p_equivalent"],
                                                                 a=m["implementation"], b=top)
    word = "different" if m["answer"] == "mixed" else "inconclusive"
    return (f"{m['implementation']} vs {top}: " + shown_text(res, word, a=m["implementation"], b=top)
            + f": {m['decision']}")


def _summary(verdict: str, members: list[dict], top_share: float, top_in_set: float, n_cands: int,
             n_impls: int, norm_best: str, far_below: bool) -> str:
    names = ", ".join(m["implementation"] for m in members)
    top = members[0]
    head = f"{top['implementation']} (ξ {top['optimality']:.3f}, 95% CI {_ci_text(top['optimality_ci'])})"
    if verdict == "only implementation":
        what = "the only implementation" if n_impls == 1 else "the only unflagged implementation"
        text = f"only implementation: {head} is {what} of this family and norm"
        if far_below:
            text += f"; it is far below the best attack of its norm here, {norm_best}"
        return text + (f". {top['why_zero']}" if top.get("why_zero") else "")
    stable = (f"{top['implementation']} is the top pick in {top_share:.0%} of image resamples and stays in the set "
              f"in {top_in_set:.0%}")
    if verdict == "clear":
        return (f"clear: {head}; every other unflagged implementation is worse on the robustness curve "
                f"(worse beyond ±{np.expm1(SHARE_DELTA):.0%} on more images than better, by over "
                f"{SHARE_MARGIN * 100:.0f} points, or beyond ±{FAILURE_MARGIN * 100:.0f} points of failure rate or "
                f"±{np.expm1(DELTA):.0%} typical per-image distance, with no endpoint leaning the other way; "
                f"Holm-adjusted); {stable}")
    rel = "; ".join(_tie_text(top["implementation"], m) for m in members[1:])
    if verdict == "tied":
        return f"tied: {names}; use any of them. {rel}. {stable}"
    worst = max((m for m in members[1:] if m["answer"] != "equivalent"),
                key=lambda m: -1.0 if m["images_to_decide"] is None else m["images_to_decide"])
    return f"inconclusive: {names}; {worst['decision']}. {rel}. {stable}"


# ------------------------------------------------------------------------------------ main
def recommend(table: pd.DataFrame, flags_df: pd.DataFrame | None, *,
              eps_max: Mapping[str, float] | None = None, n_boot: int = N_BOOTSTRAP,
              seed: int = BOOTSTRAP_SEED, board: pd.DataFrame | None = None, alpha: float = ALPHA,
              dataset_images: int | None = None, exact=None, settings=None) -> pd.DataFrame:
    """Per (family, norm): the trust set. ``RECOMMEND_COLUMNS``, one row per family and norm.

    ``verdict`` is one of ``VERDICTS``; "none" has no trusted implementation (``note`` says why
    and, for a strong family whose implementations all fall below their expected strength, names
    the best attack of the norm instead). ``trust_set`` is a list of ``{implementation,
    library_version, optimality, optimality_ci: [lo, hi], answer, estimate, p_different,
    p_equivalent, p_adjusted, wins_top, wins_member, samples_to_separate,
    fail_member, fail_top, share_beyond, n_both, decision}`` (top pick first; ``answer`` against
    the top pick: "equivalent" or "inconclusive"; ``estimate`` the member's pseudo-median log
    ratio to the top pick on the images both broke; ``p_adjusted``, ``wins_*`` and
    ``samples_to_separate`` repeat the equivalence p, the images where the top pick / the member
    is closer, and ``images_to_decide`` under older names; ``decision`` what would decide it).
    ``weak`` lists weakness notes. ``board``: ``leaderboard(table, eps_max=eps_max)`` when the
    caller has it already. ``dataset_images``: how many images the dataset has (an inconclusive
    pair that needs more "cannot be decided on this dataset"); ``exact``/``settings``: ``yardstick_verdicts.annotated``.
    """
    table = prepare(table)  # one family per implementation (prepare's one_family), for every grouping below
    board = leaderboard(table, eps_max=eps_max) if board is None else board
    if board.empty:
        return pd.DataFrame(columns=RECOMMEND_COLUMNS)
    real = without_twins(table)
    long = long_distances(real)
    marks = flagged(flags_df)
    board = board.assign(queries=board["forwards"] + board["backwards"],
                         flags=[marks.get((r.implementation, r.library_version, r.norm), [])
                                for r in board.itertuples(index=False)])
    # candidates are ordered by ξ against their own family's envelope: no other family moves a pick
    own = family_optimality(real, eps_max)[["norm", *IMPL_KEY, "family_optimality"]]
    board = board.drop(columns=["family_optimality"], errors="ignore").merge(own, on=["norm", *IMPL_KEY], how="left")
    strength = strength_findings(board[["norm", *IMPL_KEY, "library", "family", "optimality", "n_models"]])
    best_of_norm = strength.drop_duplicates("norm").set_index("norm")
    by_norm = dict(tuple(long.groupby("norm", sort=False)))
    notes = label_notes(table)
    rows = []
    for (family, norm), g in board.groupby(["family", "norm"], sort=True):
        row = _one(family, norm, g, by_norm.get(norm, long.iloc[0:0]), best_of_norm.loc[norm],
                   (eps_max or {}).get(norm), n_boot, seed, alpha, dataset_images)
        mine = [f"{r.implementation}: {n}" for r in g.itertuples(index=False)
                for n in notes.get((r.implementation, r.library_version, norm), [])]
        short = shortfall_note(family, norm, strength, best_of_norm.loc[norm])
        if short and row["verdict"] != "none":
            row["summary"] = f"{row['summary']}. {short}"
        row["note"] = "; ".join([x for x in [row["note"], short, *mine] if x])
        rows.append(row)
    from .yardstick_verdicts import annotated  # the absolute yardstick of each row and member, given either
    return annotated(pd.DataFrame(rows, columns=RECOMMEND_COLUMNS), table, exact, settings)


def label_notes(table: pd.DataFrame) -> dict[tuple[str, str, str], list[str]]:
    """Label evidence too weak or too noisy for a flag, named for what it likely is (perm twin
    within seed noise or a few images; a class failed entirely that difficulty explains):
    ``{(implementation, library_version, norm): notes}``."""
    out: dict[tuple[str, str, str], list[str]] = {}
    for n in twin_notes(prepare(table)) + class_notes_of(table):
        out.setdefault((n["implementation"], n["library_version"], n["norm"]), []).append(n["note"])
    return out


def trust_tests(blocks: ImageBlocks, cands: list[int], alpha: float = ALPHA) -> tuple[dict, np.ndarray, list]:
    """All candidate pairs: (``{(i, j): (per-image values, pair_test result)}``, exclusions (c,),
    the pair list). Holm over every pair's difference test; excluded: worse than some other."""
    pairs = [(a, b) for x, a in enumerate(cands) for b in cands[x + 1:]]
    tests = {}
    for i, j in pairs:
        x = blocks.image_values(i, j)
        tests[(i, j)] = (x, pair_test(x, alpha=alpha))
    # a mixed pair (one breaks more images, the other is closer on those both broke) excludes neither
    p = np.array([[1.0 if tests[q][1]["mixed"] else tests[q][1]["p_different"] for q in pairs]]) if pairs \
        else np.zeros((1, 0))
    better = np.array([[tests[q][1]["direction"] < 0 for q in pairs]]) if pairs else np.zeros((1, 0), bool)
    local = [(cands.index(i), cands.index(j)) for i, j in pairs]
    return tests, _excluded(p, better, local, len(cands), alpha)[0], pairs


def _member(r: pd.Series, ci: tuple[float, float]) -> dict:
    return {"implementation": r["implementation"], "library_version": r["library_version"],
            "optimality": float(r["optimality"]), "optimality_ci": list(ci), "answer": "", "estimate": 0.0,
            "p_different": None, "p_equivalent": None, "images_to_decide": None, "p_adjusted": None,
            "wins_top": None, "wins_member": None, "samples_to_separate": None}


def _none_trusted(family: str, norm: str, g: pd.DataFrame, ci: list, e: float | None, best_norm: str,
                  flagged_note: str, norm_best: pd.Series) -> dict:
    """The "none" verdict of a family × norm whose every implementation is flagged: the best flagged
    one named, untrusted, with why."""
    top = g.iloc[0]
    if is_strong(family, norm) and any(BELOW_EXPECTED_STRENGTH in f for f in g["flags"]):
        note = (f"no implementation reaches the expected strength of {family} under {norm} here (AttackBench "
                f"publishes {e:.3f}); use the best attack of {norm} instead: {best_norm}")
    else:
        note = f"every implementation is flagged ({flagged_note}); none is trusted"
    return {"verdict": "none", "implementation": top["implementation"], "library": top["library"],
            "library_version": top["library_version"], "optimality": float(top["optimality"]),
            "optimality_ci": list(ci[0]), "queries": float(top["queries"]), "wall_s": float(top["wall_s"]),
            "trusted": False, "trust_set": [], "top_share": float("nan"), "top_in_set": float("nan"),
            "samples_to_separate": float("nan"), "images_to_decide": float("nan"),
            "runner_up": g["implementation"].iloc[1] if len(g) > 1 else "",
            "note": note, "weak": _weak(g, norm_best, set()), "summary": note}


def _one(family: str, norm: str, g: pd.DataFrame, long: pd.DataFrame, norm_best: pd.Series,
         eps_max: float | None, n_boot: int, seed: int, alpha: float, dataset_images: int | None = None) -> dict:
    g = g.assign(clean=[not (set(f) - WEAKNESS_FLAGS) for f in g["flags"]],
                 tier=(g["family_optimality"].fillna(-1.0) / TIE_TOLERANCE).round())
    # no wall-time tie-break: it differs between two runs of one config, and the pick must not
    g = g.sort_values(["clean", "tier", "queries", "implementation"],
                      ascending=[False, False, True, True], kind="stable").reset_index(drop=True)
    keys = list(zip(g["implementation"], g["library_version"]))
    blocks = ImageBlocks(long[long.set_index(IMPL_KEY).index.isin(keys)], keys)
    cands = [i for i in range(len(g)) if g.at[i, "clean"] and np.isfinite(g.at[i, "optimality"])]
    e = expected(family, norm)
    xi_norm = float(norm_best["best_in_norm"])
    best_norm = f"{norm_best['best_in_norm_impl']} (ξ {xi_norm:.3f})" if np.isfinite(xi_norm) else "none (ξ n/a)"
    have = len(blocks.images) > 0 and len(blocks.models) > 0
    xi_boot, idx = _bootstrap(blocks, eps_max, n_boot, seed) if have else (np.full((0, len(g)), np.nan), None)
    ci = [(float(np.nanpercentile(xi_boot[:, i], 2.5)), float(np.nanpercentile(xi_boot[:, i], 97.5)))
          if len(xi_boot) and np.isfinite(xi_boot[:, i]).any() else (float("nan"), float("nan")) for i in range(len(g))]
    flagged_note = "; ".join(f"{r.implementation} ({', '.join(r.flags)})" for r in g[~g["clean"]].itertuples(index=False))
    base = {"family": family, "norm": norm, "expected_optimality": e if e is not None else float("nan"),
            "best_in_norm": norm_best["best_in_norm_impl"], "candidates": len(g), "flagged": int((~g["clean"]).sum()),
            "samples_per_model": len(blocks.images)}
    if not cands:
        return base | _none_trusted(family, norm, g, ci, e, best_norm, flagged_note, norm_best)
    tests, excluded, pairs = trust_tests(blocks, cands, alpha)
    kept = [c for c, ex in zip(cands, excluded) if not ex]
    top = kept[0]  # candidates are in ξ-tier then cost order
    members = [_member(g.iloc[top], ci[top])]
    others = kept[1:]
    raw_eq = [tests[(min(top, c), max(top, c))][1]["p_equivalent"] for c in others]
    # "tied" claims every member equivalent at once: an intersection-union test, each at α; only
    # when some member is not shown equivalent are the others' answers claims of their own (Holm)
    p_eq = raw_eq if raw_eq and max(raw_eq) < alpha else holm(raw_eq) if others else []
    for c, pe in zip(others, p_eq):
        x, _ = tests[(min(top, c), max(top, c))]
        vals = x if c < top else swapped(x)                   # the member against the top pick
        res = pair_test(vals, alpha=alpha)
        word = "mixed" if res["mixed"] else answer(1.0, pe, alpha)  # not different: it was kept
        need = images_to_decide(vals, alpha / max(len(others), 1)) if word == "inconclusive" else None
        members.append(_member(g.iloc[c], ci[c]) | {
            "answer": word, "estimate": res["estimate"], "p_equivalent": float(pe),
            "p_different": float(res["p_different"]), "images_to_decide": need, "p_adjusted": float(pe),
            "wins_top": int(res["wins_b"]), "wins_member": int(res["wins_a"]), "samples_to_separate": need,
            "fail_member": res["fail_a"], "fail_top": res["fail_b"], "share_beyond": res["share_beyond"],
            "n_both": res["n_both"], "result": res,
            "decision": decision_text(need, dataset_images) if need is not None else (
                MIXED_DECISION if word == "mixed" else "")})
    # the other members in the order of the ξ every view shows (the top pick stays first)
    members[1:] = sorted(members[1:], key=lambda m: -m["optimality"])
    top_share, top_in_set = _stability(xi_boot, idx, tests, pairs, cands, top, alpha)
    if len(cands) == 1:
        verdict = "only implementation"
    elif len(members) == 1:
        verdict = "clear"
    else:
        verdict = "tied" if all(m["answer"] == "equivalent" for m in members[1:]) else "inconclusive"
    top_row = g.iloc[top]
    xi_top = float(top_row["optimality"])
    if xi_top == 0:
        members[0]["why_zero"] = f"ξ = 0: {what_happened(blocks, top, eps_max)}"
    far = is_weak(xi_top, xi_norm)
    undecided = [m["images_to_decide"] for m in members[1:] if m["answer"] == "inconclusive"]
    # images that would decide whether the excluded were rightly excluded are not asked for
    need = max(undecided) if undecided else float("nan")
    notes = [f"flagged, not considered: {flagged_note}"] if flagged_note else []
    summary = _summary(verdict, members, top_share, top_in_set, len(cands), len(g), best_norm, far)
    for m in members:
        m.pop("why_zero", None)
        m.pop("result", None)
    return base | {"verdict": verdict, "implementation": top_row["implementation"], "library": top_row["library"],
                   "library_version": top_row["library_version"], "optimality": xi_top,
                   "optimality_ci": list(ci[top]), "queries": float(top_row["queries"]),
                   "wall_s": float(top_row["wall_s"]), "trusted": True, "trust_set": members,
                   "top_share": top_share, "top_in_set": top_in_set, "samples_to_separate": need,
                   "images_to_decide": need,
                   "runner_up": g["implementation"].iloc[cands[1]] if len(cands) > 1 else "",
                   "note": "; ".join(notes),
                   "weak": _weak(g, norm_best, {c for c, ex in zip(cands, excluded) if ex}, top),
                   "summary": summary}


def _stability(xi_boot: np.ndarray, idx: np.ndarray | None, tests: dict, pairs: list, cands: list[int], top: int,
               alpha: float) -> tuple[float, float]:
    """(share of image resamples whose own top pick — the same rule — is ``top``, share in which
    ``top`` is not excluded)."""
    if len(cands) == 1:
        return 1.0, 1.0
    if idx is None or not len(xi_boot):
        return float("nan"), float("nan")
    local = [(cands.index(i), cands.index(j)) for i, j in pairs]
    excl = _resampled_exclusions([tests[q][0] for q in pairs], idx, local, len(cands), alpha)
    pick = _pick(xi_boot[:, cands], excl)
    t = cands.index(top)
    return float(np.mean(pick == t)), float(np.mean(~excl[:, t]))


def _weak(g: pd.DataFrame, norm_best: pd.Series, excluded: set[int], top: int | None = None) -> list[str]:
    """Weakness notes, for implementations whose only flags (if any) are ``WEAKNESS_FLAGS``: those
    a sibling is different from and better than (excluded from the set), flagged
    ``optimality_gap``, or far below the best attack of their norm. Weak is not a label bug:
    without label evidence (perm twin, class-conditional failure) nothing says the labels are
    wrong."""
    out = []
    top_row = g.iloc[top] if top is not None else None
    for i, r in g.iterrows():
        if set(r["flags"]) - WEAKNESS_FLAGS or i == top:
            continue
        xi = float(r["optimality"])
        if i in excluded:
            why = (f"different from and worse than another unflagged implementation (ξ {xi:.3f}; the top pick "
                   f"{top_row['implementation']} has {float(top_row['optimality']):.3f})")
        elif OPTIMALITY_GAP in r["flags"]:
            why = f"weaker than the best of its family on some models (ξ {xi:.3f}; see its optimality_gap flags)"
        elif np.isfinite(xi) and is_weak(xi, float(norm_best["best_in_norm"])):
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
