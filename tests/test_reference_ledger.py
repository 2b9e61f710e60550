"""Differential tests: the QueryTracker (fast paths, deferred buffer) against the reference ledger
(tests/reference_ledger.py, the attribution rule one row at a time, with its own distances) on
random query streams.

Counts, refusals, answers, gradients and what ``recheck`` drops must agree exactly; the kept best
candidates exactly in their points and within float32 rounding in their distances. The streams
cover whole batches, subsets (hinted, wrong or repeated hints, none), repeats, NaN, ±inf and
far-out-of-box rows, backward passes on any of them (twice on one forward, or delayed past later
forwards), float64 and non-contiguous queries, trackers on float64 inputs, and streams longer
than the tracker's 128-query window. ``ATTACKAUDIT_HYPOTHESIS=ci`` runs more examples
(``conftest.examples``).
"""
from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import dataclass

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import attackaudit.measure.tracker as tracker_module
from attackaudit.measure.tracker import BOX_TOLERANCE, DEFERRED_QUERIES, QueryTracker
from conftest import examples
from reference_ledger import ReferenceLedger, assert_agree, same

NORMS = ("l0", "l1", "l2", "linf")
#: values far outside [0, 1] that a broken attack returns; moderate enough that float32 sums
#: still tell two known points apart (at 1e3 the tracker's float32 distances to every point tie)
FAR_VALUES = (-3.0, 4.0, 25.0)

#: how far a "toward" query moves each row from its sample to another. A row sits at a position p
#: on the segment between two samples (p = s, or 1 − s when the other sample moves back towards it);
#: no position of these sizes is twice another, and none is ½, so no row is exactly as far from an
#: earlier "toward" row as from a sample. At such a tie (0.6 then 0.3; 0.9 then 0.55 met halfway)
#: the float32 rounding of the tracker's distances and of the ledger's decides the owner, which the
#: ledger does not model (reference_ledger.py: streams keep distances to different points apart);
#: hypothesis found it. Chains of three such queries on every norm then agree exactly.
TOWARD_SIZES = (0.3, 0.62, 0.9, 0.7, 0.97)
#: one operation of a stream: (kind, a seed or sample, a size)
OPS = st.one_of(
    st.tuples(st.just("walk"), st.integers(0, 2**16), st.sampled_from([0.02, 0.1, 0.4])),
    st.tuples(st.just("clean"), st.just(0), st.just(0.0)),
    st.tuples(st.just("subset"), st.integers(0, 2**16), st.sampled_from([1, 2, 3])),
    st.tuples(st.just("subset_backward"), st.integers(0, 2**16), st.sampled_from([1, 2, 3])),
    st.tuples(st.just("hinted"), st.integers(0, 2**16), st.sampled_from([1, 2, 3])),
    st.tuples(st.just("wrong_hint"), st.integers(0, 2**16), st.sampled_from([1, 2, 3])),
    st.tuples(st.just("repeated_hint"), st.integers(0, 2**16), st.sampled_from([2, 3])),
    st.tuples(st.just("repeat"), st.integers(0, 2**16), st.sampled_from([2, 3])),
    st.tuples(st.just("nan"), st.integers(0, 2**16), st.sampled_from([0.0, 1.0])),
    st.tuples(st.just("inf"), st.integers(0, 2**16), st.sampled_from([1.0, -1.0])),
    st.tuples(st.just("far"), st.integers(0, 2**16), st.sampled_from(FAR_VALUES)),
    st.tuples(st.just("far_row"), st.integers(0, 2**16), st.sampled_from(FAR_VALUES)),
    st.tuples(st.just("edge"), st.integers(0, 2**16), st.sampled_from([0.5, 2.0])),
    st.tuples(st.just("toward"), st.integers(0, 2**16), st.sampled_from(TOWARD_SIZES[:3])),
    # twice as often as the rest: most adversarial rows, hence most kept bests, come from here
    st.tuples(st.just("toward"), st.integers(0, 2**16), st.sampled_from(TOWARD_SIZES[3:])),
    st.tuples(st.just("larger"), st.integers(0, 2**16), st.sampled_from([1, 3])),
    st.tuples(st.just("empty"), st.just(0), st.just(0.0)),
    st.tuples(st.just("backward"), st.integers(0, 2**16), st.sampled_from([0.05, 0.3])),
    st.tuples(st.just("two_backwards"), st.integers(0, 2**16), st.sampled_from([0.02, 0.3])),
    st.tuples(st.just("delayed_backward"), st.integers(0, 2**16), st.sampled_from([1, 2, 4])),
    st.tuples(st.just("float64"), st.integers(0, 2**16), st.sampled_from([0.02, 0.3])),
    st.tuples(st.just("noncontiguous"), st.integers(0, 2**16), st.sampled_from([0.02, 0.3])),
)
#: a burst of in-order queries long enough to fill the tracker's window (DEFERRED_QUERIES) by itself
BURST = st.tuples(st.just("burst"), st.integers(0, 2**16),
                  st.integers(DEFERRED_QUERIES - 8, DEFERRED_QUERIES + 12))


@contextmanager
def deferred_queries(k: int):
    """Force the tracker's deferred buffer to ``k`` queries (1: the one-slot ring of large inputs)."""
    saved = tracker_module.DEFERRED_QUERIES
    tracker_module.DEFERRED_QUERIES = k
    try:
        yield
    finally:
        tracker_module.DEFERRED_QUERIES = saved


class AnyFloat(torch.nn.Module):
    """``model`` on inputs of any float dtype (a float64 query reaches float32 weights as float32),
    as a model wrapped for numpy-based libraries is."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x.float())


@dataclass
class Query:
    """One query of a stream: its rows (B×C×H×W), the hint given before it (or None), and the
    backward passes through its answer: 0, 1, 2 (two on one forward), or ``delay`` operations later."""

    rows: torch.Tensor
    hint: torch.Tensor | None = None
    backwards: int = 0
    delay: int = 0


def _query(kind: str, seed: int, size: float, walk: torch.Tensor, x: torch.Tensor) -> Query:
    """The query of one operation; moves ``walk`` (N×C×H×W, the attack's iterate) for walks."""
    g = torch.Generator().manual_seed(seed)
    n = len(x)
    count = int(size) if kind in ("subset", "subset_backward", "hinted", "wrong_hint", "repeated_hint",
                                  "repeat") else 1
    pick = torch.randint(0, n, (count,), generator=g)
    if kind in ("walk", "backward", "two_backwards", "float64", "noncontiguous"):
        walk.copy_((walk + size * torch.randn(walk.shape, generator=g, dtype=walk.dtype)).clamp(0, 1))
        rows = walk.clone()
        if kind == "float64":  # below float32's precision: the tracker rounds it as the ledger does
            rows = rows.double() + 1e-12 * torch.randn(rows.shape, generator=g, dtype=torch.float64)
        if kind == "noncontiguous":  # the same values through transposed strides
            rows = rows.transpose(2, 3).contiguous().transpose(2, 3)
            assert not rows.is_contiguous()
        return Query(rows, backwards={"walk": 0, "two_backwards": 2}.get(kind, 1))
    if kind == "delayed_backward":
        walk.copy_((walk + 0.05 * torch.randn(walk.shape, generator=g, dtype=walk.dtype)).clamp(0, 1))
        return Query(walk.clone(), backwards=1, delay=int(size))
    if kind == "clean":
        return Query(x.clone())
    if kind in ("subset", "subset_backward"):  # reorders and repeats included, no hint
        return Query(walk[pick].clone(), backwards=int(kind == "subset_backward"))
    if kind in ("hinted", "wrong_hint"):  # the minimal-ε search's subsets: distinct samples, named in advance
        idx = torch.randperm(n, generator=g)[:min(int(size), n)]
        hint = idx if kind == "hinted" else torch.randperm(n, generator=g)[:len(idx)]  # often other samples
        return Query(walk[idx].clone(), hint, backwards=1)
    if kind == "repeated_hint":  # a hint that names a sample twice is no hint
        hint = torch.cat([pick[:1], pick[:-1]])
        return Query(walk[pick].clone(), hint, backwards=1)
    if kind == "repeat":
        return Query(walk[pick[:1]].repeat(int(size), 1, 1, 1))
    if kind in ("nan", "inf", "far"):
        q = walk.clone()
        value = {"nan": float("nan"), "inf": size * float("inf"), "far": size}[kind]
        if kind == "nan" and size == 0.0:
            q[pick[0]] = value  # the whole row: a division by a zero gradient norm
        else:
            q[pick[0]].view(-1)[int(torch.randint(0, q[0].numel(), (1,), generator=g))] = value
        return Query(q, backwards=int(kind != "nan"))
    if kind == "far_row":  # a whole row far out of the box
        q = walk.clone()
        q[pick[0]] = size
        return Query(q, backwards=1)
    if kind == "edge":  # just inside (0.5) or just outside (2.0) the box tolerance
        q = walk.clone()
        q[pick[0]].view(-1)[0] = 1 + size * BOX_TOLERANCE
        return Query(q)
    if kind == "toward":  # every row moves towards another sample (far, often adversarial)
        shift = int(torch.randint(1, max(2, n), (1,), generator=g)) % max(n, 1)
        walk.copy_(x + size * (x.roll(shift, 0) - x))
        return Query(walk.clone())
    if kind == "larger":  # more rows than samples
        return Query(torch.cat([walk, walk[pick].repeat(int(size), 1, 1, 1)]))
    if kind == "empty":
        return Query(x[:0].clone())
    raise AssertionError(kind)


class Stream:
    """Feeds the same queries to a tracker and a ledger and compares every answer and gradient."""

    def __init__(self, t: QueryTracker, ref: ReferenceLedger) -> None:
        self.t, self.ref = t, ref
        self.delayed: list[list] = []  # [operations left, (out, input) of the tracker, of the ledger]

    def ask(self, q: Query, where: str) -> None:
        self.t.expect(q.hint)
        self.ref.expect(q.hint)
        grad = q.backwards > 0
        qa, qb = q.rows.clone().requires_grad_(grad), q.rows.clone().requires_grad_(grad)
        out_a, out_b = self.t(qa), self.ref(qb)
        assert same(out_a.detach(), out_b.detach()), where
        self.t.expect(None)
        self.ref.expect(None)
        if q.delay:
            self.delayed.append([q.delay, (out_a, qa), (out_b, qb)])
            return
        for k in range(q.backwards):
            self._backward((out_a, qa), (out_b, qb), retain=k + 1 < q.backwards, where=where)

    def tick(self, where: str, *, all_now: bool = False) -> None:
        """One operation has passed: run the delayed backwards that are due."""
        for entry in self.delayed:
            entry[0] -= 1
        due = [e for e in self.delayed if e[0] <= 0 or all_now]
        self.delayed = [e for e in self.delayed if not (e[0] <= 0 or all_now)]
        for _, a, b in due:
            self._backward(a, b, retain=False, where=f"{where} (delayed backward)")

    @staticmethod
    def _backward(a, b, *, retain: bool, where: str) -> None:
        (out_a, qa), (out_b, qb) = a, b
        out_a.sum().backward(retain_graph=retain)
        out_b.sum().backward(retain_graph=retain)
        assert same(qa.grad, qb.grad), where


def run_stream(model, x, y, norm, budget, ops, deferred, targeted=False):
    """Feed one stream to both; compare after every query, every few operations in full, and at
    the end (offer, recheck)."""
    targets = ((y + 1) % 10) if targeted else None
    with deferred_queries(deferred):
        t = QueryTracker(model, x, y, norm=norm, budget=budget, targeted=targeted, targets=targets)
    ref = ReferenceLedger(model, x, y, norm=norm, budget=budget, targeted=targeted, targets=targets)
    stream = Stream(t, ref)
    walk = x.clone()
    for step, (kind, seed, size) in enumerate(ops):
        where = f"step {step} {kind}"
        if kind == "burst":  # size in-order queries with backwards, no read in between
            g = torch.Generator().manual_seed(seed)
            for k in range(int(size)):
                walk.copy_((walk + 0.01 * torch.randn(walk.shape, generator=g, dtype=walk.dtype)).clamp(0, 1))
                stream.ask(Query(walk.clone(), backwards=k % 2), f"{where} query {k}")
        else:
            stream.ask(_query(kind, seed, size, walk, x), where)
        stream.tick(where)
        if step % 5 == 4:  # reading results mid-stream processes the deferred window early
            assert_agree(t, ref, where)
    stream.tick("end", all_now=True)
    final = walk.clamp(0, 1)
    t.offer(final)
    ref.offer(final)
    assert_agree(t, ref, "after offer")
    assert t.recheck().tolist() == ref.recheck()
    assert_agree(t, ref, "after recheck")
    return t, ref


@pytest.fixture(scope="module")
def pool():
    from attackaudit.sources.subset import load_subset

    sub = load_subset("digits", 6, 0)
    return sub.inputs, sub.labels


def _inputs(pool, n: int, duplicate: bool, dtype: torch.dtype):
    x, y = pool[0][:n].clone().to(dtype), pool[1][:n].clone()
    if duplicate and n >= 2:  # two identical originals (same label: a duplicated image in the data)
        x[n - 1], y[n - 1] = x[0], y[0]
    return x, y


#: small budgets reach refusals within a stream; larger ones keep more adversarial rows as bests
BUDGETS = st.one_of(st.integers(2, 14), st.integers(24, 60))


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(n=st.integers(1, 5), norm=st.sampled_from(NORMS), budget=BUDGETS,
       duplicate=st.booleans(), deferred=st.sampled_from([1, 2, 3, 128]), targeted=st.booleans(),
       dtype=st.sampled_from([torch.float32, torch.float64]), ops=st.lists(OPS, min_size=1, max_size=24))
def test_tracker_agrees_with_the_reference_ledger(cnn, pool, n, norm, budget, duplicate, deferred, targeted,
                                                  dtype, ops):
    x, y = _inputs(pool, n, duplicate, dtype)
    run_stream(AnyFloat(cnn), x, y, norm, budget, ops, deferred, targeted)


@settings(max_examples=examples(6), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(n=st.integers(1, 5), norm=st.sampled_from(NORMS), budget=st.integers(DEFERRED_QUERIES - 20, 400),
       duplicate=st.booleans(), ops=st.lists(st.one_of(BURST, OPS), min_size=2, max_size=6).filter(
           lambda ops: any(kind == "burst" for kind, _, _ in ops)))
def test_streams_longer_than_the_window_agree(cnn, pool, n, norm, budget, duplicate, ops):
    """The tracker's own window (DEFERRED_QUERIES in-order queries) fills and is processed by
    itself, with no read in between, under budgets that a long stream reaches or not."""
    x, y = _inputs(pool, n, duplicate, torch.float32)
    run_stream(AnyFloat(cnn), x, y, norm, budget, ops, DEFERRED_QUERIES)


#: streams the property tests once found a disagreement on, kept as fixed cases
FOUND_STREAMS = [
    # torch.cdist's L∞ skipped the NaN coordinates of a known point (the previous query's NaN
    # row): a finite row was at distance 0 from it, and the whole batch was charged to sample 0
    pytest.param(2, "linf", 2, [("nan", 0, 0.0), ("walk", 0, 0.4)], id="linf-nan-known-point"),
]


@pytest.mark.parametrize("n, norm, budget, ops", FOUND_STREAMS)
def test_streams_that_once_disagreed(cnn, pool, n, norm, budget, ops):
    x, y = _inputs(pool, n, False, torch.float32)
    run_stream(cnn, x, y, norm, budget, ops, 1)


def test_a_burst_fills_the_window_by_itself(cnn, pool):
    """The property above is only worth something if its bursts really reach the tracker's
    natural flush: count the flushes of one burst that a read never interrupts."""
    x, y = pool
    flushes = []
    t = QueryTracker(cnn, x, y, norm="l2", budget=1000, on_progress=flushes.append)
    walk = x.clone()
    g = torch.Generator().manual_seed(0)
    for _ in range(DEFERRED_QUERIES + 3):
        walk = (walk + 0.01 * torch.randn(walk.shape, generator=g)).clamp(0, 1)
        t(walk)
    assert flushes == [DEFERRED_QUERIES]  # the full window, processed by itself
    t.kept  # a read processes the rest: three more queries waited
    assert flushes == [DEFERRED_QUERIES, DEFERRED_QUERIES + 3]


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
    assert_agree(t, ref)


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
    assert_agree(t, ref)
    assert torch.isfinite(t.kept[1][[0, 6], 0]).all()


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


def _tie_free(sizes) -> bool:
    positions = set(sizes) | {1 - v for v in sizes}
    return not any(math.isclose(p, 0.5) or any(math.isclose(p, 2 * q) for q in positions) for p in positions)


def test_toward_sizes_never_tie():
    """The stream's "toward" sizes keep rows of such queries in general position (TOWARD_SIZES)."""
    assert _tie_free(TOWARD_SIZES)
    # the check can fail: the sizes the stream used before tie (0.6 then 0.3), and so does 0.55 beside 0.9
    assert not _tie_free((0.3, 0.6, 0.9, 0.7, 0.95)) and not _tie_free((0.55, 0.9))


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
        logits = torch.round(x.float().flatten(1) @ self.weight.T)  # float64 queries too
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
            q = _query(kind, seed, size, walk, x)
            t.expect(q.hint)
            ref.expect(q.hint)
            with torch.no_grad():
                out, out_ref = t(q.rows.clone()), ref(q.rows.clone())
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
    from attackaudit.measure.success import is_success

    logits = torch.tensor([[1.0, 1.0, 0.0], [0.0, 2.0, 2.0], [0.0, 3.0, 1.0], [float("nan"), 0.0, 0.0]])
    labels = torch.tensor([1, 0, 0, 1])
    assert is_success(logits, labels).tolist() == [False, True, True, False]
    assert is_success(logits, labels, torch.tensor([0, 1, 1, 2])).tolist() == [False, False, True, False]
