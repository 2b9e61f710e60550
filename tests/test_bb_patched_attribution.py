"""Regression: a batched attack whose iterate jumps far in one step keeps its queries.

Found on foolbox 3.3.4's L0BrendelBethgeAttack with its trust region normalised per image
(benchmarks/defects/foolbox-bb-l0-batch-trust-region.toml, the fix side): BB queries the whole
batch in order, a fixed number of times, so every image pays the same queries. One step of the
smaller trust region took two digits 42 pixels (L1 25) from their previous iterate: within reach of
no anchor and no original, and nearer another digit's original (L1 20) than their own (L1 25).
Step 4 of the attribution rule (the nearest known point) charged those rows, and, through the
previous query, every later row at their positions, to the other digits: those hit the budget and
were refused real queries (budget_overrun against the library) while the jumpers were charged
nothing.

The attack below queries the tracked model as BB does (forward and backward of the whole batch or
of one subset, ``inputs[ok]``, every step) and makes such a jump; real model, data and tracker.
"""
from __future__ import annotations

import pytest
import torch

from attackaudit.measure.attribution import anchor_reach
from attackaudit.measure.distance import pairwise_distance
from attackaudit.measure.tracker import QueryTracker

STEPS = 8
JUMP_AT = 2


@pytest.fixture(scope="module")
def mlp():
    from attackaudit.sources.zoo import load_model

    return load_model("digits-mlp")


@pytest.fixture(scope="module")
def digits16():
    from attackaudit.sources.subset import load_subset

    sub = load_subset("digits", 16, 0)
    return sub.inputs, sub.labels


def far_jump(x: torch.Tensor, p: int, norm: str) -> tuple[torch.Tensor, int]:
    """A point in [0, 1] for sample ``p`` (of originals ``x``) within reach of no original and
    nearer another sample's original ``q`` than its own, as BB's jumping iterate was; (point, q)."""
    flat = x.reshape(len(x), -1)
    reach = anchor_reach(flat, flat, norm, is_origin=True)
    d = pairwise_distance(flat[p:p + 1], flat, norm)[0]
    d[p] = float("inf")
    q = int(d.argmin())
    g = torch.Generator().manual_seed(p)
    for _ in range(100):
        row = (flat[q] + 0.35 * (2 * torch.rand(flat.shape[1], generator=g) - 1)).clamp(0, 1)
        dist = pairwise_distance(row.unsqueeze(0), flat, norm)[0]
        if int(dist.argmin()) == q and bool((dist >= reach).all()):
            return row.view(x.shape[1:]), q
    raise AssertionError("no far point found")


def bb_like(model, inputs: torch.Tensor, jumps: dict[int, dict[int, torch.Tensor]]) -> torch.Tensor:
    """STEPS steps, each a forward and a backward of the whole of ``inputs``, in order, with small
    moves; after step s the rows in ``jumps[s]`` (position -> point) are put there instead."""
    x = inputs.clone()
    for step in range(STEPS):
        xs = x.clone().requires_grad_(True)
        (grad,) = torch.autograd.grad(model(xs).logsumexp(1).sum(), xs)
        x = (x + 0.01 * grad.sign()).clamp(0, 1)
        for p, point in jumps.get(step, {}).items():
            x[p] = point
    return x


@pytest.mark.parametrize("norm", ["l0", "l2"])
@pytest.mark.parametrize("meet", [False, True], ids=["apart", "meeting"])
@pytest.mark.parametrize("subset", [False, True], ids=["whole batch", "subset inputs[ok]"])
def test_a_far_jump_in_a_batched_attack_is_charged_to_its_own_image(mlp, digits16, norm, meet, subset):
    """Two iterates jump far from their originals, each nearer another digit's original than its
    own. ``meet``: to almost the same point, 0.04 apart, and in the next step one of them comes 0.01
    from where the other is (and where its own anchor is not), as two of BB's iterates did, 28
    from their originals in L1, 0.26 apart; else each to its own point, and on from there."""
    x, y = digits16
    budget = 2 * STEPS  # exactly what each image's steps take: one query more is refused
    t = QueryTracker(mlp, x, y, norm=norm, budget=budget)
    ok = torch.ones(len(x), dtype=torch.bool)
    if subset:
        ok[[1, 6, 11]] = False  # as BB after its init attack: the samples the init broke
    pos = ok.nonzero().squeeze(1)
    a, b = 4, 9  # positions in the attacked batch
    far_a, q_a = far_jump(x, int(pos[a]), norm)
    far_b, q_b = far_jump(x, int(pos[b]), norm)
    if meet:
        k = int(((far_a > 0.05) & (far_a < 0.95)).flatten().nonzero()[0])
        near = [far_a.clone(), far_a.clone()]
        near[0].view(-1)[k] += 0.04
        near[1].view(-1)[k] += 0.01
        jumps = {JUMP_AT: {a: far_a, b: near[0]}}
        jumps |= {s: {a: far_a, b: near[1]} for s in range(JUMP_AT + 1, STEPS)}
    else:
        jumps = {JUMP_AT: {a: far_a, b: far_b}}
    took = [q_a, q_b]
    jumpers = [a, b]
    out = bb_like(t, x[ok], jumps)
    expected = torch.where(ok, STEPS, 0)
    assert t.forwards.tolist() == expected.tolist(), f"jumpers {pos[jumpers].tolist()}, nearest to {took}"
    assert t.backwards.tolist() == expected.tolist()
    assert t.refused.tolist() == [0] * len(x)
    # the rule's one-row-at-a-time reference says the same
    from reference_ledger import ReferenceLedger, assert_agree

    ref = ReferenceLedger(mlp, x, y, norm=norm, budget=budget)
    assert torch.equal(bb_like(ref, x[ok], jumps), out)
    assert_agree(t, ref)
