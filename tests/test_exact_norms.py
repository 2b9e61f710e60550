"""Exact L0 (MILP) and L2 (MIQP, SCIP) minimal distances: closed forms, a dense grid that no
adversarial point may beat (the proven lower bound) and the exact answer must match within the
grid's resolution, random small networks, and the tiny zoo MLP."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attackaudit.exact.encoding import encode_sequential
from attackaudit.exact.solver import distance, forward, margin_to_label, minimal_distance
from attackaudit.sources.subset import load_subset
from attackaudit.sources.zoo import load_model

M = 1e-6  # the solver's default decision margin

pytest.importorskip("pyscipopt")


def two_class_linear(w1: list[float], c: float) -> list[tuple[np.ndarray, np.ndarray]]:
    """Class 0 logit 0, class 1 logit w1·x − c: a single affine layer."""
    return [(np.array([[0.0] * len(w1), w1]), np.array([0.0, -c]))]


def abs_diff_net(threshold: float) -> list[tuple[np.ndarray, np.ndarray]]:
    """Logits (threshold, |x1 − x2|) through two ReLUs: misclassified on two disjoint regions."""
    return [(np.array([[1.0, -1.0], [-1.0, 1.0]]), np.zeros(2)), (np.array([[0.0, 0.0], [1.0, 1.0]]),
                                                                  np.array([threshold, 0.0]))]


def _check(layers, x0, label, r, norm):
    """The discipline of every answer: a verified adversarial at the stated distance, inside the box."""
    assert r.status == "optimal", r
    assert margin_to_label(forward(layers, r.adversarial), label) > 0
    assert np.all((r.adversarial >= 0) & (r.adversarial <= 1))
    assert float(distance(r.adversarial - x0, norm)) == pytest.approx(r.distance, abs=1e-9)
    assert r.lower_bound <= r.distance + 1e-9


def test_l2_closed_forms():
    # interior: δ along w = (1, 1): ‖δ‖₂ = (0.5 + m)/√2
    layers, x0 = two_class_linear([1.0, 1.0], 1.0), np.array([0.2, 0.3])
    r = minimal_distance(layers, x0, 0, "l2", time_limit=30)
    _check(layers, x0, 0, r, "l2")
    assert r.distance == pytest.approx((0.5 + M) / math.sqrt(2), abs=1e-6)
    # the box binds: x1 can rise 0.1 only; 3δ1 + δ2 ≥ 0.6 + m. Unboxed δ = λ(3, 1), λ = 0.06 → δ1
    # = 0.18 > 0.1; so δ1 = 0.1, δ2 = 0.3 + m: ‖δ‖ = √(0.01 + 0.09)
    layers, x0 = two_class_linear([3.0, 1.0], 3.4), np.array([0.9, 0.1])
    r = minimal_distance(layers, x0, 0, "l2", time_limit=30)
    _check(layers, x0, 0, r, "l2")
    assert r.distance == pytest.approx(math.sqrt(0.1 ** 2 + (0.3 + M) ** 2), abs=1e-6)
    # through ReLUs, nonconvex: |x1 − x2| ≥ 0.3 + m from the diagonal, δ = ±(a, −a), 2a = 0.3 + m
    layers, x0 = abs_diff_net(0.3), np.array([0.5, 0.5])
    r = minimal_distance(layers, x0, 0, "l2", time_limit=30)
    _check(layers, x0, 0, r, "l2")
    assert r.distance == pytest.approx((0.3 + M) / math.sqrt(2), abs=1e-6)


def test_l2_close_to_the_boundary_in_64_dimensions():
    """An image 0.008 from the boundary of a 64-pixel linear net: SCIP's tolerance on the squared
    distance (1e-9 a pixel) is 3e-6 on the distance there, which is still 'optimal'."""
    w = np.full(64, 1 / 8)  # ‖w‖₂ = 1: the distance is the logit gap to close
    x0 = np.linspace(0.2, 0.8, 64)
    layers = two_class_linear(list(w), float(w @ x0) + 0.008)
    r = minimal_distance(layers, x0, 0, "l2", time_limit=60)
    _check(layers, x0, 0, r, "l2")
    assert r.distance == pytest.approx(0.008 + M, abs=1e-5)


def test_l0_closed_forms():
    # one pixel: x1 alone can reach 0.2 + 0.8 = 1 > 0.9? w = (1, 1), c = 1.4, x0 = (0.2, 0.3): one
    # coordinate to 1 gives 1.3 or 1.2 < 1.4, both coordinates needed
    layers, x0 = two_class_linear([1.0, 1.0], 1.4), np.array([0.2, 0.3])
    r = minimal_distance(layers, x0, 0, "l0", time_limit=30)
    _check(layers, x0, 0, r, "l0")
    assert r.distance == 2 and r.lower_bound == 2
    # c = 1.25: raising x1 to 1 suffices (1.3 > 1.25), one pixel; the other stays exactly at x0
    layers = two_class_linear([1.0, 1.0], 1.25)
    r = minimal_distance(layers, x0, 0, "l0", time_limit=30)
    _check(layers, x0, 0, r, "l0")
    assert r.distance == 1 and r.adversarial[1] == x0[1]
    # a weight of 3 on the first of four coordinates and 1 on the rest: one pixel of the first
    # beats three of the others
    layers, x0 = two_class_linear([3.0, 1.0, 1.0, 1.0], 2.5), np.full(4, 0.1)
    r = minimal_distance(layers, x0, 0, "l0", time_limit=30)
    _check(layers, x0, 0, r, "l0")
    assert r.distance == 1 and r.adversarial[0] > x0[0] and np.all(r.adversarial[1:] == x0[1:])
    # robust on the whole box: the proven answer is inf
    r = minimal_distance(two_class_linear([1.0, 1.0], 5.0), np.array([0.5, 0.5]), 0, "l0", time_limit=30)
    assert r.status == "optimal" and math.isinf(r.distance) and r.adversarial is None


def test_l0_lower_bound_holds_for_ties():
    """Only the full margin needs two pixels: one pixel (to 1) reaches gap 0.5e-6 < the margin
    1e-6. That adversarial is strict (gap > 0), so the answer is 1, not 2."""
    layers, x0 = two_class_linear([1.0, 1.0], 1.2 - 0.5e-6), np.array([0.2, 0.2])
    r = minimal_distance(layers, x0, 0, "l0", time_limit=30)
    _check(layers, x0, 0, r, "l0")
    assert r.distance == 1 and r.lower_bound == 1


def _grid(d: int, n: int) -> np.ndarray:
    axis = np.linspace(0.0, 1.0, n)
    return np.array(list(itertools.product(axis, repeat=d)))


def random_net(rng: np.random.Generator, d: int, hidden: int, classes: int) -> list:
    return [(rng.normal(size=(hidden, d)), rng.normal(size=hidden) * 0.5),
            (rng.normal(size=(classes, hidden)), rng.normal(size=classes) * 0.5)]


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), d=st.integers(2, 3), hidden=st.integers(2, 5))
def test_random_nets_against_a_grid(seed, d, hidden):
    """On a grid of the box (41 per axis in 2-D, 21 in 3-D): no adversarial grid point is closer
    than the proven lower bound, and the exact distance is within the grid's reach of the closest
    one (L2: half a cell's diagonal; L0: at most the grid's count, since every count the grid
    reaches is a feasible support)."""
    rng = np.random.default_rng(seed)
    layers = random_net(rng, d, hidden, 3)
    x0 = rng.uniform(0.1, 0.9, size=d)
    label = int(np.argmax(forward(layers, x0)))
    if margin_to_label(forward(layers, x0), label) > -1e-3:
        return  # on a tie: no sample
    n = 41 if d == 2 else 21
    grid = _grid(d, n)
    adv = grid[margin_to_label(forward(layers, grid), label) > 0]
    for norm in ("l2", "l0"):
        r = minimal_distance(layers, x0, label, norm, time_limit=60)
        if not len(adv):
            assert r.status == "optimal"
            if math.isfinite(r.distance):
                _check(layers, x0, label, r, norm)
            continue
        _check(layers, x0, label, r, norm)
        if norm == "l2":
            grid_d = np.sqrt(((adv - x0) ** 2).sum(1))
            assert grid_d.min() >= r.lower_bound - 1e-5  # the bound is a bound
            assert r.distance <= grid_d.min() + 1e-9  # the minimum beats every grid point
        else:
            # grid points move every coordinate: compare with the fewest-coordinate points on
            # the grid lines through x0 (all other coordinates exactly at x0)
            best = d
            for k in range(1, d):
                for support in itertools.combinations(range(d), k):
                    pts = np.tile(x0, (n ** k, 1))
                    pts[:, support] = _grid(k, n)
                    if (margin_to_label(forward(layers, pts), label) > 0).any():
                        best = min(best, k)
                        break
                if best == k:
                    break
            assert r.distance <= best
            # no support smaller than the bound reaches the label's logit (grid lines of size < lb)
            for k in range(1, int(r.lower_bound)):
                for support in itertools.combinations(range(d), k):
                    pts = np.tile(x0, (n ** k, 1))
                    pts[:, support] = _grid(k, n)
                    assert not (margin_to_label(forward(layers, pts), label) > 0).any()


def test_tiny_zoo_mlp_l0_l2():
    """digits-mlp-tiny: optimal within the limit, the adversarial verified on the torch model in
    float64, and no random sparse / dense perturbation closer than the proven bound flips it."""
    model = load_model("digits-mlp-tiny")
    model64 = load_model("digits-mlp-tiny").double()
    layers = encode_sequential(model, (1, 8, 8))
    sub = load_subset("digits", 2, seed=0)
    rng = np.random.default_rng(0)
    for i in range(len(sub)):
        y = int(sub.labels[i])
        x0 = sub.inputs[i].reshape(-1).double().numpy()
        for norm in ("l0", "l2"):
            r = minimal_distance(layers, x0, y, norm, time_limit=120, margin=1e-4)
            _check(layers, x0, y, r, norm)
            with torch.no_grad():
                assert model64(torch.from_numpy(r.adversarial).reshape(1, 1, 8, 8)).argmax().item() != y
            if norm == "l2":  # random directions at 0.999 of the bound: never adversarial
                u = rng.normal(size=(2000, 64))
                pts = np.clip(x0 + 0.999 * r.lower_bound * u / np.linalg.norm(u, axis=1, keepdims=True), 0, 1)
            else:  # random supports of size lower_bound − 1, moved to random corners of the box
                k = int(r.lower_bound) - 1
                pts = np.tile(x0, (2000, 1))
                for row in pts:
                    idx = rng.choice(64, size=k, replace=False)
                    row[idx] = rng.integers(0, 2, size=k).astype(float)
            assert not (margin_to_label(forward(layers, pts), y) > 0).any()


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), d=st.integers(2, 6), radius=st.floats(0.01, 2.0), norm=st.sampled_from(["l2", "l0"]))
def test_first_layer_bounds_hold_on_random_points(seed, d, radius, norm):
    """The big-M constants of the first layer: no point of box ∩ ball (L2: ‖δ‖₂ ≤ r; L0: at most
    ⌊r⌋ moved coordinates, here r scaled to a count) leaves them, and L2's is no looser than r‖w‖₂."""
    from attackaudit.exact.network import preactivation_bounds

    rng = np.random.default_rng(seed)
    layers = random_net(rng, d, 4, 3)
    x0 = rng.uniform(0, 1, size=d)
    r = radius if norm == "l2" else float(rng.integers(0, d + 1))
    (lo, hi), = preactivation_bounds(layers, x0, norm, r)
    n = 5000
    if norm == "l2":
        u = rng.normal(size=(n, d))
        delta = u / np.linalg.norm(u, axis=1, keepdims=True) * r * rng.uniform(0, 1, (n, 1)) ** (1 / d)
        pts = np.clip(x0 + delta, 0, 1)
        w = layers[0][0]
        base = w @ x0 + layers[0][1]
        assert np.all(hi <= base + r * np.linalg.norm(w, axis=1) + 1e-9)
    else:
        pts = np.tile(x0, (n, 1))
        for row in pts:
            idx = rng.choice(d, size=int(r), replace=False)
            row[idx] = rng.uniform(0, 1, size=int(r)) if rng.uniform() < 0.5 else rng.integers(0, 2, int(r))
    pre = pts @ layers[0][0].T + layers[0][1]
    assert np.all(pre <= hi + 1e-9) and np.all(pre >= lo - 1e-9)
