"""The QueryTracker's parts, each alone: the ledger (step 6 of the attribution rule in
``harness/measure/tracker.py``), the attribution (steps 2–5), the best-keeper (step 7) and the query
window that defers step 7. Each part against a plain Python statement of its own step, on real
digits where distances matter; the tracker as a whole is checked against the reference ledger in
``tests/test_reference_ledger.py``.
"""
from __future__ import annotations

from functools import partial

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attackaudit.measure.attribution import BOX_MARGIN, Attribution, anchor_reach, linf_box
from attackaudit.measure.best_keeper import BOX_TOLERANCE, KEEP_BESTS, BestKeeper
from attackaudit.measure.distance import attribution_norm, lp_norm
from attackaudit.measure.query_ledger import REFUSAL_SCALE, QueryLedger, rank_within_batch
from attackaudit.measure.query_window import QueryWindow
from attackaudit.measure.success import is_success
from conftest import examples

NORMS = ("l0", "l1", "l2", "linf")


# -- the ledger ------------------------------------------------------------------------------------
def _ledger(n: int, budget: int, targets: torch.Tensor | None = None) -> QueryLedger:
    labels = torch.arange(n) % 10
    return QueryLedger(labels, targets, budget, torch.arange(n))


#: one charge: (counter, kind, a seed for its owners)
CHARGES = st.lists(st.tuples(st.sampled_from(["forwards", "backwards"]), st.sampled_from(["all", "distinct", "any"]),
                             st.integers(0, 2**16)), min_size=1, max_size=30)


@settings(max_examples=examples(80), deadline=None)
@given(n=st.integers(1, 5), budget=st.integers(1, 8), charges=CHARGES)
def test_the_ledger_charges_row_by_row_within_the_budget(n, budget, charges):
    """Step 6 in plain Python: a row is one query of its owner while the owner has used fewer than
    ``budget`` forwards + backwards, else refused; the fast paths (pending whole batches, the
    ``max_used`` shortcut) give the same counts and masks."""
    ledger = _ledger(n, budget)
    counts = {"forwards": [0] * n, "backwards": [0] * n}
    refused = [0] * n
    for counter, kind, seed in charges:
        g = torch.Generator().manual_seed(seed)
        if kind == "all":
            idx = ledger.arange
        elif kind == "distinct":
            idx = torch.randperm(n, generator=g)[:int(torch.randint(1, n + 1, (1,), generator=g))]
        else:
            idx = torch.randint(0, n, (int(torch.randint(1, 2 * n + 1, (1,), generator=g)),), generator=g)
        expected = []
        for s in idx.tolist():
            ok = counts["forwards"][s] + counts["backwards"][s] < budget
            counts[counter][s] += ok
            refused[s] += not ok
            expected.append(ok)
        got = ledger.charge(counter, idx, kind)
        assert (got is True) == all(expected)
        if got is not True:
            assert got.tolist() == expected
        assert ledger.max_used >= max(f + b for f, b in zip(counts["forwards"], counts["backwards"]))
    assert ledger.forwards.tolist() == counts["forwards"]
    assert ledger.backwards.tolist() == counts["backwards"]
    assert ledger.refused.tolist() == refused
    assert ledger.used() == [f + b + r for f, b, r in zip(counts["forwards"], counts["backwards"], refused)]
    assert (ledger.queries <= budget).all()


def test_whole_batches_wait_in_a_python_counter_until_read():
    ledger = _ledger(3, 10)
    for _ in range(4):
        ledger.charge_whole_batch("forwards")
    assert ledger.charge("backwards", ledger.arange, "all") is True
    assert ledger._forwards.tolist() == [0, 0, 0]  # nothing added to the tensor yet
    assert ledger.forwards.tolist() == [4, 4, 4] and ledger.backwards.tolist() == [1, 1, 1]
    assert ledger.max_used == 5


@settings(max_examples=examples(50), deadline=None)
@given(idx=st.lists(st.integers(0, 6), min_size=1, max_size=20))
def test_rank_within_batch_counts_earlier_rows_of_the_same_sample(idx):
    assert rank_within_batch(torch.tensor(idx)).tolist() == [idx[:p].count(s) for p, s in enumerate(idx)]


@pytest.mark.parametrize("targeted", [False, True])
def test_the_refusal_answer_is_never_a_success(targeted):
    labels = torch.tensor([0, 3, 9])
    targets = torch.tensor([1, 2, 0]) if targeted else None
    ledger = QueryLedger(labels, targets, 1, torch.arange(3))
    idx = torch.tensor([2, 0, 0, 1])
    answer = ledger.refusal_logits(idx, torch.float64, 10)
    assert answer.dtype == torch.float64 and answer.shape == (4, 10)
    assert (answer.gather(1, labels[idx].view(-1, 1)) == REFUSAL_SCALE).all()
    assert not is_success(answer, labels[idx], None if targets is None else targets[idx]).any()
    if targeted:
        assert (answer.gather(1, targets[idx].view(-1, 1)) == -REFUSAL_SCALE).all()


def test_backward_hooks_zero_the_gradient_of_refused_rows():
    """Through real autograd: a backward is charged like a forward, a refused row gets no gradient."""
    ledger = _ledger(3, 2)
    ledger.charge("forwards", torch.tensor([0, 0]), "any")  # sample 0 has used its budget
    x = torch.ones(2, 4, requires_grad=True)
    out = x * 2
    idx = torch.tensor([0, 1])
    out.grad_fn.register_prehook(partial(ledger.on_backward_known, idx))
    out.sum().backward()
    assert x.grad.tolist() == [[0.0] * 4, [2.0] * 4]
    assert ledger.backwards.tolist() == [0, 1, 0] and ledger.refused.tolist() == [1, 0, 0]

    x = torch.ones(3, 4, requires_grad=True)
    out = x * 3
    out.register_hook(partial(ledger.on_backward, idx=torch.tensor([1, 1, 2]), kind="any"))
    out.sum().backward()
    assert x.grad[:, 0].tolist() == [3.0, 0.0, 3.0]  # sample 1's second row is past its budget
    assert ledger.backwards.tolist() == [0, 2, 1] and ledger.refused.tolist() == [1, 1, 0]


def test_an_in_order_backward_below_the_budget_costs_no_tensor_operation():
    ledger = _ledger(2, 5)
    x = torch.ones(2, 3, requires_grad=True)
    out = x * 2
    out.grad_fn.register_prehook(ledger.on_backward_in_order)
    out.sum().backward()
    assert ledger._pending["backwards"] == 1 and x.grad.eq(2).all()
    assert ledger.backwards.tolist() == [1, 1]


def test_the_ledger_names_a_wrong_arange():
    with pytest.raises(ValueError, match="arange has 2 entries for 3 samples"):
        QueryLedger(torch.zeros(3, dtype=torch.long), None, 5, torch.arange(2))


# -- the attribution -------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def digits():
    """Six distinct digits, flattened (6×64), and their input shape."""
    from attackaudit.sources.subset import load_subset

    x = load_subset("digits", 6, 0).inputs
    return x.reshape(len(x), -1), x.shape


def _attribution(flat: torch.Tensor, shape: torch.Size, norm: str) -> Attribution:
    return Attribution(flat, shape, norm, torch.arange(len(flat)))


def _near(flat: torch.Tensor, reach: torch.Tensor, owners: list[int], norm: str, fraction: float,
          g: torch.Generator) -> torch.Tensor:
    """A row per owner at ``fraction`` of its reach from the owner's original (attribution norm)."""
    direction = torch.randn((len(owners), flat.shape[1]), generator=g)
    direction = direction / lp_norm(direction, attribution_norm(norm)).unsqueeze(1)
    return flat[owners] + fraction * reach[owners].unsqueeze(1) * direction


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(norm=st.sampled_from(NORMS), owners=st.lists(st.integers(0, 5), min_size=1, max_size=12),
       fraction=st.sampled_from([0.0, 0.3, 0.9]), seed=st.integers(0, 2**16))
def test_rows_near_an_original_go_to_it_whatever_the_batch(digits, norm, owners, fraction, seed):
    """Subsets, reorders and repeats: a row within reach of one original (nearer to it than to any
    other) is that original's, and the kind says how the batch lines up with the samples."""
    flat, shape = digits
    attribution = _attribution(flat, shape, norm)
    rows = _near(flat, attribution.reach, owners, norm, fraction, torch.Generator().manual_seed(seed))
    slot = torch.empty_like(flat)
    idx, kind, copy, in_slot = attribution.attribute(rows, lambda: slot, lambda: [0] * len(flat))
    assert idx.tolist() == owners
    assert torch.equal(copy, rows) and copy.data_ptr() != rows.data_ptr()  # a private copy
    if owners == list(range(len(flat))):
        assert (kind, in_slot) == ("all", True) and copy.data_ptr() == slot.data_ptr()
    else:
        assert kind == "any" and not in_slot  # no hint, no previous query: nothing was expected


@pytest.mark.parametrize("norm", NORMS)
def test_the_whole_batch_containment_test(digits, norm):
    flat, shape = digits
    attribution = _attribution(flat, shape, norm)
    slot = torch.empty_like(flat)
    g = torch.Generator().manual_seed(1)
    inside = _near(flat, attribution.reach, list(range(6)), norm, 0.5, g)
    assert attribution.contains_whole_batch(inside.view(shape), slot, slot.view(shape))
    assert torch.equal(slot, inside)
    for bad in (flat[[1, 0, 2, 3, 4, 5]], inside.clone().index_fill_(0, torch.tensor([3]), float("nan"))):
        assert not attribution.contains_whole_batch(bad.view(shape), slot, slot.view(shape))


def test_a_hint_names_the_owners_and_a_repeated_hint_is_none(digits):
    flat, shape = digits
    attribution = _attribution(flat, shape, "l2")
    slot, unused = torch.empty_like(flat), lambda: [0] * 6
    rows = _near(flat, attribution.reach, [4, 1], "l2", 0.5, torch.Generator().manual_seed(2))
    attribution.expect(torch.tensor([4, 1]))
    idx, kind, _, in_slot = attribution.attribute(rows, lambda: slot, unused)
    assert (idx.tolist(), kind, in_slot) == ([4, 1], "distinct", True)
    attribution.expect(torch.tensor([4, 4]))
    assert attribution.expected(2) is None
    idx, kind, _, _ = attribution.attribute(rows, lambda: slot, unused)
    assert (idx.tolist(), kind) == ([4, 1], "any")  # resolved by the nearest original


def test_ties_go_to_the_expected_owner_then_the_least_used_then_the_lowest(digits):
    """Step 4's tie rule on two identical originals (0 and 2)."""
    flat, shape = digits
    flat = flat.clone()
    flat[2] = flat[0]
    attribution = _attribution(flat, shape, "l2")
    slot = torch.empty_like(flat)
    whole = attribution.attribute(flat.clone(), lambda: slot, lambda: [0] * 6)
    assert whole[0].tolist() == list(range(6)) and whole[1] == "all"  # positions kept
    one = flat[:1].clone()
    assert attribution.attribute(one, lambda: slot, lambda: [0] * 6)[0].tolist() == [0]
    assert attribution.attribute(one, lambda: slot, lambda: [5, 0, 0, 0, 0, 0])[0].tolist() == [2]
    # earlier rows of the call count: two copies go one to each twin
    assert attribution.attribute(flat[[0, 0]].clone(), lambda: slot, lambda: [0] * 6)[0].tolist() == [0, 2]


def test_a_batch_resolved_as_expected_moves_the_anchor(digits):
    """Step 5: the whole batch, far from the originals but in order, becomes the anchor."""
    flat, shape = digits
    attribution = _attribution(flat, shape, "l2")
    slot = torch.empty_like(flat)
    moved = flat + 0.45 * (flat.roll(1, 0) - flat)  # each row still nearest its own original
    before = attribution.anchor
    idx, kind, copy, _ = attribution.attribute(moved, lambda: slot, lambda: [0] * 6)
    assert (idx.tolist(), kind) == (list(range(6)), "all")
    assert attribution.anchor is not before and torch.equal(attribution.anchor, moved)
    assert torch.equal(attribution.reach, anchor_reach(moved, flat, "l2"))


def test_the_previous_query_moves_to_the_spare_slot(digits):
    flat, shape = digits
    attribution = _attribution(flat, shape, "l1")
    window = QueryWindow(flat, shape, max_queries=2)
    slot = window.push(flat.clone(), torch.zeros(6, 10), None)
    attribution.remember(slot, attribution.arange, in_slot=True)
    spare = window.spare(6)
    attribution.move_previous(spare)
    assert not attribution.previous_in_slot and attribution.previous[0].data_ptr() == spare.data_ptr()
    assert torch.equal(attribution.previous[0], flat)


def test_anchor_reach_and_the_linf_box(digits):
    flat, _ = digits
    reach = anchor_reach(flat, flat, "linf", is_origin=True)
    sep = torch.cdist(flat, flat, p=float("inf")) + torch.eye(6) * 1e9
    assert torch.allclose(reach, sep.amin(1) / 2)
    assert anchor_reach(flat[:1], flat[:1], "l2").tolist() == [float("inf")]
    lo, hi = linf_box(flat, reach)
    # the margin (2e-6 across the box) is far above float32 rounding at these values (~1e-7)
    assert ((hi - flat) - (reach - BOX_MARGIN).unsqueeze(1)).abs().max() < 5e-7
    assert torch.allclose(flat - lo, hi - flat)
    lo, hi = linf_box(flat[:1], torch.tensor([float("inf")]))
    assert (lo <= -1).all() and (hi >= 2).all()  # no other sample: a box beyond [0, 1]


# -- the best-keeper --------------------------------------------------------------------------------
#: a candidate: (owner, coordinates on a grid of 1/8 so that distances are exact (L2: its sum of
#: squares) and often equal, adversarial?, a non-finite logit?)
CANDIDATE = st.tuples(st.integers(0, 3), st.lists(st.integers(-1, 9), min_size=4, max_size=4), st.booleans(),
                      st.booleans())


def _originals() -> torch.Tensor:
    return torch.tensor([[0, 0, 0, 0], [1, 1, 1, 1], [0.5, 0.25, 0.75, 0], [0.125, 1, 0, 0.5]])


def _candidates(raw: list) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(rows B×4, logits B×3, owners B) of raw candidates; labels are 0, so class 1 above 0 is
    adversarial and an exact tie is not."""
    rows = torch.tensor([[c / 8 for c in coords] for _, coords, _, _ in raw])
    logits = torch.tensor([[1.0, 2.0 if adv else 1.0, 0.0] for _, _, adv, _ in raw])
    logits[torch.tensor([bad for *_, bad in raw], dtype=torch.bool), 2] = float("nan")
    return rows, logits, torch.tensor([owner for owner, *_ in raw])


def _plain_kept(raw: list, norm: str) -> list[list[float]]:
    """Step 7 in plain Python: per sample, the KEEP_BESTS smallest eligible distances, earliest first."""
    originals = _originals()
    kept: list[list[float]] = [[] for _ in range(4)]
    for owner, coords, adv, bad in raw:
        point = [min(max(c / 8, 0.0), 1.0) for c in coords]
        if adv and not bad and all(0 <= c / 8 <= 1 for c in coords):
            delta = [p - float(o) for p, o in zip(point, originals[owner])]
            size = {"l0": sum(d != 0 for d in delta), "l1": sum(abs(d) for d in delta),
                    "l2": sum(d * d for d in delta) ** 0.5, "linf": max(abs(d) for d in delta)}[norm]
            kept[owner] = sorted(kept[owner] + [float(size)])[:KEEP_BESTS]
    return [k + [float("inf")] * (KEEP_BESTS - len(k)) for k in kept]


@settings(max_examples=examples(80), deadline=None)
@given(norm=st.sampled_from(NORMS), raw=st.lists(CANDIDATE, min_size=1, max_size=24),
       split=st.integers(1, 24))
def test_the_keeper_keeps_the_smallest_eligible_candidates(norm, raw, split):
    """Eligible: adversarial strictly, finite logits, inside the box; in any number of offers."""
    keeper = BestKeeper(_originals(), norm, torch.zeros(4, dtype=torch.long), None)
    rows, logits, owners = _candidates(raw)
    for start in range(0, len(raw), split):
        keeper.offer(rows[start:start + split], logits[start:start + split], owners[start:start + split])
    # exact but for L2's square root, taken in float32 by the keeper
    assert torch.allclose(keeper.distances, torch.tensor(_plain_kept(raw, norm)), rtol=1e-6, atol=0)
    empty = torch.isinf(keeper.distances)
    assert torch.equal(keeper.points[empty], _originals().unsqueeze(1).expand(-1, KEEP_BESTS, -1)[empty])
    assert (keeper.points >= 0).all() and (keeper.points <= 1).all()


def test_the_earliest_of_equal_candidates_is_kept_and_the_clean_input_comes_first():
    originals = _originals()
    keeper = BestKeeper(originals, "linf", torch.zeros(4, dtype=torch.long), None)
    adversarial = torch.tensor([[0.0, 1.0, 0.0]])
    for value in (0.25, 0.5, 0.75, 0.5):  # three at distance 0.25 from sample 2's third coordinate
        row = originals[2].clone()
        row[0] = value
        keeper.offer(row.unsqueeze(0), adversarial, torch.tensor([2]))
    assert keeper.points[2, :, 0].tolist() == [0.5, 0.5, 0.25]  # 0.5 (dist 0) twice, then 0.25
    keeper.add_clean(torch.tensor([2]))  # the clean input, distance 0, before every query row
    assert keeper.distances[2].tolist() == [0.0, 0.0, 0.0] and keeper.points[2, :, 0].tolist() == [0.5, 0.5, 0.5]


@settings(max_examples=examples(40), deadline=None)
@given(norm=st.sampled_from(NORMS), queries=st.lists(st.tuples(st.integers(0, 2**16), st.booleans()), min_size=1,
                                                      max_size=6))
def test_a_window_of_queries_equals_one_query_at_a_time(norm, queries):
    """``offer_window`` (whole batches, and subsets in the first places of their slots) keeps what
    ``offer`` keeps when each query comes alone."""
    originals = _originals()
    labels = torch.zeros(4, dtype=torch.long)
    at_once, one_by_one = (BestKeeper(originals, norm, labels, None) for _ in range(2))
    window = QueryWindow(originals, originals.shape, max_queries=len(queries))
    for seed, subset in queries:
        g = torch.Generator().manual_seed(seed)
        rows = (torch.randint(-1, 10, (4, 4), generator=g) / 8.0)
        logits = torch.randint(0, 3, (4, 3), generator=g).float()
        owners = torch.randperm(4, generator=g)[:2] if subset else None
        b = 4 if owners is None else 2
        window.push(rows[:b], logits[:b], owners)
        one_by_one.offer(rows[:b], logits[:b], torch.arange(4) if owners is None else owners)
    at_once.offer_window(*window.take())
    assert torch.equal(at_once.distances, one_by_one.distances)
    assert torch.equal(at_once.points, one_by_one.points)


def test_a_best_the_model_rejects_gives_way_to_the_next():
    originals = _originals()
    keeper = BestKeeper(originals, "l1", torch.zeros(4, dtype=torch.long), torch.ones(4, dtype=torch.long))
    target_reached = torch.tensor([[0.0, 2.0, 0.0]])  # targeted: class 1 strictly above the rest
    for value in (0.125, 0.25, 0.375):
        keeper.offer(torch.full((1, 4), value), target_reached, torch.tensor([0]))
    rejected = {0.125, 0.25}

    def still_adversarial(points: torch.Tensor, owners: torch.Tensor) -> torch.Tensor:
        assert owners.tolist() == [0]
        return torch.tensor([float(p[0]) not in rejected for p in points])

    assert keeper.drop_unconfirmed(still_adversarial).tolist() == [2, 0, 0, 0]
    assert keeper.distances[0].tolist() == [1.5, float("inf"), float("inf")]
    rejected.add(0.375)
    assert keeper.drop_unconfirmed(still_adversarial).tolist() == [1, 0, 0, 0]
    assert torch.isinf(keeper.distances).all() and torch.equal(keeper.points[0, 0], originals[0])


def test_the_keeper_names_mismatched_labels():
    with pytest.raises(ValueError, match="4 originals, 3 labels"):
        BestKeeper(_originals(), "l2", torch.zeros(3, dtype=torch.long), None)


# -- the query window -------------------------------------------------------------------------------
def test_the_window_holds_queries_in_order_and_keeps_a_spare_slot():
    originals = torch.rand(3, 4)
    window = QueryWindow(originals, torch.Size([3, 1, 2, 2]), max_queries=3)
    assert not window.ready and window.limit == 3
    pushed = [(torch.rand(3, 4), torch.rand(3, 5), None), (torch.rand(2, 4), torch.rand(2, 5), torch.tensor([2, 0]))]
    for rows, logits, owners in pushed:
        slot = window.push(rows, logits, owners)
        assert torch.equal(slot, rows)
    assert window.ready and window.count == 2 and not window.full
    spare = window.spare(3)
    assert all(spare.data_ptr() != s.data_ptr() for s in window.row_slots[:window.limit])
    rows, logits, owners = window.take()
    assert rows.shape == (2, 3, 4) and logits.shape == (2, 3, 5) and window.count == 0
    assert torch.equal(rows[0], pushed[0][0]) and torch.equal(rows[1, :2], pushed[1][0])
    assert torch.equal(logits[1, :2], pushed[1][1])
    assert owners[0] is None and owners[1].tolist() == [2, 0]
    assert window.shaped_slots[0].shape == (3, 1, 2, 2)
    assert window.shaped_slots[0].data_ptr() == window.row_slots[0].data_ptr()


def test_the_window_is_bounded_by_bytes():
    originals = torch.zeros(10, 100)  # 4000 bytes a query
    assert QueryWindow(originals, originals.shape, max_queries=128, max_bytes=10_000).limit == 2
    assert QueryWindow(originals, originals.shape, max_queries=128, max_bytes=100).limit == 1
    with pytest.raises(ValueError, match="max_queries must be at least 1, got 0"):
        QueryWindow(originals, originals.shape, max_queries=0)


def test_out_of_box_rows_never_become_bests():
    originals = _originals()
    keeper = BestKeeper(originals, "l2", torch.zeros(4, dtype=torch.long), None)
    edge = originals[[1, 1]].clone()
    edge[0, 0], edge[1, 0] = 1 + 0.5 * BOX_TOLERANCE, 1 + 2 * BOX_TOLERANCE
    keeper.offer(edge, torch.tensor([[0.0, 1.0, 0.0]] * 2), torch.tensor([1, 1]))
    assert keeper.distances[1].tolist() == [0.0, float("inf"), float("inf")]  # only the one inside, clamped
