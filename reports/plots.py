"""The report's plots as SVG (``reports/svg.py`` draws them; matplotlib only lays out the text).

A plot is an ``svg.Svg``: its elements styled by shared CSS classes and the shared definitions
(glyph outlines, markers) they use. Markdown writes each as a self-contained file; the HTML page
inlines them all and carries the shared definitions once. Text is drawn as outlines, so no name
that came from a library ever appears as markup. Output is deterministic.
"""
from __future__ import annotations

import numpy as np

from .svg import MARKER_ORDER, Axes, Canvas, Svg, num, shorten, text_width
from .tables import Curve, Pair

#: the line styles of implementations 0-9, 10-19, ... (colour repeats every 10)
_STYLES = 4


def _steps(d: np.ndarray, x_max: float) -> tuple[np.ndarray, np.ndarray]:
    """Robust-accuracy step function of ``d`` on [0, x_max] (fidelity.robustness_curve)."""
    from attackaudit.fidelity import robustness_curve

    eps, acc = robustness_curve(d)
    keep = eps <= x_max
    eps, acc = eps[keep], acc[keep]
    return np.append(eps, x_max), np.append(acc, acc[-1])


def impl_label(key: tuple[str, str]) -> str:
    """How every plot names an implementation (the same string everywhere, so its outline is
    drawn once per page): "name version", cut to fit a legend."""
    return shorten(f"{key[0]} {key[1]}".strip(), 46)


def _step_path(ax: Axes, x: np.ndarray, y: np.ndarray) -> str:
    """A post-step curve through (x, y) as path data: only its change points, as H and V moves."""
    px, py = ax.x(x), ax.y(y)
    out = [f"M{num(px[0])} {num(py[0])}"]
    last_y = num(py[0])
    last_x = num(px[0])
    for i in range(1, len(px)):
        xi = num(px[i])
        if xi != last_x:
            out.append(f"H{xi}")
            last_x = xi
        yi = num(py[i])
        if yi != last_y:
            out.append(f"V{yi}")
            last_y = yi
    return "".join(out)


def _legend(canvas: Canvas, x: float, y: float, entries: list[tuple[str, str]], size: float, row: float) -> None:
    """Entries (CSS class of the sample line, or "" for none; text) top-down from (x, y). An
    implementation's name and its " ξ=…" are drawn apart: the name is then one shared outline for
    all the plots it labels."""
    for cls, text in entries:
        if cls:
            canvas.line(x, y - size * 0.35, x + 2 * size, y - size * 0.35, cls)
        name, sep, value = text.rpartition(" ξ=")
        if sep:
            canvas.text(x + 2.8 * size, y, name, size)
            canvas.text(x + 2.8 * size + text_width(name + " ", size), y, sep.strip() + value, size)
        else:
            canvas.text(x + 2.8 * size, y, text, size)
        y += row


def robustness_svg(curve: Curve, prefix: str = "", colors: dict | None = None, max_lines: int = 24) -> Svg:
    """Robust accuracy against ε for one model and norm: the envelope thick and black, every
    implementation its own line labelled with its local optimality ξ (best first), the exact
    curve dashed red when exact distances exist. (``prefix`` is unused: ids are shared by design.)"""
    canvas = Canvas(691.2, 316.8)
    finite = curve.d_star[np.isfinite(curve.d_star)]
    extra = [] if curve.exact is None else list(curve.exact[np.isfinite(curve.exact)])
    top = max([*finite, *extra, 0.0])
    x_max = top * 1.08 if top > 0 else 1.0
    ax = Axes(canvas, 48.4, 25.3, 387.1, 253.4, (0.0, x_max), (-0.02, 1.02))
    ax.frame(shorten(f"ε ({curve.norm} distance)"), "robust accuracy",
             shorten(f"{curve.model} · {curve.norm} · {len(curve.samples)} samples", 90), 9, 6)
    order = sorted(curve.by_impl, key=lambda k: (-np.nan_to_num(curve.optimality.get(k, 0.0)), k))
    colors = colors or {k: i for i, k in enumerate(order)}
    legend = []
    for key in order[:max_lines]:
        i = colors.get(key, 0)
        cls = _impl_class(i)
        x, y = _steps(curve.by_impl[key], x_max)
        canvas.path(_step_path(ax, x, y), cls)
        xi = curve.optimality.get(key, float("nan"))
        # two decimals: at most 101 distinct labels, each one shared outline per page (the tables have three)
        legend.append((cls, f"{impl_label(key)} ξ={xi:.2f}"))
    x, y = _steps(curve.d_star, x_max)
    canvas.path(_step_path(ax, x, y), "aa-ln aa-env")
    legend.append(("aa-ln aa-env", "envelope (best per sample)"))
    if curve.exact is not None and len(curve.exact):
        x, y = _steps(curve.exact, x_max)
        canvas.path(_step_path(ax, x, y), "aa-ln aa-exact")
        note = f", {curve.exact_unsolved} lower bounds" if curve.exact_unsolved else ""
        legend.append(("aa-ln aa-exact", shorten(f"exact (MILP, {len(curve.exact)} samples{note})", 60)))
    if len(order) > max_lines:
        legend.append(("", f"… {len(order) - max_lines} more in the tables"))
    _legend(canvas, ax.left + ax.width + 10.0, ax.top + 6.0, legend, 7.5, min(10.5, 290.0 / max(len(legend), 1)))
    return canvas.svg()


def scatter_svg(pair: Pair, prefix: str = "") -> Svg:
    """Per-sample distances of two implementations against each other (one point per sample that
    needed an attack, coloured by model); failures sit on the "failed" line beyond the largest
    distance; points below the diagonal are samples where ``b`` found the smaller perturbation.
    (``prefix`` is unused: ids are shared by design.)"""
    canvas = Canvas(403.2, 360.0)
    a, b = pair.dist_a, pair.dist_b
    finite = np.concatenate([a[np.isfinite(a)], b[np.isfinite(b)]])
    top = float(finite.max()) if finite.size else 1.0
    fail = top * 1.15 if top > 0 else 1.0
    pa, pb = np.where(np.isfinite(a), a, fail), np.where(np.isfinite(b), b, fail)
    lim = fail * 1.05
    side = 288.0                                    # square plot area (equal aspect)
    ax = Axes(canvas, 64.5 + (322.6 - side) / 2, 28.8, side, side, (0.0, lim), (0.0, lim))
    # the axes are named exactly as the legends name an implementation: one shared outline each
    ax.frame(impl_label(pair.a), impl_label(pair.b),
             shorten(f"{pair.family} · {pair.norm}", 80), 6, 6)
    canvas.line(float(ax.x(0)), float(ax.y(0)), float(ax.x(lim)), float(ax.y(lim)), "aa-ln aa-diag")
    if (~np.isfinite(a)).any() or (~np.isfinite(b)).any():
        fx, fy = float(ax.x(fail)), float(ax.y(fail))
        canvas.path(f"M{num(fx)} {num(ax.top)}V{num(ax.top + side)}M{num(ax.left)} {num(fy)}H{num(ax.left + side)}",
                    "aa-ln aa-fail")
        canvas.text(fx + 3.5, ax.top + side - 2, "failed", 7, "start", rotate=True, cls="aa-red")
    models = list(dict.fromkeys(pair.models.tolist()))
    radius = float(np.sqrt(22.0)) / 2                # matplotlib's s=22: marker area in pt²
    legend = []
    for i, m in enumerate(models):
        sel = pair.models == m
        cls = f"aa-pt aa-f{i % 10}"
        kind = MARKER_ORDER[i % len(MARKER_ORDER)]
        canvas.markers(kind, list(zip(ax.x(pa[sel]).tolist(), ax.y(pb[sel]).tolist())), radius, cls)
        legend.append((kind, cls, shorten(m, 30)))
    y = ax.top + 10.0
    for kind, cls, text in legend:
        canvas.markers(kind, [(ax.left + 12.0, y - 2.5)], radius, cls)
        canvas.text(ax.left + 20.0, y, text, 7)
        y += 9.5
    return canvas.svg()


def curve_svg(data, i: int) -> Svg:
    """The robustness plot of ``data.curves[i]`` (drawn once per report)."""
    return data.svg(f"curve{i}", lambda: robustness_svg(data.curves[i], f"c{i}", data.colors))


def family_svg(data, j: int) -> Svg:
    """The scatter plot of the two implementations of ``data.families[j]`` that differ most."""
    return data.svg(f"pair{j}", lambda: scatter_svg(data.families[j]["widest"], f"p{j}"))


def members_svg(curves: list[Curve], keys: list[tuple[str, str]], colors: dict | None = None) -> Svg:
    """The robustness curves of ``keys`` (a trust set, or the implementations a verdict is about)
    against the envelope, over the images of every model in ``curves`` (one norm) pooled: one
    small plot, legend below (the per-model curves are the report's robustness plots)."""
    colors = colors or {k: i for i, k in enumerate(keys)}
    legend = [(_impl_class(colors.get(k, i)), impl_label(k))
              for i, k in enumerate(keys)] + [("aa-ln aa-env", "envelope (best per image)")]
    canvas = Canvas(300.0, 176.0 + len(legend) * 10.0)
    d_star = np.concatenate([c.d_star for c in curves]) if curves else np.zeros(0)
    finite = d_star[np.isfinite(d_star)]
    x_max = float(finite.max()) * 1.08 if finite.size and finite.max() > 0 else 1.0
    ax = Axes(canvas, 44.0, 20.0, 246.0, 120.0, (0.0, x_max), (-0.02, 1.02))
    ax.frame(f"ε ({curves[0].norm})" if curves else "ε", "robust accuracy",
             shorten(f"{len(d_star)} images of {len(curves)} model{'s' if len(curves) != 1 else ''}", 60), 5, 4)
    for i, key in enumerate(keys):
        parts = [c.by_impl.get(key) for c in curves]
        if any(p is None for p in parts) or not parts:
            continue    # an implementation that did not run on every model has no pooled curve
        x, y = _steps(np.concatenate(parts), x_max)
        canvas.path(_step_path(ax, x, y), _impl_class(colors.get(key, i)))
    x, y = _steps(d_star, x_max)
    canvas.path(_step_path(ax, x, y), "aa-ln aa-env")
    _legend(canvas, 10.0, 172.0, legend, 7.5, 10.0)
    return canvas.svg()


def _impl_class(i: int) -> str:
    """The CSS classes of implementation ``i``'s line: colour ``i mod 10``, dash ``i // 10``."""
    return f"aa-ln aa-impl aa-c{i % 10}" + (f" aa-d{(i // 10) % _STYLES}" if (i // 10) % _STYLES else "")
