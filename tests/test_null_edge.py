"""Null shares that hold at every n (issue 48, item 6; fidelity/README.md, "Null rates that hold at
every n").

Every rule whose statistic is a share of images against a fixed null share is checked against the
shares sound built-ins really showed at 256 and 512 digits (``benchmarks/null_edge.py``, stored in
``benchmarks/noise/null_edge.csv``): the null sits at least ``null_rates.NULL_MARGIN`` above the
upper confidence bound of the largest sound share, and the rule itself, run on a sound
implementation at its measured 512-image share, at 512 images and at ten times as many, flags
nothing. Before this, the L∞ FGMs of foolbox, ART, torchattacks and cleverhans (99 of 500 images
differ on ``digits-cnn~shift``) were flagged ``shift_sensitivity`` at 512 images (p 0.002).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from attackaudit.fidelity import defects, null_rates, strength, twins
from attackaudit.fidelity._table import prepare
from attackaudit.fidelity.flags import LAST_NOT_BEST_NULL_RATE, flags
from attackaudit.fidelity.synthetic import job_rows, table

STORED = Path(__file__).resolve().parents[1] / "benchmarks" / "noise" / "null_edge.csv"
MEASURED = pd.read_csv(STORED)
SOUND = MEASURED[~MEASURED["known"].astype(bool)]
#: a share measured on fewer informative images bounds little but its own sample size (0 of 35
#: images: upper bound 0.082); the null is set from the jobs with at least this many
MIN_N = 100
#: the null share each measured rule tests against (the table's ``rule`` column)
NULLS = {
    "label_bug (perm)": twins.NULL_RATE["perm"],
    "shift_sensitivity (shift)": twins.NULL_RATE["shift"],
    "batch_dependence (split)": twins.NULL_RATE["split"],
    "batch_dependence (batch)": twins.NULL_RATE["batch"],
    "last_not_best (minimal)": LAST_NOT_BEST_NULL_RATE["minimal"],
    "last_not_best (fixed)": LAST_NOT_BEST_NULL_RATE["fixed"],
    "label_bug (target kept, minimal)": defects.TARGET_KEPT_NULL_RATE["minimal"],
    "label_bug (target kept, fixed)": defects.TARGET_KEPT_NULL_RATE["fixed"],
    "below_expected_strength (failure)": strength.MINIMAL_FAILURE_NULL,
}
TWIN_KIND = {"label_bug (perm)": "perm", "shift_sensitivity (shift)": "shift", "batch_dependence (split)": "split",
             "batch_dependence (batch)": "batch"}


def test_the_table_measures_every_rule_at_256_and_512_images():
    assert set(MEASURED["rule"]) <= set(NULLS)
    for rule in ("label_bug (perm)", "shift_sensitivity (shift)", "batch_dependence (split)",
                 "batch_dependence (batch)", "last_not_best (minimal)", "last_not_best (fixed)",
                 "below_expected_strength (failure)"):
        assert set(SOUND.loc[SOUND["rule"] == rule, "images"]) == {256, 512}, rule
    # the issue's case: the four libraries' L∞ FGMs on the CNN's shift twin
    fgm = SOUND[(SOUND["rule"] == "shift_sensitivity (shift)") & (SOUND["model"] == "digits-cnn")
                & (SOUND["norm"] == "linf") & (SOUND["images"] == 512)]
    assert len(fgm) >= 4 and (fgm["share"] > 0.15).all()


#: the split twin's count is not its guard: a sound long search differs one image per call on 30–39%
#: of the images (adv_lib ALMA L1) with no side; the rule also asks the differences to lean one way
#: (``twins.one_way_p``), which ``test_the_split_twin_s_worst_sound_case_has_no_lean`` checks
COUNT_NOT_GUARDED = {"batch_dependence (split)"}


@pytest.mark.parametrize("rule", sorted(set(NULLS) - COUNT_NOT_GUARDED))
def test_every_null_sits_a_margin_above_the_largest_sound_share(rule):
    """At 512 images: the upper bound of each sound job's share plus the margin
    (``null_rates.required_null``); at 256 (the 512's first images, a check that the share does not
    move with n): its share plus the margin."""
    rows = SOUND[(SOUND["rule"] == rule) & (SOUND["n"] >= MIN_N)]
    if rows.empty:
        pytest.skip(f"{rule}: not measured")
    at512, at256 = rows[rows["images"] == 512], rows[rows["images"] == 256]
    need = max([null_rates.required_null(int(k), int(n)) for k, n in zip(at512["k"], at512["n"])]
               + [k / n + null_rates.NULL_MARGIN for k, n in zip(at256["k"], at256["n"])])
    assert NULLS[rule] >= need, (f"{rule}: null {NULLS[rule]} below the largest sound share's upper bound "
                                 f"plus the margin, {need:.3f}")


def _twin_table(kind: str, n: int, k: int, farther: int) -> pd.DataFrame:
    """A deterministic attack whose twin differs on ``k`` of ``n`` images (30% apart), worse on
    ``farther`` of them."""
    base = np.linspace(0.2, 0.8, n)
    twin = base.copy()
    twin[:farther] *= 1.3
    twin[farther:k] /= 1.3
    return table(job_rows("m", "lib/a", "l2", base, family="a"), job_rows(f"m~{kind}", "lib/a", "l2", twin, family="a"))


def _flagged(rule: str, n: int, k: int, farther: int) -> bool:
    """Whether ``rule`` flags a sound implementation showing ``k`` of ``n`` (through the rule's own code)."""
    if rule in TWIN_KIND:
        kind = TWIN_KIND[rule]
        return bool(twins.judge(prepare(_twin_table(kind, n, k, farther)), (kind,))["flagged"].any())
    best = np.linspace(0.2, 0.8, n)
    if rule.startswith("last_not_best"):
        kind = rule.split("(")[1].rstrip(")")
        ret = best.copy()
        ret[:k] *= 1.5
        t = table(job_rows("m", "lib/a", "l2", best, family="a", kind=kind, returned=ret))
        return "last_not_best" in set(flags(t)["flag"])
    if rule.startswith("below_expected_strength"):
        best[:k] = np.inf
        return bool(strength.minimal_failure_findings(prepare(table(job_rows("m", "lib/fmn", "l1", best, family="fmn")))))
    kind = rule.split(", ")[1].rstrip(")")
    t = table(job_rows("m", "lib/a", "l2", best, family="a", kind=kind, targeted=True))
    t["target"] = (t["label"] + 1) % 10
    t["returned_class"] = np.where(np.arange(n) < k, t["label"], t["target"])
    t["returned_fallback"] = ""
    return bool(defects.success_ignores_target(prepare(t)))


@pytest.mark.parametrize("scale", [1, pytest.param(10, marks=pytest.mark.slow)])
def test_a_sound_implementation_at_its_measured_512_image_share_is_not_flagged(scale):
    rows = SOUND[(SOUND["images"] == 512) & (SOUND["k"] > 0)]
    assert len(rows)
    for r in rows.itertuples(index=False):
        farther = int(r.farther) if pd.notna(r.farther) else 0
        assert not _flagged(r.rule, int(r.n) * scale, int(r.k) * scale, farther * scale), (
            f"{r.rule}: {r.implementation} {r.norm} on {r.model}, {r.k} of {r.n} (x{scale})")


def test_the_rules_still_flag_beyond_the_margin():
    """The test above is not vacuous: each rule's code flags the share a margin above its null."""
    for rule, null in NULLS.items():
        n = 512
        k = int(np.ceil(min(1.0, null + 0.1) * n))
        assert _flagged(rule, n, k, k), rule


def test_the_split_twin_s_worst_sound_case_has_no_lean():
    """The split rule's guard: the differing images of the worst sound case lean neither way at
    256 or 512 images (sign p > 0.5), so ``one_way_p``'s ½ is the sound lean, not below it."""
    rows = SOUND[SOUND["rule"] == "batch_dependence (split)"]
    big = rows[rows["k"] >= 50]
    assert len(big) >= 4
    for r in big.itertuples(index=False):
        assert twins.one_way_p(int(r.farther), int(r.k)) > 0.5, r
        assert abs(r.farther / r.k - 0.5) < 0.04, r
