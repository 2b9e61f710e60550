"""The network the exact solver works on: affine layers with ReLUs between them, evaluated in
float64, and interval bounds on every hidden pre-activation.

A network is a list of affine layers ``(W, b)`` with ``W``: out×in and ``b``: out, and a ReLU
between consecutive layers (none after the last, whose outputs are the logits). Inputs are flat
vectors of length ``D = layers[0][0].shape[1]`` inside the box ``[lo, hi]^D``. Pure numpy.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

Layer = tuple[np.ndarray, np.ndarray]  # (W: out×in, b: out), float64


def as_layers(layers: Sequence[tuple[np.ndarray, np.ndarray]]) -> list[Layer]:
    """Validate shapes and cast to float64."""
    out: list[Layer] = []
    for k, (w, b) in enumerate(layers):
        w, b = np.asarray(w, dtype=np.float64), np.asarray(b, dtype=np.float64)
        if w.ndim != 2 or b.shape != (w.shape[0],):
            raise ValueError(f"layer {k}: W must be out×in and b of length out, got {w.shape}, {b.shape}")
        if out and out[-1][0].shape[0] != w.shape[1]:
            raise ValueError(f"layer {k}: expects {w.shape[1]} inputs, previous layer gives {out[-1][0].shape[0]}")
        out.append((w, b))
    if not out:
        raise ValueError("the network has no layers")
    return out


def forward(layers: Sequence[Layer], x: np.ndarray) -> np.ndarray:
    """Logits in float64; ``x``: D or N×D → 10 or N×10 (ReLU between layers)."""
    h = np.asarray(x, dtype=np.float64)
    for k, (w, b) in enumerate(layers):
        h = h @ w.T + b
        if k < len(layers) - 1:
            h = np.maximum(h, 0.0)
    return h


def distance(delta: np.ndarray, norm: str) -> np.ndarray | float:
    """L∞, L1, L2 or L0 size of ``delta`` (D, or N×D → N). L0 counts every coordinate that moved
    at all (|δ_i| > 0): the solver's points leave the unchanged coordinates exactly at x0."""
    d = np.abs(np.asarray(delta, dtype=np.float64))
    if norm == "linf":
        return d.max(-1, initial=0.0)
    if norm == "l0":
        return (d > 0).sum(-1).astype(np.float64)
    if norm == "l2":
        return np.sqrt((d * d).sum(-1))
    return d.sum(-1)


def margin_to_label(logits: np.ndarray, label: int) -> np.ndarray | float:
    """max_{j≠y} logit_j − logit_y: positive means misclassified whatever the argmax tie-break."""
    z = np.asarray(logits, dtype=np.float64)
    other = np.delete(z, label, axis=-1)
    return other.max(-1) - z[..., label]


def _first_layer_bounds(w: np.ndarray, b: np.ndarray, x0: np.ndarray, xl: np.ndarray,
                        xu: np.ndarray, norm: str, radius: float) -> tuple[np.ndarray, np.ndarray]:
    """Range of ``w x + b`` over the box [xl, xu] ∩ ball(radius) around x0: exact for L∞, L1 and
    L0 (at most ``radius`` coordinates moved: the largest moves), a valid outer bound for L2."""
    wp, wn = np.maximum(w, 0), np.minimum(w, 0)
    lo, hi = wp @ xl + wn @ xu + b, wp @ xu + wn @ xl + b
    if norm in ("linf",) or not np.isfinite(radius):
        return lo, hi
    base = w @ x0 + b
    if norm == "l2":
        return np.maximum(lo, base - _ball_reach(-w, x0, xl, xu, radius)), np.minimum(hi, base + _ball_reach(w, x0, xl, xu, radius))
    if norm == "l0":  # at most ⌊r⌋ coordinates move: the ⌊r⌋ largest gains each way
        k = int(np.floor(radius + 1e-9))
        up = np.sort(np.maximum(w * (xu - x0), w * (xl - x0)), axis=1)[:, ::-1][:, :k].sum(1)
        dn = np.sort(np.maximum(-w * (xu - x0), -w * (xl - x0)), axis=1)[:, ::-1][:, :k].sum(1)
        return np.maximum(lo, base - dn), np.minimum(hi, base + up)
    # L1 ball ∩ box: a fractional knapsack per neuron — spend the budget on the largest |w| first.
    order = np.argsort(-np.abs(w), axis=1)
    aw = np.take_along_axis(np.abs(w), order, 1)
    up_cap = np.take_along_axis(np.where(w > 0, xu - x0, x0 - xl), order, 1)
    dn_cap = np.take_along_axis(np.where(w > 0, x0 - xl, xu - x0), order, 1)

    def spend(cap: np.ndarray) -> np.ndarray:
        used_before = np.cumsum(cap, 1) - cap
        return (aw * np.clip(radius - used_before, 0, cap)).sum(1)

    return np.maximum(lo, base - spend(dn_cap)), np.minimum(hi, base + spend(up_cap))


def _ball_reach(w: np.ndarray, x0: np.ndarray, xl: np.ndarray, xu: np.ndarray, radius: float) -> np.ndarray:
    """Per row of ``w``, an upper bound (tight to 1e-12) on max w·δ over ‖δ‖₂ ≤ r with x0 + δ in
    [xl, xu]: the maximiser is δ(λ) = clip(λw, xl − x0, xu − x0) at the λ where ‖δ(λ)‖ = r
    (w·δ and ‖δ‖ both grow with λ), bracketed by bisection; the bracket's upper end bounds it."""
    dn, up = xl - x0, xu - x0
    box = np.maximum(w * up, w * dn).sum(1)

    def norm_at(lam: np.ndarray) -> np.ndarray:
        return np.linalg.norm(np.clip(lam[:, None] * w, dn, up), axis=1)

    lo_l, hi_l = np.zeros(len(w)), np.full(len(w), 1e12)
    for _ in range(120):
        mid = 0.5 * (lo_l + hi_l)
        over = norm_at(mid) > radius
        hi_l, lo_l = np.where(over, mid, hi_l), np.where(over, lo_l, mid)
    reach = (w * np.clip(hi_l[:, None] * w, dn, up)).sum(1)
    bracketed = norm_at(hi_l) >= radius  # else the ball holds the whole box: the box's bound
    return np.where(bracketed, np.minimum(reach, box) + 1e-12 * (1 + np.abs(box)), box)


def input_box(x0: np.ndarray, radius: float, lo: float, hi: float,
              norm: str = "linf") -> tuple[np.ndarray, np.ndarray]:
    """Per-coordinate bounds (xl, xu), each D, of [lo, hi]^D ∩ ball(radius) around ``x0`` (D)."""
    if norm == "l0":  # a count of moved coordinates bounds none of them
        radius = np.inf
    # each of ‖δ‖∞ ≤ r, ‖δ‖₁ ≤ r and ‖δ‖₂ ≤ r implies |δ_i| ≤ r
    return np.maximum(lo, x0 - radius), np.minimum(hi, x0 + radius)


def preactivation_bounds(layers: Sequence[Layer], x0: np.ndarray, norm: str, radius: float,
                         lo: float = 0.0, hi: float = 1.0) -> list[tuple[np.ndarray, np.ndarray]]:
    """Interval bounds (l, u) on every hidden layer's pre-activations over box ∩ ball(radius)."""
    xl, xu = input_box(x0, radius, lo, hi, norm)
    w, b = layers[0]
    bounds = [_first_layer_bounds(w, b, x0, xl, xu, norm, radius)]
    for w, b in layers[1:-1]:
        zl, zu = np.maximum(bounds[-1][0], 0), np.maximum(bounds[-1][1], 0)
        wp, wn = np.maximum(w, 0), np.minimum(w, 0)
        bounds.append((wp @ zl + wn @ zu + b, wp @ zu + wn @ zl + b))
    return bounds

