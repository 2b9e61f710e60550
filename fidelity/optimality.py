"""Envelope and optimality (docs/architecture.md "Where each decision lives"; fidelity/README.md for the decisions).

ξ = (ρ·ε₀ − A_attack) / (ρ·ε₀ − A*), with A the exact areas of the robust-accuracy step curves on
[0, ε₀] (``curves.curve_area``), A* the envelope's, ρ the envelope's robust accuracy at ε = 0 and
ε₀ the largest finite envelope distance (or a given ε_max per norm). Because every sample with
d* = 0 is 0 for every implementation, this is exactly

    ξ = Σ_i (ε₀ − d_i)₊ / Σ_i (ε₀ − d*_i)₊     over samples with d*_i > 0,

which is how it is computed (no cancellation between nearly equal areas). An implementation that
never succeeds scores 0, one that matches the envelope 1. When the envelope breaks nothing inside
(0, ε₀) — one live sample, or every envelope distance tied at ε₀, as integer L0 distances often
are — the denominator is 0 and ξ is undefined: NaN ("n/a" in reports), never 0, which would read
as an attack that never succeeded.
"""
from __future__ import annotations

from typing import Mapping

import numpy as np
import pandas as pd

from ._table import IMPL_KEY, SAMPLE_KEY, group_rows, impl_meta, long_distances, prepare, without_twins
from .curves import as_distances

_trapezoid = getattr(np, "trapezoid", None) or getattr(np, "trapz")

LOCAL_COLUMNS = ["model", "norm", "implementation", "library", "library_version", "attack", "family",
                 "optimality", "optimality_attackbench", "eps0", "n_samples", "n_success"]
GLOBAL_COLUMNS = ["norm", "implementation", "library", "library_version", "attack", "family",
                  "optimality", "optimality_attackbench", "n_models"]


def eps0_of(reference: np.ndarray, eps_max: float | None = None) -> float:
    """ε₀: ``eps_max`` when given, else the largest finite reference distance (0 if none)."""
    if eps_max is not None:
        return float(eps_max)
    ref = as_distances(reference)
    finite = ref[np.isfinite(ref)]
    return float(finite.max()) if finite.size else 0.0


def optimality(distances: np.ndarray, reference: np.ndarray, eps_max: float | None = None) -> float:
    """Local optimality ξ ∈ [0, 1] of per-sample ``distances`` against ``reference`` (both (N,),
    same sample order; usually the envelope d*, or exact distances).

    Samples with reference 0 are left out (nobody has to attack them); a reference that breaks
    nothing inside (0, ε₀) gives NaN (ξ undefined, not 0). Distances below the reference (possible against an external
    reference only) would exceed 1 and are clipped; ``flags`` reports them as ``below_exact``.
    """
    d, ref = as_distances(distances), as_distances(reference)
    if d.shape != ref.shape:
        raise ValueError(f"distances and reference differ in length: {d.size} vs {ref.size}")
    eps0 = eps0_of(ref, eps_max)
    live = ref > 0
    if not eps0 > 0 or not live.any():
        return float("nan")
    gain_ref = np.clip(eps0 - ref[live], 0.0, None).sum()
    if not gain_ref > 0:
        return float("nan")
    return float(np.clip(np.clip(eps0 - d[live], 0.0, None).sum() / gain_ref, 0.0, 1.0))


def optimality_attackbench(distances: np.ndarray, reference: np.ndarray) -> float:
    """AttackBench's published optimality (``analysis/utils.py::eval_optimality``), for comparing
    with the public leaderboard: trapezoids through each curve's own points, ε₀ = max d*.

    ``1 − (A − A*) / (clean_acc·ε₀ − A*)`` where A (A*) is ``np.trapz`` of ``1 − cumsum/N`` at the
    distinct distances of the attack clipped at ε₀ (of the reference). The reference's infs,
    which AttackBench never has, are clipped at ε₀ too. Not bounded to [0, 1]: an always-failing
    attack scores at least 0.5 (about 1 against an evenly spread envelope) when some samples are
    misclassified clean, and above 1 when none are (fidelity/README.md). A degenerate reference
    (nothing broken, or a zero denominator) gives NaN.
    """
    d, ref = as_distances(distances), as_distances(reference)
    if d.shape != ref.shape:
        raise ValueError(f"distances and reference differ in length: {d.size} vs {ref.size}")
    finite = ref[np.isfinite(ref)]
    if finite.size == 0 or not finite.max() > 0:
        return float("nan")
    eps0 = float(finite.max())

    def area(x: np.ndarray) -> float:
        points, counts = np.unique(np.minimum(x, eps0), return_counts=True)
        return float(_trapezoid(1.0 - counts.cumsum() / x.size, points))

    best_area = area(ref)
    denominator = np.count_nonzero(ref) / ref.size * eps0 - best_area
    if not denominator > 0:
        return float("nan")
    return float(1.0 - (area(d) - best_area) / denominator)


def envelope(table: pd.DataFrame) -> pd.DataFrame:
    """Per (model, norm, sample): ``d_star``, the smallest best distance over all implementations
    (every status: the tracker's best is valid evidence even from a job that later crashed), and
    ``found_by``, an implementation that reached it ("" when none broke the sample).

    Twins (``model~shift``) are models of their own here. Columns: model, norm, sample, d_star,
    found_by.
    """
    t = prepare(table)
    if t.empty:
        return pd.DataFrame(columns=SAMPLE_KEY + ["d_star", "found_by"])
    order = t.sort_values(SAMPLE_KEY + ["best_distance", "implementation"], kind="stable")
    first = order.drop_duplicates(SAMPLE_KEY, keep="first")
    out = first[SAMPLE_KEY].assign(
        d_star=first["best_distance"].to_numpy(),
        found_by=np.where(np.isfinite(first["best_distance"]), first["implementation"], ""))
    return out.sort_values(SAMPLE_KEY).reset_index(drop=True)


def _local(t: pd.DataFrame, eps_max: Mapping[str, float] | None) -> pd.DataFrame:
    long = long_distances(t)
    distance, d_star, alive = (long[c].to_numpy() for c in ("distance", "d_star", "live"))
    rows = []
    for (model, norm, impl, version), at in group_rows(long, ["model", "norm", *IMPL_KEY]):
        d, ref = distance[at], d_star[at]
        eps_given = (eps_max or {}).get(norm)
        live = alive[at]
        rows.append({"model": model, "norm": norm, "implementation": impl, "library_version": version,
                     "optimality": optimality(d, ref, eps_given),
                     "optimality_attackbench": optimality_attackbench(d, ref),
                     "eps0": eps0_of(ref, eps_given), "n_samples": int(len(at)),
                     "n_success": int((np.isfinite(d) & live).sum())})
    if not rows:
        return pd.DataFrame(columns=LOCAL_COLUMNS)
    return pd.DataFrame(rows).merge(impl_meta(t), on=IMPL_KEY, how="left")[LOCAL_COLUMNS]


def local_optimality(table: pd.DataFrame, eps_max: Mapping[str, float] | None = None) -> pd.DataFrame:
    """Per (model, norm, implementation, library_version): ξ against that model's envelope.

    ``eps_max`` fixes ε₀ per norm (e.g. ``{"linf": 0.3}``); otherwise ε₀ is the largest finite
    envelope distance. Twins are their own models. Columns: ``LOCAL_COLUMNS`` (``eps0`` is the ε₀
    used, ``n_success`` the samples the implementation broke that were not broken at ε = 0).
    """
    return _local(prepare(table), eps_max)


def global_optimality(table: pd.DataFrame, eps_max: Mapping[str, float] | None = None) -> pd.DataFrame:
    """Per (norm, implementation, library_version): mean local optimality over the real models it
    ran on (twins excluded; ``n_models`` says over how many). Columns: ``GLOBAL_COLUMNS``."""
    return global_of(_local(without_twins(prepare(table)), eps_max))


def global_of(local: pd.DataFrame) -> pd.DataFrame:
    """``global_optimality`` from the ``_local`` frame of a prepared table without twins (for a
    caller that has it already: the same frame, computed once)."""
    if local.empty:
        return pd.DataFrame(columns=GLOBAL_COLUMNS)
    keys = ["norm", *IMPL_KEY, "library", "attack", "family"]
    out = (local.groupby(keys, sort=True)
           .agg(optimality=("optimality", "mean"), optimality_attackbench=("optimality_attackbench", "mean"),
                n_models=("model", "nunique"))
           .reset_index())
    return out[GLOBAL_COLUMNS]
