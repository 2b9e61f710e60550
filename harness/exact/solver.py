"""Ground truth: exact minimal adversarial L∞ / L1 / L0 / L2 distances of small ReLU networks
(MILP by HiGHS; L2, a mixed-integer convex QP, by SCIP: ``miqp``).

Pure numpy / scipy (no torch, no I/O; ``encoding`` turns a torch model into its layers). A network is a list of affine layers ``(W, b)`` with
``W``: out×in and ``b``: out, and a ReLU between consecutive layers (none after the last, whose
outputs are the logits). Inputs are flat vectors of length ``D = layers[0][0].shape[1]`` inside
the box ``[lo, hi]^D``. The parts: ``network`` (evaluation, interval bounds), ``program`` (the
big-M (MI)LP and HiGHS), ``miqp`` (the same program with L2's quadratic objective, SCIP), ``incumbent`` (the best verified adversarial and the cheap searches
that seed it); this module runs them per sample.

``minimal_distance`` solves, per target class ``j ≠ y``, the mixed-integer program

    min ‖x − x0‖   s.t.  x ∈ [lo, hi]^D,  logit_j(x) ≥ logit_y(x) + margin

(L2: min ‖x − x0‖²₂; L0: the count of moved coordinates, the margin lexicographic: below) with
the standard big-M encoding of every ReLU whose pre-activation bounds straddle 0 (bounds from
interval arithmetic, the first layer exactly for box ∩ ball in L∞, L1, L0 and L2, deeper ones
optionally tightened by LPs), and returns the minimum over ``j``. The margin (default 1e-6) breaks decision-boundary ties:
a point exactly on the boundary is not an adversarial example (``attackaudit.measure.success``: success
is a strict inequality, as everywhere in the harness); the distance to the margin set exceeds the infimum over the boundary by at most
``margin / ‖∇(logit_j − logit_y)‖_dual`` (≈1e-7 on the zoo), far below the flag tolerance.

L0 counts are integers, and one coordinate more or less is no rounding: its program (``program``)
minimises the count first and the share of the margin reached second, so its ``lower_bound``
holds for every point with logit_j ≥ logit_y (ties included), and its adversarial reaches the
margin where the fewest coordinates can (else only a strict gap > 0). A coordinate counts as
moved when it differs from x0 at all; the harness counts |δ_i| > 1e-6 (``measure.distance``).

Every reported adversarial is clipped into the box and re-evaluated in float64: some other logit must strictly exceed
the label's, and ``distance`` is its norm as computed here. ``lower_bound`` is the solver's proven
bound (HiGHS's, or SCIP's for L2; valid up to the feasibility tolerances, set to 1e-9).

The table helpers over its results (true optimality, below-exact flags) are
``attackaudit.fidelity.true_optimality``.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from attackaudit.exact.incumbent import Incumbent, offer_candidates, upper_bound_search
from attackaudit.exact.network import Layer, as_layers, distance, forward, margin_to_label, preactivation_bounds
from attackaudit.exact.program import Program, encode, lp_tighten, solve, target_row

__all__ = ["NORMS", "STATUSES", "ExactResult", "Layer", "as_layers", "distance", "forward", "lp_tighten",
           "margin_to_label", "minimal_distance", "preactivation_bounds"]

NORMS = ("linf", "l1", "l0", "l2")
STATUSES = ("optimal", "time_limit", "clean_misclassified", "error")


@dataclass
class ExactResult:
    """One sample's answer. ``adversarial``: D float64 (the best verified point) or None."""

    distance: float          # verified distance when status is optimal, else NaN
    lower_bound: float       # proven: no misclassification strictly closer (up to solver tol)
    upper_bound: float       # distance of ``adversarial`` (inf when none was found)
    status: str              # optimal | time_limit | clean_misclassified | error
    adversarial: np.ndarray | None
    adversarial_class: int = -1
    solve_s: float = 0.0
    error: str = ""
    targets: dict = field(default_factory=dict)  # per target class: (lower, upper, how)



@dataclass
class _Sample:
    """One sample's solve: the network, the point x0 (D) and its label, the options, the clock."""

    layers: list[Layer]
    x0: np.ndarray
    label: int
    norm: str
    margin: float
    lo: float
    hi: float
    tighten: bool
    time_limit: float
    start: float

    def left(self) -> float:
        """Seconds left of the sample's time limit."""
        return self.time_limit - (time.perf_counter() - self.start)

    def program(self, radius: float) -> tuple[Program, np.ndarray]:
        """The MILP (L2: MIQP) over box ∩ ball(radius): its big-M constants come from the bounds
        at ``radius``. L0 counts are integers: a better point moves at most ``radius`` − 1."""
        depth = len(self.layers) - 1
        if self.norm == "l0" and np.isfinite(radius):
            radius = radius - 1
        bounds = preactivation_bounds(self.layers, self.x0, self.norm, radius, self.lo, self.hi)
        if self.tighten and depth > 1:
            bounds = lp_tighten(self.layers, self.x0, self.norm, radius, bounds, self.lo, self.hi,
                                time_limit=max(0.0, 0.25 * self.left()))
        return encode(self.layers, self.x0, self.norm, radius, bounds, depth, self.lo, self.hi)

    def target(self, p: Program, target: int) -> tuple[np.ndarray, np.ndarray, float, float]:
        """The margin row of class ``target`` over ``p``'s variables."""
        return target_row(self.layers, p, self.label, target, self.margin)

    def solve(self, p: Program, c: np.ndarray, extra: list, relax: bool, time_limit: float):
        """HiGHS, or SCIP for L2 (``miqp``): a result with scipy ``milp``'s fields."""
        if self.norm == "l2":
            from attackaudit.exact import miqp

            return miqp.solve(p, c, extra, relax, time_limit)
        return solve(p, c, extra, relax=relax, time_limit=time_limit)

    def bound(self, value: float | None) -> float | None:
        """A lower bound on the program's objective as one on the distance: L2's objective is
        the squared distance, L0's the count less half the margin share (so ⌈value⌉ counts)."""
        if value is None or not np.isfinite(value):
            return value
        if self.norm == "l2":
            return float(np.sqrt(max(value, 0.0)))
        if self.norm == "l0":
            return float(max(0.0, np.ceil(value - 1e-6)))
        return float(value)


def minimal_distance(layers: Sequence[tuple[np.ndarray, np.ndarray]], x0: np.ndarray, label: int,
                     norm: str, *, time_limit: float = 30.0, margin: float = 1e-6, lo: float = 0.0,
                     hi: float = 1.0, candidates: np.ndarray | None = None, tighten: bool = True,
                     tol: float = 1e-6) -> ExactResult:
    """Exact minimal ``norm`` distance from ``x0`` (D) to any class ≠ ``label`` inside [lo, hi]^D.

    ``candidates`` (N×D, inside the box) are points that may be misclassified (e.g. training
    points of other classes): the misclassified ones, shrunk towards x0, seed the upper bound that
    restricts every MILP and its big-M constants. Targets are visited in order of their LP
    relaxation bound and skipped once that bound reaches the best distance found. ``time_limit``
    covers the whole sample; when it runs out the proven lower and upper bounds are returned.
    """
    start = time.perf_counter()
    if norm not in NORMS:
        raise ValueError(f"exact distances support {', '.join(NORMS)}, not {norm!r}")
    layers = as_layers(layers)
    x0 = np.asarray(x0, dtype=np.float64).reshape(-1)
    best = Incumbent(layers, x0, label, norm, margin, lo, hi)
    if margin_to_label(forward(layers, x0), label) > 0:
        # already misclassified; a tie is not (attackaudit.measure.success: success is strict)
        return ExactResult(0.0, 0.0, 0.0, "clean_misclassified", x0.copy(),
                           int(np.argmax(forward(layers, x0))), time.perf_counter() - start)
    offer_candidates(best, candidates)
    upper_bound_search(best, lo, hi)
    sample = _Sample(layers, x0, label, norm, margin, lo, hi, tighten, time_limit, start)
    radius = best.dist
    p, c = sample.program(radius)
    lp_lb = _lp_bounds(sample, p, c, radius, best)
    targets = _milp_targets(sample, p, c, radius, lp_lb, best, tol)
    return _result(best, targets, tol, start)


def _lp_bounds(sample: _Sample, p: Program, c: np.ndarray, radius: float, best: Incumbent) -> dict[int, float]:
    """Per target class ≠ label, the LP relaxation's lower bound (capped at ``radius``); every LP
    optimum is also offered to ``best`` as a heuristic point."""
    lp_lb: dict[int, float] = {}
    n_cls = sample.layers[-1][0].shape[0]
    for j in (j for j in range(n_cls) if j != sample.label):
        res = sample.solve(p, c, [sample.target(p, j)], relax=True, time_limit=max(sample.left(), 0.01))
        if res.status == 0:
            lp_lb[j] = min(sample.bound(res.fun), radius)
            best.offer(res.x[:sample.x0.size], shrink=True)
        elif res.status == 2:  # infeasible within the radius: target j needs ≥ radius
            lp_lb[j] = radius
        else:
            lp_lb[j] = 0.0
    return lp_lb


def _milp_targets(sample: _Sample, p: Program, c: np.ndarray, radius: float, lp_lb: dict[int, float],
                  best: Incumbent, tol: float) -> dict[int, tuple[float, float, str]]:
    """Per target class, (proven lower bound, verified distance found, how): the MILPs, the
    incumbent's class first, each skipped once its LP bound reaches the incumbent's distance."""
    targets: dict[int, tuple[float, float, str]] = {}
    first = best.cls  # the incumbent's class most often holds the optimum: prove it first
    for j in sorted(lp_lb, key=lambda j: (j != first, lp_lb[j])):
        if lp_lb[j] >= best.dist - tol:
            targets[j] = (lp_lb[j], np.inf, "pruned by LP bound")
            continue
        if sample.left() <= 0:
            targets[j] = (lp_lb[j], np.inf, "not started (time limit)")
            continue
        if best.dist < radius * (1 - 1e-3):  # a better incumbent: rebuild with tighter big-M
            radius = best.dist
            p, c = sample.program(radius)
        t_j = time.perf_counter()
        res = sample.solve(p, c, [sample.target(p, j)], relax=False, time_limit=max(sample.left(), 0.01))
        t_j = time.perf_counter() - t_j
        found = _accept(sample, p, res, j, best)
        dual = sample.bound(res.mip_dual_bound if res.mip_dual_bound is not None else res.fun)
        if res.status == 0:
            targets[j] = (min(dual, radius), found, f"optimal in {t_j:.2f}s")
        elif res.status == 2:
            targets[j] = (radius, np.inf, f"infeasible within the incumbent distance ({t_j:.2f}s)")
        else:
            dual = dual if dual is not None else lp_lb[j]
            targets[j] = (min(max(dual, lp_lb[j]), radius), found, f"time limit after {t_j:.2f}s")
    return targets


def _result(best: Incumbent, targets: dict[int, tuple[float, float, str]], tol: float, start: float) -> ExactResult:
    """The sample's answer from the incumbent and the per-target bounds."""
    lower = min([best.dist] + [t[0] for t in targets.values()])
    elapsed = time.perf_counter() - start
    if best.x is None:  # no adversarial found: proven robust on the whole box, or out of time
        proven = lower == np.inf
        return ExactResult(np.inf if proven else np.nan, lower, np.inf,
                           "optimal" if proven else "time_limit", None, -1, elapsed, "", targets)
    solved = best.dist - lower <= tol + 1e-6 * best.dist
    if best.norm == "l2":  # SCIP's tolerance acts on the squared distance: 1e-9 per coordinate
        solved = solved or best.dist ** 2 - lower ** 2 <= 2e-9 * best.x0.size + 1e-6 * best.dist ** 2
    return ExactResult(best.dist if solved else np.nan, min(lower, best.dist), best.dist,
                       "optimal" if solved else "time_limit", best.x, best.cls, elapsed, "", targets)


def _accept(sample: _Sample, p: Program, res, target: int, best: Incumbent) -> float:
    """Offer the MILP incumbent, and its LP polish under the MILP's activation pattern (no big-M
    slack), to ``best``; returns the smaller verified distance (inf when neither verifies)."""
    x0 = sample.x0
    if res.x is None:
        return np.inf
    x = res.x[:x0.size]
    found = np.inf
    if best.offer(x):
        found = best.dist
    pattern = []
    for k, z in enumerate(p.z):  # activation pattern: binaries where unstable, else the bounds
        on = res.x[z] > 0
        for i, a in p.a[k].items():
            on[i] = res.x[a] > 0.5
        pattern.append(on)
    layers, norm, lo, hi = sample.layers, sample.norm, sample.lo, sample.hi
    bounds = preactivation_bounds(layers, x0, norm, np.inf, lo, hi)
    q, c = encode(layers, x0, norm, np.inf, bounds, len(layers) - 1, lo, hi, pattern=pattern)
    if norm == "l0":  # keep the MILP's moved coordinates, the others exactly at x0; most margin
        moved = [i for i, m in enumerate(p.moved) if (m >= 0 and res.x[m] > 0.5) or abs(x[i] - x0[i]) > 1e-9]
        for i in np.setdiff1d(np.arange(x0.size), moved):
            q.vl[i] = q.vu[i] = x0[i]
        c = np.zeros(q.n_vars)
        c[q.share] = -1.0
    pol = sample.solve(q, c, [sample.target(q, target)], relax=True, time_limit=10.0)
    if pol.status == 0 and best.offer(pol.x[:x0.size]):
        found = best.dist
    return found if np.isfinite(found) else (best.dist if best.offer(x, shrink=True) else np.inf)
