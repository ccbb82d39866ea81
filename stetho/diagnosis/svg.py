"""The diagnosis report's trend chart: one metric over the last 30 days, as a standalone SVG.

Why SVG written by hand: the report travels into a git knowledge base and is viewed in a web UI
or a text editor. A small self-contained SVG diffs as text, needs no plotting library on a node,
and renders everywhere an image link does. It carries no scripts, no styles from elsewhere, no
links and no fonts to fetch: a viewer that opens it fetches nothing.

Every string drawn comes from data (the metric name, its unit), so every one goes through
`_text()`: XML-escaped, with the characters XML 1.0 forbids replaced, so a hostile metric name
can neither inject markup nor make the file ill-formed.

Degenerate input is expected, not exceptional: no points (a node seen for the first time), one
point, the same time twice, a flat series. Each is drawn without dividing by zero. Non-finite
values (NaN, inf) cannot be placed on an axis and are left out of the plot.
"""

from __future__ import annotations

import math
import re
from datetime import datetime, timezone

from stetho.diagnosis.model import Trend

#: Space around the plot for tick labels, the title and the axis names.
_LEFT, _RIGHT, _TOP, _BOTTOM = 68, 20, 30, 44
#: Candidate x tick steps, in seconds: the smallest giving at most _X_TICKS ticks is used,
#: aligned to multiples of itself since the epoch (day steps fall on UTC midnight).
_X_STEPS = (3600, 3 * 3600, 6 * 3600, 12 * 3600, 86400, 2 * 86400, 7 * 86400, 14 * 86400,
            30 * 86400, 91 * 86400, 365 * 86400)
_X_TICKS = 6
_Y_TICKS = 5
_DAY = 86400.0
#: Characters an XML 1.0 document may not contain at all, even escaped.
_XML_ILLEGAL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")

_LINE = "#1f77b4"
_THRESHOLD = "#d62728"
_BASELINE = "#2ca02c"
_GRID = "#e0e0e0"
_INK = "#333333"


def _text(value: object) -> str:
    """Text from data, made safe for element content and double-quoted attributes."""
    s = _XML_ILLEGAL.sub("\ufffd", str(value))
    return (s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
            .replace('"', "&quot;"))


def _num(v: float) -> str:
    """A coordinate: short, and never '-0'."""
    s = f"{v:.1f}".rstrip("0").rstrip(".")
    return "0" if s in ("-0", "") else s


def _label(v: float, step: float) -> str:
    """A y tick value with as many decimals as the tick step needs, and no more."""
    decimals = max(0, -math.floor(math.log10(step)) + 1) if step > 0 else 0
    s = f"{v:.{min(decimals, 12)}f}"
    if "." in s:
        s = s.rstrip("0").rstrip(".")
    return "0" if s in ("-0", "") else s


def _span(lo: float, hi: float) -> tuple[float, float]:
    """A non-empty range around [lo, hi]: a flat series gets room above and below it."""
    if hi > lo and math.isfinite(hi - lo):
        return lo, hi
    pad = abs(lo) * 0.1 if lo != 0 and math.isfinite(lo) else 1.0
    return lo - pad, lo + pad


def _nice_step(span: float, count: int) -> float:
    """1, 2, 2.5 or 5 times a power of ten: about `count` ticks over `span`."""
    raw = span / count
    mag = 10.0 ** math.floor(math.log10(raw))
    for m in (1.0, 2.0, 2.5, 5.0):
        if raw <= m * mag:
            return m * mag
    return 10.0 * mag


def _y_axis(values: list[float]) -> tuple[float, float, list[float], float]:
    """(low, high, ticks, step) of the value axis, widened to whole tick steps."""
    lo, hi = _span(min(values), max(values)) if values else (0.0, 1.0)
    try:
        step = _nice_step(hi - lo, _Y_TICKS)
        lo, hi = math.floor(lo / step) * step, math.ceil(hi / step) * step
    except (OverflowError, ValueError):  # values near the ends of the float range
        step = math.nan
    if not (math.isfinite(step) and math.isfinite(hi - lo) and hi > lo):
        lo = lo if math.isfinite(lo) else 0.0
        return lo, lo + 1.0, [lo], 1.0
    ticks: list[float] = []
    i = 0
    while i <= _Y_TICKS * 3:
        t = lo + i * step
        if t > hi + step * 1e-9:
            break
        ticks.append(t)
        i += 1
    return lo, hi, ticks, step


def _date(t: float, fmt: str) -> str:
    try:
        return datetime.fromtimestamp(t, tz=timezone.utc).strftime(fmt)
    except (OverflowError, OSError, ValueError):
        return _label(t, 1.0)


def _x_axis(times: list[float]) -> tuple[float, float, list[tuple[float, str]]]:
    """(low, high, [(tick time, label)]) of the time axis, labelled in UTC."""
    lo, hi = (min(times), max(times)) if times else (0.0, 0.0)
    if not hi > lo or not math.isfinite(hi - lo):
        lo, hi = lo - _DAY, lo + _DAY  # one point (or one instant) sits in the middle
    step, first = 0.0, 0.0
    for candidate in _X_STEPS:
        step = float(candidate)
        first = math.ceil(lo / step) * step
        if (hi - first) / step < _X_TICKS:
            break
    else:  # longer than years: evenly spaced, unaligned
        step = (hi - lo) / (_X_TICKS - 1)
        first = lo
    fmt = "%Y-%m-%d" if step >= _DAY else "%m-%d %H:%M"
    ticks: list[tuple[float, str]] = []
    t = first
    while t <= hi + step * 1e-9 and len(ticks) <= _X_TICKS:
        ticks.append((t, _date(t, fmt)))
        t += step
    return lo, hi, ticks


def render_trend(trend: Trend, width: int = 720, height: int = 240) -> str:
    """The trend as a standalone SVG document: the points as a polyline with a circle on each,
    dated x ticks (UTC), value ticks with the unit, a dashed threshold line and a dotted
    baseline line when they are set. Pure: returns the text, writes nothing."""
    points = [(t, v) for t, v in trend.points if math.isfinite(t) and math.isfinite(v)]
    refs = [r for r in (trend.threshold, trend.baseline) if r is not None and math.isfinite(r)]
    x_lo, x_hi, x_ticks = _x_axis([t for t, _ in points])
    y_lo, y_hi, y_ticks, y_step = _y_axis([v for _, v in points] + refs)
    plot_w = max(1.0, width - _LEFT - _RIGHT)
    plot_h = max(1.0, height - _TOP - _BOTTOM)
    left, top, bottom, right = _LEFT, _TOP, _TOP + plot_h, _LEFT + plot_w

    def px(t: float) -> float:
        return left + (t - x_lo) / (x_hi - x_lo) * plot_w

    def py(v: float) -> float:
        return bottom - (v - y_lo) / (y_hi - y_lo) * plot_h

    unit = trend.unit or ""
    title = f"{trend.metric} ({unit})" if unit else trend.metric
    out = [
        '<?xml version="1.0" encoding="UTF-8"?>',
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" font-family="sans-serif" '
        f'font-size="11" fill="{_INK}">',
        f"<title>{_text(title)} over the last 30 days</title>",
        f'<rect x="0" y="0" width="{width}" height="{height}" fill="#ffffff"/>',
        f'<text x="{left}" y="{_TOP - 12}" font-size="13" font-weight="bold">'
        f"{_text(title)}</text>",
    ]
    for v in y_ticks:
        y = _num(py(v))
        out.append(f'<line class="grid" x1="{left}" y1="{y}" x2="{_num(right)}" y2="{y}" '
                   f'stroke="{_GRID}"/>')
        out.append(f'<text class="ytick" x="{left - 6}" y="{y}" text-anchor="end" '
                   f'dominant-baseline="middle">{_text(_label(v, y_step))}</text>')
    for t, text in x_ticks if points else ():  # no dates to show without data
        x = _num(px(t))
        out.append(f'<line x1="{x}" y1="{_num(bottom)}" x2="{x}" y2="{_num(bottom + 4)}" '
                   f'stroke="{_INK}"/>')
        out.append(f'<text class="xtick" x="{x}" y="{_num(bottom + 16)}" '
                   f'text-anchor="middle">{_text(text)}</text>')
    out.append(f'<line x1="{left}" y1="{_num(bottom)}" x2="{_num(right)}" y2="{_num(bottom)}" '
               f'stroke="{_INK}"/>')
    out.append(f'<line x1="{left}" y1="{top}" x2="{left}" y2="{_num(bottom)}" '
               f'stroke="{_INK}"/>')
    out.append(f'<text x="{_num(left + plot_w / 2)}" y="{height - 6}" text-anchor="middle">'
               "date (UTC)</text>")
    if unit:
        mid = _num(top + plot_h / 2)
        out.append(f'<text class="unit" x="14" y="{mid}" text-anchor="middle" '
                   f'transform="rotate(-90 14 {mid})">{_text(unit)}</text>')
    for cls, value, dash, colour in (("threshold", trend.threshold, "6 4", _THRESHOLD),
                                     ("baseline", trend.baseline, "2 3", _BASELINE)):
        if value is None or not math.isfinite(value):
            continue
        y = _num(py(value))
        shown = f"{value:g} {unit}".strip()
        out.append(f'<line class="{cls}" x1="{left}" y1="{y}" x2="{_num(right)}" y2="{y}" '
                   f'stroke="{colour}" stroke-width="1.5" stroke-dasharray="{dash}"/>')
        out.append(f'<text class="{cls}-label" x="{_num(right - 4)}" y="{_num(py(value) - 4)}" '
                   f'text-anchor="end" fill="{colour}">{cls} {_text(shown)}</text>')
    if points:
        coords = " ".join(f"{_num(px(t))},{_num(py(v))}" for t, v in points)
        out.append(f'<polyline points="{coords}" fill="none" stroke="{_LINE}" '
                   'stroke-width="2" stroke-linejoin="round"/>')
        out.extend(f'<circle cx="{_num(px(t))}" cy="{_num(py(v))}" r="3" fill="{_LINE}"/>'
                   for t, v in points)
    else:
        out.append(f'<text x="{_num(left + plot_w / 2)}" y="{_num(top + plot_h / 2)}" '
                   'text-anchor="middle">no data in the last 30 days</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"
