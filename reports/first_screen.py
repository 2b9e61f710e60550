"""The first screen's answer table, as rows both renderers print (report.html: answer_html.py;
report.md: markdown.py), so the two open on the same table.

``ordered`` puts the decided answers first (clear, tied, only implementation), then the
inconclusive ones, then those where none is trusted; within each, by family and norm, so that a
family's norms sit together whatever their verdicts. ``screen_rows`` gives one row per
implementation an answer shows: its trust set, top pick first, or where none is trusted one row
"none trusted" (its pick column left empty: there is nothing to pick; the evidence names the best
flagged one). "Flagged" and "weaker" are fidelity/flag_kinds.py's: each row's ⚑ counts that
implementation's own defect flags under the norm, a weakness (``optimality_gap``) is written
"weaker" in its note and never counted as a flag; the family's count ("⚑ k of n") sits in the
family's header cell (the family's first row, spanning its rows), never beside an implementation it
does not concern. A pick under ``WEAK_PICK_FRACTION`` of the best global ξ of its norm is marked
weak on its row, with that best named (``NormBest``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import pandas as pd

from attackaudit.fidelity.flag_kinds import defect_rows
from attackaudit.fidelity.strength import WEAK_FRACTION, is_weak  # the rule is fidelity's; shown here
from .answer import Answer
from .formats import f_opt
from .formats import f_ci
from .tables import ReportData

#: how a verdict reads in the answer table
VERDICT_LABEL = {"clear": "clear", "tied": "tied", "inconclusive": "inconclusive", "only implementation": "only",
                 "none": "none"}
#: the verdicts that decide: the first screen shows them first
DECIDED = ("clear", "tied", "only implementation")
#: the pick column of a family where none is trusted
NONE_TRUSTED = "none trusted"
#: a pick fidelity judges weak (``fidelity/strength.py`` ``is_weak``: global ξ under this fraction of
#: the best of its norm in the run, the rule of the summary's weakness notes too) is marked "weak"
#: on its row, with that best named; the fraction is here only to be printed in the legend
WEAK_PICK_FRACTION: float = WEAK_FRACTION
#: the first screen's columns (report.html and report.md): header, what it holds
SCREEN_COLUMNS = (("family · norm", "family and norm; ⚑ k of n: k of the family's n implementations under this norm "
                   "were flagged (a defect)"),
                  ("verdict", "clear · tied · inconclusive · only · none"),
                  ("pick", "the trusted implementation(s), top pick first; with verdict none, none is trusted"),
                  ("ξ (95% interval)", "global ξ of this implementation, bootstrap 95% interval"),
                  ("note", "1.01× exact: median per-image distance over the exact minimum (× strong envelope: "
                           "over the strong attacks of its norm where no exact minimum exists), the yardstick it met; "
                           f"weak: ξ under {WEAK_PICK_FRACTION:g} of the best of its norm in this run (named under "
                           "the table); weaker: a sibling is closer on some model (optimality_gap, a weakness, not a "
                           "flag); inconclusive: the images that would decide"),
                  ("⚑", "this implementation's own flags (defects) under this norm"))
#: how to read the first screen, under its title (report.html) or under its table (report.md)
SCREEN_KEY = ("clear: one is significantly better · tied: equivalent, use any · inconclusive: more images would "
              "decide · only: the sole implementation · none: every one flagged. ξ = 1 matches the best found per "
              f"image; weak: under {WEAK_PICK_FRACTION:g} of the best ξ of its norm in this run (named under the table; not a flag, "
              "the verdict stands); weaker: a sibling is closer on some model (a weakness: still trusted). ⚑ beside "
              "a family: how many of its implementations were flagged (a defect: never trusted); in a row: that "
              "implementation's own flags.")


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
    found = defect_rows(data.flags)
    flagged = set(zip(found["implementation"].astype(str), found["library_version"].astype(str),
                      found["norm"].astype(str))) if len(found) else set()
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
    flags: list[str]                                      # this implementation's own defect flags, this norm
    weak: NormBest | None                                 # the norm's best, when this one is far below it
    label: str                                            # its name, with the version where the name repeats
    weaker: list[str] = field(default_factory=list)      # its weakness flags (no defect), this norm
    yardstick: str = "none"                               # the absolute yardstick its verdict used
    ratio: float = math.nan                               # its median per-image ratio to that reference

    @property
    def none_trusted(self) -> bool:
        """The one row of a family where none is trusted: nothing to pick."""
        return not self.implementation

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
        interval = f_ci(*self.ci)  # at ξ's own precision: "0.999 (0.998–1.000)", never "0.999 (1.00–1.00)"
        return f"({interval})" if interval else ""

    @property
    def xi_text(self) -> str:
        return "" if self.none_trusted else f"{f_opt(self.optimality)} {self.ci_text}".strip()

    @property
    def weak_text(self) -> str:
        """"weak": far below the best of its norm (``weak_legend`` names that best once per norm)."""
        return "weak" if self.weak is not None else ""

    @property
    def rerun_text(self) -> str:
        """On the family's first row of an inconclusive verdict: the images that would decide, short."""
        return short_rerun(self.answer) if self.span else ""

    @property
    def weaker_text(self) -> str:
        """"weaker": a weakness flag (``optimality_gap``), still trusted (fidelity/flag_kinds.py)."""
        return "weaker" if self.weaker else ""

    @property
    def ratio_text(self) -> str:
        """Its distance against the absolute yardstick (fidelity/yardstick.py), short: "1.01× exact"
        (median per image to the exact minimum) or "1.03× strong envelope"; "" without one."""
        if self.none_trusted or self.yardstick not in ("exact", "envelope") or not math.isfinite(self.ratio):
            return ""
        return f"{self.ratio:.2f}× {'exact' if self.yardstick == 'exact' else 'strong envelope'}"

    @property
    def note_text(self) -> str:
        return "; ".join(x for x in (self.ratio_text, self.weaker_text, self.weak_text, self.rerun_text) if x)

    @property
    def flags_text(self) -> str:
        return f"⚑ {len(self.flags)}" if self.flags else ""


def short_rerun(answer: Answer) -> str:
    """An inconclusive verdict's "what would decide" in a few words (the evidence has the sentence),
    from its values: "rerun: --samples N", or "needs ≈N images" (more than the dataset has)."""
    most = answer.deciding
    if most is None:
        return ""
    advice = answer.rerun_advice
    return f"rerun: {advice.phrase()}" if advice is not None else f"needs ≈{int(most.images_to_decide)} images"


def weak_legend(rows: list[ScreenRow]) -> str:
    """One line under the table naming, per norm with a weak pick, the best of that norm."""
    bests = {r.answer.norm: r.weak for r in rows if r.weak is not None}
    if not bests:
        return ""
    return (f"weak: ξ under {WEAK_PICK_FRACTION:g} of the best of its norm here: "
            + "; ".join(f"{norm} {best.text}" for norm, best in sorted(bests.items())) + ".")


def ordered(found: list[Answer]) -> list[Answer]:
    """``found`` as the first screen shows it: decided answers (``DECIDED``) first, then
    inconclusive, then none trusted; by family and norm within each."""
    rank = {v: 0 for v in DECIDED} | {"inconclusive": 1}
    return sorted(found, key=lambda a: (rank.get(a.verdict, 2), a.family, a.norm))


def screen_rows(found: list[Answer], bests: dict[str, NormBest]) -> list[ScreenRow]:
    """The first screen's rows of ``found`` (``answers``), in their order: per family and norm its
    trusted implementations, top pick first, or where none is trusted one row with no pick."""
    out = []
    for a in found:
        if not a.members and a.verdict == "none":
            out.append(ScreenRow(a, 1, "", "", math.nan, (math.nan, math.nan), [], None, NONE_TRUSTED))
            continue
        shown = [(m.key, m.optimality, m.ci, m.yardstick, m.ratio) for m in a.members] \
            or [(a.top, a.optimality, a.ci, "none", math.nan)]
        names = [k[0] for k in a.implementations]
        best = bests.get(a.norm)
        for i, (key, xi, ci, ys, ratio) in enumerate(shown):
            label = f"{key[0]} {key[1]}".strip() if names.count(key[0]) > 1 else key[0]
            out.append(ScreenRow(a, len(shown) if i == 0 else 0, key[0], key[1], xi, ci, list(a.flagged.get(key, [])),
                                 best if best is not None and is_weak(xi, best.optimality) else None, label, list(a.weaker.get(key, [])), ys, ratio))
    return out


__all__ = ["DECIDED", "NONE_TRUSTED", "SCREEN_COLUMNS", "SCREEN_KEY", "VERDICT_LABEL", "WEAK_PICK_FRACTION", "NormBest",
           "ScreenRow", "norm_bests", "ordered", "screen_rows", "short_rerun", "weak_legend"]
