"""What the release audit's pages say (``attackaudit compare``, ``attackaudit audit``: compare.md /
compare.html, audit.md / audit.html): the columns of a diff (``fidelity.diff``), how to read it,
and one line per implementation. Plain text; each renderer escapes it for its own format."""
from __future__ import annotations

import pandas as pd

from .formats import MARGIN, Col, f_bool, f_count, f_flag_names, f_opt, f_p, f_pct, f_ratio, f_signed

#: the order a diff's rows are listed in: what needs a look first
VERDICT_ORDER = {"regressed": 0, "improved": 1, "new": 2, "removed": 3, "unchanged": 4}

DIFF_COLS = [
    Col("implementation", "implementation"), Col("norm", "norm"), Col("model", "model"),
    Col("version A", "version_a"), Col("version B", "version_b"),
    Col("ξ A", "optimality_a", f_opt, True), Col("ξ B", "optimality_b", f_opt, True),
    Col("Δξ", "delta_optimality", f_signed, True), Col("ASR A", "asr_a", f_pct, True), Col("ASR B", "asr_b", f_pct, True),
    Col("identical", "identical", f_bool, tip="the same result and status on every image of every shared model: "
                                              "unchanged, whatever else moved"),
    Col("B better", "n_better", f_count, True, "images where run B found the smaller perturbation"),
    Col("B worse", "n_worse", f_count, True),
    Col("B vs A per image", "estimate", f_ratio, True, "Hodges–Lehmann estimate of the per-image ratio new/old on "
                                                       "the images that ran in both"),
    Col("answer", "answer", tip="different: beyond ±" + MARGIN + " per image; equivalent: shown inside it; "
                                "inconclusive: neither; identical: the rows did not change"),
    Col("p (different)", "p_adjusted", f_p, True, "Holm-adjusted over the implementations whose rows changed"),
    Col("images to decide", "images_to_decide", f_count, True),
    Col("score", "score", f_count, True, "+ improved, − regressed (fidelity/README.md, Diff)"),
    Col("flags appeared", "flags_appeared", f_flag_names, tip="each a defect unless marked (weaker): a weakness"),
    Col("flags gone", "flags_disappeared", f_flag_names),
    Col("verdict", "verdict"), Col("reason", "reason"),
]

EXPLAIN_DIFF = ("The same grid run twice (two library releases, or two configs). Each implementation's verdict "
                "rests on its own per-image results in the two runs: identical rows are unchanged whatever its "
                "siblings or the envelope did; otherwise the per-image ratio new/old on the images that ran in both "
                "is different (beyond ±" + MARGIN + ", Holm over the implementations whose rows changed), equivalent "
                "or inconclusive. A difference counts 2 (3 when ξ moved by 0.1 or more), each own-result flag that "
                "disappeared or appeared counts by severity (3: wrong or missing results, 2: a suspect objective, "
                "step rule or batch dependence, 1: inefficiency); positive is improved, negative regressed, material "
                "evidence both ways is mixed. ξ and ASR are shown against one joint envelope.")


DIFF_EVIDENCE_COLS = [c for c in DIFF_COLS if c.key not in ("implementation", "norm", "verdict", "reason")]
EXPLAIN_DIFF_EVIDENCE = ("Each regressed, improved or could-not-run implementation: the numbers its verdict weighs "
                         "and, where both runs' results are at hand, every image's distance in run A against run B.")


def verdict_line(r: pd.Series | dict) -> str:
    """One line per implementation and norm for ``attackaudit compare`` (``r``: one row of a diff)."""
    va, vb = str(r["version_a"] or "—"), str(r["version_b"] or "—")
    model = "" if r["model"] in ("*", "") else f" on {r['model']}"
    return f"{r['implementation']} [{r['norm']}{model}] {va} -> {vb}: {r['verdict']}: {r['reason']}"


def ordered(diff: pd.DataFrame) -> pd.DataFrame:
    """``diff``'s rows in ``VERDICT_ORDER``, then by implementation and norm."""
    if not len(diff):
        return diff
    return diff.assign(_o=diff["verdict"].map(VERDICT_ORDER).fillna(9)).sort_values(["_o", "implementation", "norm"])
