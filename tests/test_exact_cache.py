"""Exact minima computed once: the cache (nested subsets reuse every solved sample, changed
weights miss, time-limited rows only for limits as short), the shipped tables (each row
re-verified on the model as it is now), and the run's hook (a real run of digits-mlp-tiny
writes RUN/exact/ for every norm it attacks; off with exact=False; a failure is recorded, never
fatal)."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch

from attackaudit.exact import cache, defaults
from attackaudit.exact.cache import CACHE_COLUMNS, EXACT_COLUMNS, network_hash, solve_subset
from attackaudit.exact.command import exact_path
from attackaudit.exact.encoding import encode_sequential
from attackaudit.exact.solver import distance, forward, margin_to_label
from attackaudit.sources.subset import load_subset
from attackaudit.sources.zoo import load_model


@pytest.fixture
def empty_cache(tmp_path, monkeypatch):
    """A fresh user cache and no shipped tables."""
    monkeypatch.setenv("ATTACKAUDIT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(cache, "SHIPPED", tmp_path / "shipped")
    return tmp_path / "cache" / "exact"


def test_nested_subsets_reuse_and_changed_weights_miss(empty_cache):
    small, large = load_subset("digits", 2, 5), load_subset("digits", 3, 5)
    first, counts = solve_subset("digits-mlp-tiny", "linf", small, 20)
    assert counts["solved"] == 2 and counts["cached"] == 0 and list(first.columns) == EXACT_COLUMNS
    again, counts = solve_subset("digits-mlp-tiny", "linf", large, 20)
    assert counts == {**counts, "cached": 2, "solved": 1, "left_out": 0}
    pd.testing.assert_frame_equal(again.head(2).drop(columns="subset_hash"), first.drop(columns="subset_hash"))
    assert (again["subset_hash"] == large.hash).all()
    # another norm, another margin, another network: all misses
    assert solve_subset("digits-mlp-tiny", "l1", small, 20)[1]["solved"] == 2
    assert solve_subset("digits-mlp-tiny", "linf", small, 20, margin=1e-5)[1]["solved"] == 2
    net = load_model("digits-mlp-tiny")
    with torch.no_grad():
        net[1].bias[0] += 0.01
    assert solve_subset("digits-mlp-tiny", "linf", small, 20, net=net)[1]["solved"] == 2
    # a budget spent: the rest is left out of the table, not solved
    table, counts = solve_subset("digits-mlp-tiny", "l0", large, 20, budget_s=0.0)
    assert counts["left_out"] == 3 and table.empty


def _row(sample: int, status: str, limit: float, lower: float) -> dict:
    return {"network_hash": "n", "dataset": "d", "sample": sample, "input_hash": "i", "norm": "linf",
            "margin": 1e-4, "time_limit": limit, "solver_version": cache.SOLVER_VERSION, "label": 1,
            "exact_distance": np.nan if status != "optimal" else lower, "lower_bound": lower, "upper_bound": 0.5,
            "status": status, "solve_s": limit, "adversarial_class": 2, "adversarial": [0.0, 1.0],
            "flips_float32": True, "error": ""}


def test_time_limited_rows_and_the_best_row_kept(empty_cache):
    cache.store([_row(7, "time_limit", 5.0, 0.1)])
    (hit,) = cache.lookup("n", "d", "linf", 1e-4).to_dict("records")
    assert cache.reusable(hit, 5.0) and cache.reusable(hit, 1.0) and not cache.reusable(hit, 30.0)
    cache.store([_row(7, "time_limit", 30.0, 0.2)])
    cache.store([_row(7, "time_limit", 1.0, 0.05)])  # shorter: the longer one stays
    (hit,) = cache.lookup("n", "d", "linf", 1e-4).to_dict("records")
    assert hit["time_limit"] == 30.0 and hit["lower_bound"] == 0.2
    cache.store([_row(7, "optimal", 2.0, 0.3)])  # solved beats any time limit
    (hit,) = cache.lookup("n", "d", "linf", 1e-4).to_dict("records")
    assert hit["status"] == "optimal" and cache.reusable(hit, 1e9)
    assert list(cache.lookup("n", "d", "linf", 1e-4).columns) == CACHE_COLUMNS
    assert cache.lookup("n", "d", "l1", 1e-4).empty and cache.lookup("other", "d", "linf", 1e-4).empty


SHIPPED_FILES = sorted(cache.SHIPPED.glob("*.parquet"))


@pytest.mark.parametrize("path", SHIPPED_FILES, ids=[p.stem for p in SHIPPED_FILES])
def test_shipped_tables_verify_on_the_model_as_it_is(path):
    """Every shipped row belongs to the zoo weights as they are now (else it would be ignored:
    the tables must be rebuilt), holds seed 0's prefix in order, and its adversarial flips the
    float64 network at the stated distance, at or above the proven bound."""
    model, norm = path.stem.split("__")
    table = pd.read_parquet(path)
    assert list(table.columns) == CACHE_COLUMNS and len(table) >= 16
    sub = load_subset("digits", len(table), 0)
    net = load_model(model)
    layers = encode_sequential(net, (1, 8, 8))
    assert (table["network_hash"] == network_hash(layers)).all(), "zoo weights changed: rebuild the shipped tables"
    assert (table["sample"].to_numpy() == sub.indices).all() and (table["label"].to_numpy() == sub.labels.numpy()).all()
    assert set(table["status"]) <= {"optimal", "time_limit", "clean_misclassified"}
    assert (table["status"] == "optimal").mean() >= 0.9
    for row, x0 in zip(table.itertuples(), sub.inputs.reshape(len(sub), -1).double().numpy()):
        assert row.lower_bound <= row.upper_bound + 1e-9
        if row.adversarial is None:
            continue
        adv = np.asarray(row.adversarial)
        assert np.all((adv >= 0) & (adv <= 1))
        assert margin_to_label(forward(layers, adv), row.label) > 0
        assert float(distance(adv - x0, norm)) == pytest.approx(row.upper_bound, abs=1e-9)
        if row.status == "optimal":
            assert row.exact_distance == row.upper_bound and row.upper_bound - row.lower_bound <= 1e-5


@pytest.mark.parametrize("model", defaults.EXACT_MODELS)
def test_the_default_subset_is_shipped_for_every_norm(tmp_path, monkeypatch, model):
    """A run of 16 images with seed 0 (the demo) solves nothing: every norm is shipped."""
    monkeypatch.setenv("ATTACKAUDIT_CACHE", str(tmp_path))
    sub = load_subset("digits", 16, 0)
    for norm in defaults.NORM_ORDER:
        table, counts = solve_subset(model, norm, sub, defaults.SAMPLE_TIME_LIMIT, budget_s=0.0)
        assert counts["cached"] == 16 and counts["solved"] == 0, (model, norm)
        assert len(table) == 16 and (table["sample"].to_numpy() == sub.indices).all()


def _run(tmp_path, **extra):
    from attackaudit.run.config import resolve
    from attackaudit.run.runner import run

    config = resolve(None, {"out": str(tmp_path / "run"), "models": ["digits-mlp-tiny"], "samples": 4,
                            "attacks": ["adv_lib/fmn"], "steps_scale": 0.1, "quiet": True, **extra})
    notes: list[str] = []
    run(config, say=notes.append)
    return tmp_path / "run", notes


def test_a_run_writes_exact_minima_for_every_norm(tmp_path, monkeypatch):
    """A real run (digits-mlp-tiny, 4 images, adv_lib's FMN in its four norms) ends with exact
    tables for its subset; no attack lands below the proven minimum; the report reads them."""
    from attackaudit.fidelity.true_optimality import below_exact_flags, true_optimality
    from attackaudit.results.store import load_exact, load_run

    monkeypatch.setenv("ATTACKAUDIT_CACHE", str(tmp_path / "cache"))
    run_dir, _ = _run(tmp_path)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    status = json.loads((run_dir / "exact" / "status.json").read_text())
    assert set(status) == {f"digits-mlp-tiny__{n}" for n in ("l0", "l1", "l2", "linf")}
    for norm in ("l0", "l1", "l2", "linf"):
        table = pd.read_parquet(exact_path(run_dir, "digits-mlp-tiny", norm))
        assert len(table) == 4 and (table["subset_hash"] == manifest["subset_hash"]).all()
        assert status[f"digits-mlp-tiny__{norm}"]["cached"] == 4  # seed 0: shipped
    rows, exact = load_run(run_dir), load_exact(run_dir)
    assert below_exact_flags(rows, exact).empty
    assert set(true_optimality(rows, exact)["norm"]) == {"l0", "l1", "l2", "linf"}


def test_the_hook_is_off_on_request_and_never_fatal(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTACKAUDIT_CACHE", str(tmp_path / "cache"))
    run_dir, _ = _run(tmp_path / "off", exact=False, norms=["linf"])
    assert not (run_dir / "exact").exists()

    def broken(*args, **kwargs):
        raise RuntimeError("solver exploded")

    monkeypatch.setattr(cache, "solve_subset", broken)
    run_dir, notes = _run(tmp_path / "broken", norms=["linf"])
    status = json.loads((run_dir / "exact" / "status.json").read_text())
    assert "solver exploded" in status["digits-mlp-tiny__linf"]["error"]
    assert any("exact minima failed" in n and "solver exploded" in n for n in notes)
    assert list((run_dir / "jobs").glob("*.parquet"))  # the attacks' results stand
