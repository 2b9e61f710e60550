"""The (MI)LP of the exact solver: a ReLU network's big-M encoding, solved by HiGHS.

``encode`` writes the input box, the distance variables (L∞: one ε; L1: t ≥ |x − x0|; L0: one
binary "coordinate moved" z_i per coordinate, |x_i − x0_i| ≤ z_i·(its box width), and the share
s ∈ [0, 1] of the margin reached; L2: none, its objective is quadratic and ``miqp`` adds it) and
the hidden layers, with the standard big-M encoding of every ReLU whose pre-activation bounds
straddle 0; ``solve`` runs HiGHS on it plus extra rows (a target class's margin row from
``target_row``); ``lp_tighten`` tightens the interval bounds of deeper layers by LPs. Pure numpy /
scipy.

L0's objective is Σ z_i − s/2 with the margin row logit_j − logit_y ≥ margin·s: lexicographic,
the fewest moved coordinates first (s/2 < 1), then the largest share of the margin. Its bound is
therefore a bound on the count of any point with logit_j ≥ logit_y (a tie included), which is
what a strict adversarial must beat, and its optimum still reaches the full margin where the
fewest coordinates can.
"""
from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import csr_array

from attackaudit.exact.network import Layer, input_box

#: HiGHS options beyond scipy's five are passed verbatim (scipy warns; we silence that warning).
#: Tight tolerances keep big-M slack (integrality tol × M) from producing fake adversarials.
_HIGHS = {"mip_rel_gap": 1e-7, "mip_abs_gap": 1e-9, "mip_feasibility_tolerance": 1e-9,
          "primal_feasibility_tolerance": 1e-9, "dual_feasibility_tolerance": 1e-9, "threads": 1}


@dataclass
class Program:
    """Sparse (MI)LP: min c·v s.t. cl ≤ A v ≤ cu, vl ≤ v ≤ vu, integrality; plus index maps."""

    n_vars: int
    rows: list = field(default_factory=list)   # (cols, vals, lower, upper) per constraint
    vl: list = field(default_factory=list)
    vu: list = field(default_factory=list)
    integ: list = field(default_factory=list)
    z: list = field(default_factory=list)       # per hidden layer: array of variable indices
    a: list = field(default_factory=list)       # per hidden layer: {neuron: binary index}
    moved: list = field(default_factory=list)   # L0: per coordinate its "moved" binary (or -1)
    share: int = -1                             # L0: the share s of the margin reached
    center: np.ndarray | None = None            # L2: x0, the centre of the quadratic objective
    cap: float = np.inf                         # L2: bound on ‖x − x0‖² (the squared radius)

    def var(self, lower: float, upper: float, integer: bool = False) -> int:
        self.vl.append(lower), self.vu.append(upper), self.integ.append(int(integer))
        self.n_vars += 1
        return self.n_vars - 1

    def row(self, cols: np.ndarray, vals: np.ndarray, lower: float, upper: float) -> None:
        self.rows.append((np.asarray(cols), np.asarray(vals, dtype=np.float64), lower, upper))

    def matrices(self) -> tuple[csr_array, np.ndarray, np.ndarray]:
        data = np.concatenate([r[1] for r in self.rows]) if self.rows else np.zeros(0)
        cols = np.concatenate([r[0] for r in self.rows]) if self.rows else np.zeros(0, int)
        ptr = np.concatenate([[0], np.cumsum([len(r[0]) for r in self.rows])])
        a = csr_array((data, cols, ptr), shape=(len(self.rows), self.n_vars))
        return a, np.array([r[2] for r in self.rows]), np.array([r[3] for r in self.rows])


def encode(layers: Sequence[Layer], x0: np.ndarray, norm: str, radius: float,
           bounds: Sequence[tuple[np.ndarray, np.ndarray]], depth: int, lo: float, hi: float,
           pattern: Sequence[np.ndarray] | None = None) -> tuple[Program, np.ndarray]:
    """Encode input, distance and the first ``depth`` hidden layers; returns (program, c).

    Variables: x (D) first, then the distance variables (L∞: one ε; L1: t ≥ |x − x0|; L0: the
    binaries ``p.moved`` and the share ``p.share``; L2: none), then per hidden layer its
    post-activations z and one binary per unstable neuron. ``c`` is the distance objective's
    linear part (zero for L2, whose ``p.center`` the backend ``miqp`` reads). For L0 ``radius``
    is the largest count of moved coordinates. ``pattern`` (bool per hidden neuron) fixes the activation pattern instead of
    binaries: used to polish a MILP solution with an LP that has no big-M slack at all.
    """
    d = x0.size
    xl, xu = input_box(x0, radius, lo, hi, norm)
    p = Program(0)
    for i in range(d):
        p.var(xl[i], xu[i])
    r = radius if np.isfinite(radius) else (1.0 if norm == "linf" else float(d)) * max(hi - lo, 0)
    dist_cols, weights = np.zeros(0, int), np.zeros(0)
    if norm == "l0":
        _encode_moved(p, x0, xl, xu, float(d) if not np.isfinite(radius) else radius)
        dist_cols = np.array([m for m in p.moved if m >= 0] + [p.share])
        weights = np.append(np.ones(len(dist_cols) - 1), -0.5)
    elif norm == "l2":  # the quadratic objective is the backend's (exact.miqp); the box holds |δ_i| ≤ r
        p.center, p.cap = x0.copy(), (radius * radius * (1 + 1e-9) + 1e-12 if np.isfinite(radius) else np.inf)
    elif norm == "linf":
        eps = p.var(0.0, r)
        for i in range(d):  # x_i − ε ≤ x0_i ≤ x_i + ε
            p.row(np.array([i, eps]), np.array([1.0, -1.0]), -np.inf, x0[i])
            p.row(np.array([i, eps]), np.array([1.0, 1.0]), x0[i], np.inf)
        dist_cols = np.array([eps])
    else:
        t = np.array([p.var(0.0, max(x0[i] - xl[i], xu[i] - x0[i])) for i in range(d)])
        for i in range(d):  # t_i ≥ ±(x_i − x0_i)
            p.row(np.array([t[i], i]), np.array([1.0, -1.0]), -x0[i], np.inf)
            p.row(np.array([t[i], i]), np.array([1.0, 1.0]), x0[i], np.inf)
        p.row(t, np.ones(d), -np.inf, r)
        dist_cols = t
    if norm in ("linf", "l1"):
        weights = np.ones(len(dist_cols))
    prev = np.arange(d)
    for k in range(depth):
        w, b = layers[k]
        l, u = bounds[k]
        if pattern is not None:  # force the pattern by tightening the bounds around 0
            l, u = np.where(pattern[k], np.maximum(l, 0), l), np.where(pattern[k], u, np.minimum(u, 0))
        z = np.array([p.var(max(l[i], 0.0), max(u[i], 0.0)) for i in range(len(b))])
        binaries = {}
        for i in range(len(b)):
            cols, wi = np.concatenate([[z[i]], prev]), np.concatenate([[1.0], -w[i]])
            if u[i] <= 0:  # stable inactive: z = 0; under a forced pattern also pre ≤ 0
                if pattern is not None:
                    p.row(prev, w[i], -np.inf, -b[i])
            elif l[i] >= 0:  # stable active: z = pre
                p.row(cols, wi, b[i], b[i])
            else:  # unstable: z ≥ pre, z ≤ u·a, z ≤ pre − l·(1 − a)
                a = p.var(0.0, 1.0, integer=True)
                binaries[i] = a
                p.row(cols, wi, b[i], np.inf)
                p.row(np.array([z[i], a]), np.array([1.0, -u[i]]), -np.inf, 0.0)
                p.row(np.append(cols, a), np.append(wi, -l[i]), -np.inf, b[i] - l[i])
        p.z.append(z)
        p.a.append(binaries)
        prev = z
    c = np.zeros(p.n_vars)
    c[dist_cols] = weights
    return p, c


def _encode_moved(p: Program, x0: np.ndarray, xl: np.ndarray, xu: np.ndarray, count: float) -> None:
    """L0's variables: z_i ∈ {0, 1} with x0_i − z_i·(x0_i − xl_i) ≤ x_i ≤ x0_i + z_i·(xu_i − x0_i)
    (a coordinate with no room to move gets none), Σ z_i ≤ ``count``, and the margin share s."""
    for i in range(x0.size):
        up, dn = xu[i] - x0[i], x0[i] - xl[i]
        if up <= 0 and dn <= 0:
            p.moved.append(-1)
            continue
        z = p.var(0.0, 1.0, integer=True)
        p.moved.append(z)
        p.row(np.array([i, z]), np.array([1.0, -up]), -np.inf, x0[i])
        p.row(np.array([i, z]), np.array([1.0, dn]), x0[i], np.inf)
    cols = np.array([m for m in p.moved if m >= 0], dtype=int)
    if len(cols):
        p.row(cols, np.ones(len(cols)), -np.inf, np.floor(count + 1e-9))
    p.share = p.var(0.0, 1.0)


def solve(p: Program, c: np.ndarray, extra: Sequence[tuple[np.ndarray, np.ndarray, float, float]],
          relax: bool, time_limit: float):
    """HiGHS on program ``p`` plus ``extra`` rows (cols, vals, lower, upper) over its variables."""
    for cols, vals, lower, upper in extra:
        p.row(cols, vals, lower, upper)
    try:
        a, cl, cu = p.matrices()
    finally:
        del p.rows[len(p.rows) - len(extra):]
    integ = np.zeros(p.n_vars) if relax else np.array(p.integ)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Unrecognized options", RuntimeWarning)
        return milp(c, integrality=integ, bounds=Bounds(np.array(p.vl), np.array(p.vu)),
                    constraints=LinearConstraint(a, cl, cu),
                    options={**_HIGHS, "time_limit": max(float(time_limit), 1e-3)})


def target_row(layers: Sequence[Layer], p: Program, label: int, target: int, margin: float):
    """The row ``logit_target − logit_label ≥ margin`` over the last hidden layer's variables of ``p``
    (the inputs when the network has no hidden layer), as ``solve``'s (cols, vals, lower, upper)."""
    w, b = layers[-1]
    cols, vals = (p.z[-1] if p.z else np.arange(w.shape[1])), w[target] - w[label]
    if p.share >= 0:  # L0: logit_target − logit_label ≥ margin·s
        return np.append(cols, p.share), np.append(vals, -margin), b[label] - b[target], np.inf
    return cols, vals, b[label] - b[target] + margin, np.inf


def lp_tighten(layers: Sequence[Layer], x0: np.ndarray, norm: str, radius: float,
               bounds: list[tuple[np.ndarray, np.ndarray]], lo: float = 0.0, hi: float = 1.0,
               time_limit: float = 10.0) -> list[tuple[np.ndarray, np.ndarray]]:
    """Tighten hidden layers ≥ 2 by two LPs per unstable-candidate neuron (relaxation of earlier
    layers). Worth it on deeper nets: every neuron made stable is a binary fewer."""
    bounds = [(l.copy(), u.copy()) for l, u in bounds]
    start = time.perf_counter()
    for k in range(1, len(layers) - 1):
        # refresh layer k's interval bounds from the tightened layer k−1
        w, b = layers[k]
        zl, zu = np.maximum(bounds[k - 1][0], 0), np.maximum(bounds[k - 1][1], 0)
        wp, wn = np.maximum(w, 0), np.minimum(w, 0)
        l, u = np.maximum(bounds[k][0], wp @ zl + wn @ zu + b), np.minimum(bounds[k][1], wp @ zu + wn @ zl + b)
        p, _ = encode(layers, x0, norm, radius, bounds, k, lo, hi)
        for i in np.flatnonzero((l < 0) & (u > 0)):
            for sign in (1.0, -1.0):
                left = time_limit - (time.perf_counter() - start)
                if left <= 0:
                    break
                c = np.zeros(p.n_vars)
                c[p.z[-1]] = sign * w[i]
                res = solve(p, c, [], relax=True, time_limit=left)
                if res.status == 0 and res.fun is not None:
                    # loosen by far more than the LP tolerance: a bound cut 1e-9 too tight could
                    # remove the optimum's corner and break the exactness claim
                    val = sign * res.fun + b[i] - sign * 1e-7 * (1 + abs(res.fun))
                    if sign > 0:
                        l[i] = max(l[i], val)
                    else:
                        u[i] = min(u[i], val)
        bounds[k] = (l, u)
    return bounds

