"""Plots as SVG text (matplotlib, no pyplot: a ``Figure`` drawn by the Agg-free SVG canvas, so the
host's backend is never touched).

Text is drawn as paths (``svg.fonttype = "path"``) and ``clean_svg`` strips comments (matplotlib
writes every label into one), metadata and the XML prolog, and prefixes every id, so that several
plots can be inlined into one HTML page without their ids colliding and no name that came from a
library ever appears as markup. Output is deterministic (fixed hash salt, no date).
"""
from __future__ import annotations

import io
import re

import matplotlib
import numpy as np
from matplotlib.figure import Figure

from .tables import Curve, Pair

_RC = {"svg.fonttype": "path", "svg.hashsalt": "attackaudit", "font.size": 9, "axes.titlesize": 10,
       "axes.spines.top": False, "axes.spines.right": False}
_STYLES = ["-", "--", "-.", ":"]


def label(text: object, limit: int = 48) -> str:
    """A string matplotlib draws literally: ``$`` would start mathtext, long names are cut."""
    s = " ".join(str(text).split())
    s = s if len(s) <= limit else s[: limit - 1] + "…"
    return s.replace("\\", "\\\\").replace("$", r"\$")


def clean_svg(svg: str, prefix: str) -> str:
    """The ``<svg>`` element of matplotlib's output, safe and unique for inlining into HTML."""
    svg = svg[svg.find("<svg"):]
    svg = re.sub(r"<!--.*?-->", "", svg, flags=re.S)
    svg = re.sub(r"<metadata>.*?</metadata>", "", svg, flags=re.S)
    ids = set(re.findall(r'\bid="([^"]+)"', svg))
    prefix = re.sub(r"[^A-Za-z0-9_-]", "-", prefix)

    def rename(m: re.Match) -> str:
        return m.group(1) + prefix + "-" + m.group(2) if m.group(2) in ids else m.group(0)

    svg = re.sub(r'(\bid="|href="#|url\(#)([^")]+)', rename, svg)
    return re.sub(r"\n\s*", "\n", svg).strip()


def _svg(fig: Figure, prefix: str) -> str:
    buf = io.StringIO()
    with matplotlib.rc_context(_RC):
        fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None})
    return clean_svg(buf.getvalue(), prefix)


def _steps(d: np.ndarray, x_max: float) -> tuple[np.ndarray, np.ndarray]:
    """Robust-accuracy step function of ``d`` on [0, x_max] (fidelity.robustness_curve)."""
    from ..fidelity import robustness_curve

    eps, acc = robustness_curve(d)
    keep = eps <= x_max
    eps, acc = eps[keep], acc[keep]
    return np.append(eps, x_max), np.append(acc, acc[-1])


def robustness_svg(curve: Curve, prefix: str, colors: dict | None = None, max_lines: int = 24) -> str:
    """Robust accuracy against ε for one model and norm: the envelope thick and black, every
    implementation its own line labelled with its local optimality ξ (best first), the exact
    curve dashed red when exact distances exist."""
    with matplotlib.rc_context(_RC):
        fig = Figure(figsize=(9.6, 4.4))
        ax = fig.subplots()
        fig.subplots_adjust(left=0.07, right=0.63, top=0.92, bottom=0.12)
        finite = curve.d_star[np.isfinite(curve.d_star)]
        extra = [] if curve.exact is None else list(curve.exact[np.isfinite(curve.exact)])
        top = max([*finite, *extra, 0.0])
        x_max = top * 1.08 if top > 0 else 1.0
        order = sorted(curve.by_impl, key=lambda k: (-np.nan_to_num(curve.optimality.get(k, 0.0)), k))
        cmap = matplotlib.colormaps["tab10"]
        colors = colors or {k: i for i, k in enumerate(order)}
        for key in order[:max_lines]:
            i = colors.get(key, 0)
            x, y = _steps(curve.by_impl[key], x_max)
            xi = curve.optimality.get(key, float("nan"))
            name = key[0] + (f" {key[1]}" if key[1] else "")
            ax.step(x, y, where="post", lw=1.4, color=cmap(i % 10), ls=_STYLES[(i // 10) % 4], alpha=0.9,
                    label=label(f"{name}  ξ={xi:.3f}"))
        x, y = _steps(curve.d_star, x_max)
        ax.step(x, y, where="post", lw=3.6, color="black", label="envelope (best per sample)", zorder=5)
        if curve.exact is not None and len(curve.exact):
            x, y = _steps(curve.exact, x_max)
            note = f", {curve.exact_unsolved} lower bounds" if curve.exact_unsolved else ""
            ax.step(x, y, where="post", lw=2.2, color="#d62728", ls="--", zorder=6,
                    label=label(f"exact (MILP, {len(curve.exact)} samples{note})", 60))
        if len(order) > max_lines:
            ax.plot([], [], " ", label=f"… {len(order) - max_lines} more in the tables")
        ax.set_xlim(0, x_max)
        ax.set_ylim(-0.02, 1.02)
        ax.set_xlabel(label(f"ε ({curve.norm} distance)"))
        ax.set_ylabel("robust accuracy")
        ax.set_title(label(f"{curve.model} · {curve.norm} · {len(curve.samples)} samples", 90))
        ax.grid(alpha=0.3)
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7.5, frameon=False)
        return _svg(fig, prefix)


def scatter_svg(pair: Pair, prefix: str) -> str:
    """Per-sample distances of two implementations against each other (one point per sample that
    needed an attack, coloured by model); failures sit on the "failed" line beyond the largest
    distance; points below the diagonal are samples where ``b`` found the smaller perturbation."""
    with matplotlib.rc_context(_RC):
        fig = Figure(figsize=(5.6, 5.0))
        ax = fig.subplots()
        fig.subplots_adjust(left=0.16, right=0.96, top=0.92, bottom=0.12)
        a, b = pair.dist_a, pair.dist_b
        finite = np.concatenate([a[np.isfinite(a)], b[np.isfinite(b)]])
        top = float(finite.max()) if finite.size else 1.0
        fail = top * 1.15 if top > 0 else 1.0
        pa, pb = np.where(np.isfinite(a), a, fail), np.where(np.isfinite(b), b, fail)
        models = list(dict.fromkeys(pair.models.tolist()))
        cmap = matplotlib.colormaps["tab10"]
        for i, m in enumerate(models):
            sel = pair.models == m
            ax.scatter(pa[sel], pb[sel], s=22, alpha=0.75, color=cmap(i % 10), edgecolor="none",
                       label=label(m, 30), marker="os^Dv<>"[i % 7])
        lim = fail * 1.05
        ax.plot([0, lim], [0, lim], color="grey", lw=1, ls="--", zorder=0)
        if (~np.isfinite(a)).any() or (~np.isfinite(b)).any():
            ax.axvline(fail, color="#d62728", lw=0.8, ls=":")
            ax.axhline(fail, color="#d62728", lw=0.8, ls=":")
            ax.text(fail, 0, " failed", color="#d62728", fontsize=7, rotation=90, va="bottom", ha="left")
        ax.set_xlim(0, lim)
        ax.set_ylim(0, lim)
        ax.set_aspect("equal", adjustable="box")
        ax.set_xlabel(label(f"{pair.a[0]} {pair.a[1]}  ({pair.norm})", 60))
        ax.set_ylabel(label(f"{pair.b[0]} {pair.b[1]}  ({pair.norm})", 60))
        ax.set_title(label(f"{pair.family} · {pair.norm}: ξ {pair.optimality_a:.3f} vs {pair.optimality_b:.3f}", 80))
        ax.grid(alpha=0.3)
        if models:
            ax.legend(fontsize=7, frameon=False, loc="upper left")
        return _svg(fig, prefix)


def curve_svg(data, i: int) -> str:
    """The robustness plot of ``data.curves[i]`` (drawn once per report)."""
    return data.svg(f"curve{i}", lambda: robustness_svg(data.curves[i], f"c{i}", data.colors))


def family_svg(data, j: int) -> str:
    """The scatter plot of the two implementations of ``data.families[j]`` that differ most."""
    return data.svg(f"pair{j}", lambda: scatter_svg(data.families[j]["widest"], f"p{j}"))
