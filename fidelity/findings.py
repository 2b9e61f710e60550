"""The findings of one result table and its implementations' yardstick standing, computed together.

``flags`` and ``yardstick_verdicts.standing`` both rest on the yardstick's ``assess`` (the flag
``worse_than_yardstick`` is its flagged jobs; the standing its per-implementation summary), so
``findings`` assesses once and hands the assessment to both. It also holds the one rule for exact
distances the rows cannot use: a targeted table leaves them out (exact minima are untargeted), and
exact distances that raise (they do not match the rows) are left out rather than losing the verdict.
The report (``reports/tables.py`` ``build``, which says in a note what was left out) and each look of a
run that extends until decided (``sequential.judge``) call it alike, so they judge the same rows the
same way.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import pandas as pd

from .flags import flags
from .yardstick import assess
from .yardstick_verdicts import standing


@dataclass(frozen=True)
class Findings:
    """``flags`` (``FLAG_COLUMNS``) and ``standing`` (``STANDING_COLUMNS``) of one table, and the
    exact distances they used (None: none given, or left out)."""

    flags: pd.DataFrame
    standing: pd.DataFrame
    exact: pd.DataFrame | None
    #: exact distances were given for a targeted table and left out (they are untargeted)
    exact_untargeted: bool = False
    #: what the given exact distances raised, when they were left out for it
    exact_error: Exception | None = None


def _targeted(table: pd.DataFrame) -> bool:
    return "targeted" in table.columns and bool(table["targeted"].fillna(False).astype(bool).any())


def _found(table: pd.DataFrame, repeats: pd.DataFrame | None, exact: pd.DataFrame | None,
           settings: Mapping[str, float] | None) -> tuple[pd.DataFrame, pd.DataFrame]:
    assessed = assess(table, exact, settings)  # once, for the flag and the standing alike
    return (flags(table, repeats, exact=exact, settings=settings, assessed=assessed),
            standing(table, exact, settings, assessed=assessed))


def findings(table: pd.DataFrame, repeats: pd.DataFrame | None = None, *, exact: pd.DataFrame | None = None,
             settings: Mapping[str, float] | None = None) -> Findings:
    """The flags and the yardstick standing of ``table`` (``repeats``: a second seeded run, for
    ``nondeterminism``; ``exact``: exact minimal distances; ``settings``: the run's ``steps_scale``
    and ``budget``, as ``flags`` takes them). Exact distances are left out of a targeted table, and
    where they raise anything but a ValueError (a ValueError is the rows' own problem and is raised);
    ``Findings`` says which."""
    untargeted = exact is not None and _targeted(table)
    if untargeted:
        exact = None
    try:
        found, stand = _found(table, repeats, exact, settings)
    except ValueError:
        raise
    except Exception as exc:  # exact distances that do not match the rows: judged without them
        if exact is None:
            raise
        found, stand = _found(table, repeats, None, settings)
        return Findings(found, stand, None, exact_error=exc)
    return Findings(found, stand, exact, exact_untargeted=untargeted)


__all__ = ["Findings", "findings"]
