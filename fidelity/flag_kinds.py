"""What each flag means and how much it weighs: the one definition every view reads.

A flag is either a **defect** (the implementation is wrong: it is never trusted, and every view
counts it as *flagged*) or a **weakness** (the implementation is correct as far as the evidence
goes but measurably weaker than a sibling: it never removes a candidate from a trust set, whose own
tests decide, and every view words it as *weaker*, never as *flagged*). fidelity/README.md
("Flags", "Trust sets") gives the rules; ``recommend`` keeps only implementations without a defect
flag as candidates; the report (HTML, Markdown, JSON, text), the notebook's ``Result``,
``attackaudit explain`` and ``attackaudit compare`` count and word flags from this module alone.

A flag name this module does not know (a newer run read by an older report) is a defect: never
trust what the code cannot name.

``FLAG_KINDS`` is the registry: for every flag its meaning, its severity and the twins whose
disagreement raises it (``fidelity/twins.py`` ``FLAG_OF`` is drawn from it); its order is the order
every table lists flags in (``flags.FLAGS``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

import pandas as pd

from attackaudit.results.schema import BATCH, PERM, SEED, SHIFT, SPLIT

DEFECT = "defect"
WEAKNESS = "weakness"
#: the word each severity gives an implementation in every view
SEVERITY_WORD = {DEFECT: "flagged", WEAKNESS: "weaker"}


@dataclass(frozen=True)
class FlagKind:
    """One flag: its name, its severity (``DEFECT`` or ``WEAKNESS``), one sentence of meaning, and
    the twin kinds (``harness/results/schema.py``) whose disagreement with the model raises it."""

    name: str
    severity: str
    meaning: str
    twins: tuple[str, ...] = ()

    @property
    def removes_trust(self) -> bool:
        return self.severity == DEFECT


_MEANINGS: dict[str, tuple[str, str]] = {
    "crash": (DEFECT, "the attack raised an exception; what the tracker saw before it still counts (the evidence "
                      "says whether anything survived)"),
    "timeout": (DEFECT, "the job ran past its time limit and was killed"),
    "invalid": (DEFECT, "it returned NaN, or a batch of the wrong shape or type"),
    "label_bug": (DEFECT, "label evidence: its result changes on the class-permutation twin (same network, classes "
                          "renamed) beyond its own seed noise, or it fails on every image of one class beyond what "
                          "their difficulty explains, or in a targeted run its outputs reach a third class instead "
                          "of the target"),
    "silent_failure": (DEFECT, "it did not work: no backward pass, about one query per sample, or it broke none of "
                               "the images the other implementations broke (its success rate is the clean error "
                               "rate)"),
    "budget_overrun": (DEFECT, "it asked for more queries than the budget; the tracker refused the extra ones"),
    "out_of_box": (DEFECT, "it returned inputs outside the [0, 1] box"),
    "out_of_ball": (DEFECT, "a fixed-ε attack returned points outside the ε-ball it was called with"),
    "eps_unused": (DEFECT, "a fixed-ε attack failed while its outputs stayed far inside the ε-ball, where other "
                           "implementations found adversarials within that ε: no ε makes it stronger"),
    "batch_dependence": (DEFECT, "its result on an image changes when the image is attacked alone (the batch-split "
                                 "twin) beyond its own seed noise: it depends on the rest of the batch"),
    "fallback_output": (DEFECT, "it returned a default output (the input, an all-zero or constant image, one output "
                                "shared by several images) for images its own search never broke: those images "
                                "count as failed"),
    "last_not_best": (DEFECT, "it returned a worse point than the best adversarial it had already found"),
    "nondeterminism": (DEFECT, "two seeded runs of the same config disagree"),
    "optimality_gap": (WEAKNESS, "a sibling of its family is shown different from it and closer (beyond ±5% per "
                                 "image) on the same model: a weakness, which alone does not keep it out of a "
                                 "trust set"),
    "shift_sensitivity": (DEFECT, "its result changes when every logit is shifted by the same per-sample constant, "
                                  "which no sound loss notices"),
    "below_exact": (DEFECT, "it claims a perturbation smaller than the proven exact minimum: a bug"),
    "below_expected_strength": (DEFECT, "a family AttackBench publishes as strong, implemented far below both that "
                                        "strength and the best attack of its norm here: a defect, never trusted"),
    "worse_than_yardstick": (DEFECT, "an absolute yardstick: on most images it lands farther from the exact minimum (or "
                                     "from the envelope of the strong attacks of its norm) than sound implementations "
                                     "of its family do at these settings, beyond their measured spread; a plugin, or "
                                     "a family with no sound implementation, meets its norm's yardstick: never "
                                     "trusted, sole implementation or not"),
    "known_defect": (DEFECT, "this release's implementation has a defect traced in attackaudit's defect corpus "
                             "(fidelity/known_defects.json names the source line): never trusted"),
}
#: the twins that raise a flag (fidelity/twins.py judges them); the seed twin raises none of its own:
#: it is the noise floor every twin rule measures against
_RAISED_BY: dict[str, tuple[str, ...]] = {"label_bug": (PERM,), "shift_sensitivity": (SHIFT,),
                                          "batch_dependence": (SPLIT, BATCH)}
#: the flags a job's failed status raises (its row status is the flag): the job could not run
FAILURE_FLAGS = ("crash", "timeout", "invalid")
#: flags a rule outside the flag's own module reads by name
OPTIMALITY_GAP, BELOW_EXPECTED_STRENGTH = "optimality_gap", "below_expected_strength"
#: every flag, by name, in the order every table lists them
FLAG_KINDS: dict[str, FlagKind] = {name: FlagKind(name, sev, text, _RAISED_BY.get(name, ()))
                                   for name, (sev, text) in _MEANINGS.items()}
#: one sentence per flag, for readers who do not know the vocabulary
assert {*FAILURE_FLAGS, OPTIMALITY_GAP, BELOW_EXPECTED_STRENGTH} <= set(FLAG_KINDS)  # a rename fails at import
FLAG_MEANINGS: dict[str, str] = {name: kind.meaning for name, kind in FLAG_KINDS.items()}
#: flags that say "weaker", not "wrong": they never remove a candidate (the tests decide) and an
#: implementation carrying only these gets a weakness note
WEAKNESS_FLAGS = frozenset(name for name, kind in FLAG_KINDS.items() if kind.severity == WEAKNESS)


def flag_of_twin(twin: str) -> str | None:
    """The flag a twin kind raises when a model and that twin disagree (None: the seed twin, the
    noise floor, raises none)."""
    return next((kind.name for kind in FLAG_KINDS.values() if twin in kind.twins), None)


def evidence_twins(flag: str) -> tuple[str, ...]:
    """The twins whose rows are a flag's evidence: those that raise it, and the seed twin (its
    noise floor); () for a flag no twin raises."""
    kind = FLAG_KINDS.get(str(flag))
    return (*kind.twins, SEED) if kind is not None and kind.twins else ()


def severity(flag: str) -> str:
    """``DEFECT`` or ``WEAKNESS``; an unknown flag is a defect."""
    kind = FLAG_KINDS.get(str(flag))
    return kind.severity if kind is not None else DEFECT


def is_defect(flag: str) -> bool:
    return severity(flag) == DEFECT


def defects(flags: Iterable[str]) -> list[str]:
    """The defect flags of ``flags``, in their order."""
    return [f for f in flags if is_defect(f)]


def weaknesses(flags: Iterable[str]) -> list[str]:
    """The weakness flags of ``flags``, in their order."""
    return [f for f in flags if not is_defect(f)]


def raised_by_twins(flags_df: pd.DataFrame) -> pd.DataFrame:
    """The findings of ``flags_df`` that a twin's disagreement raised (their flag has ``twins``; a
    finding about an implementation over all models, ``model == "*"``, is another rule's): what a
    later look of a run that extends until decided carries from the look its twins ran in."""
    if flags_df is None or flags_df.empty:
        return pd.DataFrame(columns=flags_df.columns if flags_df is not None else [])
    kinds = [bool(FLAG_KINDS[f].twins) if f in FLAG_KINDS else False for f in flags_df["flag"]]
    return flags_df[pd.Series(kinds, index=flags_df.index) & (flags_df["model"].astype(str) != "*")]


def with_severity(flags_df: pd.DataFrame) -> pd.DataFrame:
    """``flags_df`` (one row per finding, a ``flag`` column) with a ``severity`` column."""
    return flags_df.assign(severity=[severity(f) for f in flags_df["flag"]] if len(flags_df) else
                           pd.Series(dtype=str))


def defect_rows(flags_df: pd.DataFrame) -> pd.DataFrame:
    """The findings of ``flags_df`` that are defects."""
    if flags_df is None or flags_df.empty:
        return flags_df
    return flags_df[[is_defect(f) for f in flags_df["flag"]]]


def standing(flags: Iterable[str]) -> str:
    """An implementation's standing from its own flags: "flagged" (any defect), "weaker" (only
    weaknesses) or "" (none): the word every view prints."""
    flags = list(flags)
    if defects(flags):
        return SEVERITY_WORD[DEFECT]
    return SEVERITY_WORD[WEAKNESS] if flags else ""


def family_counts(flags_df: pd.DataFrame) -> dict[tuple[str, str], tuple[int, int]]:
    """``{(family, norm): (flagged, weaker)}``: how many implementations of each family and norm carry
    a defect flag, and how many carry only weakness flags (the counts every view prints)."""
    out: dict[tuple[str, str], tuple[int, int]] = {}
    if flags_df is None or flags_df.empty:
        return out
    for (family, norm), g in flags_df.groupby(["family", "norm"], sort=True):
        marks = {k: standing(f["flag"]) for k, f in g.groupby(["implementation", "library_version"])}
        words = list(marks.values())
        out[(str(family), str(norm))] = (words.count(SEVERITY_WORD[DEFECT]), words.count(SEVERITY_WORD[WEAKNESS]))
    return out


__all__ = ["family_counts", "DEFECT", "WEAKNESS", "SEVERITY_WORD", "FlagKind", "FLAG_KINDS", "FLAG_MEANINGS", "WEAKNESS_FLAGS",
           "severity", "is_defect", "defects", "weaknesses", "with_severity", "defect_rows", "standing",
           "flag_of_twin", "evidence_twins", "raised_by_twins", "FAILURE_FLAGS", "OPTIMALITY_GAP", "BELOW_EXPECTED_STRENGTH"]
