"""The statistics behind drift detection, in pure Python.

Drift checks run on every node's history (a few to a few hundred samples per metric, ~100
metrics per node), on the controller and inside checks shipped to nodes, so this module has no
numpy/scipy dependency and is cheap enough to call thousands of times per sweep.

- ``median``/``mad``/``robust_z``: "is this sample an outlier against this node's own history",
  robust to the occasional spike already in that history.
- ``ks_2samp`` (stetho.history.ks): "has the distribution of this metric changed".
- ``linear_fit``/``crossing_time``: "when will this rising metric hit its limit".
- ``counter_delta``/``rate_per_day``: cumulative hardware counters that reset on reboot, driver
  reload or ``perfquery -R``.

NaN is rejected (ValueError) wherever it would make an ordering or a fit meaningless: a NaN
p-value or slope compares False against every threshold and would silently read as "no drift".
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "CounterDelta",
    "Fit",
    "counter_delta",
    "crossing_time",
    "linear_fit",
    "mad",
    "median",
    "rate_per_day",
    "robust_z",
]

#: Iglewicz & Hoaglin's modified z-score constant: 0.6745 * (x - median) / MAD is ~N(0, 1) for
#: normal data (0.6745 is the 75th percentile of the standard normal).
ROBUST_Z_SCALE = 0.6745

# -- robust location and scale ------------------------------------------------------------------


def _check_no_nan(xs: Sequence[float], what: str) -> None:
    if any(map(math.isnan, xs)):
        raise ValueError(f"{what} contains NaN")


def _median_sorted(s: Sequence[float]) -> float:
    n = len(s)
    mid = n // 2
    if n % 2:
        return float(s[mid])
    lo, hi = float(s[mid - 1]), float(s[mid])
    m = (lo + hi) / 2
    if math.isinf(m) and math.isfinite(lo) and math.isfinite(hi):
        m = lo / 2 + hi / 2  # lo + hi overflowed
    return m


def median(xs: Sequence[float]) -> float:
    """The median (mean of the two middle values for an even count), as numpy.median.

    Raises ValueError on an empty sequence or NaN: both have no meaningful middle.
    """
    if len(xs) == 0:
        raise ValueError("median of an empty sequence")
    _check_no_nan(xs, "median input")
    return _median_sorted(sorted(xs))


def mad(xs: Sequence[float]) -> float:
    """Median absolute deviation from the median, raw (not scaled by 1.4826).

    Equals ``scipy.stats.median_abs_deviation(xs)`` with its default scale=1.0. Raises
    ValueError on an empty sequence or NaN.
    """
    med = median(xs)
    return _median_sorted(sorted(abs(v - med) for v in xs))


def robust_z(x: float, reference: Sequence[float], floor: float = 0.0) -> float | None:
    """Modified z-score of ``x`` against ``reference``: (x - median) / scale, where scale is
    the larger of MAD * 1.4826 (i.e. 0.6745 * (x - median) / MAD) and ``floor``.

    Median and MAD instead of mean and standard deviation, so that a spike already in the
    reference does not hide the next one.

    - ``floor`` is the finest scale that means anything for this metric (its resolution, its
      minimum meaningful change over the bound): a gauge that read 30 °C all week and now
      reads 31 °C is 1 / floor, not infinitely, surprising. With a positive floor z is finite.
    - None when ``reference`` has fewer than 3 points: too little history to judge.
    - When MAD == 0 and no floor (an error counter that sits at 0): 0.0 if ``x`` equals the
      median, else +inf or -inf with the sign of ``x - median``: a counter leaving 0 is news.
    - NaN ``x``, NaN in the reference, or a negative or NaN floor raises ValueError.
    """
    if len(reference) < 3:
        return None
    if x != x:
        raise ValueError("robust_z of NaN")
    if not floor >= 0:
        raise ValueError(f"robust_z floor {floor!r} must be a non-negative number")
    med = median(reference)
    spread = _median_sorted(sorted(abs(v - med) for v in reference))
    diff = x - med
    if spread / ROBUST_Z_SCALE >= floor and spread > 0:
        return ROBUST_Z_SCALE * diff / spread
    if floor > 0:
        return diff / floor
    if diff == 0:
        return 0.0
    return math.copysign(math.inf, diff)


# -- trends --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Fit:
    """The least-squares line y = slope * t + intercept through n points.

    ``r2`` is the coefficient of determination (0..1): how much of the variance of y the line
    explains, so a caller can ignore a "trend" that is mostly noise. 0.0 when y is constant:
    nothing to explain (``scipy.stats.linregress`` gives NaN there, which would compare False
    against any cut-off).
    """

    slope: float
    intercept: float
    r2: float
    n: int


def linear_fit(ts: Sequence[float], ys: Sequence[float]) -> Fit | None:
    """Ordinary least squares of y on t, as ``numpy.polyfit(ts, ys, 1)``.

    Returns None when no line is defined: fewer than 2 points, or all t equal (a new node, or
    several samples with one timestamp); that is a normal state of a young history, not an
    error. Raises ValueError when the lengths differ or a value is NaN or infinite.

    Computed about the means with ``math.fsum``: with t in POSIX seconds (~1.7e9) the naive
    sum(t*t) formulas lose all precision in the slope.
    """
    n = len(ts)
    if n != len(ys):
        raise ValueError(f"linear_fit: {n} times but {len(ys)} values")
    if not all(map(math.isfinite, ts)) or not all(map(math.isfinite, ys)):
        raise ValueError("linear_fit: times and values must be finite")
    if n < 2:
        return None
    t_mean = math.fsum(ts) / n
    y_mean = math.fsum(ys) / n
    dts = [t - t_mean for t in ts]
    dys = [y - y_mean for y in ys]
    sxx = math.fsum(map(operator.mul, dts, dts))
    if sxx == 0:
        return None
    sxy = math.fsum(map(operator.mul, dts, dys))
    syy = math.fsum(map(operator.mul, dys, dys))
    slope = sxy / sxx
    r2 = 0.0 if syy == 0 else min(1.0, sxy * sxy / (sxx * syy))
    return Fit(slope=slope, intercept=y_mean - slope * t_mean, r2=r2, n=n)


def crossing_time(fit: Fit, threshold: float) -> float | None:
    """The t at which the fitted line reaches ``threshold``, for a metric rising toward it.

    Rule: we only warn about a metric rising toward an upper threshold (temperature, error
    counts, retired pages). So:

    - slope <= 0: None. The line never rises to a threshold above it, and a falling metric
      under a lower limit (e.g. busbw) is not what this predicts.
    - slope > 0: (threshold - intercept) / slope. This may be earlier than the last sample
      when the line is already at or above the threshold; callers compare it with "now".
    - threshold +/-inf, or a slope so small that the time overflows: None (never reached).

    Raises ValueError for a NaN threshold (a configuration error that must not read as
    "never").
    """
    if math.isnan(threshold):
        raise ValueError("crossing_time: threshold is NaN")
    if not fit.slope > 0 or math.isinf(threshold):
        return None
    t = (threshold - fit.intercept) / fit.slope
    return t if math.isfinite(t) else None


# -- cumulative counters --------------------------------------------------------------------------


@dataclass(frozen=True)
class CounterDelta:
    """How much a cumulative counter grew between two readings.

    ``reset`` is True when the counter went backwards (reboot, driver reload, ``perfquery
    -R``); ``delta`` is then the current reading, a lower bound: what accrued between the
    previous reading and the reset is lost.
    """

    delta: float
    reset: bool


def counter_delta(previous: float, current: float) -> CounterDelta:
    """Growth of a cumulative hardware counter between two readings; never negative.

    current >= previous: delta = current - previous. current < previous: the counter was
    reset, so delta = current (everything counted since the reset) and reset=True. Integer
    readings give an integer delta. Raises ValueError on a negative, NaN or infinite reading:
    counters start at 0 and are finite, so such a value is a parse or collection bug.
    """
    for name, v in (("previous", previous), ("current", current)):
        if not math.isfinite(v) or v < 0:
            raise ValueError(f"counter_delta: {name} reading {v!r} is not a counter value")
    if current < previous:
        return CounterDelta(delta=current, reset=True)
    return CounterDelta(delta=current - previous, reset=False)


SECONDS_PER_DAY = 86400.0


def rate_per_day(delta: float, seconds: float) -> float:
    """``delta`` events over ``seconds`` as events per day, the unit counter limits are set in.

    Raises ValueError when ``seconds`` is not a positive finite number (two readings with one
    timestamp, or a clock that went backwards: no rate can be told) or ``delta`` is negative
    or not finite (use ``counter_delta`` to get a delta that is never negative).
    """
    if not (math.isfinite(seconds) and seconds > 0):
        raise ValueError(f"rate_per_day: interval {seconds!r} s is not positive")
    if not (math.isfinite(delta) and delta >= 0):
        raise ValueError(f"rate_per_day: delta {delta!r} is not a non-negative count")
    return delta * SECONDS_PER_DAY / seconds
