"""Unicode sparklines: a metric's shape over time in one table cell."""

from __future__ import annotations

BARS = "▁▂▃▄▅▆▇█"


def sparkline(values: list[float], width: int = 30) -> str:
    """The last `width` values (resampled evenly if there are more), scaled to 8 levels.
    A flat series is a flat line at the bottom, not noise."""
    if not values:
        return ""
    if len(values) > width:
        step = len(values) / width
        values = [values[int(i * step)] for i in range(width - 1)] + [values[-1]]
    lo, hi = min(values), max(values)
    if hi - lo <= 1e-12 * max(abs(hi), 1.0):
        return BARS[0] * len(values)
    return "".join(BARS[min(7, int((v - lo) / (hi - lo) * 8))] for v in values)
