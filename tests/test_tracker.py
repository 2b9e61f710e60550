"""QueryTracker: exact per-sample counts, the budget, and best-not-last."""
import torch
import torch.nn.functional as F
import torchattacks

from attackaudit.measure.tracker import BOX_TOLERANCE, QueryTracker
from reference_ledger import ReferenceLedger, assert_agree
from test_minimal import TwoClassLinear


def fgsm(model, x, y, eps):
    x = x.clone().requires_grad_(True)
    loss = F.cross_entropy(model(x), y)
    (g,) = torch.autograd.grad(loss, x)
    return (x + eps * g.sign()).clamp(0, 1).detach()


def test_one_step_attack_costs_one_forward_one_backward(cnn, subset8):
    x, y = subset8.inputs, subset8.labels
    t = QueryTracker(cnn, x, y, norm="linf")
    fgsm(t, x, y, 0.1)
    assert t.forwards.tolist() == [1] * 8 and t.backwards.tolist() == [1] * 8
    # the same through a real library's FGSM
    t2 = QueryTracker(cnn, x, y, norm="linf")
    torchattacks.FGSM(t2, eps=0.1)(x, y)
    assert t2.forwards.tolist() == [1] * 8 and t2.backwards.tolist() == [1] * 8


def test_subset_reorder_repeat_are_attributed_to_the_right_sample(cnn, subset8):
    x, y = subset8.inputs, subset8.labels
    t = QueryTracker(cnn, x, y, norm="l2")
    noise = 0.01 * torch.randn_like(x)
    with torch.no_grad():
        t(x[[5, 2]] + noise[[5, 2]])                 # subset
        t(x.flip(0) + noise)                         # reordered
        t(torch.cat([x[[3]], x[[3]], x[[3]]]))       # repeated
    expected = [1] * 8
    for i in (5, 2):
        expected[i] += 1
    expected[3] += 3
    assert t.forwards.tolist() == expected
    assert t.backwards.sum() == 0


def test_backward_on_subset_counts_only_those_rows(cnn, subset8):
    x, y = subset8.inputs, subset8.labels
    t = QueryTracker(cnn, x, y, norm="linf")
    xs = x[[1, 4, 6]].clone().requires_grad_(True)
    t(xs).sum().backward()
    assert t.backwards.tolist() == [0, 1, 0, 0, 1, 0, 1, 0]


def test_budget_is_never_exceeded_and_refusal_is_useless(cnn, subset8):
    x, y = subset8.inputs, subset8.labels
    t = QueryTracker(cnn, x, y, norm="linf", budget=11)
    ref = ReferenceLedger(cnn, x, y, norm="linf", budget=11)
    for model in (t, ref):
        adv = x.clone()
        for _ in range(10):
            adv = fgsm(model, adv, y, 0.01)
    assert t.forwards.tolist() == [6] * 8 and t.backwards.tolist() == [5] * 8
    assert (t.refused == 9).all()  # 10 forwards + 10 backwards wanted, 11 allowed
    assert_agree(t, ref)
    # past the budget: the clean label wins and the gradient is zero
    xr = (x + 0.3).clamp(0, 1).requires_grad_(True)
    out = t(xr)
    assert (out.argmax(1) == y).all()
    out.sum().backward()
    assert xr.grad.abs().sum() == 0
    assert t.queries.tolist() == [11] * 8 and (t.refused == 11).all()


def test_best_is_kept_when_last_iterate_is_worse(cnn, subset8):
    x, y = subset8.inputs, subset8.labels
    t = QueryTracker(cnn, x, y, norm="linf")
    with torch.no_grad():
        pred = cnn(x).argmax(1)
    correct = pred == y
    # walk towards a random other image: some point along the way is adversarial
    other = x.roll(1, 0)
    for a in torch.linspace(0, 1, 21):
        with torch.no_grad():
            t(x + a * (other - x))
    # the last iterate is `other` (distance large); best must be the first adversarial point
    final = (other - x).flatten(1).abs().amax(1)
    found = torch.isfinite(t.best_distance) & correct
    assert found.any()
    assert (t.best_distance[found] <= final[found]).all()
    assert (t.best_distance[found] < final[found]).any()
    with torch.no_grad():
        assert (cnn(t.best_adversarial[found]).argmax(1) != y[found]).all()
    dist = (t.best_adversarial - x).flatten(1).abs().amax(1)
    assert torch.allclose(dist[found], t.best_distance[found], atol=1e-6)


def test_targeted_best_requires_reaching_the_target(cnn, subset8):
    from attackaudit.sources.subset import random_targets

    x, y = subset8.inputs, subset8.labels
    targets = random_targets(y, 10, 0)
    assert (targets != y).all()
    t = QueryTracker(cnn, x, y, norm="l2", targeted=True, targets=targets)
    ref = ReferenceLedger(cnn, x, y, norm="l2", targeted=True, targets=targets)
    for model in (t, ref):
        torch.manual_seed(0)  # PGD's random start
        torchattacks_pgd = torchattacks.PGDL2(model, eps=3.0, alpha=0.2, steps=40)
        torchattacks_pgd.set_mode_targeted_by_label(quiet=True)
        torchattacks_pgd(x, targets)
    found = torch.isfinite(t.best_distance)
    assert found.float().mean() >= 0.75
    with torch.no_grad():
        assert (cnn(t.best_adversarial[found]).argmax(1) == targets[found]).all()
    assert_agree(t, ref)


def test_clean_misclassified_have_distance_zero(cnn):
    from attackaudit.sources.subset import digits

    x, y = digits("test")
    with torch.no_grad():
        wrong = torch.nonzero(cnn(x).argmax(1) != y).squeeze(1)[:3]
    t = QueryTracker(cnn, x[wrong], y[wrong], norm="l2")
    assert (t.best_distance == 0).all() and (~t.clean_correct).all()


def test_adversarial_rows_outside_the_box_are_counted_but_never_best(cnn, subset8):
    x, y = subset8.inputs, subset8.labels
    with torch.no_grad():
        ok = (cnn(x).argmax(1) == y) & (cnn(x + 5.0).argmax(1) != y)
    i = int(torch.nonzero(ok)[0])  # clean-correct, misclassified once moved far outside [0, 1]
    t = QueryTracker(cnn, x[[i]], y[[i]], norm="l2")
    with torch.no_grad():
        t(x[[i]] + 5.0)
    assert t.forwards.tolist() == [1]
    assert torch.isinf(t.best_distance).all()


def _walk(x, steps, seed, scale):
    """A seeded in-order random walk from ``x`` with some rows out of the box and some NaN."""
    g = torch.Generator().manual_seed(seed)
    cur = x.clone()
    for s in range(steps):
        cur = (cur + scale * torch.randn(cur.shape, generator=g)).clamp(0, 1)
        q = cur.clone()
        if s % 7 == 3:
            q[0] += 2.0          # outside [0, 1]: counted, never best
        if s % 11 == 5:
            q[1, 0, 0, 0] = float("nan")
        if s % 5 == 0:
            q = cur.clone()      # a repeat of an earlier point: ties keep the first
        yield q


def test_deferred_best_equals_the_reference_ledger(cnn, subset8):
    """The batched best-candidate update gives exactly what the rule gives one row at a time."""
    x, y = subset8.inputs, subset8.labels
    for norm, scale in (("linf", 0.05), ("l2", 0.15), ("l1", 0.15), ("l0", 0.15)):
        batched = QueryTracker(cnn, x, y, norm=norm)
        ref = ReferenceLedger(cnn, x, y, norm=norm)
        assert batched._deferred_limit > 20
        with torch.no_grad():
            for q in _walk(x, 60, 0, scale):
                batched(q)
                ref(q)
        assert torch.isfinite(batched.best_distance).any(), norm
        assert_agree(batched, ref, norm)


def test_rows_changed_in_place_after_the_query_do_not_change_the_best(cnn, subset8):
    x, y = subset8.inputs, subset8.labels
    t = QueryTracker(cnn, x, y, norm="linf")
    other = x.roll(1, 0)
    q = x.clone()
    with torch.no_grad():
        for a in torch.linspace(0, 1, 11):
            q.copy_(x + a * (other - x))   # one tensor, changed in place between queries
            t(q)
        q.fill_(0.5)
        best = t.best_adversarial
        found = torch.isfinite(t.best_distance)
        assert found.any()
        assert (cnn(best[found]).argmax(1) != y[found]).all()
        dist = (best - x).flatten(1).abs().amax(1)
        assert torch.allclose(dist[found], t.best_distance[found], atol=1e-6)


def test_iterates_that_travel_far_stay_with_their_sample(cnn, subset8):
    """Whole-batch steps much larger than half the distance between two digits (the anchor moves
    with them) are still counted one per sample, and the budget holds."""
    x, y = subset8.inputs, subset8.labels
    t = QueryTracker(cnn, x, y, norm="l2", budget=50)
    ref = ReferenceLedger(cnn, x, y, norm="l2", budget=50)
    sep = torch.cdist(x.flatten(1), x.flatten(1)) + torch.eye(len(x)) * 1e9
    target = x.roll(3, 0)
    with torch.no_grad():
        for a in torch.linspace(0, 0.8, 40):  # each row ends nearer another digit than its own
            t(x + a * (target - x))
            ref(x + a * (target - x))
        further = (x + 0.81 * (target - x))[[2, 5]]  # a subset nearer other digits than its own:
        t(further)                                   # charged by the previous query's rows
        ref(further)
    end = (x + 0.8 * (target - x)).flatten(1)
    assert (torch.cdist(end, x.flatten(1)).argmin(1) != torch.arange(8)).all()
    assert ((end - x.flatten(1)).norm(dim=1) > sep.amin(1) / 2).all()
    assert t.forwards.tolist() == [40, 40, 41, 40, 40, 41, 40, 40]
    assert_agree(t, ref)


class _CountingModel(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model, self.calls = model, 0

    def forward(self, x):
        self.calls += 1
        return self.model(x)


def test_clean_logits_come_from_a_clean_first_query_or_one_extra_forward(cnn):
    from attackaudit.sources.subset import digits

    x, y = digits("test")
    with torch.no_grad():
        wrong = cnn(x).argmax(1) != y
    pick = torch.cat([torch.nonzero(wrong).squeeze(1)[:3], torch.nonzero(~wrong).squeeze(1)[:5]])
    x, y, wrong = x[pick], y[pick], wrong[pick]
    for first_query_clean in (True, False):
        counting = _CountingModel(cnn)
        t = QueryTracker(counting, x, y, norm="l2")
        with torch.no_grad():
            t(x if first_query_clean else x + 0.01)
            t(x + 0.02)
        assert counting.calls == 2  # nothing extra while the attack runs
        assert torch.equal(t.clean_correct, ~wrong)
        assert counting.calls == (2 if first_query_clean else 3)
        assert (t.best_distance[wrong] == 0).all()
        assert torch.equal(t.best_adversarial[wrong], x[wrong])
    # the harness passes the clean logits it computed once per model: no clean forward at all
    with torch.no_grad():
        clean = cnn(x)
    counting = _CountingModel(cnn)
    t = QueryTracker(counting, x, y, norm="l2", clean_logits=clean)
    with torch.no_grad():
        t(x + 0.01)
    assert torch.equal(t.clean_correct, ~wrong) and (t.best_distance[wrong] == 0).all()
    assert counting.calls == 1


def test_a_subset_hint_is_checked_not_trusted(cnn, subset8):
    """With ``expect(idx)`` subset queries skip the B×N distances; the result is the same as
    without the hint, and a wrong hint is caught by the containment test."""
    x, y = subset8.inputs, subset8.labels
    sub = torch.tensor([1, 4, 6])
    runs = []
    for hint in (None, sub, torch.tensor([0, 2, 3])):  # no hint, the right one, a wrong one
        t = QueryTracker(cnn, x, y, norm="linf")
        t.expect(hint)
        g = torch.Generator().manual_seed(0)
        walk = x[sub].clone()
        with torch.no_grad():
            for _ in range(40):  # a walk: at first within the anchors' boxes, later beyond them
                walk = (walk + 0.04 * torch.randn(walk.shape, generator=g)).clamp(0, 1)
                t(walk)
        xs = x[sub].clone().requires_grad_(True)
        t(xs).sum().backward()
        t.expect(None)
        runs.append(t)
    expected = torch.zeros(8, dtype=torch.long)
    expected[sub] = 41
    for t in runs:
        assert torch.equal(t.forwards, expected) and t.backwards.tolist() == [0, 1, 0, 0, 1, 0, 1, 0]
        assert torch.equal(t.best_distance, runs[0].best_distance)
        assert torch.equal(t.best_adversarial, runs[0].best_adversarial)
    assert torch.isfinite(runs[0].best_distance[sub]).any()


def test_recheck_drops_a_best_that_only_the_unclamped_row_made_adversarial():
    """A minimum-norm attack that steps just outside the box (within the tolerance) where the
    outside coordinate carries it over the boundary: the raw row is adversarial, its clamped point
    is not. ``recheck`` falls back to the next kept candidate, which is; a sound attack that stays
    inside the box loses nothing."""
    w = torch.zeros(4)
    w[0], w[1] = 1e4, 1.0
    x = torch.tensor([[1.0, 0.0, 0.0, 0.0]]).view(1, 1, 2, 2)
    model = TwoClassLinear(w, -1e4 - 0.05)  # clean: 1e4 - 1e4 - 0.05 < 0, label 0
    y = torch.tensor([0])
    far = x.clone().view(-1)
    far[1] = 0.5  # w·x + b = 0.45 > 0: adversarial at L2 distance 0.5
    near = x.clone().view(-1)
    near[0] = 1 + 0.9 * BOX_TOLERANCE  # +0.09 on the raw row, lost when clamped to 1
    near[1] = 0.01  # w·x + b = 0.09 - 0.05 + 0.01 > 0 raw; 0.01 - 0.05 < 0 once clamped
    for queries, dropped, best in (([far, near], 1, 0.5), ([far], 0, 0.5)):
        t = QueryTracker(model, x, y, norm="l2")
        ref = ReferenceLedger(model, x, y, norm="l2")
        with torch.no_grad():
            for q in queries:
                t(q.view(1, 1, 2, 2))
                ref(q.view(1, 1, 2, 2))
        assert_agree(t, ref)
        assert t.recheck().tolist() == [dropped] == ref.recheck()
        assert_agree(t, ref)
        assert torch.allclose(t.best_distance, torch.tensor([best]))
        with torch.no_grad():
            assert model(t.best_adversarial).argmax(1).item() == 1
