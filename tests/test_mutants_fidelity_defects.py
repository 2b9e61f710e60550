"""Exact behaviour of the defect rules (fidelity/defects.py), the known-defect lookup
(fidelity/known_defects.py), the planned sizes of an inconclusive comparison
(fidelity/sample_size.py) and the cross-library pair table (fidelity/alignment.py), on small
hand-built per-image tables whose answers are worked out in the test: which implementation a rule
names, the evidence text a user reads, the counts in it, each threshold at its edge, and the
planned number of images against an independent normal-approximation calculation.

Written to kill one-line mutants of those modules (issue 40): every table here is small, so the
whole file runs in seconds."""
import json
import math
from statistics import NormalDist

import numpy as np
import pandas as pd
import pytest

from attackaudit.fidelity import alignment, defects, known_defects, sample_size
from attackaudit.fidelity._table import prepare
from attackaudit.fidelity.synthetic import job_rows, table

INF = np.inf
Z = NormalDist()


def _keys(findings):
    return [(f["model"], f["norm"], f["implementation"], f["library_version"], f["flag"]) for f in findings]


# ================================================================ out_of_ball
def _ball_job(impl, n, *, calls, out, ratio=1.0, eps=0.03, kind="fixed", model="m", version="1.0"):
    rows = job_rows(model, impl, "linf", np.linspace(0.1, 0.2, n), kind=kind, family="pgd",
                    library_version=version)
    return rows.assign(ball_calls=calls, ball_out=out, ball_worst_ratio=ratio, ball_worst_eps=eps)


def test_out_of_ball_counts_rows_images_and_names_the_worst_row_exactly():
    out = np.array([0, 1, 3, 0, np.nan, 2, 0, 0], dtype=float)     # 6 rows out, on 3 images; a NaN counts 0
    ratio = np.array([1.0, 1.2, 1.5, 1.0, 1.0, 2.5, 1.0, 1.0])
    eps = np.array([0.03, 0.03, 0.03, 0.03, 0.03, 0.06, 0.03, 0.03])
    calls = np.array([5, 5, 5, 5, 5, 5, 5, 1])                     # 36 calls; one image called once
    job = _ball_job("lib/b", 8, calls=calls, out=out, ratio=ratio, eps=eps)
    (f,) = defects.out_of_ball(prepare(job))
    assert f == {"model": "m", "norm": "linf", "implementation": "lib/b", "library_version": "1.0",
                 "flag": "out_of_ball", "evidence": (
                     "returned rows outside the ε-ball it was called with on 6 of 36 calls (image × ε) on 3 of 8 "
                     "images; worst distance/ε = 2.5: image 5 called at ε = 0.06 got a row at distance 0.15")}


def test_out_of_ball_judges_only_fixed_rows_with_calls():
    calls = np.array([4, 4, 0, np.nan, 4, "n/a"], dtype=object)
    out = np.array([0, 0, 9, 9, 2, 9])   # the rows without a recorded call carry no evidence
    (f,) = defects.out_of_ball(prepare(_ball_job("lib/a", 6, calls=calls, out=out, ratio=[1, 1, 9, 9, 3, 9])))
    assert f["evidence"].startswith("returned rows outside the ε-ball it was called with on 2 of 12 calls (image × ε) "
                                    "on 1 of 3 images; worst distance/ε = 3: image 4 ")
    # a minimal attack's calls are not judged, however many rows it returned outside
    assert defects.out_of_ball(prepare(_ball_job("lib/a", 5, calls=4, out=9, kind="minimal"))) == []
    # a table without calls recorded at all (or without the columns) is not judged
    assert defects.out_of_ball(prepare(_ball_job("lib/a", 5, calls=np.nan, out=9))) == []
    for col in ("ball_calls", "ball_out", "ball_worst_ratio"):
        assert defects.out_of_ball(prepare(_ball_job("lib/a", 5, calls=4, out=3).drop(columns=[col]))) == []
        assert defects.out_of_ball(prepare(_ball_job("lib/a", 5, calls=4, out=3).assign(**{col: np.nan}))) == []


def test_out_of_ball_threshold_edges_of_rows_and_share():
    def judged(out_rows, calls_total):
        n = 4
        calls = np.full(n, calls_total // n)
        calls[0] += calls_total - calls.sum()
        out = np.zeros(n)
        out[1] = out_rows
        return defects.out_of_ball(prepare(_ball_job("lib/a", n, calls=calls, out=out)))
    assert len(judged(2, 40)) == 1          # 2 rows, exactly 5% of 40: both gates met at their edge
    assert judged(2, 41) == []              # 2 rows, under 5% of 41
    assert judged(1, 4) == []               # 25% of the calls but a single row
    assert len(judged(3, 60)) == 1 and judged(3, 61) == []


def test_out_of_ball_reports_each_job_in_key_order_past_an_unjudged_one():
    quiet = _ball_job("lib/a", 4, calls=5, out=0)
    loud_old = _ball_job("lib/c", 4, calls=5, out=[0, 4, 0, 0], ratio=[1, 2, 1, 1], version="1.0")
    loud_new = _ball_job("lib/c", 4, calls=5, out=[0, 0, 4, 0], ratio=[1, 1, 2, 1], version="2.0")
    other = _ball_job("lib/b", 4, calls=5, out=[3, 0, 0, 0], ratio=[2, 1, 1, 1], model="k")
    found = defects.out_of_ball(prepare(table(loud_new, loud_old, quiet, other)))
    assert _keys(found) == [("k", "linf", "lib/b", "1.0", "out_of_ball"), ("m", "linf", "lib/c", "1.0", "out_of_ball"),
                            ("m", "linf", "lib/c", "2.0", "out_of_ball")]
    assert [f["evidence"].split(": image ")[1][:1] for f in found] == ["0", "1", "2"]


# ================================================================ eps_unused
def _unused_table(failing, ratio, eps, *, d_sibling=None, status="ok", returned_adv=False, kind="fixed"):
    """A fixed-ε job ``lib/f`` failing on the images ``failing`` (eps_fail_max ``eps``, ratio
    ``ratio`` there) next to a minimal sibling ``lib/s`` that broke every image at ``d_sibling``."""
    n = 8
    d = np.full(n, 0.5) if d_sibling is None else np.asarray(d_sibling, float)
    fail = np.isin(np.arange(n), failing)
    best = np.where(fail, INF, 0.6)
    f = job_rows("m", "lib/f", "linf", best, kind=kind, family="pgd", status=status).assign(
        eps_fail_max=np.where(fail, eps, np.nan), eps_fail_ratio=np.where(fail, ratio, np.nan))
    f["returned_adversarial"] = np.where(fail, returned_adv, True)
    s = job_rows("m", "lib/s", "linf", d, family="ddn")
    return prepare(table(f, s))


def test_eps_unused_evidence_reports_counts_and_extremes_exactly():
    ratio = np.array([0.05, 0.2, 0.9, 0.6, 0, 0, 0, 0])
    eps = np.array([1.0, 0.5, 1.0, 1.0, 0, 0, 0, 0])
    t = _unused_table([0, 1, 2, 3], ratio, eps)
    (f,) = defects.eps_unused(t)
    assert f == {"model": "m", "norm": "linf", "implementation": "lib/f", "library_version": "1.0",
                 "flag": "eps_unused", "evidence": (
                     "on 2 of the 4 images it failed on at an ε within which another implementation found an "
                     "adversarial, its returned row moved at most 0.2 of ε (ε tried up to 1, largest distance "
                     "reached 0.1) and no larger ε made it succeed: images 0, 1")}


def test_eps_unused_edges_of_ratio_envelope_and_share():
    eps = np.full(8, 0.5)
    # a ratio of exactly EPS_UNUSED_RATIO uses the ball
    assert defects.eps_unused(_unused_table([0, 1], [0.25, 0.1] + [0] * 6, eps)) == []
    assert len(defects.eps_unused(_unused_table([0, 1], [0.2499, 0.1] + [0] * 6, eps))) == 1
    # an adversarial found at exactly ε counts as "within ε"; just beyond it does not
    assert len(defects.eps_unused(_unused_table([0, 1], [0.1] * 8, eps, d_sibling=np.full(8, 0.5)))) == 1
    assert defects.eps_unused(_unused_table([0, 1], [0.1] * 8, eps, d_sibling=np.full(8, 0.5000001))) == []
    # 2 unused of 5 failures is under half; 3 of 5 and 2 of 4 are not
    assert defects.eps_unused(_unused_table([0, 1, 2, 3, 4], [0.1, 0.1, 0.9, 0.9, 0.9, 0, 0, 0], eps)) == []
    assert len(defects.eps_unused(_unused_table([0, 1, 2, 3, 4], [0.1, 0.1, 0.1, 0.9, 0.9, 0, 0, 0], eps))) == 1
    assert len(defects.eps_unused(_unused_table([0, 1, 2, 3], [0.1, 0.1, 0.9, 0.9, 0, 0, 0, 0], eps))) == 1
    # a single image is never enough, whatever its share
    assert defects.eps_unused(_unused_table([0], [0.1] + [0] * 7, eps)) == []


def test_eps_unused_leaves_out_images_nobody_had_to_attack_crashes_and_returned_adversarials():
    eps = np.full(8, 0.5)
    ratio = [0.1] * 8
    d0 = np.array([0.0, 0.0, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5])     # images 0, 1 misclassified clean
    assert defects.eps_unused(_unused_table([0, 1], ratio, eps, d_sibling=d0)) == []
    (f,) = defects.eps_unused(_unused_table([0, 1, 2, 3], ratio, eps, d_sibling=d0))
    assert "on 2 of the 2 images" in f["evidence"] and f["evidence"].endswith("images 2, 3")
    assert defects.eps_unused(_unused_table([0, 1], ratio, eps, status="error")) == []
    assert defects.eps_unused(_unused_table([0, 1], ratio, eps, returned_adv=True)) == []
    assert defects.eps_unused(_unused_table([0, 1], ratio, eps, kind="minimal")) == []
    t = _unused_table([0, 1], ratio, eps)
    assert defects.eps_unused(t.drop(columns=["eps_fail_ratio"])) == []
    assert defects.eps_unused(t.drop(columns=["eps_fail_max"])) == []
    assert defects.eps_unused(t.assign(eps_fail_ratio=np.nan)) == []


def test_eps_unused_reports_each_job_in_key_order_past_an_unjudged_one():
    n = 6
    fail = np.array([True, True, False, False, False, False])
    sibling = job_rows("m", "lib/s", "linf", np.full(n, 0.3), family="ddn")

    def fixed(impl, ratio):
        return job_rows("m", impl, "linf", np.where(fail, INF, 0.4), kind="fixed").assign(
            eps_fail_max=np.where(fail, 0.5, np.nan), eps_fail_ratio=np.where(fail, ratio, np.nan),
            returned_adversarial=~fail)
    t = prepare(table(fixed("lib/z", 0.1), fixed("lib/c", 0.1), fixed("lib/b", 0.9), sibling))
    assert [f["implementation"] for f in defects.eps_unused(t)] == ["lib/c", "lib/z"]


# ================================================================ targets_ignored
def _targeted_job(impl, best, cls, *, target=7, labels=None, fallback=None, status="ok", kind="minimal"):
    n = len(best)
    rows = job_rows("m", impl, "l2", np.asarray(best, float), targeted=True, kind=kind, status=status,
                    labels=labels if labels is not None else np.full(n, 1))
    rows = rows.assign(target=target, returned_class=np.asarray(cls, float))
    if fallback is not None:
        rows["returned_fallback"] = fallback
    return rows


def test_targets_ignored_counts_third_classes_on_images_another_brought_to_the_target():
    # lib/good brought images 0-9 to the target 7 (label 1; image 8's label is 2), not image 10
    # (nobody did) nor 11 (only lib/bug did)
    labels = [1] * 8 + [2] + [1] * 3
    good = _targeted_job("lib/good", [0.3] * 10 + [INF, INF], [7] * 10 + [3, 3], labels=labels)
    # lib/bug reached images 0, 1 and 11; on 2-5 and 9 it returned a third class (class 0 counts),
    # on 6 the label, on 7 the target's class without reaching it, on 8 no class (unreadable)
    cls = np.array([7, 7, 0, 2, 3, 4, 1, 7, "unknown", 6, 5, 7], dtype=object)
    bug = _targeted_job("lib/bug", [0.4, 0.4] + [INF] * 9 + [0.4], [0] * 12, labels=labels).assign(returned_class=cls)
    t = prepare(table(good, bug))
    (f,) = defects.targets_ignored(t)
    assert defects.targets_ignored(t.set_axis(t.index + 100)) == [f]   # whatever the table's index
    assert f == {"model": "m", "norm": "l2", "implementation": "lib/bug", "library_version": "1.0",
                 "flag": "label_bug", "evidence": (
                     "targets ignored: misclassified as another class, not the target, on 5 of 10 images that another "
                     "implementation brought to the target (2 reached it here): image 2: class 0, target 7; "
                     "image 3: class 2, target 7; image 4: class 3, target 7")}


def test_targets_ignored_edges_of_count_and_share():
    def bug(third):  # of 8 images lib/good reached, lib/bug returned a third class on ``third`` of them
        good = _targeted_job("lib/good", [0.3] * 8, [7] * 8)
        cls = [3] * third + [1] * (8 - third)
        return defects.targets_ignored(prepare(table(good, _targeted_job("lib/bug", [INF] * 8, cls))))
    assert len(bug(4)) == 1 and bug(3) == []          # half of 8 is needed
    small = [_targeted_job("lib/good", [0.3] * 6, [7] * 6), _targeted_job("lib/bug", [INF] * 6, [3, 3, 3, 1, 1, 1])]
    assert len(defects.targets_ignored(prepare(table(*small)))) == 1   # 3 of 6: both edges met
    tiny = [_targeted_job("lib/good", [0.3] * 2, [7] * 2), _targeted_job("lib/bug", [INF] * 2, [3, 3])]
    assert defects.targets_ignored(prepare(table(*tiny))) == []        # 2 of 2: under 3 images


def test_targets_ignored_leaves_out_defaults_crashes_clean_errors_and_untargeted_runs():
    good = _targeted_job("lib/good", [0.0, 0.3, 0.3, 0.3, 0.3], [7] * 5)
    bug = _targeted_job("lib/bug", [INF] * 5, [3] * 5)
    # image 0 was at the target already (d* = 0): nothing to judge there, 4 of 4 remain
    (f,) = defects.targets_ignored(prepare(table(good, bug)))
    assert "on 4 of 4 images" in f["evidence"] and "(0 reached it here)" in f["evidence"]
    # two images returned a default output: fallback_output's, not a target ignored (2 of 2 left)
    fb = bug.assign(returned_fallback=["", "", "", "constant 0.5 image", "constant 0.5 image"])
    assert defects.targets_ignored(prepare(table(good, fb))) == []
    assert len(defects.targets_ignored(prepare(table(good, bug.assign(returned_fallback=""))))) == 1
    # an older run without the column: no default outputs recorded, every image judged
    assert len(defects.targets_ignored(prepare(table(good, bug).drop(columns=["returned_fallback"])))) == 1
    assert defects.targets_ignored(prepare(table(good, bug.assign(status=["ok", "ok", "error", "error", "ok"])))) == []
    untargeted = table(good, bug).assign(targeted=False)
    assert defects.targets_ignored(prepare(untargeted)) == []
    assert defects.targets_ignored(prepare(table(good, bug).drop(columns=["returned_class"]))) == []
    assert defects.targets_ignored(prepare(table(good, bug).assign(returned_class=np.nan))) == []
    assert defects.targets_ignored(prepare(table(good, bug).drop(columns=["label"]))) == []
    assert defects.targets_ignored(prepare(table(good, bug)).iloc[:0]) == []


def test_targets_ignored_reports_each_job_in_key_order_past_an_unjudged_one():
    good = _targeted_job("lib/good", [0.3] * 4, [7] * 4)
    jobs = [_targeted_job("lib/z", [INF] * 4, [3] * 4), _targeted_job("lib/c", [INF] * 4, [3] * 4),
            _targeted_job("lib/b", [INF] * 4, [1] * 4)]
    found = defects.targets_ignored(prepare(table(*jobs, good)))
    assert [f["implementation"] for f in found] == ["lib/c", "lib/z"]


# ================================================================ fallback_output
def test_fallback_output_names_kinds_counts_and_images_exactly():
    kinds = (["constant 0.5 image"] * 4 + ["all-zero image shared by 3 images"] * 3 + ["constant 0 image"] * 2
             + ["constant 1 image"] + [""] * 2)
    job = job_rows("m", "lib/f", "l2", np.full(12, INF), returned=INF).assign(returned_fallback=kinds)
    other_version = job_rows("m", "lib/f", "l2", np.full(3, 0.2), library_version="2.0").assign(returned_fallback="")
    other_model = job_rows("k", "lib/f", "l2", np.full(5, 0.2)).assign(returned_fallback="")
    other_norm = job_rows("m", "lib/f", "linf", np.full(7, 0.2)).assign(returned_fallback="")
    (f,) = defects.fallback_output(prepare(table(job, other_version, other_model, other_norm)))
    assert f == {"model": "m", "norm": "l2", "implementation": "lib/f", "library_version": "1.0",
                 "flag": "fallback_output", "evidence": (
                     "returned a default output instead of a search result on 10 of 12 images, one the model "
                     "misclassifies: constant 0.5 image (counted on none of its 4 images here); all-zero image "
                     "shared by 3 images (counted on none of its 3 images here); constant 0 image (counted on none "
                     "of its 2 images here); the best of its own queries stands: images 0, 1, 2, 3, 4, 5, … (+4)")}


def test_fallback_output_single_image_targeted_wording_and_job_order():
    one = job_rows("m", "lib/z", "l2", np.full(3, 0.2), targeted=True).assign(
        returned_fallback=["", "constant 0 image", np.nan])
    two = job_rows("m", "lib/c", "l2", np.full(2, 0.2), targeted=True).assign(returned_fallback="constant 0 image")
    none = job_rows("m", "lib/b", "l2", np.full(2, 0.2), targeted=True).assign(returned_fallback="")
    found = defects.fallback_output(prepare(table(one, two, none)))
    assert [f["implementation"] for f in found] == ["lib/c", "lib/z"]
    assert found[1]["evidence"] == (
        "returned a default output instead of a search result on 1 of 3 images, one the model misclassifies (a "
        "targeted run: not a target it ignored, a default it returned): constant 0 image (counted on none of its 1 "
        "images here); the best of its own queries stands: images 1")
    assert defects.fallback_output(prepare(table(none))) == []
    assert defects.fallback_output(prepare(job_rows("m", "lib/b", "l2", [0.2]))) == []   # not recorded: NaN


# ================================================================ success_ignores_target
def _p_at_least(k, n, rate):
    return sum(math.comb(n, i) * rate ** i * (1 - rate) ** (n - i) for i in range(k, n + 1))


def _kept_job(impl, n, kept, *, model="m", kind="minimal", at_label=0, version="1.0"):
    """A targeted job whose queries reached the target (7) on all ``n`` images; it returned a
    non-target class on the first ``kept`` (the label 1 on the first ``at_label`` of them, class 4
    on the others)."""
    cls = np.full(n, 7.0)
    cls[:kept] = 4
    cls[:at_label] = 1
    return job_rows(model, impl, "l2", np.full(n, 0.3), targeted=True, kind=kind, labels=np.full(n, 1),
                    library_version=version).assign(target=7, returned_class=cls)


def test_success_ignores_target_evidence_with_binomial_p_exactly():
    t = prepare(_kept_job("lib/k", 10, 4, at_label=2))
    (f,) = defects.success_ignores_target(t)
    p = _p_at_least(4, 10, 0.03)
    assert f == {"model": "m", "norm": "l2", "implementation": "lib/k", "library_version": "1.0",
                 "flag": "label_bug", "evidence": (
                     f"success test ignores the target: its queries reached the target on 10 images, but it returned "
                     f"an output outside the target on 4 of them (2 still at the label); a sound minimal attack does "
                     f"on 3%, p = {p:.2g}, BH q = {p:.2g} over its own models: image 0: returned class 1, target 7; "
                     f"image 1: returned class 1, target 7; image 2: returned class 4, target 7")}
    assert f"p = {p:.2g}" == "p = 0.00015"


def test_success_ignores_target_rate_depends_on_the_attack_kind():
    # 3 of 16 kept: p 0.011 at the minimal rate 3%, 0.43 at the fixed rate 15%
    assert len(defects.success_ignores_target(prepare(_kept_job("lib/k", 16, 3)))) == 1
    assert defects.success_ignores_target(prepare(_kept_job("lib/k", 16, 3, kind="fixed"))) == []
    # an unknown kind is judged at the minimal rate
    assert "a sound  attack does on 3%" in defects.success_ignores_target(prepare(_kept_job("lib/k", 16, 3, kind="")))[0]["evidence"]
    # 8 of 16 at 15%: p well under 5%
    (f,) = defects.success_ignores_target(prepare(_kept_job("lib/k", 16, 8, kind="fixed")))
    assert f"a sound fixed attack does on 15%, p = {_p_at_least(8, 16, 0.15):.2g}," in f["evidence"]


def test_success_ignores_target_needs_three_images_and_q_under_alpha():
    # 2 of 3 kept: p 0.0012, significant, yet fewer than 3 images
    assert _p_at_least(2, 3, 0.02) < 0.05
    assert defects.success_ignores_target(prepare(_kept_job("lib/k", 3, 2))) == []
    assert len(defects.success_ignores_target(prepare(_kept_job("lib/k", 3, 3)))) == 1
    # none kept: nothing
    assert defects.success_ignores_target(prepare(_kept_job("lib/k", 16, 0))) == []
    # 5 of 16 at 15%: p just above ALPHA, 6 of 16 just below
    assert _p_at_least(5, 16, 0.15) > 0.05 > _p_at_least(6, 16, 0.15)
    assert defects.success_ignores_target(prepare(_kept_job("lib/k", 16, 5, kind="fixed"))) == []
    assert len(defects.success_ignores_target(prepare(_kept_job("lib/k", 16, 6, kind="fixed")))) == 1


def test_success_ignores_target_adjusts_over_the_implementations_own_models_only():
    p6 = _p_at_least(9, 32, 0.15)
    assert p6 < 0.05 < 2 * p6
    # one model alone: q = p, a finding
    alone = [_kept_job("lib/k", 32, 9, kind="fixed")]
    assert len(defects.success_ignores_target(prepare(table(*alone)))) == 1
    # another implementation's clean model is not in its family
    other = _kept_job("lib/o", 32, 0, kind="fixed", model="m")
    assert [f["implementation"] for f in defects.success_ignores_target(prepare(table(*alone, other)))] == ["lib/k"]
    # its own second model with a large p doubles the smaller p (BH over 2): q = 2·p > ALPHA
    own = _kept_job("lib/k", 32, 1, kind="fixed", model="k")
    assert defects.success_ignores_target(prepare(table(*alone, own))) == []
    # the same implementation under another norm: another family
    linf = _kept_job("lib/k", 32, 1, kind="fixed", model="k").assign(norm="linf")
    assert [f["norm"] for f in defects.success_ignores_target(prepare(table(*alone, linf)))] == ["l2"]
    # another release is another implementation: its own family
    rel = _kept_job("lib/k", 32, 1, kind="fixed", model="k", version="2.0")
    (f,) = defects.success_ignores_target(prepare(table(*alone, rel)))
    assert f"BH q = {p6:.2g} over its own models" in f["evidence"]
    # two significant models: BH q of the smaller p is min(2·p_min, p_max)
    strong = _kept_job("lib/k", 32, 13, kind="fixed", model="k")
    found = defects.success_ignores_target(prepare(table(*alone, strong)))
    p8 = _p_at_least(13, 32, 0.15)
    assert 2 * p8 < p6
    assert [(f["model"], f["evidence"].split("BH q = ")[1].split(" ")[0]) for f in found] == [
        ("k", f"{min(2 * p8, p6):.2g}"), ("m", f"{p6:.2g}")]


def test_success_ignores_target_leaves_out_defaults_crashes_failures_and_clean_hits():
    base = _kept_job("lib/k", 6, 6)
    assert len(defects.success_ignores_target(prepare(base))) == 1
    for change in ({"returned_fallback": ["constant 0 image"] * 4 + [""] * 2},
                   {"status": ["error"] * 4 + ["ok"] * 2},
                   {"best_distance": [INF] * 4 + [0.3] * 2},
                   {"best_distance": [0.0] * 4 + [0.3] * 2}):
        assert defects.success_ignores_target(prepare(base.assign(**change))) == [], change
    assert len(defects.success_ignores_target(prepare(base.assign(returned_fallback="")))) == 1
    assert len(defects.success_ignores_target(prepare(base.drop(columns=["returned_fallback"])))) == 1
    assert defects.fallback_output(prepare(base.drop(columns=["returned_fallback"]))) == []
    # an unknown returned class is "not the target"
    assert "on 6 of them (0 still at the label)" in defects.success_ignores_target(
        prepare(base.assign(returned_class=np.array([np.nan] * 4 + ["unknown", 4], dtype=object))))[0]["evidence"]
    assert defects.success_ignores_target(prepare(base.assign(targeted=False))) == []
    assert defects.success_ignores_target(prepare(base.drop(columns=["returned_class"]))) == []
    assert defects.success_ignores_target(prepare(base).iloc[:0]) == []


# ================================================================ batch_dependence, defect_findings
N = 16
D = np.random.default_rng(7).uniform(0.05, 0.3, N)


def _batch_jobs(impl, kinds, kind="minimal"):
    """``impl`` on ``m`` and on the twins ``kinds`` where 6 images came out 2% farther."""
    off = D * np.where(np.arange(N) < 6, 1.02, 1.0)
    jobs = [job_rows("m", impl, "l2", D, kind=kind).assign(best_margin=0.1, rng_used=False)]
    jobs += [job_rows(f"m~{k}", impl, "l2", off, kind=kind).assign(best_margin=0.1, rng_used=False) for k in kinds]
    return jobs


def test_batch_dependence_joins_both_twins_of_one_job_into_one_finding():
    t = prepare(table(*_batch_jobs("lib/x", ("batch", "split")), *_batch_jobs("lib/y", ("split",))))
    found = defects.batch_dependence(t)
    assert _keys(found) == [("m", "l2", "lib/x", "1.0", "batch_dependence"), ("m", "l2", "lib/y", "1.0", "batch_dependence")]
    x, y = found[0]["evidence"], found[1]["evidence"]
    assert x.count("; ") >= 1 and "m~batch" in x and "m~split" in x and "m~batch" not in y
    parts = x.split("; ")
    assert any("m~split" in p for p in parts) and any("m~batch" in p for p in parts)


def test_defect_findings_orders_rules_and_folds_eps_unused_into_batch_dependence():
    # lib/x: batch dependent on m and leaves ε unused there (joined); lib/u: ε unused alone
    fail = np.arange(N) >= 12   # not among the 6 images the twin moved
    sibling = job_rows("m", "lib/s", "l2", D * 0.5, family="ddn").assign(best_margin=0.1, rng_used=False)

    def unused(rows):
        return rows.assign(eps_fail_max=np.where(fail, 1.0, np.nan), eps_fail_ratio=np.where(fail, 0.05, np.nan),
                           returned_adversarial=~fail, best_distance=np.where(fail, INF, rows["best_distance"]))
    x = _batch_jobs("lib/x", ("batch",), kind="fixed")
    x[0] = unused(x[0])
    x[1] = x[1].assign(best_distance=np.where(fail, INF, x[1]["best_distance"]))
    u = unused(job_rows("m", "lib/u", "l2", D, kind="fixed").assign(best_margin=0.1, rng_used=False))
    oob = _ball_job("lib/o", N, calls=5, out=[5] + [0] * (N - 1)).assign(norm="l2", best_margin=0.1, rng_used=False)
    fb = job_rows("m", "lib/f", "l2", D).assign(returned_fallback=["constant 0 image"] + [""] * (N - 1),
                                                 best_margin=0.1, rng_used=False)
    t = prepare(table(*x, u, sibling, oob, fb))
    found = defects.defect_findings(t)
    assert [(f["implementation"], f["flag"]) for f in found] == [
        ("lib/o", "out_of_ball"), ("lib/u", "eps_unused"), ("lib/x", "batch_dependence"), ("lib/f", "fallback_output")]
    alone = {f["implementation"]: f for f in defects.eps_unused(t)}["lib/x"]["evidence"]
    batch = {f["implementation"]: f for f in defects.batch_dependence(t)}["lib/x"]["evidence"]
    assert found[2]["evidence"] == f"{batch}; in the batch it also leaves ε unused: {alone}"


# ================================================================ sample_size
DELTA = float(np.log(1.05))
MIN_SE = 0.01   # the floor of the per-image standard error: what identical log ratios get


def _normal_size(est, n, alpha_each, power, share=1.0, sd=MIN_SE):
    """The planned size by hand (module docstring): the one-sided ``PLAN_CONFIDENCE`` bound of the
    estimate as the truth (0.3: past the estimate, away from the margin), the normal approximation
    of the test at that truth, never under the fewest images the exact signed-rank test needs;
    ``alpha_each`` is the level the distance test is run at."""
    se = sd / math.sqrt(n)
    z80 = Z.inv_cdf(sample_size.PLAN_CONFIDENCE)
    if abs(est) > DELTA:
        gap, z_a = abs(est) - z80 * se - DELTA, Z.inv_cdf(1 - alpha_each / 2)
    else:
        gap, z_a = DELTA - abs(est) - z80 * se, Z.inv_cdf(1 - alpha_each)
    if gap <= 0:
        return INF
    fewest = math.floor(math.log2(2 / alpha_each)) + 1
    return float(math.ceil(max((z_a + Z.inv_cdf(power)) ** 2 * sd ** 2 / gap ** 2, fewest) / share))


@pytest.mark.parametrize("est, n, alpha, power, share", [
    (DELTA + 0.005, 100, 0.05, 0.8, 1.0),     # leaning different, the normal size dominates
    (-(DELTA + 0.005), 100, 0.05, 0.8, 0.5),  # the sign does not matter; half the images both broke
    (DELTA + 0.005, 100, 0.01, 0.9, 1.0),
    (0.045, 100, 0.05, 0.8, 1.0),             # leaning equivalent
    (0.045, 100, 0.01, 0.8, 0.25),
    (0.02, 100, 0.05, 0.8, 1.0),              # far inside: the fewest images of the exact test (6)
    (0.02, 100, 0.01, 0.8, 1.0),              # ... 8 at α = 1%
    (0.3, 50, 0.01, 0.8, 0.5),                # far beyond: 8 both broke, of 16
])
def test_distance_images_matches_the_normal_plan_by_hand(est, n, alpha, power, share):
    expected = _normal_size(est, n, alpha, power, share)
    assert np.isfinite(expected)
    assert sample_size.distance_images(np.full(n, est), share, alpha, power=power) == expected


def test_distance_images_fewest_images_of_the_exact_test():
    assert sample_size.distance_images(np.full(40, 0.02), 1.0, 0.05) == 6.0    # 2·2⁻⁶ < 5% ≤ 2·2⁻⁵
    assert sample_size.distance_images(np.full(40, 0.02), 1.0, 0.01) == 8.0    # 2·2⁻⁸ < 1% ≤ 2·2⁻⁷
    assert sample_size.distance_images(np.full(40, 0.3), 0.5, 0.05) == 12.0
    # a single image both broke is a plan too, not "undecidable"
    assert sample_size.distance_images(np.array([0.3]), 1.0, 0.05) == 6.0


def test_distance_images_is_infinite_without_images_or_when_the_bound_reaches_the_margin():
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert sample_size.distance_images(np.zeros(0), 1.0, 0.05) == INF
        assert sample_size.distance_images(np.full(10, 0.3), 0.0, 0.05) == INF
    # an estimate at or next to the margin: the planned truth lies 0.52 standard errors past it,
    # away from the margin, so there is a size (a conservative bound reached the margin: "inf")
    for est in (DELTA + 0.0005, DELTA - 0.0005, DELTA):
        size = sample_size.distance_images(np.full(100, est), 1.0, 0.05)
        assert np.isfinite(size) and size == _normal_size(est, 100, 0.05, 0.8)
    # a larger margin (delta): far inside, the fewest images of the exact test
    assert sample_size.distance_images(np.full(100, DELTA), 1.0, 0.05, delta=0.1) == 6.0


def test_hl_standard_error_per_image_of_two_values_and_of_a_normal_sample():
    # two values 0, 1: a resample's HL is 0, 0.5 or 1 with probability ¼, ½, ¼: sd √⅛, times √2 = 0.5
    se = sample_size._hl_se(np.array([0.0, 1.0]))
    assert 0.42 < se < 0.58
    # a normal sample of sd 0.1: the HL estimate's sd is σ·√(π/3)/√n, per image 0.102
    r = np.random.default_rng(11).normal(0.0, 0.1, 120)
    assert 0.085 < sample_size._hl_se(r) < 0.12
    # the same table, the same size
    assert sample_size._hl_se(r) == sample_size._hl_se(r)
    # more than 400 images: a subsample of 400, still per image
    big = np.random.default_rng(12).normal(0.0, 0.1, 1500)
    assert 0.085 < sample_size._hl_se(big) < 0.12
    # identical values: the floor
    assert sample_size._hl_se(np.full(30, 0.2)) == MIN_SE


def test_distance_images_on_a_noisy_sample_reaches_its_power_in_a_seeded_simulation():
    """Plan from 30 noisy log ratios (θ 0.15, sd 0.1), then simulate reruns of that size at the
    planned truth (the ``PLAN_CONFIDENCE`` bound of θ̂): the exact signed-rank test beyond the
    margin at α/2 = 2.5% rejects in about 80% of them."""
    from scipy import stats
    r = np.random.default_rng(5).normal(0.15, 0.1, 30)
    size = sample_size.distance_images(r, 1.0, 0.05)
    assert 6 <= size <= 30
    sd = sample_size._hl_se(r)
    truth = sample_size.hodges_lehmann(r) - Z.inv_cdf(sample_size.PLAN_CONFIDENCE) * sd / math.sqrt(r.size)
    rng = np.random.default_rng(6)
    hits = [stats.wilcoxon(rng.normal(truth, sd, int(size)) - DELTA, alternative="greater").pvalue < 0.025
            for _ in range(300)]
    assert 0.7 < np.mean(hits) < 0.97


def _values(fa, fb, r):
    return np.vstack([np.asarray(fa, float), np.asarray(fb, float), np.asarray(r, float)])


def test_images_to_decide_leaning_equivalent_takes_the_larger_endpoint_at_the_power():
    # three endpoints (share, failure, distance) must all be shown: each at the power (they move
    # together); with no discordant image the share and failure sizes are where none shows it: 52
    from attackaudit.fidelity import paired_binary
    n, each = 100, 0.8
    zeros = np.zeros(n)
    fail = paired_binary.images_needed(zeros, zeros, 0.05, each, confidence=sample_size.PLAN_CONFIDENCE)
    assert fail == 52.0
    # distance endpoint far inside: the failure endpoint's size, under the images at hand: one more
    assert sample_size.images_to_decide(_values(zeros, zeros, np.zeros(n)), 0.05) == max(fail, n + 1)
    # distance endpoint near its margin: it decides
    near = _normal_size(0.047, n, 0.05, each)
    assert near > fail
    assert sample_size.images_to_decide(_values(zeros, zeros, np.full(n, 0.047)), 0.05) == near
    # power and level are passed on
    assert sample_size.images_to_decide(_values(zeros, zeros, np.full(n, 0.047)), 0.01, power=0.9) == \
        _normal_size(0.047, n, 0.01, 0.9)
    # a wider failure margin: the failure endpoint needs fewer, and the share endpoint's 5 points decide
    assert sample_size.images_to_decide(_values(zeros, zeros, np.zeros(n)), 0.05, margin=0.1) == \
        max(paired_binary.images_needed(zeros, zeros, 0.05, each, 0.05, sample_size.PLAN_CONFIDENCE), n + 1)
    # a wider distance margin
    assert sample_size.images_to_decide(_values(zeros, zeros, np.full(n, 0.047)), 0.05, delta=0.048) == \
        sample_size.distance_images(np.full(n, 0.047), 1.0, 0.05, 0.048, each)


def test_images_to_decide_leaning_different_takes_the_smaller_endpoint_at_its_weighted_share_of_alpha():
    # three endpoints can each show a difference: each at its weighted Bonferroni share of α
    # (headline.WEIGHTS: share 0.6, failure 0.1, distance 0.3); the share endpoint sees failures too
    from attackaudit.fidelity import paired_binary
    n = 40
    fa = np.zeros(n)
    fa[:6] = 1.0                                   # a failed 15 points more often
    fb = np.zeros(n)
    r = np.where(fa > 0, np.nan, DELTA + 0.005)    # and is 5.5% farther where both broke
    both = r[np.isfinite(r)]
    conf = sample_size.PLAN_CONFIDENCE
    share = paired_binary.images_needed(fa, fb, 0.05 * 0.6, 0.8, confidence=conf)  # the failed images are the worse
    fail = paired_binary.images_needed(fa, fb, 0.05 * 0.1, 0.8, confidence=conf)
    dist = _normal_size(DELTA + 0.005, both.size, 0.05 * 0.3, 0.8, both.size / n)
    assert np.isfinite(share) and np.isfinite(dist) and share < fail and share != dist
    assert sample_size.images_to_decide(_values(fa, fb, r), 0.05) == max(min(share, fail, dist), n + 1)
    # only the failure and share endpoints beyond their margins (distance inside): the share's size
    r_in = np.where(fa > 0, np.nan, 0.0)
    assert sample_size.images_to_decide(_values(fa, fb, r_in), 0.05) == max(share, n + 1)
    assert sample_size.images_to_decide(_values(fa, fb, r_in), 0.05, power=0.95) == \
        max(paired_binary.images_needed(fa, fb, 0.05 * 0.6, 0.95, confidence=conf), n + 1)
    # a failure margin of 10 points: the share endpoint (the same failures, its own 5 points) decides
    assert sample_size.images_to_decide(_values(fa, fb, r_in), 0.05, margin=0.1) == \
        max(paired_binary.images_needed(fa, fb, 0.05 * 0.6, 0.8, 0.05, conf), n + 1)
    # only the distance endpoint beyond its margin
    same = np.zeros(n)
    r_all = np.full(n, DELTA + 0.005)
    d_only = _normal_size(DELTA + 0.005, n, 0.05 * 0.3, 0.8)
    assert sample_size.images_to_decide(_values(same, same, r_all), 0.05) == max(d_only, n + 1)
    assert sample_size.images_to_decide(_values(same, same, r_all), 0.05, power=0.9) == \
        max(_normal_size(DELTA + 0.005, n, 0.05 * 0.3, 0.9), n + 1)


def test_images_to_decide_edges_and_the_floor_of_one_more_image():
    zeros = np.zeros(20)
    # a failure estimate of exactly the margin (1 of 20) is not beyond it
    fa = np.zeros(20)
    fa[0] = 1.0
    r = np.where(fa > 0, np.nan, 0.0)
    from attackaudit.fidelity import paired_binary
    conf = sample_size.PLAN_CONFIDENCE
    inside = max(paired_binary.images_needed(fa, zeros, 0.05, 0.8, confidence=conf),
                 paired_binary.images_needed(fa, zeros, 0.05, 0.8, confidence=conf),
                 sample_size.distance_images(r[1:], 19 / 20, 0.05, DELTA, 0.8))
    assert sample_size.images_to_decide(_values(fa, zeros, r), 0.05) == (max(inside, 21) if np.isfinite(inside) else INF)
    # a plan smaller than the images at hand: one more than it has
    many = 200
    assert sample_size.images_to_decide(_values(np.zeros(many), np.zeros(many), np.zeros(many)), 0.05) == many + 1
    # no image with a comparison, or one image
    assert sample_size.images_to_decide(np.full((3, 4), np.nan), 0.05) == INF
    assert sample_size.images_to_decide(_values([0.0], [0.0], [0.0]), 0.05) == \
        max(paired_binary.images_needed(np.zeros(1), np.zeros(1), 0.05, 0.8, confidence=conf), 2)
    # a distance endpoint just inside its margin: a size (the planned truth lies past the estimate)
    just = sample_size.images_to_decide(_values(np.zeros(100), np.zeros(100), np.full(100, DELTA - 0.0005)), 0.05)
    assert just == sample_size.distance_images(np.full(100, DELTA - 0.0005), 1.0, 0.05, DELTA, 0.8) > 100


def test_decision_text_in_the_callers_words():
    assert sample_size.decision_text(INF, 100) == "more images would not decide it at the effect the data allow"
    assert sample_size.decision_text(120.0, 100) == "cannot be decided on this dataset (needs ≈120 images, it has 100)"
    assert sample_size.decision_text(100.0, 100) == "rerun with --samples 100 (planned for 80% power)"
    assert sample_size.decision_text(5000.0, None) == "rerun with --samples 5000 (planned for 80% power)"
    assert sample_size.decision_text(64.0, None) == "rerun with --samples 64 (planned for 80% power)"


# ================================================================ known_defects
CORPUS = [
    {"implementation": "lib/x", "norm": "l2", "library": "libx", "since": "1.2.0", "through": "1.4.1",
     "case": "libx-range", "cause": "It steps the wrong way.", "file": "libx/attack.py", "line": "x = x - g"},
    {"implementation": "lib/y", "norm": "linf", "library": "liby", "since": "", "through": "0.3.0",
     "case": "liby-one", "cause": "It never projects.", "file": "liby/a.py", "line": "p = 1"},
    {"implementation": "lib/z", "norm": "l1", "library": "libz", "since": "2.0.0", "through": "2.0.0",
     "case": "libz-same", "cause": "Out of the box.", "file": "libz/b.py", "line": "y = x"},
]


@pytest.fixture
def corpus(tmp_path, monkeypatch):
    path = tmp_path / "known_defects.json"
    path.write_text(json.dumps({"source": "test", "defects": CORPUS}))
    monkeypatch.setattr(known_defects, "DATA", path)
    known_defects.known.cache_clear()
    yield path
    known_defects.known.cache_clear()


def test_known_defect_matches_implementation_norm_and_inclusive_version_range(corpus):
    def cases(impl, norm, version):
        return [k["case"] for k in known_defects.matches(impl, norm, version)]
    for version in ("1.2.0", "1.3.0", "1.4.1"):
        assert cases("lib/x", "l2", version) == ["libx-range"], version
    for version in ("1.1.9", "1.4.2", "1.3.0+c1a2b3", "not a version", ""):
        assert cases("lib/x", "l2", version) == [], version
    assert cases("lib/x", "linf", "1.3.0") == [] and cases("lib/y", "l2", "1.3.0") == []
    # without a first release, only the release named as the last one
    assert cases("lib/y", "linf", "0.3.0") == ["liby-one"]
    assert cases("lib/y", "linf", "0.2.9") == [] and cases("lib/y", "linf", "0.3.1") == []
    assert cases("lib/z", "l1", "2.0.0") == ["libz-same"] and cases("lib/z", "l1", "2.0.1") == []


def test_known_defect_findings_one_per_implementation_version_and_norm_with_the_corpus_text(corpus):
    t = prepare(table(
        job_rows("m1", "lib/x", "l2", [0.1, 0.2], library_version="1.3.0"),
        job_rows("m2", "lib/x", "l2", [0.1, 0.2], library_version="1.3.0"),
        job_rows("m1~shift", "lib/y", "linf", [0.1], library_version="0.3.0"),   # a twin only: not a run of it
        job_rows("m1", "lib/y", "linf", [0.1], library_version="0.2.0"),
        job_rows("m1", "lib/z", "l1", [0.1], library_version="2.0.0"),
        job_rows("m1", "lib/x", "l2", [0.1], library_version="1.3.0+c0ffee"),
    ))
    found = known_defects.known_defect_findings(t)
    assert found == [
        {"model": "*", "norm": "l2", "implementation": "lib/x", "library_version": "1.3.0", "flag": "known_defect",
         "evidence": "a defect of libx 1.2.0–1.4.1 in attackaudit's defect corpus (libx-range), not measured in this "
                     "run: It steps the wrong way. Wrong line: libx/attack.py: `x = x - g`"},
        {"model": "*", "norm": "l1", "implementation": "lib/z", "library_version": "2.0.0", "flag": "known_defect",
         "evidence": "a defect of libz 2.0.0 in attackaudit's defect corpus (libz-same), not measured in this "
                     "run: Out of the box. Wrong line: libz/b.py: `y = x`"},
    ]
    y = prepare(job_rows("m1", "lib/y", "linf", [0.1], library_version="0.3.0"))
    assert [f["evidence"][:30] for f in known_defects.known_defect_findings(y)] == ["a defect of liby 0.3.0 in atta"]
    assert known_defects.FLAG == "known_defect"


def test_known_defects_without_a_corpus_file_match_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(known_defects, "DATA", tmp_path / "absent.json")
    known_defects.known.cache_clear()
    try:
        assert known_defects.known() == ()
        assert known_defects.matches("lib/x", "l2", "1.3.0") == []
    finally:
        known_defects.known.cache_clear()


# ================================================================ alignment
def _holm(p):
    """Holm's step-down adjustment by hand."""
    p = np.asarray(p, float)
    order = np.argsort(p, kind="stable")
    out, running = np.empty_like(p), 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (p.size - rank) * p[i]))
        out[i] = running
    return out


def _xi(d, ref, eps0):
    """Local optimality by hand: the area the attack leaves under ε₀ against the reference's."""
    d, ref = np.asarray(d, float), np.asarray(ref, float)
    live = ref > 0
    return float(np.clip(eps0 - d[live], 0, None).sum() / np.clip(eps0 - ref[live], 0, None).sum())


BASE = np.linspace(0.2, 0.8, 12)


def _family_table():
    """Family ``f`` (three implementations), under l2, on models m1, m2 (c/z on m1 only), and a
    closer implementation of another family ``h`` on m1 that sets the envelope on 4 images."""
    jobs = []
    for model, scale, rest in (("m1", 1.0, 1), ("m2", 1.5, 2)):
        fail_b = np.arange(12) % 4 == rest               # b/y fails on 3 images on each model, not the same
        base = BASE * scale
        base[0] = 0.0                                    # misclassified clean
        jobs += [job_rows(model, "a/x", "l2", base, family="f"),
                 job_rows(model, "b/y", "l2", np.where(fail_b, INF, base * 1.3), family="f")]
    jobs.append(job_rows("m1", "c/z", "l2", BASE * np.where(np.arange(12) % 2 == 0, 1.0, 1.01), family="f"))
    h = BASE * np.where(np.arange(12) < 4, 0.5, 2.0)
    jobs.append(job_rows("m1", "h/w", "l2", h, family="h"))
    jobs.append(job_rows("m1~seed", "a/x", "l2", BASE * 3, family="f"))   # a twin: never paired
    return table(*jobs)


def test_pairwise_rows_order_keys_and_counts():
    t = prepare(_family_table())
    from attackaudit.fidelity._table import without_twins
    pairs = alignment.pairwise(without_twins(t))
    assert list(pairs.columns) == alignment.PAIR_COLUMNS
    got = list(zip(pairs.family, pairs.norm, pairs.model, pairs.implementation_a, pairs.implementation_b))
    assert got == [("f", "l2", "m1", "a/x", "b/y"), ("f", "l2", "m2", "a/x", "b/y"), ("f", "l2", "*", "a/x", "b/y"),
                   ("f", "l2", "m1", "a/x", "c/z"), ("f", "l2", "m1", "b/y", "c/z")]
    assert set(pairs.library_version_a) == {"1.0"} and set(pairs.library_version_b) == {"1.0"}
    # 11 live images on each model (image 0 misclassified clean); pooled: an image is one block
    assert list(pairs.n_samples) == [11, 11, 11, 11, 11]
    assert list(pairs.fail_b[:3]) == pytest.approx([3 / 11, 3 / 11, 3 / 11])
    assert list(pairs.broke_only_a) == [3, 3, 6, 0, 0]     # pooled: half of the models on 6 images
    assert list(pairs.n_both) == [8, 8, 11, 11, 8]
    assert list(pairs.broke_only_b) == [0, 0, 0, 0, 3]
    no_pool = alignment.pairwise(without_twins(t), pooled=False)
    assert list(no_pool.model) == ["m1", "m2", "m1", "m1"]


def test_pairwise_optimality_median_difference_and_envelopes_by_hand():
    t = prepare(_family_table())
    from attackaudit.fidelity._table import without_twins
    pairs = alignment.pairwise(without_twins(t), eps_max={"l2": 1.5})
    m1, m2 = BASE.copy(), BASE * 1.5
    m1[0] = m2[0] = 0.0
    fail_b, fail_b2 = np.arange(12) % 4 == 1, np.arange(12) % 4 == 2
    h = BASE * np.where(np.arange(12) < 4, 0.5, 2.0)
    c = BASE * np.where(np.arange(12) % 2 == 0, 1.0, 1.01)
    b1, b2 = np.where(fail_b, INF, m1 * 1.3), np.where(fail_b2, INF, m2 * 1.3)
    star1 = np.minimum.reduce([m1, b1, c, h])
    star1[0] = 0.0
    star2 = np.minimum(m2, b2)
    own1 = np.minimum.reduce([m1, b1, c])
    own1[0] = 0.0
    row = pairs.iloc[0]    # a/x against b/y on m1
    assert row.optimality_a == pytest.approx(_xi(m1, star1, 1.5))
    assert row.optimality_b == pytest.approx(_xi(b1, star1, 1.5))
    assert row.family_optimality_a == pytest.approx(_xi(m1, own1, 1.5))
    assert row.family_optimality_b == pytest.approx(_xi(b1, own1, 1.5))
    assert row.optimality_a < row.family_optimality_a == pytest.approx(1.0)
    both1 = ~fail_b & (np.arange(12) > 0)
    assert row.median_difference == pytest.approx(np.median((m1 - b1)[both1]))
    pooled = pairs.iloc[2]
    assert pooled.model == "*"
    assert pooled.optimality_a == pytest.approx((_xi(m1, star1, 1.5) + _xi(m2, star2, 1.5)) / 2)
    assert pooled.optimality_b == pytest.approx((_xi(b1, star1, 1.5) + _xi(b2, star2, 1.5)) / 2)
    assert pooled.family_optimality_b == pytest.approx((_xi(b1, own1, 1.5) + _xi(b2, star2, 1.5)) / 2)
    both2 = ~fail_b2 & (np.arange(12) > 0)
    assert pooled.median_difference == pytest.approx(np.median(np.concatenate([(m1 - b1)[both1], (m2 - b2)[both2]])))
    assert pairs.iloc[1].median_difference == pytest.approx(np.median((m2 - b2)[both2]))
    # without eps_max, ε₀ is the largest finite envelope distance of each model
    plain = alignment.pairwise(without_twins(t)).iloc[0]
    assert plain.optimality_a == pytest.approx(_xi(m1, star1, star1[np.isfinite(star1)].max()))
    # c/z on m1 only: its row is that model's, estimate from m1 alone
    cz = pairs.iloc[3]
    assert cz.optimality_b == pytest.approx(_xi(c, star1, 1.5))
    assert cz.median_difference == pytest.approx(np.median((m1 - c)[1:]))


def test_pairwise_median_difference_is_zero_without_an_image_both_broke():
    t = prepare(table(job_rows("m", "a/x", "l2", [0.3, INF, 0.5], family="f"),
                      job_rows("m", "b/y", "l2", [INF, 0.4, INF], family="f")))
    (row,) = alignment.pairwise(t).itertuples()
    assert row.median_difference == 0.0 and row.n_both == 0 and row.n_neither == 0


def test_pairwise_holm_answer_better_and_sizes_per_family_norm_and_model():
    from attackaudit.fidelity.equivalence import pair_values
    n = 80
    d = np.linspace(0.1, 1.0, n)
    far = np.where(np.arange(n) >= n - 24, INF, d * 0.8)  # fails the 24 hardest, closer elsewhere: curves cross
    jobs = [job_rows("m", "a/x", "l2", d, family="f"), job_rows("m", "b/y", "l2", d * 1.3, family="f"),
            job_rows("m", "c/z", "l2", d * 1.005, family="f"), job_rows("m", "d/w", "l2", far, family="f")]
    t = prepare(table(*jobs))
    alpha = 0.2
    pairs = alignment.pairwise(t, alpha=alpha)
    assert list(pairs.p_adjusted) == pytest.approx(list(_holm(pairs.p_different)))
    assert list(pairs.p_equivalent_adjusted) == pytest.approx(list(_holm(pairs.p_equivalent)))
    expected = ["different" if pd_ < alpha else "equivalent" if pe < alpha else "inconclusive"
                for pd_, pe in zip(pairs.p_adjusted, pairs.p_equivalent_adjusted)]
    assert list(pairs.answer) == expected
    by = {(r.implementation_a, r.implementation_b): r for r in pairs.itertuples()}
    assert by[("a/x", "b/y")].answer == "different" and by[("a/x", "b/y")].better == "a/x"
    assert by[("b/y", "c/z")].answer == "different" and by[("b/y", "c/z")].better == "c/z"
    mixed = by[("a/x", "d/w")]
    assert mixed.mixed and mixed.answer == "different" and mixed.better == ""
    assert by[("a/x", "c/z")].answer == "equivalent" and by[("a/x", "c/z")].better == ""
    assert pairs.images_to_decide.isna().all()
    # a noisy fifth: 10 pairs, three of them inconclusive, each sized at α / 10
    noisy = d * np.random.default_rng(4).lognormal(0.0, 0.15, n)
    t = prepare(table(*jobs, job_rows("m", "e/v", "l2", noisy, family="f")))
    pairs = alignment.pairwise(t, alpha=alpha)
    assert (pairs.answer == "inconclusive").sum() == 3
    for r in pairs.itertuples():
        if r.answer == "inconclusive":
            assert r.images_to_decide == sample_size.images_to_decide(
                pair_values(t.loc[t.implementation == r.implementation_a, "best_distance"].to_numpy(),
                             t.loc[t.implementation == r.implementation_b, "best_distance"].to_numpy()),
                alpha / 10)
        else:
            assert np.isnan(r.images_to_decide) and r.answer == "different"


def test_pairwise_sizes_an_inconclusive_pair_at_the_holm_share_of_alpha():
    from attackaudit.fidelity.equivalence import pair_values
    rng = np.random.default_rng(2)
    d = rng.uniform(0.2, 1.0, 10)
    noisy = d * rng.lognormal(0.0, 0.05, 10)
    t = prepare(table(job_rows("m", "c/z", "l2", d * 3, family="g"), job_rows("m", "e/v", "l2", d * 3.3, family="g"),
                      job_rows("m", "a/x", "l2", d, family="f"), job_rows("m", "b/y", "l2", noisy, family="f"),
                      job_rows("k", "a/x", "l2", d, family="f"), job_rows("k", "b/y", "l2", noisy, family="f")))
    pairs = alignment.pairwise(t, pooled=False)
    assert list(zip(pairs.family, pairs.model)) == [("f", "k"), ("f", "m"), ("g", "m")]
    f = pairs.iloc[0]
    assert f.answer == "inconclusive"
    assert f.images_to_decide == sample_size.images_to_decide(pair_values(d, noisy), 0.05)
    # each pair alone in its (family, norm, model): no adjustment
    assert list(pairs.p_adjusted) == list(pairs.p_different)
    assert list(pairs.p_equivalent_adjusted) == list(pairs.p_equivalent)


def test_pairwise_on_a_table_without_pairs():
    one = prepare(job_rows("m", "a/x", "l2", [0.1, 0.2], family="f"))
    assert list(alignment.pairwise(one).columns) == alignment.PAIR_COLUMNS and alignment.pairwise(one).empty
    assert alignment.pairwise(one.iloc[:0]).empty
    assert list(alignment.pairwise(one.iloc[:0]).columns) == alignment.PAIR_COLUMNS


def test_align_side_table_order_per_model_columns_and_arguments():
    t = _family_table()
    side, pairs = alignment.align(t, {"l2": 0.5}, eps_max={"l2": 1.5}, alpha=0.2, pooled=False)
    assert list(side.columns) == alignment.SIDE_COLUMNS + ["opt_m1", "opt_m2"]
    assert list(zip(side.family, side.implementation)) == [("f", "a/x"), ("f", "c/z"), ("f", "b/y"), ("h", "h/w")]
    assert side.optimality.iloc[0] > side.optimality.iloc[1] > side.optimality.iloc[2]
    a = side.iloc[0]
    m1, m2 = BASE.copy(), BASE * 1.5
    m1[0] = m2[0] = 0.0
    assert a.n_models == 2 and a.ref_eps == 0.5
    assert a.asr_at_ref == pytest.approx((np.mean(m1 <= 0.5) + np.mean(m2 <= 0.5)) / 2)
    assert a.optimality == pytest.approx((a.opt_m1 + a.opt_m2) / 2) and a.optimality_min == min(a.opt_m1, a.opt_m2)
    assert np.isnan(side.iloc[1].opt_m2) and np.isnan(side.iloc[3].opt_m2)
    assert a.opt_m2 == pytest.approx(_xi(m2, np.minimum(m2, np.where(np.arange(12) % 4 == 2, INF, m2 * 1.3)), 1.5))
    from attackaudit.fidelity._table import without_twins
    expected = alignment.pairwise(without_twins(prepare(t)), alpha=0.2, pooled=False, eps_max={"l2": 1.5})
    pd.testing.assert_frame_equal(pairs.reset_index(drop=True), expected.reset_index(drop=True))
    assert "*" not in set(pairs.model)
    # defaults: pooled rows, ε₀ from the envelope
    side0, pairs0 = alignment.align(t)
    assert "*" in set(pairs0.model) and side0.ref_eps.iloc[0] == 0.75
    assert side0.loc[side0.implementation == "a/x", "opt_m1"].iat[0] != a.opt_m1


def test_align_sorts_ties_by_implementation_and_families_and_norms_ascending():
    d = np.linspace(0.1, 0.5, 6)
    t = table(job_rows("m", "z/q", "linf", d, family="b"), job_rows("m", "y/q", "linf", d, family="b"),
              job_rows("m", "x/q", "l2", d, family="b"), job_rows("m", "w/q", "l2", d, family="a"))
    side, _ = alignment.align(t)
    assert list(zip(side.family, side.norm, side.implementation)) == [
        ("a", "l2", "w/q"), ("b", "l2", "x/q"), ("b", "linf", "y/q"), ("b", "linf", "z/q")]
    assert list(side.index) == [0, 1, 2, 3]
    empty_side, empty_pairs = alignment.align(table(job_rows("m~shift", "a/x", "l2", [0.1])))
    assert list(empty_side.columns) == alignment.SIDE_COLUMNS and list(empty_pairs.columns) == alignment.PAIR_COLUMNS
