"""What mutation testing found untested in harness/measure/ (docs/testing.md): default outputs and
fallbacks, the best's success margin, offers, hints, the budget of repeated rows, the recheck, a
criterion (the minimal-ε search's: tests/test_mutants_minimal.py).

Each test checks a rule a user reads in the rows: which returned images are default outputs and
how they are named (``returned_fallback``), which ones the tracker refuses to count, how close a
best lies to the decision boundary (``best_margin``), and what the budget and the end-of-job
re-check leave of an attack's queries.
"""
from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from attackaudit.measure.best_keeper import in_box_and_finite
from attackaudit.measure.criterion import Targeted, Untargeted
from attackaudit.measure.fallback import default_outputs, describe_constant
from attackaudit.measure.tracker import BOX_TOLERANCE, QueryTracker


class MeanModel(nn.Module):
    """Three classes over 1×2×2 images with mean m and first pixel p: z = [1 − 2m, 2m − 1,
    4(p − 0.75)]. Class 0 below m = 0.5, class 1 above; class 2 when the first pixel is high."""

    def forward(self, x):
        assert x.dim() == 4, "a model takes N×C×H×W images"
        flat = x.flatten(1)
        m = flat.mean(1)
        return torch.stack([1 - 2 * m, 2 * m - 1, 4 * (flat[:, 0] - 0.75)], 1)


def images(*rows: list[float]) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.float32).view(len(rows), 1, 2, 2)


# ------------------------------------------------------------------------------- default outputs
def test_a_constant_image_is_named_by_its_value():
    assert describe_constant(0.0) == "all-zero image"
    assert describe_constant(1.0) == "all-one image"
    assert describe_constant(0.5) == "constant 0.5 image"
    assert describe_constant(0.123456) == "constant 0.123 image"


def test_constant_outputs_are_default_outputs_and_the_unchanged_input_is_not():
    inputs = torch.tensor([[0.0, 0.2, 0.4, 0.6], [0.1, 0.3, 0.5, 0.7], [0.2, 0.2, 0.9, 0.1], [0.3, 0.4, 0.5, 0.0]])
    rows = torch.stack([torch.zeros(4), inputs[1], torch.full((4,), 0.5), inputs[3] + 0.01])
    default, words = default_outputs(rows, inputs)
    # row 0: all-zero although its input has a zero pixel; row 1: returned unchanged
    assert default.tolist() == [True, False, True, False]
    assert words == ["all-zero image", "", "constant 0.5 image", ""]


def test_a_constant_input_is_a_default_output_only_when_moved_to_another_constant():
    inputs = torch.tensor([[0.3] * 4, [0.3] * 4, [0.6] * 4, [0.0, 0.5, 0.5, 0.5]])
    rows = torch.stack([torch.full((4,), 0.3), torch.zeros(4), torch.tensor([0.6, 0.6, 0.6, 0.7]), inputs[3]])
    default, words = default_outputs(rows, inputs)
    assert default.tolist() == [False, True, False, False]
    assert words == ["", "all-zero image", "", ""]


def test_one_output_returned_for_images_with_different_inputs_is_shared():
    inputs = torch.tensor([[0.1, 0.2, 0.3, 0.4], [0.4, 0.3, 0.2, 0.1], [0.2, 0.2, 0.3, 0.3],
                           [0.9, 0.8, 0.7, 0.6]])
    shared_row = torch.tensor([0.5, 0.6, 0.7, 0.8])
    rows = torch.stack([shared_row, shared_row, shared_row, inputs[3] - 0.05])
    default, words = default_outputs(rows, inputs)
    assert default.tolist() == [True, True, True, False]
    assert words == ["one output shared by 3 images"] * 3 + [""]


def test_two_images_sharing_one_output_are_enough_and_a_shared_constant_says_both():
    inputs = torch.tensor([[0.1, 0.2, 0.3, 0.4], [0.4, 0.3, 0.2, 0.1]])
    for rows, word in ((torch.tensor([[0.5, 0.6, 0.7, 0.9]] * 2), "one output shared by 2 images"),
                       (torch.zeros(2, 4), "all-zero image shared by 2 images")):
        default, words = default_outputs(rows, inputs)
        assert default.tolist() == [True, True] and words == [word, word]


def test_identical_images_may_share_their_output():
    """The same image twice in the data, attacked the same way: an honest shared result."""
    inputs = torch.tensor([[0.1, 0.2, 0.3, 0.4]] * 2 + [[0.5, 0.5, 0.2, 0.2]])
    rows = torch.tensor([[0.15, 0.2, 0.3, 0.4]] * 2 + [[0.5, 0.5, 0.25, 0.2]])
    default, words = default_outputs(rows, inputs)
    assert default.tolist() == [False, False, False] and words == ["", "", ""]


def test_rows_with_equal_sums_are_not_shared_unless_identical():
    inputs = torch.tensor([[0.1, 0.2, 0.3, 0.4], [0.4, 0.3, 0.2, 0.1]])
    rows = torch.tensor([[0.5, 0.5, 0.5, 0.6], [0.6, 0.5, 0.5, 0.5]])  # the same sum, different images
    default, _ = default_outputs(rows, inputs)
    assert default.tolist() == [False, False]


def test_an_image_returned_unchanged_is_never_a_default_output():
    """Image 1's output is image 0's input, returned unchanged for image 0: only image 1 moved, so
    the one output is not shared by two moved images."""
    inputs = torch.tensor([[0.1, 0.2, 0.3, 0.4], [0.4, 0.3, 0.2, 0.1]])
    rows = torch.stack([inputs[0], inputs[0]])
    default, words = default_outputs(rows, inputs)
    assert default.tolist() == [False, False] and words == ["", ""]


def test_a_single_returned_row_is_judged_alone():
    default, words = default_outputs(torch.tensor([[0.5, 0.6, 0.7, 0.8]]), torch.tensor([[0.1, 0.2, 0.3, 0.4]]))
    assert default.tolist() == [False] and words == [""]
    default, words = default_outputs(torch.ones(1, 4), torch.tensor([[0.1, 0.2, 0.3, 0.4]]))
    assert default.tolist() == [True] and words == ["all-one image"]


# ------------------------------------------------------------------------------------ fallbacks
#: three class-0 images (m = 0.45) far enough apart that a row 0.2 from one is attributed to it
X3 = images([0.45, 0.45, 0.45, 0.45], [0.5, 0.9, 0.0, 0.4], [0.2, 0.4, 0.9, 0.3])
LABELS = torch.zeros(3, dtype=torch.long)
ADV_A = [0.55, 0.55, 0.55, 0.55]  # image 0 + 0.1: z = [-0.1, 0.1, -0.8], class 1, L2 0.2 away
ADV_B2 = [0.95, 0.9, 0.1, 0.5]  # image 1 moved: z = [-0.225, 0.225, 0.8], class 2
ALL_09 = torch.full((1, 2, 2), 0.9)  # z = [-0.8, 0.8, 0.6]: class 1, L2 0.9 from image 0


def test_an_adversarial_default_output_is_a_fallback_unless_the_queries_found_closer():
    t = QueryTracker(MeanModel(), X3, LABELS, norm="l2")
    returned = torch.stack([ALL_09, X3[1], torch.full((1, 2, 2), 0.5)])
    mask, words = t.fallbacks(returned)
    # all-0.9: class 1, adversarial, and the queries found nothing; all-0.5: a tie, never adversarial
    assert mask.tolist() == [True, False, False] and words == ["constant 0.9 image", "", ""]
    with torch.no_grad():
        t(torch.cat([images(ADV_A), X3[1:]]))
    assert t.best_distance[0].item() == pytest.approx(0.2)  # closer than the all-0.9 image (0.9)
    mask, words = t.fallbacks(returned)
    assert mask.tolist() == [False, False, False] and words == ["", "", ""]
    mask, words = t.fallbacks(returned, closer_only=False)  # a fixed-ε call's default, wherever it lies
    assert mask.tolist() == [True, False, False] and words == ["constant 0.9 image", "", ""]


def test_a_targeted_default_in_a_third_class_is_a_fallback_only_when_shared():
    """A targeted run: the all-0.9 image is class 1, neither the label (0) nor the target (2).
    Returned for one image it may be where a search ended (ART's JSMA saturates every pixel of a
    digit it cannot bring to the target: all-one, a third class, on the targeted noise grid); one
    output returned for two different images is a default."""
    t = QueryTracker(MeanModel(), X3, LABELS, norm="l2", targeted=True, targets=torch.full((3,), 2))
    mask, words = t.fallbacks(torch.stack([ALL_09, X3[1], X3[2]]))
    assert mask.tolist() == [False, False, False] and words == ["", "", ""]
    mask, words = t.fallbacks(torch.stack([ALL_09, ALL_09, X3[2]]))
    assert mask.tolist() == [True, True, False] and words[0] == "constant 0.9 image shared by 2 images"


def test_a_default_output_the_queries_found_themselves_is_a_search_result():
    t = QueryTracker(MeanModel(), X3, LABELS, norm="l2")
    with torch.no_grad():
        t(torch.cat([ALL_09.unsqueeze(0), X3[1:]]))  # the attack queried the all-0.9 image for image 0
    mask, _ = t.fallbacks(torch.stack([ALL_09, X3[1], X3[2]]))
    assert mask.tolist() == [False, False, False]


def test_a_default_output_closer_than_a_far_best_is_a_fallback():
    t = QueryTracker(MeanModel(), X3, LABELS, norm="l2")
    with torch.no_grad():  # image 0's best: the all-0.95 image, L2 1.0 away; the all-0.9 image lies 0.9 away
        t(torch.cat([images([0.95] * 4), X3[1:]]))
    mask, words = t.fallbacks(torch.stack([ALL_09, X3[1], X3[2]]))
    assert mask.tolist() == [True, False, False] and words[0] == "constant 0.9 image"


def test_returned_rows_are_judged_as_clamped_to_the_box_and_cast_to_the_model_s_dtype():
    model = nn.Sequential(nn.Flatten(), nn.Linear(4, 3))
    with torch.no_grad():
        model[1].weight.copy_(torch.tensor([[-0.5] * 4, [0.5] * 4, [0.0] * 4]))
        model[1].bias.copy_(torch.tensor([1.0, -1.0, -5.0]))  # the mean model's first two classes
    t = QueryTracker(model, X3, LABELS, norm="linf")
    returned = torch.stack([torch.full((1, 2, 2), 3.0), torch.full((1, 2, 2), -1.0), X3[2]]).double()
    mask, words = t.fallbacks(returned)
    # 3.0 everywhere is the all-one image (class 1); -1 the all-zero image (class 0, not adversarial)
    assert mask.tolist() == [True, False, False] and words == ["all-one image", "", ""]


def test_a_returned_row_below_the_box_is_judged_as_its_clamp():
    x = images([0.55, 0.55, 0.55, 0.55])  # class 1
    t = QueryTracker(MeanModel(), x, torch.ones(1, dtype=torch.long), norm="l2")
    mask, words = t.fallbacks(torch.full((1, 1, 2, 2), -1.0))
    assert mask.tolist() == [True] and words == ["all-zero image"]


def test_fallbacks_of_a_subset_are_judged_against_those_samples():
    t = QueryTracker(MeanModel(), X3, LABELS, norm="linf")
    returned = torch.stack([X3[2] + 0.01, ALL_09])
    mask, words = t.fallbacks(returned, idx=torch.tensor([2, 0]))
    assert mask.tolist() == [False, True] and words == ["", "constant 0.9 image"]


def test_a_targeted_default_output_in_a_third_class_is_a_fallback():
    t = QueryTracker(MeanModel(), X3, LABELS, norm="l2", criterion=Targeted(torch.tensor([2, 2, 1])))
    returned = torch.stack([ALL_09, torch.zeros(1, 2, 2), ALL_09])
    mask, words = t.fallbacks(returned)
    # image 0: class 1, neither its label nor its target 2 (it would read as a target ignored);
    # image 1: all-zero stays class 0, its label; image 2: class 1 is its target
    assert mask.tolist() == [True, False, True]
    assert words == ["constant 0.9 image shared by 2 images", "", "constant 0.9 image shared by 2 images"]


# ------------------------------------------------------------------- offers, hints, the recheck
def test_a_targeted_tracker_without_targets_is_refused_in_one_line():
    with pytest.raises(ValueError, match="^a targeted QueryTracker needs targets$"):
        QueryTracker(MeanModel(), X3, LABELS, norm="l2", targeted=True)



def test_an_offered_batch_counts_except_the_rows_excluded_as_fallbacks():
    t = QueryTracker(MeanModel(), X3, LABELS, norm="l2")
    offered = torch.cat([images(ADV_A, ADV_B2), X3[2:]])
    success = t.offer(offered, exclude=torch.tensor([True, False, False]))
    assert success.tolist() == [False, True, False]  # image 0 excluded; image 2 is its clean input
    assert t.best_distance[0].item() == math.inf and math.isfinite(t.best_distance[1].item())
    assert t.queries.tolist() == [0, 0, 0]  # an offer is not a query
    success = t.offer(offered)
    assert success.tolist() == [True, True, False] and t.best_distance[0].item() == pytest.approx(0.2)


def test_an_offered_float64_batch_is_judged_in_the_model_s_dtype():
    model = nn.Sequential(nn.Flatten(), nn.Linear(4, 2))
    with torch.no_grad():
        model[1].weight.copy_(torch.tensor([[-0.5] * 4, [0.5] * 4]))
        model[1].bias.copy_(torch.tensor([1.0, -1.0]))
    t = QueryTracker(model, X3, LABELS, norm="l2")
    success = t.offer(torch.cat([images(ADV_A), X3[1:]]).double())
    assert success.tolist() == [True, False, False] and t.best_distance[0].item() == pytest.approx(0.2)


def test_the_expected_owner_wins_a_tie_between_identical_images():
    x = torch.cat([X3[:1], X3[:1], X3[1:2]])  # the same image twice in the data
    t = QueryTracker(MeanModel(), x, LABELS, norm="l2")
    with torch.no_grad():
        t.expect(torch.tensor([1]))
        t(images(ADV_A))
    assert t.forwards.tolist() == [0, 1, 0]
    t2 = QueryTracker(MeanModel(), x, LABELS, norm="l2")
    with torch.no_grad():
        t2(images(ADV_A))
    assert t2.forwards.tolist() == [1, 0, 0]  # no hint: the least used, then the lowest index


def test_a_whole_batch_after_subset_queries_is_charged_once_per_sample_near_the_budget():
    t = QueryTracker(MeanModel(), X3[:2], LABELS[:2], norm="l2", budget=4)
    with torch.no_grad():
        for i in (0, 1, 0, 1):  # one sample at a time: 2 queries each, none at the budget
            t.expect(torch.tensor([i]))
            t(X3[i:i + 1] + 0.01)
        t.expect(None)
        t(X3[:2] + 0.02)
    assert t.forwards.tolist() == [3, 3] and t.refused.tolist() == [0, 0]


@pytest.mark.parametrize("repeats", [3, 60])
def test_at_the_budget_the_first_of_repeated_rows_is_answered_and_the_later_ones_refused(repeats):
    t = QueryTracker(MeanModel(), X3[:2], LABELS[:2], norm="l2", budget=2)
    with torch.no_grad():
        t(X3[:2] + 0.01)
        # sample 0's adversarial row and sample 1's clean row, interleaved, ``repeats`` times each
        rows = torch.cat([images(ADV_A), X3[1:2]] * repeats)
        out = t(rows)
    assert t.forwards.tolist() == [2, 2] and t.refused.tolist() == [repeats - 1, repeats - 1]
    assert out[0].argmax().item() == 1  # answered: the adversarial class
    assert (out[2::2].argmax(1) == 0).all()  # refused: the clean label


class ThresholdModel(nn.Module):
    """Two classes over 1×2×2 images: class 1 when the mean exceeds ``threshold`` (a model whose
    decisions the test moves between the queries and the end-of-job re-check)."""

    threshold = 0.5

    def forward(self, x):
        m = x.flatten(1).mean(1)
        return torch.stack([2 * (self.threshold - m), 2 * (m - self.threshold)], 1)


@pytest.mark.parametrize("means, dropped, best", [((0.55, 0.58, 0.65), 2, 0.4), ((0.55, 0.58), 2, math.inf)])
def test_the_recheck_drops_each_unconfirmed_best_in_turn(means, dropped, best):
    model = ThresholdModel()
    t = QueryTracker(model, X3[:1], LABELS[:1], norm="l2")
    with torch.no_grad():
        for m in means:  # candidates 2·(m − 0.45) away
            t(torch.full((1, 1, 2, 2), m))
    model.threshold = 0.6  # the unwrapped model no longer confirms m ≤ 0.6
    count = t.recheck()
    assert count.dtype == torch.long and count.tolist() == [dropped]
    assert t.best_distance[0].item() == pytest.approx(best)


# ---------------------------------------------------------------------------------- best margin
def test_the_best_margin_is_the_winning_logit_over_the_one_to_beat_scaled_by_the_largest():
    t = QueryTracker(MeanModel(), X3, LABELS, norm="l2")
    with torch.no_grad():
        t(torch.cat([images(ADV_A, ADV_B2), X3[2:]]))
    margin = t.best_margin()
    assert margin[0].item() == pytest.approx(0.2 / 0.8)  # class 1 over the label, over |z_2|
    assert margin[1].item() == pytest.approx((0.8 + 0.225) / 0.8)  # class 2 wins
    assert math.isnan(margin[2].item())  # no best


def test_a_targeted_best_margin_is_the_target_over_the_largest_other():
    t = QueryTracker(MeanModel(), X3, LABELS, norm="l2", criterion=Targeted(torch.tensor([1, 2, 2])))
    with torch.no_grad():
        t(torch.cat([images(ADV_A, ADV_B2), X3[2:]]))
    margin = t.best_margin()
    assert margin[0].item() == pytest.approx((0.1 + 0.1) / 0.8)
    assert margin[1].item() == pytest.approx((0.8 - 0.225) / 0.8)
    assert math.isnan(margin[2].item())


def test_a_best_must_lie_in_the_box_up_to_the_tolerance_and_have_finite_logits():
    rows = torch.tensor([[-BOX_TOLERANCE, 0.5], [0.5, 1 + BOX_TOLERANCE], [-2 * BOX_TOLERANCE, 0.5],
                         [0.5, 1 + 2 * BOX_TOLERANCE], [0.5, 0.5]])
    logits = torch.tensor([[0.0, 1.0]] * 4 + [[float("nan"), 1.0]])
    assert in_box_and_finite(rows, logits).tolist() == [True, True, False, False, False]


def test_repeated_rows_of_one_sample_are_charged_each_and_the_budget_holds_for_their_gradients():
    x = X3[:2]
    t = QueryTracker(MeanModel(), x, LABELS[:2], norm="l2", budget=10)
    for _ in range(4):
        xs = x[[0, 0]].clone().requires_grad_(True)  # one sample twice in a batch
        t(xs).sum().backward()
        a = x.clone().requires_grad_(True)
        t(a).sum().backward()
    assert t.forwards.tolist() == [5, 4] and t.backwards.tolist() == [5, 4]
    # each round asks 3 forwards and 3 backwards of sample 0: 24 asked, 10 answered, 14 refused
    assert t.refused.tolist() == [14, 0] and (t.queries <= 10).all()


# ------------------------------------------------------------------------------------ criteria
def test_a_malformed_target_tensor_is_refused_naming_what_it_got():
    with pytest.raises(ValueError, match=r"1-D tensor of target classes, got torch.Size\(\[1, 2\]\)"):
        Targeted(torch.tensor([[1, 2]]))
    with pytest.raises(ValueError, match="1-D tensor of target classes, got list$"):
        Targeted([1, 2])


def test_a_criterion_moves_its_targets_and_an_untargeted_one_is_itself():
    c = Targeted(torch.tensor([1, 2]))
    moved = c.to("cpu")
    assert isinstance(moved, Targeted) and moved.targets.tolist() == [1, 2]
    u = Untargeted()
    assert u.to("cpu") is u


# ------------------------------------------------------------------------------------ attribution
# Two originals, 0.2 and 0.8 in every pixel; queries are written as pixel lists. Every test below
# works the attribution rule (the module docstring of attackaudit.measure.tracker) by hand, query by
# query, and checks the forwards it charges; ``_run`` also runs the rule's one-row-at-a-time
# reference (tests/reference_ledger.py) on the same queries, which must agree.
X2 = images([0.2] * 4, [0.8] * 4)


def _run(norm, queries, inputs=X2):
    """Run ``queries`` ((hint or None, [pixel lists]) in order) on a tracker and on the reference
    ledger over ``inputs`` (two images); the tracker's forwards per sample. A hint is given (``expect``)
    only when it changes, as an attack would: it holds until the next one."""
    from reference_ledger import ReferenceLedger, assert_agree

    model = MeanModel()
    t = QueryTracker(model, inputs, LABELS[:2], norm=norm)
    ref = ReferenceLedger(model, inputs, LABELS[:2], norm=norm)
    given = None
    with torch.no_grad():
        for hint, rows in queries:
            if hint != given:
                for ledger in (t, ref):
                    ledger.expect(None if hint is None else torch.tensor(hint))
                given = hint
            for ledger in (t, ref):
                ledger(images(*rows))
    assert_agree(t, ref)
    return t.forwards.tolist()


def test_an_linf_anchor_box_is_at_most_2_wide_whatever_its_reach():
    a0, a1 = [-50.0, 44.0, 0.2, 0.2], [-44.0, 50.0, 0.8, 0.8]
    forwards = _run("linf", [
        # far out, each row nearest its own original (L∞ 50.2 vs 50.8; 49.2 vs 49.8): both anchors
        # move there; they are 6 apart, so each reach is 3
        (None, [a0, a1]),
        # sample 1 alone, 1.5 from its anchor: inside its box, so a known point of sample 1
        ([1], [[-45.5, 48.5, 0.8, 0.8]]),
        # a row 2.5 from sample 0's anchor: inside its reach (3) but outside the box (margin 2), so
        # it goes to its nearest known point, sample 1's row 2 away: both rows are sample 1's
        (None, [[-47.5, 46.5, 0.2, 0.2], a1]),
    ])
    assert forwards == [1, 4]


def test_a_subset_query_s_moved_anchor_shrinks_the_reach_of_the_anchors_near_it():
    # the originals differ in the first pixel only; every query moves the first two
    def at(u, w):
        return [u, w, 0.5, 0.5]

    forwards = _run("l2", [
        # sample 0's row to (0.2, 10), nearest its original (9.5 vs 9.52): its anchor moves there
        (None, [at(0.2, 10.0), at(0.8, 0.5)]),
        # sample 1 alone, each time nearest its own previous row: its anchor walks up to (0.8, 8)
        ([1], [at(0.8, 1.0)]), ([1], [at(0.8, 2.0)]), ([1], [at(0.8, 4.0)]), ([1], [at(0.8, 8.0)]),
        # the anchors are now 2.09 apart, so sample 0's reach is 1.04 (its original distance to
        # sample 1's original would give 4.76): a row 1.53 from sample 0's anchor is not within
        # reach and goes to its nearest known point, sample 1's last row (0.58 away)
        ([0], [at(0.5, 8.5)]),
    ], inputs=images(at(0.2, 0.5), at(0.8, 0.5)))
    assert forwards == [1, 6]


def test_the_expected_owners_of_a_query_are_checked_against_their_own_anchors():
    # no hints: a single row's expected owner is the previous single row's owner
    forwards = _run("l2", [
        (None, [[0.21] * 4]),   # nothing expected: nearest sample 0
        (None, [[0.81] * 4]),   # expected sample 0, far outside its reach: nearest sample 1
        (None, [[0.21] * 4]),   # expected sample 1 now, far outside its reach: nearest sample 0
    ])
    assert forwards == [2, 1]


def test_a_nan_query_row_does_not_blind_the_next_query_s_linf_distances():
    nan = float("nan")
    forwards = _run("linf", [
        # an all-NaN row stays with its position (sample 0); the whole row set is the previous query
        (None, [[nan] * 4, [0.8] * 4]),
        # one row, nothing expected: nearest sample 1's original (0.01 away); the NaN row is no
        # nearer than anything (its distance counts as infinite), not a reason to tie everything
        (None, [[0.81] * 4]),
    ])
    assert forwards == [1, 2]


class LeafModel(nn.Module):
    """MeanModel's logits as a fresh leaf that requires grad (a model computed outside autograd,
    e.g. in NumPy, handing back a tensor to differentiate): its output has no grad_fn."""

    def forward(self, x):
        with torch.no_grad():
            z = MeanModel()(x)
        return z.clone().requires_grad_(True)


def test_backwards_through_a_leaf_output_are_charged_on_the_in_order_path():
    t = QueryTracker(LeafModel(), X2, LABELS[:2], norm="l2")
    for step in range(3):  # the whole batch in order, near the originals: after the first, the fast path
        t(X2 + 0.01 * step).sum().backward()
    assert t.forwards.tolist() == [3, 3] and t.backwards.tolist() == [3, 3] and t.refused.tolist() == [0, 0]
