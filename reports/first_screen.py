"""The first screen's answer table, as rows both renderers print (report.html: answer_html.py;
report.md: markdown.py), so the two open on the same table.

``screen_rows`` gives one row per implementation an answer shows: its trust set, top pick first,
or where none is trusted the best one (flagged). Each row's ⚑ counts that implementation's own
flags under the norm; the family's count ("⚑ k of n") sits in the family's header cell (the
family's first row, spanning its rows), never beside an implementation it does not concern. A pick
under ``WEAK_PICK_FRACTION`` of the best global ξ of its norm is marked weak on its row, with that
best named (``NormBest``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from attackaudit.fidelity.recommend import WEAK_FRACTION
from .answer import Answer
from .formats import f_opt
from .tables import ReportData

#: how a verdict reads in the answer table
VERDICT_LABEL = {"clear": "clear", "tied": "tied", "inconclusive": "inconclusive", "only implementation": "only",
                 "none": "none"}
#: a pick whose global ξ is under this fraction of the best global ξ of its norm in the run is
#: marked "weak" on its row of the first screen, with that best named: its family, however clear
#: its verdict, is far from what the norm allows. It is fidelity.recommend's own fraction (its
#: weakness notes and "far below the best attack of the norm"), so the first screen and the
#: summary never disagree. A comparison across the families of one norm, shown: not a flag, and no
#: verdict changes with it.
WEAK_PICK_FRACTION: float = WEAK_FRACTION
#: the first screen's columns (report.html and report.md): header, what it holds
SCREEN_COLUMNS = (("family · norm", "family and norm; ⚑ k of n: k of the family's n implementations under this norm "
                   "were flagged"),
                  ("verdict", "clear · tied · inconclusive · only · none"),
                  ("pick", "the trusted implementation(s), top pick first; with verdict none the best one, flagged"),
                  ("ξ (95% interval)", "global ξ of this implementation, bootstrap 95% interval"),
                  ("note", f"weak: ξ under {WEAK_PICK_FRACTION:g} of the best of its norm in this run (named); "
                           "inconclusive: the images that would decide"),
                  ("⚑", "this implementation's own flags under this norm"))
#: how to read the first screen, under its title (report.html) or under its table (report.md)
SCREEN_KEY = ("clear: one is significantly better · tied: equivalent, use any · inconclusive: more images would "
              "decide · only: the sole implementation · none: every one flagged. ξ = 1 matches the best found per "
              f"image; weak: under {WEAK_PICK_FRACTION:g} of the best ξ of its norm in this run (named; not a flag, "
              "the verdict stands). ⚑ beside a family: how many of its implementations were flagged; in a row: "
              "that implementation's own flags.")


@dataclass(frozen=True)
class NormBest:
    """The implementation with the highest global ξ of one norm in the run, flagged or not (the
    best measured; the reader is told when it is flagged)."""

    implementation: str
    library_version: str
    optimality: float
    flagged: bool

    @property
    def text(self) -> str:
        return f"{self.implementation}{' (flagged)' if self.flagged else ''}, ξ {f_opt(self.optimality)}"


def norm_bests(data: ReportData) -> dict[str, NormBest]:
    """norm -> the best implementation of that norm in ``data.leaderboard`` (ties: by name)."""
    board = data.leaderboard
    if board.empty:
        return {}
    xi = pd.to_numeric(board["optimality"], errors="coerce")
    order = board.assign(xi=xi, rank=xi.fillna(-1.0)) \
        .sort_values(["norm", "rank", "implementation"], ascending=[True, False, True]).drop_duplicates("norm")
    flagged = set(zip(data.flags["implementation"].astype(str), data.flags["library_version"].astype(str),
                      data.flags["norm"].astype(str))) if len(data.flags) else set()
    return {str(b.norm): NormBest(str(b.implementation), str(b.library_version), float(b.xi),
                                  (str(b.implementation), str(b.library_version), str(b.norm)) in flagged)
            for b in order.itertuples(index=False)}


@dataclass
class ScreenRow:
    """One row of the first screen: one implementation an answer shows, with the texts both
    renderers print. ``span`` is the number of rows of its family and norm on the family's first
    row (whose header cell carries the family, the verdict and the family's ⚑ count), 0 below."""

    answer: Answer
    span: int
    implementation: str
    library_version: str
    optimality: float
    ci: tuple[float, float]
    flags: list[str]                                      # this implementation's own flags, this norm
    weak: NormBest | None                                 # the norm's best, when this one is far below it
    label: str                                            # its name, with the version where the name repeats

    @property
    def family_text(self) -> str:
        return f"{self.answer.family} · {self.answer.norm}"

    @property
    def family_flags_text(self) -> str:
        """"⚑ k of n": k of the family's n implementations under this norm are flagged ("" for none)."""
        k = len(self.answer.flagged)
        return f"⚑ {k} of {max(len(self.answer.implementations), k)}" if k else ""

    @property
    def ci_text(self) -> str:
        """The bootstrap 95% interval of its ξ, "(lo–hi)", or "" where there is none."""
        lo, hi = self.ci
        return f"({lo:.2f}–{hi:.2f})" if math.isfinite(lo) and math.isfinite(hi) else ""

    @property
    def xi_text(self) -> str:
        return f"{f_opt(self.optimality)} {self.ci_text}".strip()

    @property
    def weak_text(self) -> str:
        return f"weak: best of {self.answer.norm} is {self.weak.text}" if self.weak is not None else ""

    @property
    def rerun_text(self) -> str:
        """On the family's first row of an inconclusive verdict: the images that would decide."""
        return self.answer.rerun if self.span else ""

    @property
    def note_text(self) -> str:
        return "; ".join(x for x in (self.weak_text, self.rerun_text) if x)

    @property
    def flags_text(self) -> str:
        return f"⚑ {len(self.flags)}" if self.flags else ""


def is_weak(optimality: float, best: NormBest | None) -> bool:
    """Whether a pick of global ξ ``optimality`` is under ``WEAK_PICK_FRACTION`` of its norm's best."""
    return (best is not None and math.isfinite(optimality) and math.isfinite(best.optimality)
            and optimality < WEAK_PICK_FRACTION * best.optimality)


def screen_rows(found: list[Answer], bests: dict[str, NormBest]) -> list[ScreenRow]:
    """The first screen's rows of ``found`` (``answers``), in their order: per family and norm its
    trusted implementations, top pick first, or where none is trusted the best one (flagged)."""
    out = []
    for a in found:
        shown = [(m.key, m.optimality, m.ci) for m in a.members] or [(a.top, a.optimality, a.ci)]
        names = [k[0] for k in a.implementations]
        best = bests.get(a.norm)
        for i, (key, xi, ci) in enumerate(shown):
            label = f"{key[0]} {key[1]}".strip() if names.count(key[0]) > 1 else key[0]
            out.append(ScreenRow(a, len(shown) if i == 0 else 0, key[0], key[1], xi, ci, list(a.flagged.get(key, [])),
                                 best if is_weak(xi, best) else None, label))
    return out


__all__ = ["SCREEN_COLUMNS", "SCREEN_KEY", "VERDICT_LABEL", "WEAK_PICK_FRACTION", "NormBest", "ScreenRow", "is_weak", "norm_bests",
           "screen_rows"]
