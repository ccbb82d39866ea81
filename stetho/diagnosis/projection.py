"""Where a rising counter is heading: the projected crossing of its limit, for a watch report.

A cumulative error counter (correctable ECC) is judged by its growth within the profile's
counter window (`counters.ecc_correctable_max` per `counters.window_h`), not by its lifetime
total. So the projection works on that rate: the growth between consecutive readings of the
node's history, scaled to the window, fitted with a straight line over time, extended to the
limit. It says how many runs (at the node's own run interval) and around which date the rate
crosses the limit; or that it is already over, or not rising toward it at this pace. A counter
that went down between two readings was reset (a GPU reset, a reboot): the interval is left
out, never read as negative growth.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import datetime, timezone
from itertools import pairwise
from statistics import median
from typing import Any

#: (check, metric) of a cumulative counter -> (its limit on growth within the profile's
#: counter window, read from the profile; what it counts)
LIMITS: dict[tuple[str, str], tuple[Callable[[Any], float], str]] = {
    ("gpu", "ecc_correctable"): (lambda p: p.counters.ecc_correctable_max,
                                 "correctable ECC errors"),
    ("ib", "SymbolErrorCounter"): (lambda p: p.ib.counter_max["SymbolErrorCounter"],
                                   "symbol errors"),
    ("ib", "LinkErrorRecoveryCounter"): (lambda p: p.ib.counter_max["LinkErrorRecoveryCounter"],
                                         "link error recoveries"),
}
#: (check, metric) of a level that must stay at or above its check's threshold -> its name
LEVELS = {("nccl", "busbw_gbps"): "busbw"}
#: fewer rate intervals than this: no line to extend
MIN_INTERVALS = 2


def rates(points: list[tuple[float, float]], window_s: float) -> list[tuple[float, float]]:
    """(time, growth per window) between consecutive readings, resets left out."""
    out = []
    for (t0, v0), (t1, v1) in pairwise(points):
        if t1 > t0 and v1 >= v0:
            out.append((t1, (v1 - v0) / (t1 - t0) * window_s))
    return out


def project(points: list[tuple[float, float]], limit: float, window_h: float,
            what: str = "correctable ECC errors") -> str:
    """The sentence a watch report shows: the rate now, the limit, and when (in runs and a
    date) the rate's own trend crosses it. Empty when there are too few readings."""
    window_s = window_h * 3600
    points = sorted(points)
    rs = rates(points, window_s)
    if not rs:
        return ""
    per = f"per {window_h:g} h"
    now_t, now = rs[-1]
    head = (f"{what} {', '.join(f'{r:.0f}' for _, r in rs[-4:])} {per} over the last "
            f"{min(len(rs), 4)} run interval(s); limit {limit:g} {per}")
    if now > limit:
        return f"{head}: already over the limit."
    if len(rs) < MIN_INTERVALS:
        return f"{head}: one interval only, no trend to project yet."
    slope = _slope(rs)  # growth per window, per second
    if slope <= 0:
        return f"{head}: not rising toward the limit at this pace."
    cross = now_t + (limit - now) / slope
    step = median(t1 - t0 for (t0, _), (t1, _) in pairwise(points)) or window_s
    runs = max(1, math.ceil((cross - now_t) / step))
    day = datetime.fromtimestamp(cross, timezone.utc).strftime("%Y-%m-%d")
    return (f"{head}: at this pace it crosses the limit in about {runs} run(s), around "
            f"{day}.")


def project_level(points: list[tuple[float, float]], limit: float, what: str, unit: str
                  ) -> str:
    """For a level that must stay at or above `limit` (busbw): the readings, the limit, and
    when (in runs and a date) their straight-line fit falls to it. Empty with fewer than
    three readings."""
    points = sorted(points)
    if len(points) < 3:
        return ""
    now_t, now = points[-1]
    u = f" {unit}" if unit else ""
    head = (f"{what} {', '.join(f'{v:g}' for _, v in points[-4:])}{u} over the last "
            f"{min(len(points), 4)} runs; threshold {limit:g}{u}")
    if now < limit:
        return f"{head}: already under the threshold."
    slope = _slope(points)
    if slope >= 0:
        return f"{head}: not falling toward the threshold at this pace."
    cross = now_t + (limit - now) / slope
    step = median(t1 - t0 for (t0, _), (t1, _) in pairwise(points)) or 86400.0
    runs = max(1, math.ceil((cross - now_t) / step))
    day = datetime.fromtimestamp(cross, timezone.utc).strftime("%Y-%m-%d")
    return (f"{head}: at this pace it falls under the threshold in about {runs} run(s), "
            f"around {day}.")


def _slope(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of value over time."""
    n = len(points)
    mt = sum(t for t, _ in points) / n
    mv = sum(v for _, v in points) / n
    den = sum((t - mt) ** 2 for t, _ in points)
    return sum((t - mt) * (v - mv) for t, v in points) / den if den else 0.0


def for_trend(check: str, metric: str, points: list[tuple[float, float]],
              profile_name: str, threshold: float | None = None, unit: str = "",
              subject: str = "") -> str:
    """The projection of a charted metric: a counter's growth against its profile's window
    limit (LIMITS), a level against its check's threshold (LEVELS); '' when the metric has
    neither or the limit cannot be read."""
    if (check, metric) in LEVELS:
        if threshold is None:
            return ""
        return project_level(points, threshold, f"{LEVELS[(check, metric)]} {subject}".strip(),
                             unit)
    entry = LIMITS.get((check, metric))
    if entry is None or not profile_name:
        return ""
    from stetho import profiles
    from stetho.errors import ConfigError

    limit_of, what = entry
    try:
        prof = profiles.load(profile_name)
        limit = float(limit_of(prof))
    except (ConfigError, OSError, KeyError):
        return ""
    return project(points, limit, prof.counters.window_h, what)
