"""The L2 backend of the exact solver: ``program``'s big-M encoding with the convex quadratic
objective ‖x − x0‖², a mixed-integer convex QP, solved by SCIP (``pyscipopt``). HiGHS solves LPs,
MILPs and continuous QPs but no MIQP.

``solve`` mirrors ``program.solve``: the same ``Program`` (its rows, bounds and binaries; its
``center`` is x0) plus extra rows, and a result with scipy ``milp``'s fields: ``status`` (0
optimal, 1 time limit, 2 infeasible, 4 other), ``x``, ``fun`` (the squared distance of ``x``,
plus ``c·x``) and ``mip_dual_bound`` (SCIP's proven lower bound on the same). The objective is
min t + c·v with t ≥ Σ (x_i − x0_i)², the epigraph SCIP handles by outer approximation: convex,
so every cut is valid and the dual bound is proven (up to the feasibility tolerance, 1e-9 here
as in ``program``). One thread, SCIP's fixed default seed: the same answer every time.
"""
from __future__ import annotations

from types import SimpleNamespace
from typing import Sequence

import numpy as np

from attackaudit.exact.program import Program

#: SCIP settings: a relative gap of 1e-6 on the squared distance (5e-7 on the distance) keeps
#: "optimal" within the solver's tolerance of 1e-6; tight feasibility keeps big-M slack from
#: producing fake adversarials (every point is re-verified in float64 anyway).
_SCIP = {"limits/gap": 1e-6, "limits/absgap": 1e-12, "numerics/feastol": 1e-9,
         "numerics/dualfeastol": 1e-9, "display/verblevel": 0,
         # the root's cut rounds (thousands of tangent cuts) cost most of the time on digits-mlp:
         # 5 rounds halve its MIQPs, the rest of the cuts come from enforcement as needed
         "separating/maxroundsroot": 5}
_STATUS = {"optimal": 0, "gaplimit": 0, "timelimit": 1, "infeasible": 2, "inforunbd": 2}


def available() -> bool:
    """Whether SCIP (pyscipopt) can be imported: L2 exact distances need it."""
    try:
        import pyscipopt  # noqa: F401
    except ImportError:
        return False
    return True


def solve(p: Program, c: np.ndarray, extra: Sequence[tuple[np.ndarray, np.ndarray, float, float]],
          relax: bool, time_limit: float) -> SimpleNamespace:
    """SCIP on ``p`` plus ``extra`` rows, objective ‖x − p.center‖² + c·v (t ≤ ``p.cap`` when
    finite: the squared radius the program was built for); ``relax``: binaries continuous."""
    try:
        from pyscipopt import Model, quicksum
    except ImportError as exc:  # pragma: no cover - pyscipopt is in requirements.txt
        raise RuntimeError("L2 exact distances need SCIP: pip install pyscipopt") from exc
    m = Model()
    m.hideOutput(_SCIP["display/verblevel"] == 0)
    for key, value in _SCIP.items():
        m.setParam(key, value)
    m.setParam("limits/time", max(float(time_limit), 1e-3))
    v = [m.addVar(lb=lo, ub=hi, vtype="B" if (ig and not relax) else "C")
         for lo, hi, ig in zip(p.vl, p.vu, p.integ)]
    for cols, vals, lower, upper in list(p.rows) + list(extra):
        expr = quicksum(float(a) * v[int(k)] for k, a in zip(cols, vals))
        if lower == upper:
            m.addCons(expr == float(lower))
        elif np.isfinite(lower) and np.isfinite(upper):
            m.addCons(float(lower) <= (expr <= float(upper)))
        elif np.isfinite(lower):
            m.addCons(expr >= float(lower))
        elif np.isfinite(upper):
            m.addCons(expr <= float(upper))
    objective = quicksum(float(c[k]) * v[k] for k in np.flatnonzero(c))
    if p.center is not None:  # separable: one epigraph t_i ≥ (x_i − x0_i)² per coordinate
        center = np.asarray(p.center, dtype=np.float64)
        t = [m.addVar(lb=0.0, ub=max((p.vu[i] - center[i]) ** 2, (center[i] - p.vl[i]) ** 2))
             for i in range(center.size)]
        for i in range(center.size):
            m.addCons((v[i] - float(center[i])) * (v[i] - float(center[i])) <= t[i])
        if np.isfinite(p.cap):
            m.addCons(quicksum(t) <= p.cap)
        objective = objective + quicksum(t)
    m.setObjective(objective, "minimize")
    m.optimize()
    status = _STATUS.get(m.getStatus(), 4)
    x = None
    if m.getNSols() > 0:
        sol = m.getBestSol()
        x = np.array([m.getSolVal(sol, var) for var in v])
    fun = m.getObjVal() if x is not None else None
    dual = m.getDualbound()
    if status == 2:
        fun = dual = None
    return SimpleNamespace(status=status, x=x, fun=fun,
                           mip_dual_bound=float(dual) if dual is not None and np.isfinite(dual) else None)
