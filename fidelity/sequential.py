"""Runs that extend until decided: the looks' sizes, the α each look spends, and which family × norm
rows a look leaves open (``attackaudit run --until-decided CAP``; the harness's
``run/sequential.py`` runs the looks, docs/statistics.md "Runs that extend until decided" says why).

A run judges its rows at nested sizes n₁ < n₂ < … < n_K (``look_sizes``: the first ``--samples``,
then doubling, the last the cap): a row still *inconclusive* at look k runs again at n_{k+1}
(subsets nest, so its first n_k images are the same); every other row stops where it is.

**Error control across looks: α spending.** With the spending function α(t) = α·t^ρ
(``SPENDING_POWER``) of the information fraction t_k = n_k / n_K, look k judges every row it holds
at the increment a_k = α(t_k) − α(t_{k−1}) (``look_alphas``), every claim of a verdict at that level: the difference
tests that exclude an implementation ("clear", a crossing "mixed") and the equivalence tests of
"tied" (``recommend(alpha=a_k)``, which passes it on to ``equivalence.pair_test`` and the headline).
A row makes a false claim across the looks only if it makes one at some look, so by the union
bound its chance is at most Σ a_k = α, whatever the dependence between the looks (the images of
look k are among those of look k+1). ρ = 3 keeps most of α for the last look: the early looks
decide what is plain (a large difference, a sole or flagged implementation), the cap what needs α.

Everything here is a pure function of result tables (no I/O): ``judge`` is the verdict of one look,
``judge_look`` the same of a look's rows as its directory holds them (``harness/results/looks.py``
``read_look`` reads them; the results package stays below fidelity).
"""
from __future__ import annotations

from typing import Protocol

import numpy as np
import pandas as pd

from attackaudit.results.schema import HARNESS_ERROR

from .findings import findings
from .flag_kinds import raised_by_twins
from .leaderboard import leaderboard
from .recommend import recommend
from .stats import ALPHA
from .yardstick_verdicts import annotate, manifest_settings

#: ρ of the spending function α·t^ρ (the power family; 3 is close to O'Brien–Fleming's): it keeps
#: most of α for the cap, where "tied" needs it (three doubling looks: 0.0008, 0.0055, 0.044). With
#: ρ = 1 (α in proportion to the images) the cap gets 0.025, and a 64-image look of a demo-like grid
#: (digits-mlp, apgd/fmn/fab/ddn/deepfool of three libraries) ties none of its 11 open rows there,
#: where 0.044 ties 6 and a plain 64-image run at 0.05 the same 6; on real seed noise ρ = 3 keeps the
#: A/A rate and the power of ρ = 1 on a few more images (docs/statistics.md)
SPENDING_POWER = 3.0
#: the verdicts that stop a row (``recommend.VERDICTS`` but "inconclusive"): more images change
#: nothing they claim
DECIDED = ("clear", "tied", "only implementation", "none")


def look_sizes(first: int, cap: int) -> list[int]:
    """The nested sizes of the looks: ``first``, then doubling while below ``cap``, then ``cap``
    (``[16, 32, 64]`` for 16 and 64; ``[16, 32, 64, 100]`` for 16 and 100; ``[first]`` when
    ``cap <= first``)."""
    if first <= 0:
        raise ValueError(f"the first look needs a positive number of images, got {first}")
    sizes = [first]
    while sizes[-1] < cap:
        sizes.append(min(2 * sizes[-1], cap))
    return sizes


def spent(t: float, alpha: float = ALPHA, power: float = SPENDING_POWER) -> float:
    """α(t) = α·t^ρ (``power``), the α spent up to information fraction ``t`` (clipped to [0, 1])."""
    return alpha * float(np.clip(t, 0.0, 1.0)) ** power


def look_alphas(sizes: list[int], alpha: float = ALPHA, power: float = SPENDING_POWER) -> list[float]:
    """(K,) the level each look judges at: a_k = α(n_k / n_K) − α(n_{k−1} / n_K), summing to
    α over the looks (one look: α itself)."""
    fractions = [n / sizes[-1] for n in sizes]
    return [spent(t, alpha, power) - spent(prev, alpha, power) for prev, t in zip([0.0] + fractions[:-1], fractions)]


def row_key(family: str, norm: str) -> str:
    """``"apgd/linf"``: a family × norm row as the manifest's looks name it."""
    return f"{family}/{norm}"


def is_open(row: pd.Series | dict) -> bool:
    """Whether a recommendation row is undecided: "inconclusive" with a member neither shown
    equivalent nor different (a row whose open members are all "mixed" is decided: the endpoints
    disagree, and more images will not order them)."""
    if row["verdict"] in DECIDED:
        return False
    members = list(row.get("trust_set") or [])[1:]
    return not members or any(m.get("answer") != "mixed" for m in members if m.get("answer") != "equivalent")


def verdicts(rec: pd.DataFrame) -> dict[str, str]:
    """``{"family/norm": verdict}`` of a recommendation table, an open row's verdict "inconclusive",
    a decided inconclusive row (its members only "mixed") "mixed"."""
    return {row_key(r["family"], r["norm"]): ("inconclusive" if is_open(r) else
                                              "mixed" if r["verdict"] == "inconclusive" else str(r["verdict"]))
            for _, r in rec.iterrows()}


def judge(table: pd.DataFrame, alpha: float, repeats: pd.DataFrame | None = None,
          exact: pd.DataFrame | None = None, dataset_images: int | None = None,
          settings: dict | None = None, carried: pd.DataFrame | None = None) -> pd.DataFrame:
    """The recommendation of one look's rows at its level ``alpha``: the flags and the yardstick
    standing (``findings.findings``, as the report computes them: ``repeats``, the second seeded run
    of ``--repeat 2``; ``exact``, exact minimal distances, left out where the report leaves them
    out; ``settings``, the run's ``steps_scale`` and ``budget`` from its manifest, so that the
    yardstick is looked up at the same setting), the leaderboard and ``recommend``. ``carried``:
    the twins' findings of the look the twins ran in (``raised_by_twins``), for a later look that
    runs the base models only. Empty when no row has a result."""
    if "status" in table.columns:
        table = table[table["status"].astype(str) != HARNESS_ERROR]
    if table.empty:
        return pd.DataFrame(columns=["family", "norm", "verdict", "trust_set"])
    found = findings(table, repeats, exact=exact, settings=settings)
    flags_df = with_carried(found.flags, carried) if carried is not None and len(carried) else found.flags
    rec = recommend(table, flags_df, board=leaderboard(table), alpha=alpha, dataset_images=dataset_images)
    # the yardstick's standing can turn a sole implementation "inconclusive" or a family "none"
    # (reports/tables.py annotates the same way): without it the runner would stop rows the report reopens
    return annotate(rec, found.standing)


class LookRows(Protocol):
    """One look's rows as ``harness/results/looks.py`` ``read_look`` reads them from its directory."""

    table: pd.DataFrame
    repeats: pd.DataFrame | None
    exact: pd.DataFrame | None
    manifest: dict


def twins_findings(first: LookRows) -> pd.DataFrame:
    """The findings the twins raised on the first look (``raised_by_twins`` of its flags), which a
    later look, running the base models only, carries: computed once for all the later looks."""
    return raised_by_twins(findings(first.table, first.repeats, exact=first.exact,
                                    settings=manifest_settings([first.manifest])).flags)


def judge_look(look: LookRows, alpha: float, carried: pd.DataFrame | None = None) -> pd.DataFrame:
    """``judge`` of one look's rows at its level ``alpha``, with its ``--repeat`` rows, exact
    distances, dataset size and settings as its manifest records them; ``carried``: for a later
    look, the first look's ``twins_findings``. The one judgement of a look, for the runner, which
    chooses the rows it extends by it (``harness/run/sequential.py``), and the report, which shows
    each row's last look (``reports/looks.py``)."""
    return judge(look.table, alpha, look.repeats, look.exact, look.manifest.get("dataset_images"),
                 manifest_settings([look.manifest]), carried=carried)


def with_carried(found: pd.DataFrame, carried: pd.DataFrame) -> pd.DataFrame:
    """``found`` with the ``carried`` findings it does not already hold (the same implementation,
    release, norm and flag): a later look's rows have no twins, its twin findings are the first
    look's (run/sequential.py: the twins run once, on the first look's images)."""
    key = ["implementation", "library_version", "norm", "flag"]
    have = set(map(tuple, found[key].astype(str).to_numpy())) if len(found) else set()
    new = carried[[tuple(k) not in have for k in carried[key].astype(str).to_numpy()]]
    return pd.concat([found, new[found.columns]], ignore_index=True) if len(new) else found
