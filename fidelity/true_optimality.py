"""True optimality: optimality ξ (fidelity/optimality.py) with the exact minimal distances of
``attackaudit exact`` as the reference curve, and the flag for attacks that claim a distance below
the proven minimum. Pure pandas / numpy over result tables; the solver is ``attackaudit.exact``.
"""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

IMPL_KEYS = ["model", "library", "library_version", "attack", "implementation", "family", "norm"]


def exact_reference(exact: pd.DataFrame) -> pd.DataFrame:
    """Per (model, dataset, norm, sample): the reference distance and whether it is proven exact.

    Solved samples use ``exact_distance``, clean misclassified ones 0, timed-out ones their
    proven ``lower_bound`` (so the optimality against them is itself a lower bound); errors drop.
    """
    e = exact[exact["status"].isin(["optimal", "clean_misclassified", "time_limit"])].copy()
    e["reference"] = np.where(e["status"] == "optimal", e["exact_distance"],
                              np.where(e["status"] == "clean_misclassified", 0.0, e["lower_bound"]))
    e["reference"] = e["reference"].astype(float)
    e["unsolved"] = e["status"] == "time_limit"
    keys = [k for k in ("model", "dataset", "norm", "sample") if k in e.columns]
    return e.drop_duplicates(keys, keep="last")[keys + ["reference", "unsolved", "lower_bound"]]


def _optimality(attack: np.ndarray, reference: np.ndarray, eps_max: float | None) -> tuple[float, float]:
    """(ξ, ε₀) with the package's one formula (``optimality.optimality``: samples with reference 0
    left out, ξ clipped to [0, 1], a degenerate reference gives NaN), so that the true and the
    empirical numbers differ only by their reference."""
    from .optimality import eps0_of, optimality

    return optimality(attack, reference, eps_max), eps0_of(reference, eps_max)


def _attack_rows(table: pd.DataFrame) -> pd.DataFrame:
    """Untargeted rows (the exact distances are untargeted), cleaned like every fidelity input."""
    from ._table import prepare

    t = table
    if "targeted" in t.columns:
        t = t[~t["targeted"].fillna(False).astype(bool)]
    return prepare(t)


def _join_exact(t: pd.DataFrame, ref: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """Attack rows with their sample's exact reference (inner join on model, dataset, norm,
    sample). A twin ``M~shift`` without exact rows of its own uses M's: it is the same network
    up to a per-sample logit shift, so its minimal distances are M's."""
    keys = [k for k in ("model", "dataset", "norm", "sample") if k in ref.columns and k in t.columns]
    have = set(ref["model"])
    exact_model = t["model"].where(t["model"].isin(have) | (t["twin"] == ""), t["base_model"])
    joined = t.assign(_exact_model=exact_model).merge(
        ref.rename(columns={"model": "_exact_model"}), on=["_exact_model"] + [k for k in keys if k != "model"],
        how="inner")
    return joined.drop(columns="_exact_model"), keys


def true_optimality(table: pd.DataFrame, exact: pd.DataFrame,
                    eps_max: Mapping[str, float] | None = None) -> pd.DataFrame:
    """Per implementation (and the envelope), optimality against the exact curve and, beside it,
    the empirical one against the envelope, both on the samples the exact table covers.

    Columns: IMPL_KEYS, samples, exact_unsolved, eps0_exact, true_optimality, eps0_envelope,
    empirical_optimality. ``eps_max`` (per norm) replaces both ε₀ when given. The envelope is
    the row whose library, attack, implementation and family are ``"envelope"``. Timed-out
    samples enter with their proven lower bound (counted in ``exact_unsolved``), which makes the
    true optimality a lower bound; an attack below the exact distance is clipped at ξ = 1 here
    and reported by ``below_exact_flags``.
    """
    ref = exact_reference(exact)
    rows, keys = _join_exact(_attack_rows(table), ref)
    out_cols = IMPL_KEYS + ["samples", "exact_unsolved", "eps0_exact", "true_optimality",
                            "eps0_envelope", "empirical_optimality"]
    if rows.empty:
        return pd.DataFrame(columns=out_cols)
    sample_keys = [k for k in keys if k != "sample"] + ["sample"]
    env = rows.groupby(sample_keys, as_index=False).agg(
        envelope=("best_distance", "min"), reference=("reference", "first"), unsolved=("unsolved", "first"))
    out = []
    impls = rows[IMPL_KEYS].drop_duplicates()
    envelope_impl = {"library": "envelope", "library_version": "", "attack": "envelope",
                     "implementation": "envelope", "family": "envelope"}
    for _, impl in pd.concat([impls, env[["model", "norm"]].drop_duplicates().assign(**envelope_impl)],
                             ignore_index=True).iterrows():
        # every sample of the (model, norm), inf where this implementation has no row (as
        # long_distances does): a job that skipped samples is not scored on the easy ones only
        samples = env[(env["model"] == impl["model"]) & (env["norm"] == impl["norm"])]
        if impl["implementation"] == "envelope" and impl["library"] == "envelope":
            d = samples["envelope"].to_numpy(dtype=float)
        else:
            mine = rows[(rows[IMPL_KEYS] == impl[IMPL_KEYS]).all(axis=1)]
            d = samples[sample_keys].merge(mine[sample_keys + ["best_distance"]], on=sample_keys, how="left")[
                "best_distance"].fillna(np.inf).to_numpy(dtype=float)
        eps = (eps_max or {}).get(impl["norm"])
        true_xi, eps0 = _optimality(d, samples["reference"].to_numpy(dtype=float), eps)
        emp_xi, eps0_env = _optimality(d, samples["envelope"].to_numpy(dtype=float), eps)
        out.append({k: impl[k] for k in IMPL_KEYS} | {
            "samples": len(samples), "exact_unsolved": int(samples["unsolved"].sum()), "eps0_exact": eps0,
            "true_optimality": true_xi, "eps0_envelope": eps0_env, "empirical_optimality": emp_xi})
    return pd.DataFrame(out, columns=out_cols)


def below_exact_flags(table: pd.DataFrame, exact: pd.DataFrame, tol: float = 1e-4) -> pd.DataFrame:
    """One ``below_exact`` finding per implementation, model and norm whose best (or returned,
    re-checked) distance lies below the proven lower bound by more than ``tol``: a bug in the
    attack, the tracker or the encoding — never averaged away."""
    ref = exact_reference(exact)
    ref = ref[ref["lower_bound"].astype(float).notna()]  # inf stays: proven robust, any hit is a bug
    rows, keys = _join_exact(_attack_rows(table), ref)
    cols = IMPL_KEYS + ["flag", "evidence"]
    if rows.empty:
        return pd.DataFrame(columns=cols)
    lb = rows["lower_bound"].astype(float)
    ret = rows["returned_distance"].astype(float) if "returned_distance" in rows else pd.Series(np.inf, rows.index)
    if "returned_adversarial" in rows:
        ret = ret.where(rows["returned_adversarial"].astype(bool), np.inf)
    rows = rows.assign(claimed=np.minimum(rows["best_distance"].astype(float), ret),
                       which=np.where(rows["best_distance"].astype(float) <= ret, "best", "returned"))
    bad = rows[rows["claimed"] < lb - tol]
    out = []
    for group, part in bad.groupby(IMPL_KEYS, dropna=False):
        part = part.assign(gap=part["lower_bound"] - part["claimed"]).sort_values("gap", ascending=False)
        worst = "; ".join(f"sample {int(r.sample)}: {r.which} distance {r.claimed:.6g} < proven lower "
                          f"bound {r.lower_bound:.6g}" for r in part.head(3).itertuples())
        n_all = int((rows[IMPL_KEYS] == pd.Series(group, IMPL_KEYS)).all(1).sum())
        out.append(dict(zip(IMPL_KEYS, group)) | {
            "flag": "below_exact",
            "evidence": f"{len(part)} of {n_all} samples below the exact lower bound by more than "
                        f"{tol:g} (attack, tracker or encoding bug): {worst}"})
    return pd.DataFrame(out, columns=cols)
