"""Shared plumbing: the per-sample result table (harness/run/job.py ``ROW_COLUMNS``) made uniform.

Every fidelity function starts from ``prepare`` (defaults, types, one row per sample and
implementation) and most from ``long_distances``: one row per (model, norm, sample,
implementation) holding the implementation's distance next to the envelope's.

Conventions shared by the whole package (fidelity/README.md explains why):
- an implementation is ``(implementation, library_version)``: two releases of one attack are two
  implementations;
- its distance on a sample is the tracker's ``best_distance`` whatever the row's ``status`` (what
  the tracker saw before a crash was re-checked on the model and stayed within the budget); NaN
  counts as ``inf`` (nothing found);
- a row whose ``twin`` column is not empty (``shift``, ``perm``, ``seed``, ``split``, ``batch``:
  ``harness/results/schema.py`` ``Twin``; its model is named ``<base_model>~<twin>``) is a
  metamorphic twin: it is its own model for envelopes and local optimality, and left out of every
  cross-model aggregate;
- rows of status ``unsupported`` (the adapter could not call that release the way the job needs:
  our limitation, not the library's) and ``harness_error`` (the job's worker failed before the
  attack started) are absent: never a crash, never a failure.
"""
from __future__ import annotations

import weakref

import numpy as np
import pandas as pd

# torch-free: the one reader of twin names and the one writer of implementation names
from attackaudit.results.schema import with_implementation, with_twin_columns

#: row status of a job the adapter could not run (treated as absent everywhere)
UNSUPPORTED = "unsupported"
#: row statuses that carry no result of the attack (``harness/results/schema.py``): left out everywhere
NO_RESULT = (UNSUPPORTED, "harness_error")
#: one implementation of one release
IMPL_KEY = ["implementation", "library_version"]
SAMPLE_KEY = ["model", "norm", "sample"]
JOB_KEY = ["model", "norm", *IMPL_KEY]
META_COLUMNS = ["library", "attack", "family", "kind"]
REQUIRED = ["model", "norm", "sample", "best_distance"]

_DEFAULTS: dict[str, object] = {
    "library": "", "library_version": "", "attack": "", "family": "", "kind": "",
    "status": "ok", "error": "", "forwards": 0, "backwards": 0, "refused": 0, "budget": 0,
    "wall_s": 0.0, "returned_distance": np.inf, "returned_adversarial": False,
    "targeted": False, "target": -1,
}


#: the tables ``prepare`` returned and that are still alive, by ``id``: a report prepares its table once
#: and hands that very table to every check, which then does not clean it again. Only the same object
#: counts (a frame derived from it, filtered or with a column changed, is cleaned again), and an entry
#: goes with its table, so a later table at the same address is never taken for it.
_PREPARED: weakref.WeakValueDictionary[int, pd.DataFrame] = weakref.WeakValueDictionary()


def is_prepared(table: pd.DataFrame) -> bool:
    """Whether ``table`` is a table ``prepare`` returned (so ``prepare`` of it is a cheap copy)."""
    return _PREPARED.get(id(table)) is table


def _prepared(t: pd.DataFrame) -> pd.DataFrame:
    _PREPARED[id(t)] = t
    return t


def prepare(table: pd.DataFrame) -> pd.DataFrame:
    """A cleaned copy of ``table``: missing optional columns filled, distances float with NaN as
    inf, one row per (model, norm, implementation, library_version, sample) (the last one wins, as
    a rerun's rows come after the original's), rows of status ``unsupported`` or ``harness_error`` dropped.
    Idempotent: of a table it returned, only a copy (milliseconds; the caller's changes stay its own).

    Raises ValueError when a required column is missing or when targeted and untargeted rows are
    mixed (their envelopes measure different things).
    """
    if is_prepared(table):
        return _prepared(table.copy())
    missing = [c for c in REQUIRED if c not in table.columns]
    if missing:
        raise ValueError(f"result table lacks column(s) {', '.join(missing)}")
    t = with_twin_columns(table.copy())  # tables written before the twin columns name twins only
    if "status" in t.columns:
        t = t[~t["status"].astype(str).isin(NO_RESULT)]
    for col, default in _DEFAULTS.items():
        if col not in t.columns:
            t[col] = default
    t = with_implementation(t)
    for col in ("implementation", "library_version", "library", "attack", "family", "kind", "status",
                "model", "norm", "base_model", "twin"):
        t[col] = t[col].fillna("").astype(str)
    t["error"] = t["error"].fillna("").astype(str)
    for col in ("best_distance", "returned_distance"):
        t[col] = pd.to_numeric(t[col], errors="coerce").astype(float).fillna(np.inf)
    for col in ("forwards", "backwards", "refused", "budget", "wall_s"):
        t[col] = pd.to_numeric(t[col], errors="coerce").fillna(0).astype(float)
    t["returned_adversarial"] = t["returned_adversarial"].fillna(False).astype(bool)
    t["targeted"] = t["targeted"].fillna(False).astype(bool)
    if t["targeted"].nunique() > 1:
        raise ValueError("the table mixes targeted and untargeted rows; split it by `targeted` first")
    return _prepared(one_family(t.drop_duplicates(JOB_KEY + ["sample"], keep="last").reset_index(drop=True)))


def one_family(t: pd.DataFrame) -> pd.DataFrame:
    """``t`` with each implementation's one non-empty family on all its rows. A job that failed
    before its spec was resolved writes "" (``run.job.failure_rows``); grouped by the row's own
    family, that one model's rows would form a second family of one member, judged apart (a
    duplicated trust-board row, a gradient attack's envelope missing). One-line ValueError naming
    an implementation with two non-empty families: which trust set it belongs to is not guessed."""
    if t.empty or any(t[c].isna().any() for c in [*IMPL_KEY, "family"]):
        return _one_family_by_merge(t)
    family = t["family"]
    named = (family != "").to_numpy()
    impl = _codes(t, IMPL_KEY)
    pair = np.unique(impl[named] * (int(impl.max()) + 1) + pd.factorize(family[named])[0])
    if len(np.unique(pair // (int(impl.max()) + 1))) < len(pair):     # an implementation with two families
        return _one_family_by_merge(t)
    # each implementation's one named family (its named rows all hold it), "" where none is named
    of_impl = np.full(int(impl.max()) + 1, "", dtype=object)
    of_impl[impl[named]] = family.to_numpy(dtype=object)[named]
    return t.assign(family=of_impl[impl])


def _one_family_by_merge(t: pd.DataFrame) -> pd.DataFrame:
    named = t.loc[t["family"] != "", [*IMPL_KEY, "family"]].drop_duplicates()
    two = [f"{i}{f' {v}' if v else ''} has {' and '.join(sorted(g))}"
           for (i, v), g in named.groupby(IMPL_KEY, sort=True)["family"] if len(g) > 1]
    if two:
        raise ValueError(f"an implementation must have one family across the table, but {'; '.join(two)}; "
                         "fix the rows' family column (or split the table) first")
    return t.assign(family=t[IMPL_KEY].merge(named, on=IMPL_KEY, how="left")["family"].fillna("").to_numpy())


def is_twin(t: pd.DataFrame) -> pd.Series:
    """Per row of a table with the ``twin`` column (``prepare``d): whether its model is a twin."""
    return t["twin"].astype(str) != ""


def twins_of(t: pd.DataFrame) -> dict[str, tuple[str, str]]:
    """{model: (base model, twin kind)} of a ``prepare``d table, for frames that name models only."""
    pairs = t[["model", "base_model", "twin"]].drop_duplicates("model")
    return {str(m): (str(b), str(k)) for m, b, k in pairs.itertuples(index=False)}


def without_twins(t: pd.DataFrame) -> pd.DataFrame:
    """Rows of real models only (twins exist for the metamorphic checks); of a ``prepare``d table,
    prepared too (its rows are)."""
    return prepared_rows(t, ~is_twin(with_twin_columns(t))) if len(t) else t


def prepared_rows(t: pd.DataFrame, rows: pd.Series) -> pd.DataFrame:
    """``t[rows]``; of a ``prepare``d table, known as prepared (a subset of clean rows is clean), so
    that the checks it is handed to do not clean it again."""
    part = t[rows]
    return _prepared(part) if is_prepared(t) else part


def long_distances(t: pd.DataFrame, keys: list[str] | None = None) -> pd.DataFrame:
    """One row per (model, norm, sample, implementation key) of a ``prepare``d table.

    Columns: model, norm, sample, *keys, distance, d_star, live. ``distance`` is the
    implementation's best distance (inf where it has no row for a sample of a (model, norm) it
    ran on); ``d_star`` the minimum over all implementations of that model and norm; ``live`` is
    ``d_star > 0``. On samples that are adversarial already at ε = 0 (``d_star == 0``: clean
    misclassified, or already at the target) every implementation's distance is set to 0, so a
    job that crashed before its tracker ran is not charged for a sample nobody had to attack.
    Rows are sorted by (model, norm, *keys, sample), so per-key arrays of one (model, norm) align.
    """
    keys = keys or IMPL_KEY
    if t.empty:
        return pd.DataFrame(columns=SAMPLE_KEY + keys + ["distance", "d_star", "live"])
    fast = _long_by_codes(t, keys)
    return fast if fast is not None else _long_by_merges(t, keys)


def _codes(t: pd.DataFrame, columns: list[str], own: dict[str, np.ndarray] | None = None) -> np.ndarray:
    """One integer per row for the combination of ``columns``, ordered as ``sort_values(columns)``
    orders the rows (0, 1, … over the combinations present). ``own``: each column's sorted codes
    where already known (filled in as they are computed)."""
    own = {} if own is None else own
    code = np.zeros(len(t), dtype=np.int64)
    for c in columns:
        if c not in own:
            own[c] = pd.factorize(t[c], sort=True)[0]
        code = np.unique(code * (int(own[c].max()) + 1) + own[c], return_inverse=True)[1].reshape(-1)
    return code


def _long_by_codes(t: pd.DataFrame, keys: list[str]) -> pd.DataFrame | None:
    """``long_distances`` computed on integer codes of the key columns instead of by merges (the
    same rows, values, order and dtypes; the merges cost 50 ms on a table of a few hundred rows).
    None where a key column has a missing value or values that do not sort, or a key repeats
    ``SAMPLE_KEY``: the merges decide those cases."""
    if set(keys) & set(SAMPLE_KEY) or len(set(keys)) != len(keys):
        return None
    if any(t[c].isna().any() for c in SAMPLE_KEY + keys):
        return None
    own: dict[str, np.ndarray] = {}
    try:
        job = _codes(t, ["model", "norm", *keys], own)
        cell = _codes(t, SAMPLE_KEY, own)
    except TypeError:
        return None
    # the jobs and the (model, norm, sample) cells in sorted order, each by its first row
    _, job_row, job_of_row = np.unique(job, return_index=True, return_inverse=True)
    _, cell_row, cell_of_row = np.unique(cell, return_index=True, return_inverse=True)
    job_of_row, cell_of_row = job_of_row.reshape(-1), cell_of_row.reshape(-1)
    mn = _codes(t, ["model", "norm"], own)
    job_mn, cell_mn = mn[job_row], mn[cell_row]      # cells are sorted by (model, norm) first
    n_cells = np.bincount(cell_mn, minlength=int(mn.max()) + 1)
    first_cell = np.concatenate([[0], np.cumsum(n_cells)[:-1]])
    per_job = n_cells[job_mn]
    job_start = np.concatenate([[0], np.cumsum(per_job)[:-1]])
    out_job = np.repeat(np.arange(len(job_row)), per_job)
    out_cell = np.repeat(first_cell[job_mn], per_job) + np.arange(len(out_job)) - np.repeat(job_start, per_job)
    # each observed row's place in the grid; of repeated rows the last one counts
    place = job_start[job_of_row] + cell_of_row - first_cell[job_mn[job_of_row]]
    best = t["best_distance"].astype(float).to_numpy()
    last = len(place) - 1 - np.unique(place[::-1], return_index=True)[1]
    distance = np.full(len(out_job), np.nan)
    distance[place[last]] = best[last]
    distance[np.isnan(distance)] = np.inf
    d_star_cell = np.full(len(cell_row), np.inf)
    np.minimum.at(d_star_cell, out_cell, distance)
    d_star = d_star_cell[out_cell]
    live = d_star > 0
    distance[~live] = 0.0
    by_cell, by_job = cell_row[out_cell], job_row[out_job]
    out = {c: t[c].iloc[by_cell].reset_index(drop=True) for c in SAMPLE_KEY}
    out.update({c: t[c].iloc[by_job].reset_index(drop=True) for c in keys})
    return pd.DataFrame({**out, "distance": distance, "d_star": d_star, "live": live})


def _long_by_merges(t: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    cols = SAMPLE_KEY + keys + ["distance", "d_star", "live"]
    samples = t[SAMPLE_KEY].drop_duplicates()
    jobs = t[["model", "norm", *keys]].drop_duplicates()
    grid = samples.merge(jobs, on=["model", "norm"])
    obs = t[SAMPLE_KEY + keys + ["best_distance"]].drop_duplicates(SAMPLE_KEY + keys, keep="last")
    long = grid.merge(obs, on=SAMPLE_KEY + keys, how="left")
    long["distance"] = long.pop("best_distance").astype(float).fillna(np.inf)
    d_star = long.groupby(SAMPLE_KEY)["distance"].transform("min")
    long["d_star"] = d_star
    long["live"] = d_star > 0
    long.loc[~long["live"], "distance"] = 0.0
    return long.sort_values(["model", "norm", *keys, "sample"], kind="stable").reset_index(drop=True)[cols]


def group_rows(frame: pd.DataFrame, keys: list[str]) -> list[tuple[tuple, np.ndarray]]:
    """``(key, row positions)`` per group of ``frame`` by ``keys`` (two or more columns), in the
    order ``groupby(keys, sort=True)`` iterates them and with the rows in frame order, without
    building a sub-frame per group: the hot loops only read a few arrays of each group."""
    if frame.empty:
        return []
    grouped = frame.groupby(keys, sort=True)
    ids = grouped.ngroup().to_numpy()
    names = grouped.size().index.tolist()
    order = np.argsort(ids, kind="stable")
    order = order[ids[order] >= 0]                   # rows with a NaN key belong to no group
    bounds = np.flatnonzero(np.diff(ids[order])) + 1
    return list(zip(names, np.split(order, bounds)))


def impl_meta(t: pd.DataFrame) -> pd.DataFrame:
    """library, attack, family, kind per implementation key (first non-empty value)."""
    def first(s: pd.Series) -> str:
        nonempty = s[s != ""]
        return str(nonempty.iloc[0]) if len(nonempty) else ""
    if t.empty:
        return pd.DataFrame(columns=IMPL_KEY + META_COLUMNS)
    return t.groupby(IMPL_KEY, sort=True)[META_COLUMNS].agg(first).reset_index()


def job_costs(t: pd.DataFrame) -> pd.DataFrame:
    """Per (model, norm, implementation key): mean forwards, backwards, refused per sample, the
    job's wall time (rows repeat it), and the number of samples."""
    if t.empty:
        return pd.DataFrame(columns=JOB_KEY + ["forwards", "backwards", "refused", "wall_s", "n_samples"])
    return (t.groupby(JOB_KEY, sort=True)
            .agg(forwards=("forwards", "mean"), backwards=("backwards", "mean"),
                 refused=("refused", "mean"), wall_s=("wall_s", "mean"), n_samples=("sample", "size"))
            .reset_index())


def sample_list(samples: object, limit: int = 6) -> str:
    """``"3, 7, 12, … (+4)"``: sample ids for evidence strings."""
    ids = [str(int(s)) if isinstance(s, (int, np.integer, float, np.floating)) and float(s).is_integer()
           else str(s) for s in list(samples)]
    head = ", ".join(ids[:limit])
    return head + (f", … (+{len(ids) - limit})" if len(ids) > limit else "")


#: the columns the per-job and per-class checks read (a slim frame keeps the many small groupby
#: selections cheap on demo-size tables)
ROW_COLUMNS = [*JOB_KEY, "base_model", "twin", "sample", "label", "family", "kind", "status", "error",
               "invalid_reason", "refused", "budget", "forwards", "backwards", "best_distance", "returned_distance"]


def with_envelope(t: pd.DataFrame) -> pd.DataFrame:
    """The slim rows of a prepared table with ``d_star`` (the envelope over every implementation),
    ``live`` and ``d_star_family`` (the envelope of the row's own family)."""
    d_star = long_distances(t)[SAMPLE_KEY + ["d_star"]].drop_duplicates(SAMPLE_KEY)
    slim = t[[c for c in ROW_COLUMNS if c in t.columns]]
    slim = slim.assign(**{c: slim[c].astype(object) for c in ("status", "error", "family", "kind")
                          if c in slim.columns})
    rows = slim.merge(d_star, on=SAMPLE_KEY, how="left")
    rows["live"] = rows["d_star"] > 0
    # the images its own family broke: what silent_failure judges an implementation against, so
    # that no implementation of another family can move it (issue 36's families fixed in advance)
    own = [long_distances(sub)[SAMPLE_KEY + ["d_star"]].drop_duplicates(SAMPLE_KEY).assign(family=family)
           for family, sub in t.groupby("family", sort=False)]
    own = (pd.concat(own, ignore_index=True) if own else pd.DataFrame(columns=[*SAMPLE_KEY, "d_star", "family"]))
    rows = rows.merge(own.rename(columns={"d_star": "d_star_family"}), on=[*SAMPLE_KEY, "family"], how="left")
    return rows
