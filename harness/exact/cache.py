"""Exact minima computed once: a cache keyed per network × dataset × sample × norm × margin.

The network is its encoded layers' SHA-256 (``network_hash``: changed weights are another key;
the log-softmax twin ``M~shift`` encodes to M's layers and shares its rows), the sample its index
in the dataset and the SHA-256 of its input bytes and label, so nested subsets (a run of 64
holds the 16 of a run of 16: ``sources.subset``) reuse every solved sample. Rows come from, in
order: the tables shipped with the package (``shipped/<model>__<norm>.parquet``: the first
samples of seed 0's permutation for digits-mlp-tiny and digits-mlp, ``shipped/README.md``), the
user's cache (``$ATTACKAUDIT_CACHE/exact``, else ``$XDG_CACHE_HOME/attackaudit/exact``, else
``~/.cache/attackaudit/exact``), else the solver. A row is reused when it is solved (optimal,
clean misclassified) or ran out of a time limit at least as long as the one asked for; errors
are never cached. Writes are atomic and serialised by a lock file.
"""
from __future__ import annotations

import fcntl
import hashlib
import os
import tempfile
import time
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from attackaudit.results.schema import SHIFT, Twin, as_twin

EXACT_COLUMNS = ["model", "dataset", "subset_hash", "sample", "label", "norm", "exact_distance",
                 "lower_bound", "upper_bound", "status", "solve_s", "adversarial_class", "adversarial",
                 "flips_float32", "margin", "error"]
#: bumped when a solver change makes earlier answers unusable: their rows are then ignored
SOLVER_VERSION = 1
#: what a cached row holds beyond its key
_RESULT = ["label", "exact_distance", "lower_bound", "upper_bound", "status", "solve_s", "adversarial_class",
           "adversarial", "flips_float32", "error"]
#: ``cpu_s``: the process's CPU seconds for the sample (``solve_s`` is wall time, which a busy
#: machine stretches)
CACHE_COLUMNS = ["network_hash", "dataset", "sample", "input_hash", "norm", "margin", "time_limit",
                 "solver_version"] + _RESULT + ["cpu_s"]
SHIPPED = Path(__file__).resolve().parent / "shipped"
SOLVED = ("optimal", "clean_misclassified")


def cache_dir() -> Path:
    """``$ATTACKAUDIT_CACHE/exact``, else the user's cache directory's ``attackaudit/exact``."""
    if os.environ.get("ATTACKAUDIT_CACHE"):
        return Path(os.environ["ATTACKAUDIT_CACHE"]).expanduser() / "exact"
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "attackaudit" / "exact"


def network_hash(layers: list[tuple[np.ndarray, np.ndarray]]) -> str:
    """SHA-256 over the encoded layers (shapes and float64 bytes): what the solver sees."""
    h = hashlib.sha256()
    for w, b in layers:
        for a in (w, b):
            a = np.ascontiguousarray(a, dtype=np.float64)
            h.update(repr(a.shape).encode())
            h.update(a.tobytes())
    return h.hexdigest()


def input_hash(x: np.ndarray, label: int) -> str:
    """SHA-256 (16 hex digits) of one sample's float32 input bytes and its label."""
    h = hashlib.sha256(np.ascontiguousarray(x, dtype=np.float32).tobytes())
    h.update(str(int(label)).encode())
    return h.hexdigest()[:16]


def write_atomic(table: pd.DataFrame, path: Path) -> None:
    """Parquet written to a temporary file beside ``path``, then moved onto it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        table.to_parquet(tmp, index=False)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _key_file(net: str, dataset: str, norm: str, margin: float) -> Path:
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "-" for ch in dataset)[:60]
    return cache_dir() / f"{net[:24]}__{safe}__{norm}__m{margin:g}.parquet"


def _matching(table: pd.DataFrame, net: str, dataset: str, norm: str, margin: float) -> pd.DataFrame:
    if table.empty or not set(CACHE_COLUMNS) <= set(table.columns):
        return pd.DataFrame(columns=CACHE_COLUMNS)
    keep = ((table["network_hash"] == net) & (table["dataset"] == dataset) & (table["norm"] == norm)
            & (table["margin"] == margin) & (table["solver_version"] == SOLVER_VERSION))
    return table.loc[keep, CACHE_COLUMNS]


def lookup(net: str, dataset: str, norm: str, margin: float, shipped_first: bool = True) -> pd.DataFrame:
    """Every known row of the key (CACHE_COLUMNS): the shipped tables' and the user's cache's,
    in that order (``shipped_first=False``: the cache's first)."""
    parts = [_matching(pd.read_parquet(p), net, dataset, norm, margin) for p in sorted(SHIPPED.glob(f"*__{norm}.parquet"))]
    path = _key_file(net, dataset, norm, margin)
    if path.exists():
        try:
            parts.insert(len(parts) if shipped_first else 0, _matching(pd.read_parquet(path), net, dataset, norm, margin))
        except Exception:  # a damaged cache file is a miss, never a failure
            pass
    parts = [p for p in parts if not p.empty]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=CACHE_COLUMNS)


def reusable(row: dict, time_limit: float) -> bool:
    """A solved row, or one that ran out of a limit at least ``time_limit`` long."""
    return row["status"] in SOLVED or (row["status"] == "time_limit" and float(row["time_limit"]) >= time_limit)


def _rank(table: pd.DataFrame) -> pd.Series:
    """Better rows rank lower: solved, then the longest time limit."""
    return (~table["status"].isin(SOLVED)).astype(int) * 1e12 - table["time_limit"].astype(float)


def store(rows: list[dict]) -> None:
    """Add ``rows`` (CACHE_COLUMNS; one key) to the user's cache, keeping the best row per sample
    (solved, then the longer time limit, then the newer).
    A cache that cannot be written (read-only home) is skipped: the rows are in the run anyway."""
    if not rows:
        return
    first = rows[0]
    path = _key_file(first["network_hash"], first["dataset"], first["norm"], first["margin"])
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path.with_suffix(".lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            old = pd.read_parquet(path) if path.exists() else pd.DataFrame(columns=CACHE_COLUMNS)
            table = pd.concat([pd.DataFrame(rows, columns=CACHE_COLUMNS), old], ignore_index=True)  # new first
            table = table.assign(_rank=_rank(table)).sort_values("_rank", kind="stable")
            table = table.drop_duplicates(["network_hash", "dataset", "sample", "input_hash", "norm", "margin",
                                           "solver_version"]).drop(columns="_rank").sort_values("sample")
            write_atomic(table, path)
    except OSError:
        pass


def load_network(model: Twin | str, dataset: str):
    """A zoo model (a name, or a ``Twin`` of one); other model sources (``module:file.py:fn`` …)
    through ``attackaudit.sources.model_loader``."""
    from attackaudit.sources.zoo import ZOO, load_model

    twin = as_twin(model)
    if twin.kind in ("", SHIFT) and twin.base_model in ZOO:
        return load_model(twin)
    try:
        from attackaudit.sources.model_loader import load_model_source
    except ImportError:
        return load_model(twin)  # its KeyError names the zoo's models
    return load_model_source(twin, dataset=dataset)


def training_candidates(dataset: str, label: int) -> np.ndarray | None:
    """Training points of other classes (N×D): misclassified ones seed the upper bound."""
    if dataset != "digits":
        return None
    from attackaudit.sources.subset import digits

    x, y = digits("train")
    return x[y != label].reshape(int((y != label).sum()), -1).double().numpy()


def flips_float32(net, adversarial: list | None, shape, label: int) -> bool:
    """Whether the float32 model (what attacks and the tracker see) misclassifies the point too."""
    if adversarial is None:
        return False
    import torch

    from attackaudit.measure.success import is_success

    with torch.no_grad():
        x = torch.tensor(np.asarray(adversarial), dtype=torch.float32).reshape(1, *shape)
        return bool(is_success(net(x), torch.tensor([label]))[0])


def _solve_one(layers, x0: np.ndarray, label: int, norm: str, dataset: str, time_limit: float,
               margin: float) -> dict:
    from attackaudit.exact.solver import minimal_distance

    start, cpu = time.perf_counter(), time.process_time()
    try:
        r = minimal_distance(layers, x0, label, norm, time_limit=time_limit, margin=margin,
                             candidates=training_candidates(dataset, label))
        return {"exact_distance": r.distance, "lower_bound": r.lower_bound, "upper_bound": r.upper_bound,
                "status": r.status, "solve_s": r.solve_s, "adversarial_class": r.adversarial_class,
                "adversarial": None if r.adversarial is None else r.adversarial.tolist(), "error": r.error,
                "cpu_s": time.process_time() - cpu}
    except Exception as exc:  # one sample's failure is data, not the end of the command
        return {"exact_distance": np.nan, "lower_bound": np.nan, "upper_bound": np.nan, "status": "error",
                "solve_s": time.perf_counter() - start, "adversarial_class": -1, "adversarial": None,
                "error": f"{type(exc).__name__}: {exc}".splitlines()[0][:500]}


def solve_subset(model: Twin | str, norm: str, subset, time_limit: float, *, margin: float = 1e-4, use_cache: bool = True,
                 budget_s: float = np.inf, net=None, progress: Callable[[dict], None] | None = None) -> tuple[pd.DataFrame, dict]:
    """Exact rows (EXACT_COLUMNS) of ``model`` on every sample of ``subset`` (``sources.subset.Subset``).

    Known rows come from the shipped tables and the cache; the others are solved with
    ``time_limit`` seconds each and cached. Once ``budget_s`` seconds of solving are spent the
    remaining unknown samples are left out of the table. ``progress`` gets each row, with
    ``cached`` (read, not solved). Returns (table, counts: cached, solved, left_out, seconds). Raises ``UnsupportedLayer`` for a model the MILP cannot encode.
    """
    from attackaudit.exact.encoding import check_encoding, encode_sequential

    model = as_twin(model)
    net = net if net is not None else load_network(model, subset.dataset)
    shape = tuple(subset.inputs.shape[1:])
    layers = encode_sequential(net, shape)
    check_encoding(net, layers, subset.inputs)
    key = network_hash(layers)
    known: dict[tuple[int, str], dict] = {}
    if use_cache:
        for row in lookup(key, subset.dataset, norm, margin).to_dict("records"):
            known.setdefault((int(row["sample"]), row["input_hash"]), row)  # shipped first
    rows, counts, start = [], {"cached": 0, "solved": 0, "left_out": 0, "seconds": 0.0}, time.perf_counter()
    for i in range(len(subset)):
        label, idx = int(subset.labels[i]), int(subset.indices[i])
        ih = input_hash(subset.inputs[i].numpy(), label)
        hit = known.get((idx, ih))
        if hit is not None and reusable(hit, time_limit):
            row = {k: hit[k] for k in _RESULT}
            row["adversarial"] = None if hit["adversarial"] is None else np.asarray(hit["adversarial"]).tolist()
            counts["cached"] += 1
        elif time.perf_counter() - start >= budget_s:
            counts["left_out"] += 1
            continue
        else:
            x0 = subset.inputs[i].reshape(-1).double().numpy()
            row = _solve_one(layers, x0, label, norm, subset.dataset, time_limit, margin)
            cpu_s = row.pop("cpu_s", np.nan)
            row["label"] = label
            row["flips_float32"] = flips_float32(net, row["adversarial"], shape, label)
            counts["solved"] += 1
            if use_cache and row["status"] != "error":
                store([{**row, "network_hash": key, "dataset": subset.dataset, "sample": idx, "input_hash": ih,
                        "norm": norm, "margin": margin, "time_limit": time_limit, "solver_version": SOLVER_VERSION,
                        "cpu_s": cpu_s}])
        row |= {"margin": margin, "model": model.name, "dataset": subset.dataset, "subset_hash": subset.hash,
                "sample": idx, "norm": norm}
        rows.append(row)
        if progress is not None:
            progress({**row, "cached": hit is not None and reusable(hit, time_limit)})
    counts["seconds"] = time.perf_counter() - start
    return pd.DataFrame(rows, columns=EXACT_COLUMNS), counts
