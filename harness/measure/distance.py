"""Perturbation sizes under the four norms, on flattened rows."""
from __future__ import annotations

import torch
from torch import Tensor

#: a coordinate changed by less than this does not count towards L0 (float round-trips through
#: numpy/float32 leave ~1e-8 noise; the smallest real change on 8-bit data is 1/255)
L0_TOLERANCE = 1e-6

TORCH_P = {"l0": 0.0, "l1": 1.0, "l2": 2.0, "linf": float("inf")}


def lp_norm(delta: Tensor, norm: str) -> Tensor:
    """Per-row size of ``delta`` (N×D or N×C×H×W) under ``norm``; returns N."""
    flat = delta.reshape(delta.shape[0], -1)
    if norm == "l0":
        return (flat.abs() > L0_TOLERANCE).sum(1).to(flat.dtype)
    if norm == "l1":
        return flat.abs().sum(1)
    if norm == "l2":
        return torch.linalg.vector_norm(flat, 2, dim=1)  # Tensor.norm's Python wrapper costs as much
    if norm == "linf":
        return flat.abs().amax(1) if flat.shape[1] else flat.new_zeros(flat.shape[0])
    raise ValueError(f"unknown norm {norm!r}; use one of l0, l1, l2, linf")


def attribution_norm(norm: str) -> str:
    """The norm a query is attributed under for a job of ``norm``: the job's own, but L1 for L0,
    where a count of changed coordinates ties too easily under float noise. The one place this
    rule lives; the tracker and the distances below both read it."""
    return "l1" if norm == "l0" else norm


def pairwise_distance(rows: Tensor, originals: Tensor, norm: str) -> Tensor:
    """B×N distances between flattened ``rows`` (B×D) and ``originals`` (N×D).

    Measured under ``attribution_norm(norm)``.
    """
    p = TORCH_P[attribution_norm(norm)]
    # no matrix-product shortcut for L2: its rounding depends on the batch sizes, and the
    # attribution rule needs a row's distance to be the same whatever else is in the batch
    dist = torch.cdist(rows.unsqueeze(0), originals.unsqueeze(0), p=p,
                       compute_mode="donot_use_mm_for_euclid_dist").squeeze(0)
    if p == float("inf"):  # cdist's L∞ skips NaN coordinates (0 for an all-NaN pair); lp_norm's is NaN
        nan_rows, nan_points = torch.isnan(rows).any(1), torch.isnan(originals).any(1)
        if bool(nan_rows.any()) or bool(nan_points.any()):
            dist = dist.masked_fill(nan_rows.unsqueeze(1) | nan_points.unsqueeze(0), float("nan"))
    return dist


def finite_pairwise_distance(rows: Tensor, points: Tensor, norm: str) -> Tensor:
    """``pairwise_distance`` (B×K) with each row's NaN/±inf coordinates left out, and NaN
    distances (a NaN among ``points``) counted as inf: the attribution distance of the
    QueryTracker's rule. An all-NaN row is at distance 0 from every point."""
    finite = torch.isfinite(rows)
    clean = bool(finite.all())
    dist = pairwise_distance(rows if clean else rows.nan_to_num(0.0, 0.0, 0.0), points, norm)
    if not clean:
        bad = (~finite.all(1)).nonzero().squeeze(1)
        delta = (rows[bad].unsqueeze(1) - points.unsqueeze(0)).masked_fill(~finite[bad].unsqueeze(1), 0.0)
        dist[bad] = lp_norm(delta.flatten(0, 1), attribution_norm(norm)).view(len(bad), len(points))
    return dist.masked_fill(torch.isnan(dist), float("inf"))
