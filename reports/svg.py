"""A small SVG writer for the report's plots: lines, step curves, markers and text, with text drawn
as glyph outlines.

Why not matplotlib's SVG backend: it drew each figure through the whole artist tree (about a
quarter of a second per plot, most of a demo report's time) and wrote every element with its own
style attribute and its own copy of every glyph, several MB per report. Here a plot is a handful
of ``<path>`` elements styled by shared CSS classes (``STYLE``), coordinates rounded to 0.1 pt,
and the glyphs and markers are *shared definitions*: ids that mean the same outline in every plot
(``Svg.defs``), so one HTML page carries each of them once however many plots it inlines.

Text is drawn as outlines of DejaVu Sans (matplotlib's bundled default font; its layout gives the
glyph positions, kerning included), never as ``<text>``: no name that came from a library ever
appears as markup, and the plots look the same on every machine.
"""
from __future__ import annotations

import hashlib
import zlib
from dataclasses import dataclass, field
from functools import lru_cache

import matplotlib
import numpy as np
from matplotlib.font_manager import FontProperties, findfont, get_font
from matplotlib.textpath import TextToPath

#: matplotlib's tab10, by index: the colour of an implementation is the same in every plot
PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
           "#bcbd22", "#17becf"]
#: dash patterns at line width 1 (matplotlib's "-", "--", "-.", ":"), scaled by the line width
DASHES = [(), (3.7, 1.6), (6.4, 1.6, 1.0, 1.6), (1.0, 1.65)]
#: line width of an implementation's curve; the dash classes are sized for it
IMPL_LW = 1.4


def _dash(pattern: tuple[float, ...], lw: float) -> str:
    return " ".join(f"{p * lw:.2f}".rstrip("0").rstrip(".") for p in pattern)


#: every class the plots use, prefixed ``aa-`` so that inlined into the report's page they meet
#: none of its own classes (CSS in an inline SVG applies to the whole document)
STYLE = ("svg .aa-bg{fill:#fff}"
         ".aa-grid{fill:none;stroke:#b0b0b0;stroke-opacity:.3;stroke-width:.8}"
         ".aa-ax{fill:none;stroke:#000;stroke-width:.8;stroke-linecap:square}"
         ".aa-ln{fill:none;stroke-linejoin:round}"
         f".aa-impl{{stroke-width:{IMPL_LW};stroke-opacity:.9}}"
         + "".join(f".aa-d{i}{{stroke-dasharray:{_dash(p, IMPL_LW)}}}" for i, p in enumerate(DASHES) if p)
         + "".join(f".aa-c{i}{{stroke:{c}}}.aa-f{i}{{fill:{c}}}" for i, c in enumerate(PALETTE))
         + ".aa-env{stroke:#000;stroke-width:3.6}"
         f".aa-exact{{stroke:#d62728;stroke-width:2.2;stroke-dasharray:{_dash(DASHES[1], 2.2)}}}"
         f".aa-diag{{stroke:#808080;stroke-width:1;stroke-dasharray:{_dash(DASHES[1], 1.0)}}}"
         f".aa-fail{{stroke:#d62728;stroke-width:.8;stroke-dasharray:{_dash(DASHES[3], 0.8)}}}"
         ".aa-red{fill:#d62728}"
         ".aa-pt{stroke:none;fill-opacity:.75}")

#: scatter markers, one per model in turn (matplotlib's "os^Dv<>"), as unit outlines of about
#: 1 pt radius; a point scales one by its size
MARKERS: dict[str, str] = {
    "o": "M0 -1A1 1 0 1 1 0 1A1 1 0 1 1 0 -1Z",
    "s": "M-.886 -.886H.886V.886H-.886Z",
    "^": "M0 -1.1L1 .7H-1Z",
    "D": "M0 -1.25L1.25 0L0 1.25L-1.25 0Z",
    "v": "M0 1.1L1 -.7H-1Z",
    "<": "M-1.1 0L.7 -1V1Z",
    ">": "M1.1 0L-.7 -1V1Z",
}
MARKER_ORDER = "os^Dv<>"


def num(x: float) -> str:
    """A coordinate rounded to 0.1 pt, without a trailing ".0" or a "-0"."""
    s = f"{x:.1f}"
    s = s[:-2] if s.endswith(".0") else s
    return "0" if s == "-0" else s


def _short(x: float) -> str:
    """A scale factor in 4 significant digits, without a leading zero."""
    return f"{x:.4g}".replace("0.", ".", 1)


@dataclass
class Svg:
    """One plot: its size in pt, its elements, and the shared definitions (glyph outlines,
    markers: ``{id: element}``) they refer to."""

    width: float
    height: float
    body: str
    defs: dict[str, str] = field(default_factory=dict)

    def element(self, defs: dict[str, str] | None = None, style: bool = False) -> str:
        """The ``<svg>`` element with ``defs`` (and the CSS when ``style``) inside it: an HTML page
        inlining several plots gives the first of them everything they share and the rest none."""
        head = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{num(self.width)}pt" height="{num(self.height)}pt" '
                f'viewBox="0 0 {num(self.width)} {num(self.height)}">')
        css = f"<style>{STYLE}</style>" if style else ""
        shared = f"<defs>{''.join(defs[k] for k in sorted(defs))}</defs>" if defs else ""
        return head + css + shared + self.body + "</svg>"

    def standalone(self) -> str:
        """A self-contained SVG file."""
        return self.element(self.defs, style=True)


# ------------------------------------------------------------------------------------ text
_FONT_SCALE = TextToPath.FONT_SCALE          # glyph outlines come at this size (pt)
_TEXT_TO_PATH = TextToPath()
_PROP = FontProperties(family=matplotlib.rcParamsDefault["font.family"])


def _font():
    font = get_font(findfont(_PROP))
    font.set_size(_FONT_SCALE, 72)
    return font


def _glyph_id(glyph_repr: str) -> str:
    # DejaVu Sans glyphs (all but exotic characters) get short ids; a fallback font's glyphs are
    # told apart by a hash of its name
    font, _, index = glyph_repr.rpartition("-")
    return f"aag{index}" if font == "DejaVuSans" else f"aag{zlib.crc32(font.encode()):x}-{index}"


def _outline(verts: np.ndarray, codes: np.ndarray) -> str:
    """Path data of a glyph in units of 0.1 at the outline size (integers: compact, and exact to
    far below a pixel at the report's font sizes)."""
    v = np.rint(np.asarray(verts) * 10).astype(int)
    out, i = [], 0
    steps = {1: ("M", 1), 2: ("L", 1), 3: ("Q", 2), 4: ("C", 3)}
    while i < len(codes):
        code = int(codes[i])
        if code == 79:      # CLOSEPOLY
            out.append("Z")
            i += 1
            continue
        if code == 0:       # STOP
            break
        letter, n = steps[code]
        out.append(letter + " ".join(f"{x} {y}" for x, y in v[i:i + n]))
        i += n
    return "".join(out)


@lru_cache(maxsize=4096)
def _shaped(text: str) -> tuple[str, float, tuple[tuple[str, str], ...]]:
    """(the id of ``text``'s outline, its advance width at the outline size, the definitions it
    needs: its glyphs and itself). A string is one shared definition, a group of glyph uses, so a
    name that labels many plots is laid out once in a page."""
    font = _font()
    info, glyphs, _ = _TEXT_TO_PATH.get_glyphs_with_font(font, text)
    font.set_text(text, 0.0)
    width = font.get_width_height()[0] / 64.0
    sid = "aat" + hashlib.sha1(text.encode()).hexdigest()[:8]
    uses = "".join(f'<use href="#{_glyph_id(r)}" x="{round(x * 10)}"/>' for r, x, _, _ in info)
    defs = tuple((_glyph_id(r), f'<path id="{_glyph_id(r)}" d="{_outline(*glyphs[r])}"/>') for r in glyphs)
    return sid, width, defs + ((sid, f'<g id="{sid}">{uses}</g>'),)


def text_width(text: str, size: float) -> float:
    """Advance width of ``text`` at font ``size`` (pt)."""
    return _shaped(text)[1] * size / _FONT_SCALE


def shorten(text: object, limit: int = 48) -> str:
    """Whitespace collapsed, cut at ``limit`` characters with "…" (legend entries must fit)."""
    s = " ".join(str(text).split())
    return s if len(s) <= limit else s[: limit - 1] + "…"


class Canvas:
    """Collects the elements and shared definitions of one plot (coordinates in pt, y down)."""

    def __init__(self, width: float, height: float):
        self.width, self.height = width, height
        self.parts: list[str] = [f'<rect class="aa-bg" width="{num(width)}" height="{num(height)}"/>']
        self.defs: dict[str, str] = {}
        self.texts: dict[tuple[str, str], list[str]] = {}

    def path(self, d: str, cls: str) -> None:
        self.parts.append(f'<path class="{cls}" d="{d}"/>')

    def line(self, x0: float, y0: float, x1: float, y1: float, cls: str) -> None:
        self.path(f"M{num(x0)} {num(y0)}L{num(x1)} {num(y1)}", cls)

    def text(self, x: float, y: float, text: str, size: float, anchor: str = "start", rotate: bool = False,
             cls: str = "") -> None:
        """``text`` with its baseline at ``y`` (``anchor``: "start", "middle" or "end" at ``x``);
        ``rotate``: read bottom to top, the anchor then along the vertical."""
        if not text:
            return
        sid, width, defs = _shaped(text)
        self.defs.update(defs)
        k = size / _FONT_SCALE / 10          # glyph outlines are in units of 0.1 at the outline size
        shift = {"start": 0.0, "middle": -width / 2, "end": -width}[anchor] * 10
        # texts of one size and direction share a group scaled to glyph units, so each is a
        # <use> with integer x and y; rotate(-90) maps (u, v) scaled by (k, -k) to (-k v, -k u)
        u, v = (-y / k + shift, -x / k) if rotate else (x / k + shift, -y / k)
        self.texts.setdefault((f"{'rotate(-90)' if rotate else ''}scale({_short(k)} {_short(-k)})", cls), []).append(
            f'<use href="#{sid}" x="{round(u)}" y="{round(v)}"/>')

    def markers(self, kind: str, points: list[tuple[float, float]], radius: float, cls: str) -> None:
        # the definition has the radius in it, so a point is only its position
        mid = f"aam{MARKER_ORDER.index(kind)}r{num(radius * 10)}"
        self.defs[mid] = f'<path id="{mid}" transform="scale({_short(radius)})" d="{MARKERS[kind]}"/>'
        uses = "".join(f'<use href="#{mid}" x="{num(x)}" y="{num(y)}"/>' for x, y in points)
        self.parts.append(f'<g class="{cls}">{uses}</g>')

    def svg(self) -> Svg:
        # text last: above the lines (SVG fills black by default; other colours come by class)
        texts = "".join(f'<g{f" class={chr(34)}{cls}{chr(34)}" if cls else ""} transform="{at}">{"".join(uses)}</g>'
                        for (at, cls), uses in self.texts.items())
        return Svg(self.width, self.height, "".join(self.parts) + texts, dict(self.defs))


# ------------------------------------------------------------------------------------ axes
def ticks(lo: float, hi: float, nbins: int) -> tuple[list[float], list[str]]:
    """Tick positions inside [lo, hi] at a round step (matplotlib's ``MaxNLocator``) and their labels
    with as many decimals as the step needs."""
    from matplotlib.ticker import MaxNLocator

    values = MaxNLocator(nbins=nbins, steps=[1, 2, 2.5, 5, 10]).tick_values(lo, hi)
    span = hi - lo
    values = [float(v) for v in values if lo - 1e-9 * span <= v <= hi + 1e-9 * span]
    step = values[1] - values[0] if len(values) > 1 else 1.0
    dec = 0
    while dec < 10 and abs(step * 10 ** dec - round(step * 10 ** dec)) > 1e-6 * max(1.0, step * 10 ** dec):
        dec += 1
    labels = [f"{v:.{dec}f}" for v in values]
    return values, ["0" if set(t) <= set("-0.") else t for t in labels]


@dataclass
class Axes:
    """A data-to-pt mapping of a plot area; ``frame`` draws its left and bottom spines, ticks,
    tick labels, grid, axis labels and title (matplotlib's look: no top or right spine)."""

    canvas: Canvas
    left: float
    top: float
    width: float
    height: float
    xlim: tuple[float, float]
    ylim: tuple[float, float]

    def x(self, v: np.ndarray | float) -> np.ndarray | float:
        return self.left + (np.asarray(v, dtype=float) - self.xlim[0]) / (self.xlim[1] - self.xlim[0]) * self.width

    def y(self, v: np.ndarray | float) -> np.ndarray | float:
        bottom = self.top + self.height
        return bottom - (np.asarray(v, dtype=float) - self.ylim[0]) / (self.ylim[1] - self.ylim[0]) * self.height

    def frame(self, xlabel: str, ylabel: str, title: str, xbins: int, ybins: int) -> None:
        c, bottom, right = self.canvas, self.top + self.height, self.left + self.width
        grid, tick = [], []
        xs, xl = ticks(*self.xlim, xbins)
        for v, t in zip(xs, xl):
            px = float(self.x(v))
            grid.append(f"M{num(px)} {num(self.top)}V{num(bottom)}")
            tick.append(f"M{num(px)} {num(bottom)}v3.5")
            c.text(px, bottom + 12.3, t, 9, "middle")
        ys, yl = ticks(*self.ylim, ybins)
        for v, t in zip(ys, yl):
            py = float(self.y(v))
            grid.append(f"M{num(self.left)} {num(py)}H{num(right)}")
            tick.append(f"M{num(self.left)} {num(py)}h-3.5")
            c.text(self.left - 6, py + 3.3, t, 9, "end")
        c.path("".join(grid), "aa-grid")
        c.path("".join(tick) + f"M{num(self.left)} {num(self.top)}V{num(bottom)}H{num(right)}", "aa-ax")
        c.text(self.left + self.width / 2, bottom + 25.5, xlabel, 9, "middle")
        label_x = self.left - 8 - max((text_width(t, 9) for t in yl), default=0.0) - 4
        c.text(label_x, self.top + self.height / 2, ylabel, 9, "middle", rotate=True)
        c.text(self.left + self.width / 2, self.top - 6, title, 10, "middle")
