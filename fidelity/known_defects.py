"""Known defects: implementations whose release is in the defect corpus with a defect that every run
of it has (benchmarks/defects/, entries with ``in_every_run = true``), read from
``known_defects.json`` (written by ``benchmarks/defect_corpus.py --known``).

A rule that measures a defect may stay silent in a given run for reasons that have nothing to do
with the attack: ``below_expected_strength`` names no one when every library's implementation of
a family shares the shortfall (fmn under l2: adv-lib's and foolbox's FMN both fall short on
saturated digits, each for its own traced reason). The corpus knows the cause; this flag carries it,
so that an implementation with a known defect is never trusted and the report says why. It is a
lookup, not a measurement: the corpus' recall table never counts it, and a release candidate
(a version with a local label, ``3.3.4+c…``: possibly patched) or a release outside the known
range is never matched.
"""
from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

import pandas as pd
from packaging.version import InvalidVersion, Version

from ._table import JOB_KEY, without_twins

FLAG = "known_defect"
DATA = Path(__file__).with_name("known_defects.json")


@lru_cache(maxsize=1)
def known() -> tuple[dict, ...]:
    """The entries of ``known_defects.json``: ``implementation, norm, library, since, through,
    case, cause, file, line``."""
    return tuple(json.loads(DATA.read_text())["defects"]) if DATA.is_file() else ()


def _in_range(version: str, since: str, through: str) -> bool:
    try:
        v = Version(str(version))
        return v.local is None and Version(since or through) <= v <= Version(through)
    except InvalidVersion:
        return False


def matches(implementation: str, norm: str, version: str) -> list[dict]:
    """The known defects of ``implementation`` under ``norm`` at ``version``."""
    return [k for k in known() if k["implementation"] == implementation and k["norm"] == norm
            and _in_range(version, k["since"], k["through"])]


def known_defect_findings(t: pd.DataFrame) -> list[dict]:
    """One ``known_defect`` finding (``model == "*"``) per implementation, library version and
    norm of a prepared table that matches a known defect."""
    out = []
    real = without_twins(t)
    for impl, version, norm in real[["implementation", "library_version", "norm"]].drop_duplicates().itertuples(
            index=False):
        for k in matches(impl, norm, str(version)):
            span = k["through"] if not k["since"] or k["since"] == k["through"] else f"{k['since']}–{k['through']}"
            out.append(dict(zip(JOB_KEY, ("*", norm, impl, version))) | {"flag": FLAG, "evidence": (
                f"a defect of {k['library']} {span} in attackaudit's defect corpus ({k['case']}), not measured in "
                f"this run: {k['cause']} Wrong line: {k['file']}: `{k['line']}`")})
    return out
