"""Messages in the caller's language: the command line's flags, or ``attackaudit.compare``'s
keyword arguments.

Advice is a value (fidelity/advice.py): fidelity's verdicts keep the ``Advice`` they give ("rerun
with --samples 12" in the command line's words, ``samples=12`` in ``compare()``'s), and ``speak``
words it from those values. What the flag pattern below still rewrites is free prose: the
harness's notes and errors (``--samples 40 is more than the 32 images the dataset has``), the
parameters the reports' own sentences name ("another --seed gives others", "(--libraries)",
"--metamorphic"). Every advice fidelity gives is a value: no advice is worded by the pattern. It is applied
where a message reaches the caller, at the rendering layer:
``attackaudit.compare``'s errors and notes, and a ``Result``'s verdicts, flags and report files.
"""
from __future__ import annotations

import math
import re
from typing import Iterable

import pandas as pd

from attackaudit.fidelity.advice import SAMPLES_N, Advice, advice_of, in_view
from attackaudit.fidelity.yardstick_verdicts import ADVICE

#: command-line flag → ``compare()`` argument: made from the parameter table (harness/results/parameters.py)
from attackaudit.results.parameters import CLI_TO_API
#: on/off flags → the argument that turns them on
SWITCHES = {"--targeted": "targeted=True", "--metamorphic": "metamorphic=True"}
STYLES = ("cli", "api")

_FLAG = re.compile(r"(?<![\w-])(--[a-z][a-z-]*)(?: (\d[\w.]*|N\b|crashed\b|'[^']*'))?")


def _api(match: re.Match) -> str:
    flag, value = match.group(1), match.group(2)
    if flag in SWITCHES:
        return SWITCHES[flag] + (f" {value}" if value else "")
    name = CLI_TO_API.get(flag)
    if name is None:  # a flag the API has no argument for: left as the command line says it
        return match.group(0)
    if value is None:
        return name
    return f"{name}={value!r}" if flag == "--retry" and not value.startswith("'") else f"{name}={value}"


def speak(text: str, style: str = "cli", advice: Iterable[Advice] = ()) -> str:
    """``text`` in the words of ``style``: "cli" leaves it as written, "api" names ``compare()``'s
    arguments instead of the flags: the advice the text holds (an ``Advised``'s, and ``advice``)
    from its values ("--samples 12" → "samples=12"), then the flags free prose names
    ("--targeted" → "targeted=True")."""
    if style not in STYLES:
        raise ValueError(f"style must be one of {', '.join(STYLES)}, got {style!r}")
    return text if style == "cli" else _FLAG.sub(_api, in_view(text, style, advice))


def report_advice(recommend: pd.DataFrame) -> tuple[Advice, ...]:
    """Every advice a report of ``recommend`` (``fidelity.recommend``'s rows) shows: its members'
    decisions (each an ``Advised`` that keeps its value), the images each row needs to decide
    (``images_to_decide``, which a row's summary advises), the advice a yardstick's words give
    (the ``advice`` column), and the legends' "--samples N"."""
    held = [SAMPLES_N]
    for members in recommend["trust_set"] if "trust_set" in recommend.columns else ():
        held += advice_of(m.get("decision") for m in members or [] if isinstance(m, dict))
    for need in recommend["images_to_decide"] if "images_to_decide" in recommend.columns else ():
        if isinstance(need, (int, float)) and math.isfinite(need):
            held.append(Advice("samples", round(need)))
    for kept in recommend[ADVICE] if ADVICE in recommend.columns else ():  # a yardstick's, on its row
        held += advice_of(kept if isinstance(kept, (tuple, list)) else ())
    return tuple(dict.fromkeys(held))


_CODE = re.compile(r"(<(style|script)\b.*?</\2>)", re.S | re.I)


def speak_document(text: str, style: str = "cli", advice: Iterable[Advice] = ()) -> str:
    """``speak`` over a rendered report (Markdown, HTML or JSON) that shows ``advice``
    (``report_advice``), leaving ``<style>`` and ``<script>`` blocks as they are (CSS custom
    properties are written ``--name`` too, and a script's bytes are pinned by the page's
    Content-Security-Policy hash)."""
    advice = tuple(advice)
    parts = _CODE.split(text)
    # re.split with two groups yields [text, block, tag name, text, block, tag name, ...]
    return "".join(speak(part, style, advice) if i % 3 == 0 else part if i % 3 == 1 else ""
                   for i, part in enumerate(parts))
