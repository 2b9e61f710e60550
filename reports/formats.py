"""How a value is written in a table cell or a sentence of any report page (report.md,
report.html, the release audit's pages): number formats, the margin δ in words, and ``Col``, one
column of a table (header, key, format, tooltip). Everything returned is plain text; each renderer
escapes it for its own format."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from attackaudit.fidelity.equivalence import DELTA
from attackaudit.fidelity.flag_kinds import WEAKNESS, severity

#: the margin δ of every comparison (fidelity/equivalence.py), as a relative size per image
MARGIN = f"{math.expm1(DELTA):.0%}"


def as_float(v: object) -> float | None:
    """``v`` as a float, None when it is not a number."""
    try:
        f = float(v)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return f


def f_opt(v: object) -> str:
    f = as_float(v)  # NaN: ξ undefined (a zero denominator), explained in the report's notes
    return "—" if f is None else "n/a" if math.isnan(f) else f"{f:.3f}"


def f_ci(lo: object, hi: object) -> str:
    """A 95% interval of ξ at ``f_opt``'s precision, "0.998–1.000" ("" where it has no bounds): a ξ
    of 0.999 beside an interval rounded to "1.00–1.00" read as a value outside its own interval."""
    a, b = as_float(lo), as_float(hi)
    return f"{a:.3f}–{b:.3f}" if a is not None and b is not None and math.isfinite(a) and math.isfinite(b) else ""


def counted(n: int, noun: str) -> str:
    """"1 model", "2 models": ``n`` and ``noun``, plural unless ``n`` is 1."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def f_dist(v: object) -> str:
    f = as_float(v)
    if f is None or math.isnan(f):
        return "—"
    return "∞" if math.isinf(f) else f"{f:.4g}"


def f_pct(v: object) -> str:
    f = as_float(v)
    return "—" if f is None or math.isnan(f) else f"{f:.0%}"


def f_count(v: object) -> str:
    f = as_float(v)
    return "—" if f is None or math.isnan(f) else f"{f:.0f}"


def f_sec(v: object) -> str:
    f = as_float(v)
    return "—" if f is None or math.isnan(f) else f"{f:.2f}"


def f_p(v: object) -> str:
    f = as_float(v)
    return "—" if f is None or math.isnan(f) else (f"{f:.2g}" if f >= 1e-4 else "<1e-4")


def p_is(v: object) -> str:
    """"p = 0.003" or "p < 1e-4", for sentences."""
    text = f_p(v)
    return f"p {text[0]} {text[1:]}" if text.startswith("<") else f"p = {text}"


def f_ratio(v: object) -> str:
    """A per-image log ratio log(d_a / d_b) as a relative size of a against b: −0.105 → "10% closer"."""
    f = as_float(v)
    if f is None or math.isnan(f):
        return "—"
    if f == 0:
        return "same"
    return f"{abs(math.expm1(f)):.0%} {'farther' if f > 0 else 'closer'}"


def f_bool(v: object) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)) or v == "":
        return ""
    return "yes" if bool(v) else "no"



def f_flag_names(value: object) -> str:
    """Comma-joined flag names, each weakness marked "(weaker)": a weakness is not a defect
    (fidelity/flag_kinds.py), in every table that lists flags."""
    if not isinstance(value, str) or not value:
        return ""
    names = [f.strip() for f in value.split(",") if f.strip()]
    return ", ".join(f + (" (weaker)" if severity(f) == WEAKNESS else "") for f in names)

def f_signed(v: object) -> str:
    f = as_float(v)
    return "—" if f is None or math.isnan(f) else f"{f:+.2f}"


def f_text(v: object) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return ""
    return str(v)


@dataclass(frozen=True)
class Col:
    """One column of a report table: its ``header``, the row ``key`` it shows, the ``fmt`` that
    writes a value, ``numeric`` (right-aligned, sorts by number) and the header's ``tip``."""

    header: str
    key: str
    fmt: Callable[[object], str] = f_text
    numeric: bool = False
    tip: str = ""


def sort_key(v: object) -> str:
    """The value a numeric cell sorts by (``data-sort``): inf sorts last, NaN first."""
    f = as_float(v)
    if f is None or math.isnan(f):
        return "-Infinity"
    # 7 significant digits order every table here and keep the page small (a repr is 18)
    return "Infinity" if f == math.inf else ("-Infinity" if f == -math.inf else f"{f:.7g}")
