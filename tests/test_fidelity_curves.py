"""Robustness curves: exact step functions and their areas."""
import numpy as np
import pytest

from attackaudit.fidelity import attack_success_rate, curve_area, robust_accuracy, robustness_curve

INF = np.inf


def test_step_function_breakpoints_and_values():
    eps, acc = robustness_curve(np.array([0.0, 0.3, 0.1, 0.3, INF]))
    np.testing.assert_allclose(eps, [0.0, 0.1, 0.3])
    # at ε=0 the misclassified sample is broken; at ε=d the sample is broken (d <= ε)
    np.testing.assert_allclose(acc, [0.8, 0.6, 0.2])


def test_never_broken_and_empty():
    eps, acc = robustness_curve(np.array([INF, INF]))
    np.testing.assert_allclose(eps, [0.0])
    np.testing.assert_allclose(acc, [1.0])
    eps, acc = robustness_curve(np.array([]))
    assert eps.tolist() == [0.0] and acc.tolist() == [0.0]


def test_nan_counts_as_not_found_and_negative_is_rejected():
    eps, acc = robustness_curve(np.array([np.nan, 0.5]))
    np.testing.assert_allclose(acc, [1.0, 0.5])
    with pytest.raises(ValueError):
        robustness_curve(np.array([-0.1]))


def test_area_is_exact_integral_of_the_step_function():
    d = np.array([0.0, 0.1, 0.25, 0.4, INF])
    # by hand: robust accuracy .8 on [0,.1), .6 on [.1,.25), .4 on [.25,.4), .2 after
    expected = 0.8 * 0.1 + 0.6 * 0.15 + 0.4 * 0.15 + 0.2 * 0.1
    assert curve_area(d, 0.5) == pytest.approx(expected)
    assert curve_area(d, 0.0) == 0.0
    assert curve_area(np.array([]), 1.0) == 0.0


def test_area_matches_curve_integration():
    rng = np.random.default_rng(0)
    for _ in range(20):
        d = np.where(rng.random(30) < 0.2, INF, rng.random(30))
        d[rng.random(30) < 0.1] = 0.0
        e_max = float(rng.uniform(0.1, 1.2))
        eps, acc = robustness_curve(d)
        edges = np.append(np.minimum(eps, e_max), e_max)
        assert curve_area(d, e_max) == pytest.approx(float(np.sum(acc * np.diff(edges))))


def test_accuracy_and_success_rate_are_complements():
    d = np.array([0.0, 0.2, 0.5, INF])
    assert robust_accuracy(d, 0.2) == 0.5
    assert attack_success_rate(d, 0.2) == 0.5
    assert attack_success_rate(d, 0.0) == 0.25
