"""Robustness curves: robust accuracy as the exact step function of ε.

A sample with minimal adversarial distance ``d`` counts as robust at ε while ``ε < d`` (broken at
``ε = d``); ``d = 0`` means misclassified already, ``d = inf`` never broken. So robust accuracy
``RA(ε) = mean(d > ε)`` is right-continuous and piecewise constant, and its area on ``[0, E]`` is
exactly ``mean(min(d, E))``: no interpolation anywhere.
"""
from __future__ import annotations

import numpy as np


def as_distances(distances: object) -> np.ndarray:
    """A 1-D float array; NaN (an unknown result) counts as inf (nothing found)."""
    d = np.asarray(distances, dtype=float).reshape(-1)
    if np.any(d < 0):
        raise ValueError("distances must be >= 0")
    return np.where(np.isnan(d), np.inf, d)


def robustness_curve(distances: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Breakpoints and values of the robust-accuracy step function.

    ``distances``: (N,) per-sample distances (0 = misclassified clean, inf = never broken).
    Returns ``(eps, acc)``, both (K,) with K ≤ N + 1: ``eps[0] = 0`` followed by the distinct
    finite positive distances, increasing; ``acc[i]`` is the robust accuracy on
    ``[eps[i], eps[i+1])`` (the last value holds for all larger ε, and is the fraction never
    broken). An empty input gives ``([0.], [0.])``.
    """
    d = as_distances(distances)
    if d.size == 0:
        return np.zeros(1), np.zeros(1)
    eps = np.union1d([0.0], d[np.isfinite(d)])
    acc = 1.0 - np.searchsorted(np.sort(d), eps, side="right") / d.size
    return eps, acc


def robust_accuracy(distances: np.ndarray, eps: float) -> float:
    """Fraction of samples not broken at ``eps`` (``d > eps``); 0 for an empty input."""
    d = as_distances(distances)
    return float(np.mean(d > eps)) if d.size else 0.0


def attack_success_rate(distances: np.ndarray, eps: float) -> float:
    """Fraction of samples broken at ``eps`` (``d <= eps``), counting those misclassified clean."""
    d = as_distances(distances)
    return float(np.mean(d <= eps)) if d.size else 0.0


def curve_area(distances: np.ndarray, eps_max: float) -> float:
    """Exact area under the robust-accuracy step function on ``[0, eps_max]``.

    Sample ``i`` is robust on ``[0, d_i)``, so it contributes ``min(d_i, eps_max)``; the area is
    their mean. 0 for an empty input or ``eps_max <= 0``.
    """
    d = as_distances(distances)
    if d.size == 0 or not eps_max > 0:
        return 0.0
    return float(np.mean(np.minimum(d, float(eps_max))))
