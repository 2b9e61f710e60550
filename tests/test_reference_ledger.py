"""Differential tests: the QueryTracker (fast paths, deferred buffer) against the reference ledger
(tests/reference_ledger.py, the attribution rule one row at a time) on random query streams.

Counts, refusals, answers, gradients, the kept best candidates (distances and points) and what
``recheck`` drops must agree exactly.
"""
from __future__ import annotations

from contextlib import contextmanager

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import attackaudit.tracker as tracker_module
from attackaudit.tracker import BOX_TOLERANCE, QueryTracker
from reference_ledger import ReferenceLedger, assert_agree, same

NORMS = ("l0", "l1", "l2", "linf")

#: one operation of a stream: (kind, a seed or sample, a size)
OPS = st.one_of(
    st.tuples(st.just("walk"), st.integers(0, 2**16), st.sampled_from([0.02, 0.1, 0.4])),
    st.tuples(st.just("clean"), st.just(0), st.just(0.0)),
    st.tuples(st.just("subset"), st.integers(0, 2**16), st.sampled_from([1, 2, 3])),
    st.tuples(st.just("hinted"), st.integers(0, 2**16), st.sampled_from([1, 2, 3])),
    st.tuples(st.just("repeat"), st.integers(0, 2**16), st.sampled_from([2, 3])),
    st.tuples(st.just("nan"), st.integers(0, 2**16), st.sampled_from([0.0, 1.0])),
    st.tuples(st.just("inf"), st.integers(0, 2**16), st.just(0.0)),
    st.tuples(st.just("edge"), st.integers(0, 2**16), st.sampled_from([0.5, 2.0])),
    st.tuples(st.just("toward"), st.integers(0, 2**16), st.sampled_from([0.3, 0.6, 0.9])),
    st.tuples(st.just("larger"), st.integers(0, 2**16), st.sampled_from([1, 3])),
    st.tuples(st.just("empty"), st.just(0), st.just(0.0)),
    st.tuples(st.just("backward"), st.integers(0, 2**16), st.sampled_from([0.05, 0.3])),
)


@contextmanager
def deferred_queries(k: int):
    """Force the tracker's deferred buffer to ``k`` queries (1: the one-slot ring of large inputs)."""
    saved = tracker_module.DEFERRED_QUERIES
    tracker_module.DEFERRED_QUERIES = k
    try:
        yield
    finally:
        tracker_module.DEFERRED_QUERIES = saved


def _query(kind: str, seed: int, size: float, walk: torch.Tensor, x: torch.Tensor):
    """(query rows N'×C×H×W or None, hint or None, backward?) for one operation; moves ``walk``."""
    g = torch.Generator().manual_seed(seed)
    n = len(x)
    pick = torch.randint(0, n, (int(size) if kind in ("subset", "hinted", "repeat") else 1,), generator=g)
    if kind == "walk" or kind == "backward":
        walk.copy_((walk + size * torch.randn(walk.shape, generator=g)).clamp(0, 1))
        return walk.clone(), None, kind == "backward"
    if kind == "clean":
        return x.clone(), None, False
    if kind == "subset":  # reorders and repeats included
        return walk[pick].clone(), None, False
    if kind == "hinted":  # the minimal-ε search's subsets: distinct samples, named in advance
        idx = torch.randperm(n, generator=g)[:min(int(size), n)]
        return walk[idx].clone(), idx, True
    if kind == "repeat":
        return walk[pick[:1]].repeat(int(size), 1, 1, 1), None, False
    if kind in ("nan", "inf"):
        q = walk.clone()
        value = float("nan") if kind == "nan" else float("inf")
        if size == 1.0 or kind == "inf":
            q[pick[0]].view(-1)[int(torch.randint(0, q[0].numel(), (1,), generator=g))] = value
        else:
            q[pick[0]] = value  # the whole row: a division by a zero gradient norm
        return q, None, False
    if kind == "edge":  # just inside (0.5) or just outside (2.0) the box tolerance
        q = walk.clone()
        q[pick[0]].view(-1)[0] = 1 + size * BOX_TOLERANCE
        return q, None, False
    if kind == "toward":  # every row moves towards another sample (far, often adversarial)
        shift = int(torch.randint(1, max(2, n), (1,), generator=g)) % max(n, 1)
        walk.copy_(x + size * (x.roll(shift, 0) - x))
        return walk.clone(), None, False
    if kind == "larger":  # more rows than samples
        return torch.cat([walk, walk[pick].repeat(int(size), 1, 1, 1)]), None, False
    if kind == "empty":
        return x[:0].clone(), None, False
    raise AssertionError(kind)


def run_stream(cnn, x, y, norm, budget, ops, deferred, targeted=False):
    """Feed one stream to both; compare after every query and at the end (offer, recheck)."""
    targets = ((y + 1) % 10) if targeted else None
    with deferred_queries(deferred):
        t = QueryTracker(cnn, x, y, norm=norm, budget=budget, targeted=targeted, targets=targets)
    ref = ReferenceLedger(cnn, x, y, norm=norm, budget=budget, targeted=targeted, targets=targets)
    walk = x.clone()
    for step, (kind, seed, size) in enumerate(ops):
        q, hint, backward = _query(kind, seed, size, walk, x)
        t.expect(hint)
        ref.expect(hint)
        qa, qb = q.clone().requires_grad_(backward), q.clone().requires_grad_(backward)
        out_a, out_b = t(qa), ref(qb)
        assert same(out_a.detach(), out_b.detach()), (step, kind)
        if backward:
            out_a.sum().backward()
            out_b.sum().backward()
            assert same(qa.grad, qb.grad), (step, kind)
        t.expect(None)
        ref.expect(None)
        if step % 5 == 4:  # reading results mid-stream processes the deferred window early
            assert_agree(t, ref, f"step {step} {kind}")
    final = walk.clamp(0, 1)
    t.offer(final)
    ref.offer(final)
    assert_agree(t, ref, "after offer")
    assert t.recheck().tolist() == ref.recheck()
    assert_agree(t, ref, "after recheck")
    return t, ref


@pytest.fixture(scope="module")
def pool():
    from attackaudit.data import load_subset

    sub = load_subset("digits", 6, 0)
    return sub.inputs, sub.labels


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(n=st.integers(1, 5), norm=st.sampled_from(NORMS), budget=st.integers(2, 14),
       duplicate=st.booleans(), deferred=st.sampled_from([1, 2, 3, 128]), targeted=st.booleans(),
       ops=st.lists(OPS, min_size=1, max_size=24))
def test_tracker_agrees_with_the_reference_ledger(cnn, pool, n, norm, budget, duplicate, deferred, targeted, ops):
    x, y = pool[0][:n].clone(), pool[1][:n].clone()
    if duplicate and n >= 2:  # two identical originals (same label: a duplicated image in the data)
        x[n - 1], y[n - 1] = x[0], y[0]
    run_stream(cnn, x, y, norm, budget, ops, deferred, targeted)


def _pgd_with_nan(model, x, y, steps, nan_after, nan_row):
    """An L2 PGD whose iterate for one sample turns NaN (a division by a zero gradient norm)."""
    adv = x.clone()
    for s in range(steps):
        adv.requires_grad_(True)
        loss = torch.nn.functional.cross_entropy(model(adv), y)
        (g,) = torch.autograd.grad(loss, adv)
        norm = g.flatten(1).norm(dim=1).view(-1, 1, 1, 1)
        if s >= nan_after:
            norm[nan_row] = 0.0
            g[nan_row] = 0.0
        adv = (adv.detach() + 0.1 * g / norm)
        adv = torch.where(torch.isnan(adv), adv, adv.clamp(0, 1))
    return adv


@pytest.mark.parametrize("deferred", [128, 1])
def test_a_nan_row_is_charged_to_its_own_sample(cnn, subset8, deferred):
    """The issue's example: 40 PGD steps, the last sample's iterate NaN after step 20. Every sample
    pays 40 forwards and 40 backwards (was [40, 80, 80, 80, 80, 80, 80, 120] in queries)."""
    x, y = subset8.inputs, subset8.labels
    with deferred_queries(deferred):
        t = QueryTracker(cnn, x, y, norm="l2", budget=2000)
    ref = ReferenceLedger(cnn, x, y, norm="l2", budget=2000)
    for model in (t, ref):
        _pgd_with_nan(model, x, y, 40, 20, 7)
    assert t.queries.tolist() == [80] * 8
    assert t.forwards.tolist() == ref.forwards and t.backwards.tolist() == ref.backwards
    assert torch.equal(t.kept[1], ref.kept_tensors()[1])


def test_identical_originals_are_each_charged_their_own_queries(cnn, subset8):
    """Two pairs of identical images (same labels), attacked by a real library's DDN in whole
    batches: each sample pays its own queries and keeps its own best (the duplicates got nothing
    and their twins double before)."""
    import foolbox as fb

    x, y = subset8.inputs.clone(), subset8.labels.clone()
    x[6], y[6], x[7], y[7] = x[0], y[0], x[1], y[1]
    t = QueryTracker(cnn, x, y, norm="l2", budget=2000)
    ref = ReferenceLedger(cnn, x, y, norm="l2", budget=2000)
    for model in (t, ref):
        fb.attacks.DDNAttack(steps=50)(fb.PyTorchModel(model, bounds=(0, 1)), x, y, epsilons=None)
    assert t.queries.tolist() == [f + b for f, b in zip(ref.forwards, ref.backwards)]
    assert len(set(t.queries.tolist())) == 1, t.queries.tolist()
    points, dist = t.kept
    assert torch.equal(dist, ref.kept_tensors()[1])
    assert torch.isfinite(dist[[0, 6], 0]).all()


@pytest.mark.parametrize("norm", NORMS)
def test_the_previous_query_survives_a_one_slot_buffer(cnn, subset8, norm):
    """With one deferred slot (the whole batch above the byte limit: CIFAR-10 at ~700 samples per
    call) a whole batch that fails the containment test is first clamped into the slot (L∞); step 4
    must still see the previous query's rows there, not this query's."""
    x, y = subset8.inputs, subset8.labels
    ops = [("walk", 1, 0.02), ("toward", 5, 0.6), ("walk", 2, 0.02), ("toward", 6, 0.9), ("subset", 3, 2.0),
           ("toward", 5, 0.3), ("subset", 4, 3.0)]
    run_stream(cnn, x, y, norm, 2000, ops, deferred=1)


def test_an_empty_batch_costs_nothing(cnn, subset8):
    x, y = subset8.inputs, subset8.labels
    t = QueryTracker(cnn, x, y, norm="linf")
    with torch.no_grad():
        out = t(x[:0])
        t(x + 0.01)
        t(x[:0])
    assert out.shape == (0, 10)
    assert t.forwards.tolist() == [1] * 8 and t.refused.sum() == 0


class TiedLogits(torch.nn.Module):
    """A linear model on 8×8 digits whose logits are rounded to whole numbers, so that many query
    rows tie the label's logit exactly with another class's; ``perm`` renames the classes (logit j
    of the twin is logit ``perm[j]`` of the model), as the ``~perm`` zoo twin does."""

    def __init__(self, perm: torch.Tensor | None = None) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(7)
        self.weight = torch.nn.Parameter(torch.randn(10, 64, generator=g) * 0.1, requires_grad=False)
        self.perm = perm

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits = torch.round(x.flatten(1) @ self.weight.T)
        return logits if self.perm is None else logits[:, self.perm]


def _tied_rows(x: torch.Tensor, y: torch.Tensor, model: torch.nn.Module) -> int:
    with torch.no_grad():
        logits = model(x.clamp(0, 1))
    own = logits.gather(1, y.view(-1, 1)).squeeze(1)
    others = logits.scatter(1, y.view(-1, 1), float("-inf")).amax(1)
    return int((own == others).sum())


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(n=st.integers(1, 5), norm=st.sampled_from(NORMS), budget=st.integers(2, 14),
       targeted=st.booleans(), perm_seed=st.integers(0, 2**16), ops=st.lists(OPS, min_size=1, max_size=16))
def test_success_is_strict_whatever_the_class_order(pool, n, norm, budget, targeted, perm_seed, ops):
    """Issue 32: with exact ties between the label and another class, the tracker and the ledger
    give the same counts, answers (renamed) and kept bests on a model and on its class-permuted
    twin (labels and targets mapped): an exact tie is never a success, whatever the class order."""
    perm = torch.randperm(10, generator=torch.Generator().manual_seed(perm_seed))
    inverse = torch.argsort(perm)  # class c of the model is class inverse[c] of the twin
    x, y = pool[0][:n].clone(), pool[1][:n].clone()
    base, twin = TiedLogits(), TiedLogits(perm)
    targets = (y + 1) % 10
    results = []
    for model, labels, tgt in ((base, y, targets), (twin, inverse[y], inverse[targets])):
        t = QueryTracker(model, x, labels, norm=norm, budget=budget, targeted=targeted,
                         targets=tgt if targeted else None)
        ref = ReferenceLedger(model, x, labels, norm=norm, budget=budget, targeted=targeted,
                              targets=tgt if targeted else None)
        walk, answers = x.clone(), []
        for kind, seed, size in ops:
            q, hint, _ = _query(kind, seed, size, walk, x)
            t.expect(hint)
            ref.expect(hint)
            with torch.no_grad():
                out, out_ref = t(q.clone()), ref(q.clone())
            assert same(out, out_ref), kind
            answers.append(out if model is base else out[:, inverse])  # back to the model's classes
            t.expect(None)
            ref.expect(None)
        t.offer(walk.clamp(0, 1))
        ref.offer(walk.clamp(0, 1))
        dropped = t.recheck().tolist()
        assert dropped == ref.recheck()
        assert_agree(t, ref, "tied logits")
        results.append((t.forwards.tolist(), t.backwards.tolist(), t.refused.tolist(), answers,
                        t.kept, dropped, t.clean_adversarial.tolist()))
    (fa, ba, ra, ans_a, kept_a, drop_a, clean_a), (fb, bb, rb, ans_b, kept_b, drop_b, clean_b) = results
    assert (fa, ba, ra, drop_a, clean_a) == (fb, bb, rb, drop_b, clean_b)
    assert all(same(a, b) for a, b in zip(ans_a, ans_b))
    assert torch.equal(kept_a[1], kept_b[1]) and torch.equal(kept_a[0], kept_b[0])


def test_the_tied_model_really_ties(pool):
    """The property above is only worth something if its streams meet exact ties: the rounded
    model ties the label with another class on a good share of points near the data."""
    x, y = pool
    g = torch.Generator().manual_seed(0)
    walks = torch.cat([x + 0.1 * k * torch.randn(x.shape, generator=g) for k in range(20)])
    assert _tied_rows(walks, y.repeat(20), TiedLogits()) >= 20  # of 120


def test_an_exact_tie_is_not_adversarial():
    from attackaudit.success import is_success

    logits = torch.tensor([[1.0, 1.0, 0.0], [0.0, 2.0, 2.0], [0.0, 3.0, 1.0], [float("nan"), 0.0, 0.0]])
    labels = torch.tensor([1, 0, 0, 1])
    assert is_success(logits, labels).tolist() == [False, True, True, False]
    assert is_success(logits, labels, torch.tensor([0, 1, 1, 2])).tolist() == [False, False, True, False]
