"""Inline SVG plots for the HTML report: heatmaps, grouped bars, scatter plots.

Plain string building, no plotting library: the report must be one file that
opens anywhere without a network, so every plot is an ``<svg>`` element
written here. Every piece of text passes through :func:`esc` (task and policy
names are user data). Tooltips are SVG ``<title>`` children, which browsers
show on hover without any script.

Sizes are in CSS pixels; text widths are estimated (there is no font metric
in Python), generously enough that labels do not collide in common fonts.
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

__all__ = [
    "esc", "colour", "text_colour", "POLICY_COLOURS", "policy_colour", "HeatCell", "heatmap",
    "Bar", "BarGroup", "bar_groups", "Part", "PartsRow", "signed_parts", "Point", "scatter",
    "nice_ticks", "pct", "pp",
]

FONT = 12  # base font size in px
CHAR_W = 0.6  # estimated glyph width / font size for the sans-serif stack

# Viridis (matplotlib's perceptually uniform, colour-blind-safe scale), 11 stops.
_VIRIDIS = [
    (0x44, 0x01, 0x54), (0x48, 0x24, 0x75), (0x41, 0x44, 0x87), (0x35, 0x5f, 0x8d),
    (0x2a, 0x78, 0x8e), (0x21, 0x91, 0x8c), (0x22, 0xa8, 0x84), (0x44, 0xbf, 0x70),
    (0x7a, 0xd1, 0x51), (0xbc, 0xdf, 0x27), (0xfd, 0xe7, 0x25),
]

#: Okabe–Ito palette (colour-blind safe), for policies.
POLICY_COLOURS = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00",
                  "#7f7f7f", "#332288", "#882255", "#44AA99"]
CEILING_COLOUR = "#4b5563"
MISSING_FILL = "#f1f2f4"
GRID = "#e5e7eb"
AXIS = "#6b7280"
INK = "#1f2937"


def esc(value: object) -> str:
    """Text safe inside SVG/HTML text and double- or single-quoted attributes."""
    return html.escape(str(value), quote=True)


def pct(x: float | None, digits: int = 0) -> str:
    """``0.8123 → '81%'``; ``None → '–'``."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    return f"{100 * x:.{digits}f}%"


def pp(x: float | None, signed: bool = True, unit: bool = True) -> str:
    """A difference of rates in percentage points: ``0.25 → '+25 pp'``, never ``-0``."""
    if x is None:
        return "–"
    v = round(100 * x)
    text = "0" if v == 0 else f"{v:+d}" if signed else f"{v:d}"
    return text + " pp" if unit else text


def colour(value: float) -> str:
    """Viridis colour of a value in [0, 1] (clamped), as ``#rrggbb``."""
    v = 0.0 if value is None or math.isnan(value) else min(1.0, max(0.0, value))
    pos = v * (len(_VIRIDIS) - 1)
    i = min(int(pos), len(_VIRIDIS) - 2)
    f = pos - i
    a, b = _VIRIDIS[i], _VIRIDIS[i + 1]
    r, g, bl = (round(a[k] + (b[k] - a[k]) * f) for k in range(3))
    return f"#{r:02x}{g:02x}{bl:02x}"


def text_colour(fill: str) -> str:
    """Dark or white text, whichever reads better on ``fill`` (relative luminance)."""
    r, g, b = (int(fill[i:i + 2], 16) / 255 for i in (1, 3, 5))

    def lin(c: float) -> float:
        return c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4

    lum = 0.2126 * lin(r) + 0.7152 * lin(g) + 0.0722 * lin(b)
    return INK if lum > 0.28 else "#ffffff"


def policy_colour(index: int) -> str:
    return POLICY_COLOURS[index % len(POLICY_COLOURS)]


def _tw(text: str, size: float = FONT) -> float:
    """Estimated rendered width of ``text`` in px."""
    return len(text) * size * CHAR_W


def _attrs(attrs: Mapping[str, str]) -> str:
    return "".join(f' {esc(k)}="{esc(v)}"' for k, v in attrs.items())


def _svg_open(width: float, height: float, label: str, cls: str) -> str:
    return (f'<svg xmlns="http://www.w3.org/2000/svg" class="plot {esc(cls)}" '
            f'width="{width:.0f}" height="{height:.0f}" viewBox="0 0 {width:.0f} {height:.0f}" '
            f'role="img" aria-label="{esc(label)}" font-size="{FONT}">')


def _text(x: float, y: float, text: str, *, anchor: str = "start", size: float = FONT,
          fill: str = INK, weight: str = "normal", extra: str = "") -> str:
    w = f' font-weight="{weight}"' if weight != "normal" else ""
    s = f' font-size="{size:g}"' if size != FONT else ""
    return (f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}" fill="{fill}"{s}{w}{extra}>'
            f'{esc(text)}</text>')


def _clip(text: str, max_chars: int) -> str:
    return text if len(text) <= max_chars else text[: max(1, max_chars - 1)] + "…"


# ---------------------------------------------------------------------------
# Heatmap
# ---------------------------------------------------------------------------

@dataclass
class HeatCell:
    """One heatmap cell: colour from ``value`` (None = no data, grey)."""

    value: float | None
    label: str
    sub: str = ""
    tooltip: str = ""
    attrs: dict[str, str] = field(default_factory=dict)


def _legend_bar(x: float, y: float, height: float, label: str) -> str:
    """A vertical 0–100% colour bar of ten steps, with ticks."""
    steps = 10
    h = height / steps
    out = ['<g class="legend">', _text(x, y - 8, label, size=11, fill=AXIS)]
    for i in range(steps):
        v = 1 - (i + 0.5) / steps
        out.append(f'<rect x="{x:.1f}" y="{y + i * h:.1f}" width="14" height="{h + 0.5:.1f}" '
                   f'fill="{colour(v)}"/>')
    for v in (0, 0.5, 1):
        ty = y + (1 - v) * height
        out.append(f'<line x1="{x + 14:.1f}" x2="{x + 18:.1f}" y1="{ty:.1f}" y2="{ty:.1f}" '
                   f'stroke="{AXIS}"/>')
        out.append(_text(x + 21, ty + 4, pct(v), size=11, fill=AXIS))
    out.append("</g>")
    return "".join(out)


def heatmap(rows: Sequence[str], cols: Sequence[str],
            cells: Mapping[tuple[str, str], HeatCell], *, title: str = "",
            x_label: str = "", y_label: str = "", legend_label: str = "success",
            row_names: Mapping[str, str] | None = None,
            col_names: Mapping[str, str] | None = None,
            cell_w: float = 78, cell_h: float = 38, fit_labels: bool = True,
            cls: str = "heatmap") -> str:
    """Rows × columns of coloured cells with their value written in.

    ``row_names`` / ``col_names`` map keys to display labels. Missing cells
    are drawn light grey with a dot. With ``fit_labels`` the cells widen to
    fit their column labels (up to 150 px); otherwise long labels are rotated.
    Cells lower than 30 px show their ``label`` only (``sub`` goes to the
    tooltip).
    """
    rname = {r: (row_names or {}).get(r, r) for r in rows}
    cname = {c: (col_names or {}).get(c, c) for c in cols}
    rlabels = {r: _clip(rname[r], 40) for r in rows}
    clabels = {c: _clip(cname[c], 28) for c in cols}
    longest_col = max((_tw(v) for v in clabels.values()), default=0)
    # Widen the cells to fit their column labels when that stays reasonable;
    # rotate the labels otherwise.
    if fit_labels and longest_col + 12 <= 150:
        cell_w = max(cell_w, longest_col + 12)
    rotate = longest_col > cell_w - 6
    col_head = (longest_col * 0.72 + 14) if rotate else 20
    left = max((_tw(v) for v in rlabels.values()), default=0) + 16 + (18 if y_label else 0)
    top = (26 if title else 4) + (18 if x_label else 0) + col_head
    grid_w = cell_w * len(cols)
    grid_h = cell_h * len(rows)
    legend_w = 70
    width = left + grid_w + 24 + legend_w
    height = top + grid_h + 12
    height = max(height, top + 130)
    out = [_svg_open(width, height, title or "heatmap", cls)]
    if title:
        out.append(_text(0, 16, title, weight="600", size=13))
    if x_label:
        out.append(_text(left + grid_w / 2, (26 if title else 4) + 12, x_label, anchor="middle",
                         fill=AXIS, size=11))
    if y_label:
        cy = top + grid_h / 2
        out.append(_text(0, 0, y_label, anchor="middle", fill=AXIS, size=11,
                         extra=f' transform="translate(12 {cy:.1f}) rotate(-90)"'))
    for j, c in enumerate(cols):
        cx = left + (j + 0.5) * cell_w
        if rotate:
            out.append(f'<text x="0" y="0" fill="{INK}" text-anchor="start" '
                       f'transform="translate({cx - 2:.1f} {top - 6:.1f}) rotate(-35)">'
                       f'<title>{esc(cname[c])}</title>{esc(clabels[c])}</text>')
        else:
            out.append(_text(cx, top - 7, clabels[c], anchor="middle"))
    for i, r in enumerate(rows):
        cy = top + (i + 0.5) * cell_h
        out.append(f'<text x="{left - 8:.1f}" y="{cy + 4:.1f}" text-anchor="end" fill="{INK}">'
                   f'<title>{esc(rname[r])}</title>{esc(rlabels[r])}</text>')
        for j, c in enumerate(cols):
            x, y = left + j * cell_w, top + i * cell_h
            cell = cells.get((r, c))
            if cell is None:
                out.append(f'<rect class="cell missing" x="{x + 1:.1f}" y="{y + 1:.1f}" '
                           f'width="{cell_w - 2:.1f}" height="{cell_h - 2:.1f}" rx="3" '
                           f'fill="{MISSING_FILL}"><title>{esc(rname[r])} × {esc(cname[c])}: '
                           f'not run</title></rect>')
                out.append(_text(x + cell_w / 2, y + cell_h / 2 + 4, "·", anchor="middle",
                                 fill=AXIS))
                continue
            fill = MISSING_FILL if cell.value is None else colour(cell.value)
            ink = AXIS if cell.value is None else text_colour(fill)
            klass = "cell" + (" link" if cell.attrs else "")
            out.append(f'<g class="{klass}"{_attrs(cell.attrs)}>')
            out.append(f'<rect x="{x + 1:.1f}" y="{y + 1:.1f}" width="{cell_w - 2:.1f}" '
                       f'height="{cell_h - 2:.1f}" rx="3" fill="{fill}"/>')
            if cell.sub and cell_h >= 30:
                out.append(_text(x + cell_w / 2, y + cell_h / 2 - 1, cell.label,
                                 anchor="middle", fill=ink, weight="600"))
                out.append(_text(x + cell_w / 2, y + cell_h / 2 + 12, cell.sub,
                                 anchor="middle", fill=ink, size=10))
            else:
                size = FONT if cell_h >= 30 else 11
                out.append(_text(x + cell_w / 2, y + cell_h / 2 + size / 3, cell.label,
                                 anchor="middle", fill=ink, weight="600", size=size))
            out.append(f"<title>{esc(cell.tooltip or cell.label)}</title></g>")
    out.append(_legend_bar(left + grid_w + 24, top + 14, min(110, max(60, grid_h - 14)),
                           legend_label))
    out.append("</svg>")
    return "".join(out)


# ---------------------------------------------------------------------------
# Grouped horizontal bars (ceiling vs achieved)
# ---------------------------------------------------------------------------

@dataclass
class Bar:
    """One horizontal bar in [0, 1]; ``lo``/``hi`` draw an interval whisker.

    ``kind="ceiling"`` bars are drawn as outlined grey bars; ``gap_to`` draws
    a hatched gap from ``value`` up to it (the mismatch ``C − J``).
    """

    label: str
    value: float
    colour: str = CEILING_COLOUR
    lo: float | None = None
    hi: float | None = None
    kind: str = "policy"
    tooltip: str = ""
    note: str = ""
    gap_to: float | None = None


@dataclass
class BarGroup:
    title: str
    bars: list[Bar]
    ref: float | None = None  # a vertical reference line (the best ceiling)
    ref_label: str = ""


def bar_groups(groups: Sequence[BarGroup], *, title: str = "", x_label: str = "",
               legend: Sequence[tuple[str, str, str]] = (), plot_w: float = 420,
               note_w: float = 190, cls: str = "bars") -> str:
    """Groups of horizontal bars on a shared 0–100% axis.

    ``legend`` entries are ``(label, colour, style)`` with style ``bar``,
    ``ceiling``, ``gap`` or ``line``.
    """
    bar_h, gap, group_gap, head = 16, 5, 16, 20
    labels = [b.label for g in groups for b in g.bars]
    left = min(220, max((_tw(s) for s in labels), default=40) + 14)
    width = left + plot_w + 12 + note_w
    # Legend entries flow left to right and wrap at the plot's width.
    legend_at: list[tuple[float, float]] = []
    ly: float
    lx, ly = 0.0, (26 if title else 6) + 10
    for label, _, _ in legend:
        w = 32 + _tw(label, 11)
        if lx + w > width and lx > 0:
            lx, ly = 0.0, ly + 18
        legend_at.append((lx, ly))
        lx += w
    top = (legend_at[-1][1] + 12) if legend else (26 if title else 6)
    y = top + 18  # room for the axis ticks
    layout: list[tuple[BarGroup, float, float]] = []
    for g in groups:
        h = head + len(g.bars) * (bar_h + gap)
        layout.append((g, y, h))
        y += h + group_gap
    bottom = y + (28 if x_label else 10)

    def X(v: float) -> float:
        return left + plot_w * min(1.0, max(0.0, v))

    out = [_svg_open(width, bottom, title or "bars", cls)]
    if title:
        out.append(_text(0, 16, title, weight="600", size=13))
    for (label, col, style), (lx, ly) in zip(legend, legend_at, strict=True):
        out.append(_legend_mark(lx, ly, col, style))
        out.append(_text(lx + 20, ly + 4, label, size=11))
    # Grid and ticks.
    for t in (0, 0.25, 0.5, 0.75, 1.0):
        out.append(f'<line x1="{X(t):.1f}" x2="{X(t):.1f}" y1="{top + 12:.1f}" '
                   f'y2="{y - group_gap + 4:.1f}" stroke="{GRID}"/>')
        out.append(_text(X(t), top + 8, pct(t), anchor="middle", size=10, fill=AXIS))
    if x_label:
        out.append(_text(left + plot_w / 2, bottom - 8, x_label, anchor="middle", size=11,
                         fill=AXIS))
    for g, gy, gh in layout:
        out.append(_text(0, gy + 13, _clip(g.title, 60), weight="600"))
        by = gy + head
        for b in g.bars:
            out.append(_bar(b, by, bar_h, X, left))
            if b.note:
                out.append(_text(left + plot_w + 12, by + bar_h - 4, b.note, size=11,
                                 fill=INK if b.kind != "ceiling" else AXIS))
            by += bar_h + gap
        if g.ref is not None:
            rx = X(g.ref)
            out.append(f'<line class="ref" x1="{rx:.1f}" x2="{rx:.1f}" y1="{gy + head - 3:.1f}" '
                       f'y2="{gy + gh - gap + 3:.1f}" stroke="#b91c1c" stroke-width="1.5" '
                       f'stroke-dasharray="4 3"><title>{esc(g.ref_label)}</title></line>')
    out.append("</svg>")
    return "".join(out)


def _legend_mark(x: float, y: float, col: str, style: str) -> str:
    if style == "line":
        return (f'<line x1="{x:.1f}" x2="{x + 14:.1f}" y1="{y:.1f}" y2="{y:.1f}" '
                f'stroke="{col}" stroke-width="1.5" stroke-dasharray="4 3"/>')
    if style == "ceiling":
        return (f'<rect x="{x:.1f}" y="{y - 5:.1f}" width="14" height="10" fill="{col}" '
                f'fill-opacity="0.18" stroke="{col}"/>')
    if style == "gap":
        return (f'<rect x="{x:.1f}" y="{y - 5:.1f}" width="14" height="10" fill="#fca5a5" '
                f'fill-opacity="0.55" stroke="#dc2626" stroke-dasharray="2 2"/>')
    return f'<rect x="{x:.1f}" y="{y - 5:.1f}" width="14" height="10" rx="2" fill="{col}"/>'


def _bar(b: Bar, y: float, h: float, X, left: float) -> str:
    out = [f'<g class="bar {esc(b.kind)}">']
    out.append(f'<text x="{left - 8:.1f}" y="{y + h - 4:.1f}" text-anchor="end" '
               f'fill="{AXIS if b.kind == "ceiling" else INK}">{esc(_clip(b.label, 34))}</text>')
    w = max(0.0, X(b.value) - X(0))
    if b.kind == "ceiling":
        out.append(f'<rect x="{X(0):.1f}" y="{y:.1f}" width="{w:.1f}" height="{h:.1f}" '
                   f'fill="{b.colour}" fill-opacity="0.16" stroke="{b.colour}" '
                   f'stroke-width="1"/>')
    else:
        out.append(f'<rect x="{X(0):.1f}" y="{y:.1f}" width="{w:.1f}" height="{h:.1f}" '
                   f'rx="2" fill="{b.colour}"/>')
    if b.gap_to is not None and b.gap_to > b.value:
        gw = X(b.gap_to) - X(b.value)
        out.append(f'<rect class="gap" x="{X(b.value):.1f}" y="{y + 2:.1f}" width="{gw:.1f}" '
                   f'height="{h - 4:.1f}" fill="#fca5a5" fill-opacity="0.55" stroke="#dc2626" '
                   f'stroke-width="1" stroke-dasharray="2 2"/>')
    if b.lo is not None and b.hi is not None:
        cy = y + h / 2
        out.append(f'<g stroke="{INK}" stroke-width="1.2">'
                   f'<line x1="{X(b.lo):.1f}" x2="{X(b.hi):.1f}" y1="{cy:.1f}" y2="{cy:.1f}"/>'
                   f'<line x1="{X(b.lo):.1f}" x2="{X(b.lo):.1f}" y1="{cy - 4:.1f}" '
                   f'y2="{cy + 4:.1f}"/><line x1="{X(b.hi):.1f}" x2="{X(b.hi):.1f}" '
                   f'y1="{cy - 4:.1f}" y2="{cy + 4:.1f}"/></g>')
    out.append(f"<title>{esc(b.tooltip or f'{b.label}: {pct(b.value)}')}</title></g>")
    return "".join(out)


# ---------------------------------------------------------------------------
# Signed parts (what a gap is made of)
# ---------------------------------------------------------------------------

@dataclass
class Part:
    """One signed bar in [-1, 1] of a :class:`PartsRow` (``lo``/``hi``: a whisker)."""

    label: str
    value: float
    colour: str
    lo: float | None = None
    hi: float | None = None
    tooltip: str = ""


@dataclass
class PartsRow:
    """A titled group of signed bars drawn from a shared zero line."""

    title: str
    parts: list[Part]
    tooltip: str = ""


def signed_parts(rows: Sequence[PartsRow], *, x_label: str = "", plot_w: float = 440,
                 cls: str = "parts") -> str:
    """Rows of signed horizontal bars on a symmetric axis around 0.

    Made for decompositions such as ``gap = ceiling part − mismatch part``:
    each row is one comparison, each bar one term, with its value written at
    its end. The axis spans the largest magnitude (at least ±25 pp).
    """
    bar_h, gap, head, row_gap = 14, 4, 20, 14
    labels = [p.label for r in rows for p in r.parts]
    left = min(240, max((_tw(s) for s in labels), default=40) + 14)
    width = left + plot_w + 70
    vals = [abs(v) for r in rows for p in r.parts
            for v in (p.value, p.lo, p.hi) if v is not None and math.isfinite(v)]
    span = max(0.25, min(1.0, max(vals, default=0.25) * 1.1))
    top = 26
    y = top
    layout = []
    for r in rows:
        h = head + len(r.parts) * (bar_h + gap)
        layout.append((r, y))
        y += h + row_gap
    bottom = y - row_gap + (30 if x_label else 10)

    def X(v: float) -> float:
        return left + plot_w * (0.5 + 0.5 * max(-span, min(span, v)) / span)

    out = [_svg_open(width, bottom, "signed parts", cls)]
    ticks = [t for t in nice_ticks(-span, span, 5) if -span <= t <= span]
    for t in ticks:
        out.append(f'<line x1="{X(t):.1f}" x2="{X(t):.1f}" y1="{top - 8:.1f}" '
                   f'y2="{y - row_gap + 2:.1f}" stroke="{GRID if t else AXIS}"/>')
        out.append(_text(X(t), top - 12, _minus_pp(t), anchor="middle", size=10, fill=AXIS))
    if x_label:
        out.append(_text(left + plot_w / 2, bottom - 8, x_label, anchor="middle", size=11,
                         fill=AXIS))
    for r, ry in layout:
        title = _text(0, ry + 14, _clip(r.title, 90), weight="600")
        if r.tooltip:
            title = f"<g>{title}<title>{esc(r.tooltip)}</title></g>"
        out.append(title)
        by = ry + head
        for p in r.parts:
            x0, x1 = sorted((X(0), X(p.value)))
            out.append(f'<g class="part"><text x="{left - 8:.1f}" y="{by + bar_h - 3:.1f}" '
                       f'text-anchor="end" fill="{INK}">{esc(_clip(p.label, 38))}</text>'
                       f'<rect x="{x0:.1f}" y="{by:.1f}" width="{max(x1 - x0, 1.0):.1f}" '
                       f'height="{bar_h}" rx="2" fill="{esc(p.colour)}"/>')
            if p.lo is not None and p.hi is not None:
                cy = by + bar_h / 2
                out.append(f'<line x1="{X(p.lo):.1f}" x2="{X(p.hi):.1f}" y1="{cy:.1f}" '
                           f'y2="{cy:.1f}" stroke="{INK}" stroke-width="1.2"/>')
            tx = X(p.value) + (6 if p.value >= 0 else -6)
            out.append(_text(tx, by + bar_h - 3, _minus_pp(p.value),
                             anchor="start" if p.value >= 0 else "end", size=11))
            out.append(f"<title>{esc(p.tooltip or p.label)}</title></g>")
            by += bar_h + gap
    out.append("</svg>")
    return "".join(out)


def _minus_pp(v: float) -> str:
    """A signed difference in percentage points, with a true minus sign."""
    return pp(v).replace("-", "\u2212")


# ---------------------------------------------------------------------------
# Scatter
# ---------------------------------------------------------------------------

@dataclass
class Point:
    x: float
    y: float
    label: str = ""
    colour: str = POLICY_COLOURS[0]
    tooltip: str = ""
    group: str = ""


def nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    """Round tick values covering ``[lo, hi]`` (about ``n`` of them)."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return [0.0, 1.0]
    if hi <= lo:
        lo, hi = lo - 0.5, hi + 0.5
    raw = (hi - lo) / max(1, n)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    start = math.floor(lo / step) * step
    ticks: list[float] = []
    t = start
    while t <= hi + step * 0.5 and len(ticks) < 50:
        ticks.append(round(t, 10))
        t += step
    if ticks[-1] < hi:
        ticks.append(round(ticks[-1] + step, 10))
    return ticks


def _fmt_tick(v: float, as_pct: bool) -> str:
    if as_pct:
        return f"{100 * v:.0f}%" if abs(100 * v - round(100 * v)) < 1e-9 else f"{100 * v:.1f}%"
    return f"{v:g}"


def scatter(points: Sequence[Point], *, title: str = "", x_label: str = "", y_label: str = "",
            line: tuple[float, float] | None = None, line_label: str = "",
            legend: Sequence[tuple[str, str]] = (), width: float = 420, height: float = 300,
            x_pct: bool = True, y_pct: bool = True, zero_line: bool = True,
            x_domain: tuple[float, float] | None = None, label_points: bool = True,
            paths: Sequence[tuple[str, Sequence[tuple[float, float]]]] = (),
            cls: str = "scatter") -> str:
    """Points with axes, ticks, an optional fitted line ``y = a·x + b`` and a legend.

    ``x_domain`` fixes the x range (widened if a point falls outside it);
    with ``label_points`` each point's ``label`` is written next to it
    (when there are at most 16 points). ``paths`` are ``(colour, [(x, y), …])``
    polylines drawn under the points (a curve per series, e.g. success per round).
    """
    left, right = 58, 14
    top = (26 if title else 8) + (18 if legend else 0)
    bottom = 44
    pw, ph = width - left - right, height - top - bottom
    xs = [p.x for p in points] or [0.0, 1.0]
    ys = [p.y for p in points] or [0.0, 1.0]
    if zero_line:
        ys = [*ys, 0.0]
    if x_domain is not None:
        xs = [*xs, *x_domain]
    xt = nice_ticks(min(xs), max(xs))
    yt = nice_ticks(min(ys), max(ys))
    x0, x1, y0, y1 = xt[0], xt[-1], yt[0], yt[-1]

    def X(v: float) -> float:
        return left + pw * (v - x0) / ((x1 - x0) or 1)

    def Y(v: float) -> float:
        return top + ph - ph * (v - y0) / ((y1 - y0) or 1)

    out = [_svg_open(width, height, title or "scatter", cls)]
    if title:
        out.append(_text(0, 16, title, weight="600", size=13))
    if legend:
        lx: float = left
        for label, col in legend:
            out.append(f'<circle cx="{lx + 5:.1f}" cy="{top - 14:.1f}" r="4.5" fill="{col}"/>')
            out.append(_text(lx + 14, top - 10, label, size=11))
            lx += 28 + _tw(label, 11)
    for t in xt:
        out.append(f'<line x1="{X(t):.1f}" x2="{X(t):.1f}" y1="{top:.1f}" y2="{top + ph:.1f}" '
                   f'stroke="{GRID}"/>')
        out.append(_text(X(t), top + ph + 15, _fmt_tick(t, x_pct), anchor="middle", size=10,
                         fill=AXIS))
    for t in yt:
        out.append(f'<line x1="{left:.1f}" x2="{left + pw:.1f}" y1="{Y(t):.1f}" y2="{Y(t):.1f}" '
                   f'stroke="{GRID}"/>')
        out.append(_text(left - 6, Y(t) + 3.5, _fmt_tick(t, y_pct), anchor="end", size=10,
                         fill=AXIS))
    if zero_line and y0 < 0 < y1:
        out.append(f'<line x1="{left:.1f}" x2="{left + pw:.1f}" y1="{Y(0):.1f}" y2="{Y(0):.1f}" '
                   f'stroke="{AXIS}" stroke-width="1"/>')
    out.append(f'<rect x="{left:.1f}" y="{top:.1f}" width="{pw:.1f}" height="{ph:.1f}" '
               f'fill="none" stroke="{AXIS}" stroke-width="0.8"/>')
    if x_label:
        out.append(_text(left + pw / 2, height - 8, x_label, anchor="middle", size=11,
                         fill=AXIS))
    if y_label:
        out.append(_text(0, 0, y_label, anchor="middle", size=11, fill=AXIS,
                         extra=f' transform="translate(13 {top + ph / 2:.1f}) rotate(-90)"'))
    if line is not None:
        seg = _clip_line(*line, x0, x1, y0, y1)
        if seg is not None:
            a, b = line
            (xa, xb) = seg
            out.append(f'<line class="fit" x1="{X(xa):.1f}" y1="{Y(a * xa + b):.1f}" '
                       f'x2="{X(xb):.1f}" y2="{Y(a * xb + b):.1f}" stroke="#b91c1c" '
                       f'stroke-width="1.5" stroke-dasharray="5 3">'
                       f'<title>{esc(line_label)}</title></line>')
    for col, xy in paths:
        pts = " ".join(f"{X(x):.1f},{Y(y):.1f}" for x, y in xy)
        out.append(f'<polyline points="{pts}" fill="none" stroke="{col}" stroke-width="1.5"/>')
    for p in points:
        out.append(f'<circle class="pt" cx="{X(p.x):.1f}" cy="{Y(p.y):.1f}" r="5" '
                   f'fill="{p.colour}" fill-opacity="0.85" stroke="#fff" stroke-width="1">'
                   f'<title>{esc(p.tooltip or p.label)}</title></circle>')
        if label_points and p.label and len(points) <= 16:
            right_side = X(p.x) + 8 + _tw(p.label, 10) <= left + pw
            out.append(_text(X(p.x) + (8 if right_side else -8), Y(p.y) + 3.5, p.label,
                             anchor="start" if right_side else "end", size=10, fill=AXIS))
    out.append("</svg>")
    return "".join(out)


def _clip_line(a: float, b: float, x0: float, x1: float, y0: float,
               y1: float) -> tuple[float, float] | None:
    """The x-range of the line ``y = a·x + b`` that lies inside the box, if any."""
    if not (math.isfinite(a) and math.isfinite(b)):
        return None
    xs = [x0, x1]
    if a != 0:
        xs += [(y0 - b) / a, (y1 - b) / a]
    eps = 1e-9 * max(1.0, abs(y1 - y0))
    inside = sorted(x for x in xs if x0 - 1e-12 <= x <= x1 + 1e-12
                    and y0 - eps <= a * x + b <= y1 + eps)
    if len(inside) < 2 or inside[-1] - inside[0] <= 0:
        return None
    return inside[0], inside[-1]
