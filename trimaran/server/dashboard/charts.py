"""Charts as inline SVG, drawn on the server: no script and nothing fetched from elsewhere.

Each series is a ``<g class="series STYLE" data-series="NAME">`` with a ``<title>`` (the browser's
tooltip), so a page's reader, and a test, can tell which line is which trial.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from trimaran.server.dashboard.html import esc

Style = Literal["best", "stopped", "failed", "other", "front", "point"]
Mode = Literal["line", "step", "points"]

_WIDTH, _HEIGHT = 760, 300
_LEFT, _RIGHT, _TOP, _BOTTOM = 64, 16, 12, 40
# Colours cycle for ordinary trials; best, stopped and failed trials have fixed looks (see STYLE).
_PALETTE = ("#2563eb", "#059669", "#7c3aed", "#0891b2", "#db2777", "#65a30d", "#4f46e5", "#0d9488")
_STYLE = {
    "best": 'stroke="#d97706" stroke-width="3.5"',
    "stopped": 'stroke="#9ca3af" stroke-width="1.5" stroke-dasharray="5 4"',
    "failed": 'stroke="#dc2626" stroke-width="1.5" stroke-dasharray="2 3"',
    "front": 'stroke="#d97706" stroke-width="2"',
}


@dataclass(frozen=True)
class Series:
    """One named line or set of points.

    Attributes:
        name: Shown as the tooltip and in ``data-series``.
        points: (x, y) pairs; non-finite ones are left out.
        style: How it looks: ``best`` (thick, amber), ``stopped`` (grey, dashed), ``failed`` (red,
            dotted), ``other`` (a palette colour), ``front`` (a Pareto front), ``point`` (dots only).
        mode: ``line`` joins the points, ``step`` holds each value until the next x, ``points``
            draws dots.
        end_marker: Mark the last point (where an early-stopped trial was stopped).
    """

    name: str
    points: list[tuple[float, float]]
    style: Style = "other"
    mode: Mode = "line"
    end_marker: bool = False


def chart(series: list[Series], x_label: str, y_label: str, integer_x: bool = False) -> str:
    """An SVG chart of ``series`` on shared axes; an empty chart says so."""
    finite = [[(x, y) for x, y in s.points if math.isfinite(x) and math.isfinite(y)] for s in series]
    xs = [x for pts in finite for x, _ in pts]
    ys = [y for pts in finite for _, y in pts]
    if not xs:
        return '<p class="muted">no observations yet</p>'
    x_ticks, y_ticks = _ticks(min(xs), max(xs), integer_x), _ticks(min(ys), max(ys))
    x0, x1, y0, y1 = x_ticks[0], x_ticks[-1], y_ticks[0], y_ticks[-1]
    plot_w, plot_h = _WIDTH - _LEFT - _RIGHT, _HEIGHT - _TOP - _BOTTOM

    def px(x: float) -> float:
        return _LEFT + (x - x0) / (x1 - x0) * plot_w

    def py(y: float) -> float:
        return _TOP + (1 - (y - y0) / (y1 - y0)) * plot_h

    parts = [f'<svg class="chart" xmlns="http://www.w3.org/2000/svg" width="{_WIDTH}" height="{_HEIGHT}" '
             f'viewBox="0 0 {_WIDTH} {_HEIGHT}" role="img" aria-label="{esc(y_label)} by {esc(x_label)}">']
    for t in x_ticks:
        parts.append(f'<line x1="{px(t):.1f}" y1="{_TOP}" x2="{px(t):.1f}" y2="{_TOP + plot_h}" stroke="#f3f4f6"/>'
                     f'<text x="{px(t):.1f}" y="{_TOP + plot_h + 14}" font-size="11" text-anchor="middle">'
                     f"{_label(t)}</text>")
    for t in y_ticks:
        parts.append(f'<line x1="{_LEFT}" y1="{py(t):.1f}" x2="{_LEFT + plot_w}" y2="{py(t):.1f}" stroke="#f3f4f6"/>'
                     f'<text x="{_LEFT - 6}" y="{py(t) + 4:.1f}" font-size="11" text-anchor="end">{_label(t)}</text>')
    parts.append(f'<rect x="{_LEFT}" y="{_TOP}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#9ca3af"/>'
                 f'<text x="{_LEFT + plot_w / 2:.1f}" y="{_HEIGHT - 6}" font-size="12" text-anchor="middle">'
                 f"{esc(x_label)}</text>"
                 f'<text transform="translate(14 {_TOP + plot_h / 2:.1f}) rotate(-90)" font-size="12" '
                 f'text-anchor="middle">{esc(y_label)}</text>')
    # Best last, so it is drawn over the others.
    order = sorted(range(len(series)), key=lambda i: series[i].style == "best")
    for i in order:
        s, pts = series[i], finite[i]
        if pts:
            parts.append(_series(s, [(px(x), py(y)) for x, y in pts], _PALETTE[i % len(_PALETTE)]))
    parts.append("</svg>")
    return "".join(parts)


def _series(s: Series, pts: list[tuple[float, float]], colour: str) -> str:
    stroke = _STYLE.get(s.style, f'stroke="{colour}" stroke-width="1.5"')
    fill = "#d97706" if s.style in ("best", "front") else "#9ca3af" if s.style == "stopped" else colour
    out = [f'<g class="series {s.style}" data-series="{esc(s.name)}"><title>{esc(s.name)}</title>']
    line = pts
    if s.mode == "step":
        line = [p for a, b in zip(pts, pts[1:] + pts[-1:], strict=True) for p in (a, (b[0], a[1]))][:-1]
    if s.mode != "points" and len(line) > 1:
        coords = " ".join(f"{x:.1f},{y:.1f}" for x, y in line)
        out.append(f'<polyline fill="none" {stroke} points="{coords}"/>')
    # Dots where each value is: for scatters, a lone point, and the members of a Pareto front.
    if s.mode == "points" or len(pts) == 1 or s.style == "front":
        out += [f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3.5" fill="{fill}"/>' for x, y in pts]
    if s.end_marker:
        x, y = pts[-1]
        out.append(f'<path class="stop-marker" d="M{x - 4:.1f},{y - 4:.1f}L{x + 4:.1f},{y + 4:.1f}'
                   f'M{x - 4:.1f},{y + 4:.1f}L{x + 4:.1f},{y - 4:.1f}" stroke="#6b7280" stroke-width="2"/>')
    out.append("</g>")
    return "".join(out)


def _ticks(lo: float, hi: float, integer: bool = False, count: int = 5) -> list[float]:
    """Round tick values that cover [lo, hi], first and last on or beyond the data."""
    if hi == lo:
        pad = abs(lo) * 0.1 or 1.0
        lo, hi = lo - pad, hi + pad
    raw = (hi - lo) / count
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    if integer:
        step = max(1.0, math.ceil(step))
    start = math.floor(lo / step) * step
    ticks = [start + i * step for i in range(math.ceil((hi - start) / step - 1e-9) + 1)]
    # Values so large that the step is below their float resolution: the two ends will do.
    return ticks if ticks[-1] > ticks[0] else [lo, hi]


def _label(value: float) -> str:
    return f"{value:.4g}"
