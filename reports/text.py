"""What the run report says (report.md and report.html alike): the column layouts of its tables,
the sentences drawn from a run (what ran, the findings, the trust cell, captions) and the
explanations under each heading. Everything returned here is plain text; each renderer escapes it
for its own format. How a number is written is ``formats.py``; what the release audit's pages say,
``audit_text.py``."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from .audit_text import DIFF_COLS, verdict_line  # noqa: F401  (imported from here by harness/audit and tests)
from .formats import (MARGIN, Col, as_float, f_bool, f_count, f_dist, f_flag_names, f_opt, f_p, f_pct, f_ratio, f_sec,
                      f_signed)
from attackaudit.fidelity.advice import Advice, advice_sentence
from attackaudit.fidelity.flag_kinds import WEAKNESS, WEAKNESS_FLAGS, defect_rows, severity
from .tables import FLAG_MEANINGS, ReportData
from .formats import counted

#: the weakness flags as the explanations name them (fidelity/flag_kinds.py)
_WEAK_NAMES = ", ".join(sorted(WEAKNESS_FLAGS))


# ------------------------------------------------------------------------------------ columns
LEADERBOARD_COLS = [
    Col("#", "rank", f_count, True, "rank within the norm, by global optimality"),
    Col("implementation", "implementation"), Col("library", "library"), Col("version", "library_version"),
    Col("kind", "kind", tip="minimal: finds the smallest perturbation; fixed: ε budget, made minimal by search"),
    Col("global ξ", "optimality", f_opt, True, "mean local optimality over models (1 = the envelope)"),
    Col("worst-model ξ", "optimality_min", f_opt, True, "the lowest local optimality over models"),
    Col("AttackBench ξ", "optimality_attackbench", f_opt, True,
        "AttackBench's published variant, for comparison with the public leaderboard only"),
    Col("ASR @ ref ε", "asr_at_ref", f_pct, True, "fraction of samples broken at the reference ε"),
    Col("median distance", "median_distance", f_dist, True, "over samples that needed an attack; ∞ if at most half broken"),
    Col("forwards", "forwards", f_count, True, "mean forward passes per sample"),
    Col("backwards", "backwards", f_count, True, "mean backward passes per sample"),
    Col("time (s)", "wall_s", f_sec, True, "wall time per job"),
    Col("flags", "flags", f_flag_names, tip="each a defect (never trusted) unless marked (weaker): a weakness"),
]

RECOMMEND_COLS = [
    Col("family", "family"), Col("norm", "norm"),
    Col("trust", "trust", tip="clear: every other unflagged implementation is shown different and worse; tied: "
                              "the listed ones are shown equivalent (use any); inconclusive: this run cannot tell, "
                              "rerun with the images named; only implementation: the sole unflagged one, with how it "
                              "stands against the best attack of its norm; none: every one flagged"),
    Col("global ξ of the top pick", "optimality", f_opt, True),
    Col("95% interval", "ci", tip="bootstrap over images (an image's rows on every model together)"),
    Col("top pick best in", "top_share", f_pct, True, "share of bootstrap resamples in which the top pick has the best ξ"),
    Col("top pick in set", "top_in_set", f_pct, True, "share of resamples whose trust set still contains the top pick"),
    Col("images to decide", "images_to_decide", f_count, True,
        "inconclusive: the number of images at which the real test would decide (rerun with --samples N)"),
    Col("queries / sample", "queries", f_count, True), Col("choice among", "candidates", f_count, True),
    Col("flagged", "flagged", f_count, True), Col("what to do", "summary"), Col("note", "note"),
]

SIDE_COLS = [
    Col("implementation", "implementation"), Col("library", "library"), Col("version", "library_version"),
    Col("global ξ", "optimality", f_opt, True), Col("worst-model ξ", "optimality_min", f_opt, True),
    Col("AttackBench ξ", "optimality_attackbench", f_opt, True), Col("ASR @ ref ε", "asr_at_ref", f_pct, True),
    Col("median distance", "median_distance", f_dist, True), Col("forwards", "forwards", f_count, True),
    Col("backwards", "backwards", f_count, True), Col("time (s)", "wall_s", f_sec, True),
    Col("flags", "flags", f_flag_names),
]

PAIR_COLS = [
    Col("model", "model"), Col("A", "implementation_a"), Col("B", "implementation_b"),
    Col("ξ A", "optimality_a", f_opt, True), Col("ξ B", "optimality_b", f_opt, True),
    Col("images", "n_samples", f_count, True, "images that needed an attack (an image on several models is one)"),
    Col("A smaller", "wins_a", f_count, True, "images where A found the smaller perturbation (shown, never used for "
                                             "direction)"),
    Col("B smaller", "wins_b", f_count, True), Col("ties", "ties", f_count, True),
    Col("A vs B per image", "estimate", f_ratio, True, "Hodges–Lehmann estimate of the per-image ratio of A's distance "
                                                       "to B's: its sign says which one is closer"),
    Col("p (different)", "p_adjusted", f_p, True, "signed-rank test that the per-image difference lies beyond ±5%, "
                                                  "Holm-adjusted over the pairs of this family, norm and model"),
    Col("p (equivalent)", "p_equivalent_adjusted", f_p, True, "two one-sided tests that it lies inside ±5%, Holm-adjusted"),
    Col("answer", "answer", tip="different: significant and beyond ±5% per image; equivalent: shown inside ±5%; "
                                "inconclusive: neither, this run cannot tell"),
    Col("images to decide", "images_to_decide", f_count, True, "inconclusive: images at which the test would decide"),
    Col("effect", "effect_size", f_signed, True, "rank-biserial correlation: +1 A always smaller, −1 B always smaller"),
    Col("median A−B", "median_difference", f_dist, True, "over images both broke"),
    Col("verdict", "verdict", tip="the answer in words: which one is closer when different (the sign of the "
                                  "estimate, the one direction rule of trust sets, flags and audits)"),
]

SEED_COLS = [
    Col("model", "model"), Col("norm", "norm"), Col("implementation", "implementation"),
    Col("version", "library_version"), Col("images", "n", f_count, True),
    Col("images that differ", "n_differ", f_count, True, "success differs, or distances differ by more than 1%"),
    Col("largest relative difference", "largest_relative_difference", f_pct, True),
    Col("vs its own model", "answer", tip="the image-by-image test of the seed twin against its model: never "
                                          "'different' for a sound attack"),
    Col("flags on the seed twin", "flags"),
    Col("moved a random state", "rng_used", f_bool, tip="its call moved a global random state (rng_used), on either seed"),
    Col("declared randomised", "declared", f_bool, tip="its spec declares randomised=True (or a measured built-in); "
                                                       "blank: the run did not record it"),
]
EXPLAIN_SEED = ("The seed twin (MODEL~seed) runs the randomised attacks again with another seed: the attack's own noise. "
                "The perm, shift and split twins are judged against it, so a seed twin must never be flagged or "
                "separated from its model.")

FLAG_COLS = [
    Col("flag", "flag"), Col("severity", "severity", tip="defect: never trusted (flagged); weakness: weaker than a "
                                                         "sibling, still a candidate (fidelity/flag_kinds.py)"),
    Col("implementation", "implementation"), Col("version", "library_version"),
    Col("model", "model"), Col("norm", "norm"), Col("evidence", "evidence"),
]

CRASH_COLS = [
    Col("implementation", "implementation"), Col("version", "library_version"), Col("model", "model"),
    Col("norm", "norm"), Col("status", "status"), Col("samples", "samples", f_count, True),
    Col("of", "of", f_count, True), Col("cause", "cause"),
]

EXACT_COLS = [
    Col("model", "model"), Col("norm", "norm"), Col("implementation", "implementation"),
    Col("version", "library_version"), Col("samples", "samples", f_count, True),
    Col("unsolved", "exact_unsolved", f_count, True, "samples whose exact distance is only a lower bound"),
    Col("true ξ", "true_optimality", f_opt, True, "optimality against the exact robust-accuracy curve"),
    Col("ξ vs envelope", "empirical_optimality", f_opt, True),
]

FLAG_ROW_COLS = [  # no tooltips: the table repeats once per flagged implementation; EXPLAIN_FLAG_ROWS says it
    Col("model", "model"), Col("image", "sample", f_count, True), Col("label", "label", f_count, True),
    Col("status", "status"), Col("distance", "best_distance", f_dist, True), Col("d*", "d_star", f_dist, True),
    Col("returned", "returned_distance", f_dist, True), Col("queries", "queries", f_count, True),
    Col("refused", "refused", f_count, True), Col("stands out", "why"), Col("error", "error"),
]

IMPL_COLS = [
    Col("implementation", "implementation"), Col("library", "library"), Col("version", "library_version"),
    Col("attack", "attack"), Col("family", "family"), Col("norm", "norm"), Col("kind", "kind"),
    Col("params", "params"),
]


def split_pairs(pairs: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(pooled rows, per-model rows) of ``pair_rows``; with one model its rows are the pooled ones."""
    p = pair_rows(pairs)
    pooled = p[p["model"] == "all models"] if len(p) else p
    if pooled.empty:
        return p, p.iloc[0:0]
    return pooled, p[p["model"] != "all models"]


def pair_rows(pairs: pd.DataFrame) -> pd.DataFrame:
    """Pair rows with a ``verdict`` sentence; pooled rows ("*", "all models") first."""
    if pairs.empty:
        return pairs.assign(verdict=[])
    p = pairs.copy()
    p["_pooled"] = p["model"] != "*"
    p = p.sort_values(["_pooled", "implementation_a", "implementation_b", "model"], kind="stable").drop(columns="_pooled")

    p["verdict"] = [pair_verdict(r) for r in p.to_dict(orient="records")]
    p["model"] = p["model"].map(lambda m: "all models" if m == "*" else m)
    return p


def pair_verdict(r: dict) -> str:
    """A pair row's answer in words ("A closer (different beyond ±5%)", "equivalent within ±5%",
    "inconclusive: 40 images would decide")."""
    word = str(r.get("answer") or "")
    if word == "different":
        who = "A" if r.get("better") == r.get("implementation_a") else "B"
        return f"{who} closer (different beyond ±{MARGIN})"
    if word == "equivalent":
        return f"equivalent within ±{MARGIN}"
    need = as_float(r.get("images_to_decide"))
    if word == "inconclusive":
        return "inconclusive" + (f": {need:.0f} images would decide" if need is not None and math.isfinite(need)
                                 else ": more images would not decide it")
    return word


# ------------------------------------------------------------------------------------ sentences
def _impl(name: str, version: str) -> str:
    return f"{name} {version}".strip()


def facts(data: ReportData) -> list[tuple[str, str]]:
    """The "what ran" list of the summary: (label, value) in reading order."""
    s = data.summary
    per_model = s["samples_per_model"]
    counts = sorted(set(per_model.values()))
    samples = (f"{counts[0]} per model" if len(counts) == 1 else
               ", ".join(f"{m}: {n}" for m, n in per_model.items()))
    versions = "; ".join(f"{lib} {', '.join(v for v in vers if v) or '(version unknown)'}"
                         for lib, vers in sorted(s["library_versions"].items()))
    hashes = ", ".join(h[:12] for h in s["subset_hashes"]) or "—"
    out = [
        ("runs", ", ".join(s["run_names"]) or "—"),
        ("models", ", ".join(s["models"]) + (f" (and metamorphic twins: {', '.join(s['twins'])})" if s["twins"] else "")),
        ("dataset and subset", f"{', '.join(s['datasets']) or '—'}; subset hash {hashes}; {samples}"),
        ("norms", ", ".join(s["norms"])),
        ("query budget", ", ".join(f"{b} forwards + backwards per sample" for b in s["budgets"]) or "—"),
        ("seed", ", ".join(str(x) for x in s["seeds"]) or "—"),
        ("attacks", "targeted (each sample has a seeded random target)" if s["targeted"] else "untargeted"),
        ("library versions", versions or "—"),
    ]
    if s["torch_versions"] or s["devices"]:
        out.append(("torch and device", f"{', '.join(map(str, s['torch_versions'])) or '—'} on "
                                         f"{', '.join(map(str, s['devices'])) or '—'}"))
    out += [
        ("implementations", f"{s['n_implementations']} ran, in {s['n_jobs']} jobs (model × implementation × norm)"),
        ("flagged", f"{s['n_flagged']} of {s['n_implementations']} implementations (a defect: never trusted)"
                    + (f"; {s['n_weaker']} more only weaker ({_WEAK_NAMES}: still trusted)" if s.get("n_weaker") else "")
                    + f"; {s['n_findings']} findings"),
        ("failed jobs", f"{s['n_failed_jobs']} crashed, timed out or returned invalid output"),
    ]
    return out


def findings(data: ReportData) -> list[str]:
    """The headline findings, most important first."""
    s, out = data.summary, []
    gap = s.get("largest_gap")
    if gap:
        out.append(f"Largest cross-library gap: {gap['family']} under {gap['norm']} — "
                   f"{_impl(gap['better'], gap['better_version'])} reaches ξ = {gap['optimality_better']:.3f}, "
                   f"{_impl(gap['worse'], gap['worse_version'])} only {gap['optimality_worse']:.3f} "
                   f"(gap {gap['gap']:.3f}; image by image: {gap.get('answer') or 'not compared'}).")
    else:
        out.append("No attack family ran in two or more libraries, so there is no cross-library comparison; "
                   "add libraries to the run (--libraries) to compare implementations across them.")
    var = s.get("largest_variant_gap")
    if var and var["gap"] > 0:
        out.append(f"Largest gap between variants of one library: {var['family']} under {var['norm']} — "
                   f"{_impl(var['better'], var['better_version'])} ξ = {var['optimality_better']:.3f} vs "
                   f"{_impl(var['worse'], var['worse_version'])} {var['optimality_worse']:.3f}.")
    if len(data.flags):
        by = data.flags.groupby("flag")["implementation"].nunique().sort_values(ascending=False)
        out.append("Flags: " + "; ".join(f"{flag} ({severity(flag)}) on {n} implementation{'s' if n != 1 else ''}"
                                        for flag, n in by.items()) + ".")
    else:
        out.append("No implementation was flagged.")
    untrusted = data.recommend[~data.recommend["trusted"].astype(bool)] if len(data.recommend) else data.recommend
    for r in untrusted.itertuples(index=False):
        out.append(f"{r.family} under {r.norm}: {r.note}.")
    for u in data.summary.get("unavailable", []):
        out.append(f"Library {u.get('library', '?')} was not available: {u.get('reason', '')}")
    return out + list(data.notes)



def _best_of_norm(data: ReportData) -> dict[str, tuple[str, float]]:
    """norm -> (implementation, global ξ) of the best attack of that norm in the leaderboard."""
    board = data.leaderboard
    if board.empty:
        return {}
    best = board.assign(_o=board["optimality"].astype(float).fillna(-1.0)) \
        .sort_values(["norm", "_o", "implementation"], ascending=[True, False, True]).drop_duplicates("norm")
    found = defect_rows(data.flags)
    flagged = set(zip(found["implementation"].astype(str), found["norm"].astype(str))) if len(found) else set()
    # a flagged best is still the best measured; the reader is told it is flagged
    return {str(b.norm): (str(b.implementation) + (" (flagged)" if (b.implementation, b.norm) in flagged else ""),
                          float(b.optimality)) for b in best.itertuples(index=False)}


def trust_text(row: dict, best_of_norm: dict[str, tuple[str, float]]) -> str:
    """The trust cell of one ``fidelity.recommend`` row: "clear: A", "tied: A, B", "inconclusive:
    A, B; rerun with --samples N", "only implementation: A (ξ …; best of the norm: B, ξ …)" or
    "none: every one flagged (best: A)"."""
    verdict = str(row.get("verdict") or "")
    names = ", ".join(m["implementation"] for m in row.get("trust_set") or [] if isinstance(m, dict))
    if verdict in ("clear", "tied"):
        return f"{verdict}: {names}"
    if verdict == "inconclusive":
        need = as_float(row.get("images_to_decide"))
        # the deciding member's own words ("cannot be decided on this dataset" where it is too small)
        deciding = [m for m in row.get("trust_set") or [] if isinstance(m, dict) and m.get("decision")
                    and as_float(m.get("images_to_decide")) == need]
        rerun = (deciding[0]["decision"] if deciding else advice_sentence(Advice("samples", round(need)))
                 if need is not None and math.isfinite(need) else "more images would not decide it")
        return f"inconclusive: {names}; {rerun}"
    if verdict == "only implementation":
        xi = as_float(row.get("optimality"))
        best, best_xi = best_of_norm.get(str(row.get("norm")), ("", math.nan))
        if not best or best == row.get("implementation"):
            standing = f"ξ {f_opt(xi)}, the best attack of {row.get('norm')} here"
        else:
            standing = f"ξ {f_opt(xi)}; the best attack of {row.get('norm')} here: {best}, ξ {f_opt(best_xi)}"
        return f"only implementation: {names or row.get('implementation')} ({standing})"
    return f"none: every one flagged (best: {row.get('implementation')})"


def recommendation_rows(data: ReportData) -> pd.DataFrame:
    """``data.recommend`` with the display columns ``trust`` (``trust_text``), ``ci`` (the top
    pick's interval) and ``note`` (flagged ones left out, label notes, weakness notes)."""
    r = data.recommend.copy()
    if r.empty:
        return r
    best = _best_of_norm(data)
    r["trust"] = [trust_text(row, best) for row in r.to_dict(orient="records")]
    r["ci"] = ["—" if not isinstance(ci, (list, tuple)) or not all(np.isfinite(ci)) else f"{ci[0]:.3f}–{ci[1]:.3f}"
               for ci in r["optimality_ci"]]
    # a "none" row's note is its "what to do" (the summary) already
    r["note"] = ["; ".join([x for x in ["" if v == "none" else note] if x] + list(weak))
                 for note, weak, v in zip(r["note"], r["weak"], r["verdict"])]
    # families with a real choice first, then alphabetical
    r["_single"] = r["candidates"] <= 1
    return r.sort_values(["_single", "family", "norm"], kind="stable").drop(columns="_single")


def family_sentence(fam: dict) -> str:
    libs = fam["libraries"]
    n = len(fam["side"])
    head = (f"{n} implementations from {len(libs)} libraries ({', '.join(libs)})" if len(libs) > 1
            else f"{n} variants of one library ({libs[0]}); no other library ran this family")
    best = fam["side"].iloc[0]
    return (f"{head}. Highest global optimality: {_impl(best['implementation'], best['library_version'])} "
            f"(ξ = {f_opt(best['optimality'])}).")


def pair_sentence(pair) -> str:
    a, b = _impl(*pair.a), _impl(*pair.b)
    lead = f"{a} found the smaller perturbation on {pair.wins_a} images and {b} on {pair.wins_b}"
    answer = pair_verdict({"answer": pair.answer, "better": pair.better, "implementation_a": pair.a[0],
                           "images_to_decide": pair.images_to_decide}).replace("A closer", f"{a} closer") \
        .replace("B closer", f"{b} closer")
    per_image = (f"; per image {a} is {f_ratio(pair.estimate)} (Hodges–Lehmann): {answer}" if answer else "")
    return (f"The two implementations that differ most: {a} (x axis, ξ = {pair.optimality_a:.3f}) against {b} "
            f"(y axis, ξ = {pair.optimality_b:.3f}). {lead}{per_image}. One point per (model, image); points above "
            f"the diagonal are images where {a} did better; points on the dotted red lines are failures.")


def curve_caption(curve) -> str:
    n_live = int(np.count_nonzero(curve.d_star > 0))
    broken = int(np.count_nonzero(np.isfinite(curve.d_star) & (curve.d_star > 0)))
    text = (f"Robust accuracy of {curve.model} as the {curve.norm} budget ε grows: lower is a stronger attack. "
            f"The thick black line is the envelope (for each sample, the smallest perturbation any implementation "
            f"found); {broken} of the {n_live} samples that needed an attack were broken by some implementation. "
            f"Each legend entry gives the implementation's local optimality ξ on this model.")
    if curve.exact is not None:
        text += (" The dashed red line is the exact curve from the MILP: no attack can go below it, and an "
                 "envelope far above it means every implementation missed closer adversarials.")
    return text


# ------------------------------------------------------------------------------------ explanations
EXPLAIN_SUMMARY = ("How to read this report: every implementation attacked the same samples of the same models "
                   "through the same query-tracked wrapper, so their results are directly comparable. For each "
                   "sample the smallest perturbation that any implementation found forms the envelope; an "
                   "implementation's optimality ξ measures how close its robust-accuracy curve comes to the "
                   "envelope's (1 = as good as the best of all, 0 = never succeeded).")
EXPLAIN_RECOMMEND = ("For each attack family and norm, the trust set. Candidates are the implementations without a "
                     "defect flag (" + _WEAK_NAMES + ", a weakness, does not remove one). Every two candidates are compared "
                     "image by image (an image's results on all models are one block): a candidate is out when another "
                     "is shown different from it and closer, beyond ±" + MARGIN + " per image (Holm over every pair). "
                     "The top pick is the remaining one with the highest global ξ (within 0.001 the cheaper one). "
                     "\"clear\": every other candidate is different and worse; \"tied\": the others left are shown "
                     "equivalent to the top pick (inside ±" + MARGIN + "): use any; \"inconclusive\": this run can show "
                     "neither, and names the number of images that would decide (rerun with --samples N); \"only "
                     "implementation\": one candidate, with how it stands against the best attack of its norm; "
                     "\"none\": every implementation is flagged. The interval is a bootstrap 95% interval of the top "
                     "pick's ξ over images; the two shares say how often the top pick stays the pick and stays in the "
                     "set when the images are resampled. An implementation of a family AttackBench publishes as strong "
                     "that falls far below it and below the best attack of its norm is flagged "
                     "(below_expected_strength) and never trusted.")
EXPLAIN_LEADERBOARD = ("One row per implementation: global ξ is the mean of the local optimality over the models "
                       "(worst-model ξ the lowest of them); the AttackBench column is the variant published by "
                       "AttackBench, shown only to compare with its public leaderboard (it rewards failures, so "
                       "rank by global ξ). ASR is measured at the reference ε given in the heading; costs are means "
                       "per sample (time per job). Click a column header to sort.")
EXPLAIN_CURVES = ("One plot per model and norm. A curve that stays above the envelope means the implementation "
                  "missed adversarial examples others found at that ε.")
EXPLAIN_ALIGNMENT = ("Families that more than one implementation ran, side by side. The paired test compares two "
                     "implementations image by image (the log ratio of their distances, an image on several models "
                     "averaged into one value; a failure counts beyond every finite ratio) and gives one of three "
                     "answers: different (significant and beyond ±" + MARGIN + " per image), equivalent (shown inside "
                     "±" + MARGIN + "), or inconclusive, with the number of images that would decide. The per-image "
                     "estimate says which one is closer; win counts are shown, never used for direction.")
EXPLAIN_FLAGS = ("Each flag is a finding about one implementation on one model and norm, with the evidence that "
                 "triggered it. Every flag but " + _WEAK_NAMES + " (a weakness: the implementation is weaker, still "
                 "trusted) marks a defect: such an implementation is flagged and never trusted. The rules that are tests bound the error rate "
                 "of each implementation (Benjamini–Hochberg over its own models), not of the report: the more "
                 "implementations a report judges, the likelier a false flag somewhere in it (docs/statistics.md). "
                 "Twin-based flags are judged against the attack's own seed noise.")
EXPLAIN_CRASHES = ("Jobs that crashed, timed out or returned invalid output, with the one-line cause (the full "
                   "traceback is in the run's logs/). What the tracker saw before a crash still counts.")
EXPLAIN_EVIDENCE = ("What each answer above rests on: the trusted implementations' robustness curves against the "
                    "envelope on every model, the per-image comparison that decided the verdict (the top pick against "
                    "the other member of a tied set, or against its closest competitor), and what was flagged, each "
                    "flag linked to the rows it rests on.")
EXPLAIN_FLAG_ROWS = ("Per flagged implementation and norm: its findings, then the per-image results they rest on "
                     "(on the models they name, a metamorphic twin's row beside its model's): the rows that stand "
                     "out most (a failed status, a result that differs on the twin, refused queries, a returned "
                     "point worse than the best, the distance furthest behind the envelope d*, the smallest "
                     "distance any implementation found on that image). distance is the tracker's best "
                     "adversarial, returned the attack's own output, queries forwards + backwards. Every row is "
                     "in the run's jobs/*.parquet.")
EXPLAIN_EXACT = ("Exact minimal distances (MILP) give the true robust-accuracy curve; true ξ measures each "
                 "implementation against it instead of against the envelope.")


def flag_meaning(flag: str) -> str:
    return FLAG_MEANINGS.get(flag, "")


def flag_line(flag: str, n: int) -> str:
    """One flag of the report's list: its name, its findings, its severity and what it means."""
    word = "a weakness: weaker, still trusted" if severity(flag) == WEAKNESS else "a defect: flagged, never trusted"
    return f"{flag} ({n}; {word}): {flag_meaning(flag)}"


def ran_line(data: ReportData) -> str:
    """What ran, in one line: runs, implementations, models, images, norms, budget, mode, failures."""
    s = data.summary
    counts = sorted(set(s["samples_per_model"].values()))
    images = counted(counts[0], "image") if len(counts) == 1 else f"{counts[0]}–{counts[-1]} images"
    twins = f" (+{len(s['twins'])} twins)" if s["twins"] else ""
    budget = "/".join(str(b) for b in s["budgets"]) or "?"
    return (f"{', '.join(s['run_names']) or 'results'}: {counted(s['n_implementations'], 'implementation')} × "
            f"{counted(len(s['models']), 'model')}{twins} ({', '.join(s['models'])}) × {', '.join(s['norms'])}, "
            f"{images} per model, budget {budget} queries per image, {'targeted' if s['targeted'] else 'untargeted'}; "
            f"{counted(s['n_jobs'], 'job')}, {s['n_failed_jobs']} failed; "
            f"{counted(s['n_flagged'], 'implementation')} flagged.")


def flag_rows(flags: pd.DataFrame) -> pd.DataFrame:
    """Findings grouped by implementation (then flag severity, model, norm) for reading."""
    if flags.empty:
        return flags
    from attackaudit.fidelity import FLAGS

    order = {f: i for i, f in enumerate(FLAGS)}
    flags = flags.assign(model=flags["model"].map(lambda m: "all models" if m == "*" else m))
    return (flags.assign(_o=flags["flag"].map(order).fillna(len(order)))
            .sort_values(["implementation", "library_version", "_o", "model", "norm"], kind="stable")
            .drop(columns="_o"))
