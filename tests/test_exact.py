"""Exact minimal distances (MILP): closed-form networks, the tiny zoo MLP, encoding, fidelity."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch
from torch import nn

from attackaudit.sources.subset import load_subset
from attackaudit.exact.command import EXACT_COLUMNS, exact_path, run_exact
from attackaudit.exact.encoding import UnsupportedLayer, check_encoding, encode_sequential
from attackaudit.exact.solver import distance, forward, margin_to_label, minimal_distance
from attackaudit.fidelity.true_optimality import below_exact_flags, true_optimality
from attackaudit.sources.zoo import LogitShift, load_model

M = 1e-6  # the solver's default decision margin


def two_class_linear(w1: list[float], c: float) -> list[tuple[np.ndarray, np.ndarray]]:
    """Class 0 logit 0, class 1 logit w1·x − c: a single affine layer."""
    return [(np.array([[0.0, 0.0], w1]), np.array([0.0, -c]))]


@pytest.mark.parametrize("w1, c, x0, linf, l1", [
    # interior: δ1 + δ2 ≥ 0.5 + m → L∞ (0.5+m)/2, L1 0.5+m
    ([1.0, 1.0], 1.0, [0.2, 0.3], (0.5 + M) / 2, 0.5 + M),
    # the box binds: x1 can rise only 0.1; 3δ1 + δ2 ≥ 0.6 + m
    #   L∞: 0.3 + ε ≥ 0.6 + m (unboxed: 4ε → 0.15); L1: δ1 = 0.1, δ2 = 0.3 + m (unboxed: 0.2)
    ([3.0, 1.0], 3.4, [0.9, 0.1], 0.3 + M, 0.4 + M),
])
def test_linear_closed_form(w1, c, x0, linf, l1):
    layers = two_class_linear(w1, c)
    for norm, expected in (("linf", linf), ("l1", l1)):
        r = minimal_distance(layers, np.array(x0), 0, norm, time_limit=10)
        assert r.status == "optimal"
        assert r.distance == pytest.approx(expected, abs=1e-7)
        assert r.lower_bound <= r.distance + 1e-9 and r.lower_bound >= expected - 1e-6
        assert margin_to_label(forward(layers, r.adversarial), 0) > 0
        assert np.all((r.adversarial >= 0) & (r.adversarial <= 1))


def abs_diff_net(threshold: float) -> list[tuple[np.ndarray, np.ndarray]]:
    """Hidden ReLUs h = (relu(x1−x2), relu(x2−x1)); logits (threshold, h1 + h2 = |x1 − x2|).
    Misclassified on two disjoint regions: both hidden units are unstable around x1 = x2."""
    hidden = (np.array([[1.0, -1.0], [-1.0, 1.0]]), np.zeros(2))
    out = (np.array([[0.0, 0.0], [1.0, 1.0]]), np.array([threshold, 0.0]))
    return [hidden, out]


def test_relu_closed_form_nonconvex():
    layers = abs_diff_net(0.3)
    x0 = np.array([0.5, 0.5])
    r = minimal_distance(layers, x0, 0, "linf", time_limit=10)
    assert r.status == "optimal" and r.distance == pytest.approx((0.3 + M) / 2, abs=1e-7)
    r = minimal_distance(layers, x0, 0, "l1", time_limit=10)
    assert r.status == "optimal" and r.distance == pytest.approx(0.3 + M, abs=1e-7)
    # near the box edge x1 can rise only 0.05: x1 − x2 ≥ 0.3 + m costs L∞ ε with
    #   0.05 + 0.05 + ε ≥ 0.3 + m → 0.2 + m, and L1 0.05 + (0.2 + m); the other side is dearer
    x0 = np.array([0.95, 0.9])
    assert minimal_distance(layers, x0, 0, "linf").distance == pytest.approx(0.2 + M, abs=1e-7)
    assert minimal_distance(layers, x0, 0, "l1").distance == pytest.approx(0.25 + M, abs=1e-7)


def test_robust_and_clean_misclassified():
    never = two_class_linear([1.0, 1.0], 5.0)  # w·x ≤ 2 < 5 on the whole box
    r = minimal_distance(never, np.array([0.5, 0.5]), 0, "linf", time_limit=10)
    assert r.status == "optimal" and math.isinf(r.distance) and r.adversarial is None
    wrong = minimal_distance(two_class_linear([1.0, 1.0], 0.5), np.array([0.5, 0.5]), 0, "l1")
    assert wrong.status == "clean_misclassified" and wrong.distance == 0.0
    with pytest.raises(ValueError, match="l3"):
        minimal_distance(never, np.array([0.5, 0.5]), 0, "l3")


def _pgd_min_linf(model: nn.Module, x: torch.Tensor, y: int, hi: float, steps: int = 60) -> float:
    """Smallest L∞ ε at which a simple margin-loss PGD (bisection over ε) finds an adversarial."""
    best = math.inf
    lo_eps, hi_eps = 0.0, hi
    for _ in range(10):
        eps = 0.5 * (lo_eps + hi_eps)
        delta = torch.zeros_like(x, requires_grad=True)
        found = None
        for _ in range(steps):
            z = model((x + delta).clamp(0, 1))
            other = z.clone()
            other[0, y] = -torch.inf
            loss = other.max() - z[0, y]
            grad, = torch.autograd.grad(loss, delta)
            with torch.no_grad():
                delta += eps / 8 * grad.sign()
                delta.clamp_(-eps, eps)
                adv = (x + delta).clamp(0, 1)
                if model(adv).argmax(1).item() != y:
                    found = adv
                    break
        if found is None:
            lo_eps = eps
        else:
            hi_eps = eps
            best = min(best, float((found - x).abs().max()))
    return best


def test_tiny_mlp_exact_vs_pgd_and_recheck():
    model = load_model("digits-mlp-tiny")
    sub = load_subset("digits", 4, seed=3)
    layers = encode_sequential(model, (1, 8, 8))
    check_encoding(model, layers, sub.inputs)
    model64 = load_model("digits-mlp-tiny").double()
    pgd_found = 0
    for i in range(len(sub)):
        y = int(sub.labels[i])
        x0 = sub.inputs[i].reshape(-1).double().numpy()
        for norm in ("linf", "l1"):
            r = minimal_distance(layers, x0, y, norm, time_limit=30)
            if r.status == "clean_misclassified":
                continue
            assert r.status == "optimal", (i, norm, r)
            # the adversarial flips the label in float64 (numpy and torch) at the reported distance
            assert margin_to_label(forward(layers, r.adversarial), y) > 0
            with torch.no_grad():
                assert model64(torch.from_numpy(r.adversarial).reshape(1, 1, 8, 8)).argmax().item() != y
            assert abs(float(distance(r.adversarial - x0, norm)) - r.distance) <= 1e-6
            assert r.lower_bound <= r.distance <= r.lower_bound + 1e-5
            if norm == "linf":  # an independent gradient attack never beats the proven bound
                pgd = _pgd_min_linf(model, sub.inputs[i:i + 1], y, hi=min(1.0, 4 * r.distance))
                assert pgd >= r.lower_bound - 1e-4
                pgd_found += math.isfinite(pgd)
    assert pgd_found >= 2  # the attack is not vacuous


def test_encoding_refuses_and_supports():
    bad = nn.Sequential(nn.Flatten(), nn.Linear(64, 8), nn.Tanh(), nn.Linear(8, 10))
    with pytest.raises(UnsupportedLayer, match=r"layer 2 \(Tanh\).*Flatten, Linear, ReLU, Conv2d"):
        encode_sequential(bad, (1, 8, 8))
    with pytest.raises(UnsupportedLayer, match="BatchNorm1d"):
        encode_sequential(nn.Sequential(nn.Flatten(), nn.BatchNorm1d(64)), (1, 8, 8))
    # conv as an explicit matrix, the log-softmax twin, and affine layers merged across Flatten
    x = load_subset("digits", 8, seed=1).inputs
    cnn = load_model("digits-cnn")
    layers = encode_sequential(cnn, (1, 8, 8))
    assert len(layers) == 4 and layers[0][0].shape == (16 * 64, 64)
    assert check_encoding(cnn, layers, x) < 1e-4
    twin = LogitShift(load_model("digits-mlp-tiny")).eval()
    assert check_encoding(twin, encode_sequential(twin, (1, 8, 8)), x) < 1e-4
    merged = nn.Sequential(nn.Flatten(), nn.Linear(64, 8), nn.Linear(8, 3), nn.ReLU(), nn.Linear(3, 2))
    assert len(encode_sequential(merged, (1, 8, 8))) == 2


def test_run_exact_writes_table(tmp_path):
    table = run_exact("digits-mlp-tiny", "linf", 3, 0, tmp_path, time_limit=20)
    path = exact_path(tmp_path, "digits-mlp-tiny", "linf")
    stored = pd.read_parquet(path)
    assert list(stored.columns) == EXACT_COLUMNS and len(stored) == 3
    assert not list(path.parent.glob("*.tmp"))
    sub = load_subset("digits", 3, 0)
    assert (stored["sample"].to_numpy() == sub.indices).all() and (stored["subset_hash"] == sub.hash).all()
    assert set(stored["status"]) <= {"optimal", "clean_misclassified"}
    model64 = load_model("digits-mlp-tiny").double()
    for row, x0 in zip(stored.itertuples(), sub.inputs):
        adv = torch.tensor(np.asarray(row.adversarial), dtype=torch.float64)
        with torch.no_grad():
            assert model64(adv.reshape(1, 1, 8, 8)).argmax().item() != row.label or row.exact_distance == 0
        assert float((adv - x0.double().reshape(-1)).abs().max()) == pytest.approx(row.exact_distance, abs=1e-6)
    with pytest.raises(ValueError, match="l3"):
        run_exact("digits-mlp-tiny", "l3", 3, 0, tmp_path, time_limit=20)
    assert len(table) == 3


def _table(rows: dict[str, list[float]], lib_of=lambda name: "lib") -> pd.DataFrame:
    frames = []
    for name, dists in rows.items():
        frames.append(pd.DataFrame({
            "model": "m", "dataset": "digits", "sample": np.arange(len(dists)), "library": lib_of(name),
            "library_version": "1", "attack": name, "implementation": f"lib/{name}", "family": name,
            "norm": "linf", "targeted": False, "best_distance": dists,
            "returned_distance": np.inf, "returned_adversarial": False}))
    return pd.concat(frames, ignore_index=True)


EXACT = pd.DataFrame({
    "model": "m", "dataset": "digits", "sample": np.arange(5), "norm": "linf",
    "exact_distance": [0.0, 0.1, 0.2, 0.4, np.nan], "lower_bound": [0.0, 0.1, 0.2, 0.4, 0.3],
    "upper_bound": [0.0, 0.1, 0.2, 0.4, 0.5],
    "status": ["clean_misclassified", "optimal", "optimal", "optimal", "error"]})


def test_true_optimality_by_hand():
    # sample 4's exact row is an error: it drops out. ε₀ = 0.4, ρ = 3/4, ρε₀ = 0.3,
    # A_exact = (0 + .1 + .2 + .4)/4 = .175; A_a = (0 + .15 + .2 + .4)/4 = .1875 → ξ_a = .9;
    # A_b = (0 + .2 + .4 + .4)/4 = .25 → ξ_b = .4; the envelope equals a.
    table = _table({"a": [0, 0.15, 0.2, 0.4, 0.3], "b": [0, 0.2, np.inf, 0.4, 0.3]})
    got = true_optimality(table, EXACT).set_index("implementation")
    assert got.loc["lib/a", "true_optimality"] == pytest.approx(0.9)
    assert got.loc["lib/b", "true_optimality"] == pytest.approx(0.4)
    assert got.loc["envelope", "true_optimality"] == pytest.approx(0.9)
    assert got.loc["envelope", "empirical_optimality"] == pytest.approx(1.0)
    # against the envelope (.15, .2, .4): A_env = .1875, ε₀ .4 → ξ_b = (.3−.25)/(.3−.1875) = .4444
    assert got.loc["lib/b", "empirical_optimality"] == pytest.approx(0.05 / 0.1125)
    assert (got["samples"] == 4).all() and (got["eps0_exact"] == 0.4).all()


def test_below_exact_flag():
    table = _table({"ok": [0, 0.1 - 5e-5, 0.2, 0.4, 0.0], "bug": [0, 0.05, 0.2, 0.39, 0.3]})
    flags = below_exact_flags(table, EXACT, tol=1e-4)
    assert list(flags["implementation"]) == ["lib/bug"]
    row = flags.iloc[0]
    assert row["flag"] == "below_exact" and "2 of 4 samples" in row["evidence"]
    assert "sample 1" in row["evidence"] and "0.05" in row["evidence"]
    assert set(flags.columns) >= {"model", "library", "library_version", "attack", "implementation",
                                  "family", "norm", "flag", "evidence"}


def test_below_exact_uses_base_model_for_twins_and_flags_proven_robust():
    twin = _table({"bug": [0, 0.05, 0.2, 0.4, 0.3]}).assign(model="m~shift")
    assert list(below_exact_flags(twin, EXACT)["model"]) == ["m~shift"]
    robust = EXACT.assign(exact_distance=np.inf, lower_bound=np.inf, upper_bound=np.inf, status="optimal")
    flags = below_exact_flags(_table({"a": [0.9, np.inf, np.inf, np.inf, np.inf]}), robust)
    assert len(flags) == 1 and "1 of 5 samples" in flags.iloc[0]["evidence"]


def test_exact_subcommand_main(tmp_path, capsys):
    import argparse

    from attackaudit.cli.exact import add_arguments, main

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    bad = parser.parse_args(["--model", "no-such-model", "--norm", "linf", "--samples", "2", "--out", str(tmp_path)])
    assert main(bad) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no-such-model" in err[0]
    ok = parser.parse_args(["--model", "digits-mlp-tiny", "--norm", "l1", "--samples", "1", "--out", str(tmp_path),
                            "--time-limit", "20"])
    assert main(ok) == 0
    assert exact_path(tmp_path, "digits-mlp-tiny", "l1").exists()


def test_exact_beside_a_run_solves_the_runs_own_subset(tmp_path, capsys):
    """``exact --out RUN`` takes the run's samples, seed and dataset; a different ``--samples``
    (the issue: 16 beside a run of 8, one sample in common) is refused with one line, exit 2, as
    is a run whose recorded subset this version no longer draws."""
    import argparse

    from attackaudit.cli.exact import add_arguments, main
    from attackaudit.results.store import write_manifest

    run = load_subset("digits", 2, 4)
    write_manifest(tmp_path, {"config": {"samples": 2, "seed": 4, "dataset": "digits"}, "seed": 4,
                              "dataset": "digits", "subset_hash": run.hash})
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    common = ["--model", "digits-mlp-tiny", "--norm", "l1", "--out", str(tmp_path), "--time-limit", "20"]
    assert main(parser.parse_args(common + ["--samples", "16"])) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--samples 16" in err[0] and "2 samples, seed 4" in err[0]
    assert not exact_path(tmp_path, "digits-mlp-tiny", "l1").exists()
    assert main(parser.parse_args(common)) == 0
    capsys.readouterr()  # its per-sample progress
    stored = pd.read_parquet(exact_path(tmp_path, "digits-mlp-tiny", "l1"))
    assert (stored["sample"].to_numpy() == run.indices).all() and (stored["subset_hash"] == run.hash).all()
    write_manifest(tmp_path, {"config": {"samples": 2, "seed": 4, "dataset": "digits"}, "seed": 4,
                              "dataset": "digits", "subset_hash": "0" * 64})
    assert main(parser.parse_args(common)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "rerun" in err[0]
