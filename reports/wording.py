"""Messages in the caller's language: the command line's flags, or ``attackaudit.compare``'s
keyword arguments.

Verdicts, notes and errors are written once, in the command line's words ("rerun with --samples
12"); ``speak(text, "api")`` turns each flag into the argument a notebook user passes ("rerun
with samples=12"). It is applied where a message reaches the caller, at the rendering layer:
``attackaudit.compare``'s errors and notes, and a ``Result``'s verdicts, flags and report files.
"""
from __future__ import annotations

import re

#: command-line flag → ``compare()`` argument
CLI_TO_API = {"--samples": "samples", "--budget": "budget", "--seed": "seed", "--steps-scale": "steps_scale",
              "--batch-size": "batch_size", "--workers": "workers", "--timeout": "timeout_s",
              "--families": "families", "--norms": "norms", "--libraries": "libraries", "--attacks": "attacks",
              "--plugin": "plugins", "--device": "device", "--out": "out", "--retry": "retry"}
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


def speak(text: str, style: str = "cli") -> str:
    """``text`` in the words of ``style``: "cli" leaves it as written, "api" names ``compare()``'s
    arguments instead of the flags ("--samples 12" → "samples=12", "--targeted" → "targeted=True")."""
    if style not in STYLES:
        raise ValueError(f"style must be one of {', '.join(STYLES)}, got {style!r}")
    return text if style == "cli" else _FLAG.sub(_api, text)


_CODE = re.compile(r"(<(style|script)\b.*?</\2>)", re.S | re.I)


def speak_document(text: str, style: str = "cli") -> str:
    """``speak`` over a rendered report (Markdown, HTML or JSON), leaving ``<style>`` and
    ``<script>`` blocks as they are (CSS custom properties are written ``--name`` too, and a
    script's bytes are pinned by the page's Content-Security-Policy hash)."""
    parts = _CODE.split(text)
    # re.split with two groups yields [text, block, tag name, text, block, tag name, ...]
    return "".join(speak(part, style) if i % 3 == 0 else part if i % 3 == 1 else ""
                   for i, part in enumerate(parts))
