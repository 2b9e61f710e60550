"""Advice as a value: what a rerun should change to decide what this run could not.

fidelity decides the advice (``sample_size``: the images an inconclusive comparison needs) and
each view words it: the command line, its Markdown and HTML reports and report.json say the flag
(``--samples 52``), ``attackaudit.compare``'s caller the keyword argument (``samples=52``).

A decision that carries advice is an ``Advised``: a ``str`` whose text is the command line's words
(so report.json, report.md and every reader of the string see what they always saw) and which
keeps its ``Advice``, so a view can word it its own way (``in_view``) without reading it back out
of the text. (A ``str`` column of a DataFrame stores plain strings: an ``Advised`` keeps its value
where it stays an object, as a trust-set member's ``decision`` does.)
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable

#: the views advice is worded for: the command line's flags, ``compare()``'s keyword arguments
VIEWS = ("cli", "api")
#: the parameters fidelity advises on: each is a ``compare()`` keyword and the command line's flag
#: is its name with dashes (tests/test_advice.py holds that against the command line's flags)
ADVISED = ("samples",)


@dataclass(frozen=True)
class Advice:
    """Rerun with ``parameter`` set to ``value`` (``None``: the placeholder "N" of prose that
    explains the advice), because of ``reason`` ("planned for 80% power"; "" to say none)."""

    parameter: str
    value: int | None = None
    reason: str = ""

    def __post_init__(self) -> None:
        if self.parameter not in ADVISED:
            raise ValueError(f"no advice on {self.parameter!r}: fidelity advises on {', '.join(ADVISED)}")

    @property
    def flag(self) -> str:
        """The command line's flag ("samples" → "--samples")."""
        return "--" + self.parameter.replace("_", "-")

    def phrase(self, view: str = "cli") -> str:
        """The parameter and value in ``view``'s words: "--samples 52" or "samples=52"."""
        shown = "N" if self.value is None else str(self.value)
        if view == "cli":
            return f"{self.flag} {shown}"
        if view == "api":
            return f"{self.parameter}={shown}"
        raise ValueError(f"view must be one of {', '.join(VIEWS)}, got {view!r}")

    def sentence(self, view: str = "cli") -> str:
        """"rerun with --samples 52 (planned for 80% power)" in ``view``'s words."""
        return f"rerun with {self.phrase(view)}" + (f" ({self.reason})" if self.reason else "")

    def __str__(self) -> str:  # report.json and the command line's views: today's words
        return self.sentence("cli")


#: "rerun with --samples N": the advice as legends explain it, with no value
SAMPLES_N = Advice("samples")


class Advised(str):
    """Prose in the command line's words that keeps the ``Advice`` values it contains."""

    advice: tuple[Advice, ...]

    def __new__(cls, text: str, advice: Iterable[Advice] = ()) -> "Advised":
        made = super().__new__(cls, text)
        made.advice = tuple(dict.fromkeys(advice))
        return made


def advice_of(values: Iterable[object]) -> tuple[Advice, ...]:
    """The advice ``values`` hold: each ``Advice``, and the advice of each ``Advised``."""
    out: list[Advice] = []
    for v in values:
        if isinstance(v, Advice):
            out.append(v)
        elif isinstance(v, Advised):
            out.extend(v.advice)
    return tuple(dict.fromkeys(out))


def advice_sentence(advice: Advice) -> Advised:
    """``advice``'s sentence in the command line's words, keeping the value."""
    return Advised(advice.sentence("cli"), (advice,))


def in_view(text: str, view: str, advice: Iterable[Advice] = ()) -> str:
    """``text`` with each advice it holds (an ``Advised``'s own, and ``advice``) worded for
    ``view``: the phrase "--samples 52" of the command line becomes ``view``'s ("samples=52"). The
    phrases are the values' own, so nothing is read back out of the text; a longer value is never
    taken for a shorter one ("--samples 5" is not part of "--samples 52")."""
    if view not in VIEWS:
        raise ValueError(f"view must be one of {', '.join(VIEWS)}, got {view!r}")
    held = advice_of([text]) + tuple(advice)
    if view == "cli" or not held:
        return str(text)
    words = {a.phrase("cli"): a.phrase(view) for a in held}
    # one pass over the text, each phrase whole: not inside a longer flag, not followed by more digits
    pattern = re.compile(r"(?<![\w-])(?:" + "|".join(re.escape(p) for p in sorted(words, key=len, reverse=True))
                         + r")(?!\w)")
    return pattern.sub(lambda m: words[m.group(0)], str(text))
