"""stetho.history.stats against numpy/scipy as the reference, on seeded random and hand-built cases.

The runtime module is pure Python; numpy and scipy appear here only as the ground truth. The KS
test is held to scipy's own p-values (exact method to ~1e-10 relative, in practice bit for bit),
including the cases where scipy itself falls back to its asymptotic formula.
"""

from __future__ import annotations

import ast
import math
import sys
import warnings
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from scipy import special
from scipy import stats as sps

from stetho.history import ks, stats
from stetho.history.ks import KsResult, ks_2samp
from stetho.history.stats import (
    CounterDelta,
    Fit,
    counter_delta,
    crossing_time,
    linear_fit,
    mad,
    median,
    rate_per_day,
    robust_z,
)

EXACT_REL = 1e-10  # scipy's exact KS p-values: same algorithm, same operation order
ASYMP_REL = 1e-9  # scipy's kstwo.sf: same method selection, a few sums done differently
DAY = 86400.0
T0 = 1.7e9  # POSIX seconds, late 2023: what stetho's history timestamps look like


@pytest.mark.parametrize("module", [stats, ks], ids=["stats", "ks"])
def test_runtime_module_imports_only_the_standard_library(module: object) -> None:
    tree = ast.parse(Path(module.__file__).read_text())  # type: ignore[attr-defined]
    imported: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.module is not None and node.level == 0
            if node.module != "stetho.history.stats":
                imported.add(node.module.split(".")[0])
    assert "math" in imported
    assert imported <= set(sys.stdlib_module_names) | {"__future__"}, imported


# -- median, MAD, robust z ---------------------------------------------------------------------


def _samples(seed: int, count: int = 40) -> list[list[float]]:
    """Seeded samples of sizes 1..41, half of them rounded so that ties are common."""
    rng = np.random.default_rng(seed)
    out = []
    for k in range(count):
        xs = rng.normal(rng.uniform(-50, 50), rng.uniform(0.1, 10), int(rng.integers(1, 42)))
        out.append([float(v) for v in (np.round(xs) if k % 2 else xs)])
    return out


@pytest.mark.parametrize("seed", range(5))
def test_median_and_mad_match_numpy_and_scipy(seed: int) -> None:
    for xs in _samples(seed):
        assert median(xs) == pytest.approx(float(np.median(xs)), rel=1e-15, abs=0)
        assert mad(xs) == pytest.approx(float(sps.median_abs_deviation(xs)), rel=1e-14, abs=1e-14)


def test_median_even_count_and_overflow() -> None:
    assert median([3, 1, 2, 10]) == 2.5
    assert median([7]) == 7.0
    assert median([1e308, 1.7e308]) == pytest.approx(1.35e308)  # (a + b) / 2 would be inf
    assert mad([1.0, 1.0, 2.0, 2.0, 4.0, 6.0, 9.0]) == 1.0  # the textbook example


@pytest.mark.parametrize("func", [median, mad])
def test_median_and_mad_reject_empty_and_nan(func: object) -> None:
    assert callable(func)
    with pytest.raises(ValueError, match="empty"):
        func([])
    with pytest.raises(ValueError, match="NaN"):
        func([1.0, math.nan, 2.0])


@pytest.mark.parametrize("seed", range(5))
def test_robust_z_matches_the_modified_z_formula(seed: int) -> None:
    rng = np.random.default_rng(100 + seed)
    checked = 0
    for ref in _samples(seed):
        if len(ref) < 3:
            assert robust_z(0.0, ref) is None
            continue
        med = np.median(ref)
        spread = sps.median_abs_deviation(ref)
        x = float(rng.normal(med, 3 * spread + 1))
        z = robust_z(x, ref)
        if spread == 0:
            continue  # covered by test_robust_z_zero_mad
        assert z == pytest.approx(0.6745 * (x - med) / spread, rel=1e-12)
        checked += 1
    assert checked > 20


def test_robust_z_needs_three_reference_points() -> None:
    assert robust_z(5.0, []) is None
    assert robust_z(5.0, [1.0]) is None
    assert robust_z(5.0, [1.0, 2.0]) is None
    assert robust_z(5.0, [1.0, 2.0, 3.0]) == pytest.approx(0.6745 * 3.0)


def test_robust_z_zero_mad() -> None:
    errors = [0.0, 0.0, 0.0, 0.0, 7.0]  # an error counter that is almost always 0: MAD == 0
    assert mad(errors) == 0.0
    assert robust_z(0.0, errors) == 0.0
    assert robust_z(1.0, errors) == math.inf
    assert robust_z(-1.0, errors) == -math.inf


def test_robust_z_is_not_masked_by_a_spike_in_the_reference() -> None:
    """Why median/MAD: one spike in the history must not hide the next anomaly."""
    rng = np.random.default_rng(7)
    ref = [float(v) for v in rng.normal(65.0, 1.0, 29)] + [95.0]  # one thermal spike
    x = 71.0
    classic = (x - np.mean(ref)) / np.std(ref)
    robust = robust_z(x, ref)
    assert classic < 3.5  # the spike inflated the standard deviation: x looks normal
    assert robust is not None and robust > 3.5  # the robust score still flags it


def test_robust_z_rejects_nan() -> None:
    with pytest.raises(ValueError):
        robust_z(math.nan, [1.0, 2.0, 3.0])
    with pytest.raises(ValueError):
        robust_z(1.0, [1.0, math.nan, 3.0])


# -- two-sample KS: the exact method -----------------------------------------------------------


def scipy_ks(a: list[float], b: list[float]) -> tuple[float, float, bool]:
    """scipy's statistic and p-value, and whether scipy fell back from exact to asymptotic."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = sps.ks_2samp(a, b)
    fell_back = any("Exact calculation unsuccessful" in str(w.message) for w in caught)
    return float(res.statistic), float(res.pvalue), fell_back


def _ks_cases(seed: int, count: int = 60) -> list[tuple[str, list[float], list[float]]]:
    """Seeded KS cases, sizes 3..60: same law, shifted, rescaled, ties, identical, subsets."""
    rng = np.random.default_rng(seed)
    cases: list[tuple[str, list[float], list[float]]] = []
    for k in range(count):
        n1, n2 = (int(v) for v in rng.integers(3, 61, 2))
        if k % 5 == 0:
            n2 = n1  # equal sizes take scipy's other exact formula
        kind = ("same", "shifted", "scaled", "ties", "identical", "subset")[k % 6]
        a = rng.normal(0.0, 1.0, n1)
        if kind == "same":
            b = rng.normal(0.0, 1.0, n2)
        elif kind == "shifted":
            b = rng.normal(rng.uniform(0.2, 3.0), 1.0, n2)
        elif kind == "scaled":
            b = rng.normal(0.0, rng.uniform(1.5, 4.0), n2)
        elif kind == "ties":  # integer-valued counters: ties within and across samples
            a = rng.integers(0, 5, n1).astype(float)
            b = rng.integers(0, int(rng.integers(3, 8)), n2).astype(float)
        elif kind == "identical":
            b = a.copy()
        else:
            b = rng.choice(a, n2)
        cases.append((kind, [float(v) for v in a], [float(v) for v in b]))
    return cases


@pytest.mark.parametrize("seed", range(10))
def test_ks_2samp_matches_scipy_exact(seed: int) -> None:
    kinds = set()
    for kind, a, b in _ks_cases(seed):
        stat, p, _ = scipy_ks(a, b)
        res = ks_2samp(a, b)
        assert isinstance(res, KsResult)
        assert res.statistic == pytest.approx(stat, rel=1e-14, abs=0), (kind, a, b)
        assert res.pvalue == pytest.approx(p, rel=EXACT_REL, abs=0), (kind, a, b)
        kinds.add(kind)
        if kind == "identical":
            assert res == (0.0, 1.0)
    assert len(kinds) == 6


def test_ks_2samp_small_p_values_keep_relative_precision() -> None:
    """Disjoint samples give tiny p-values; they must be right in relative terms too."""
    for n1, n2 in [(3, 3), (3, 60), (17, 23), (60, 60), (59, 60)]:
        a = [float(i) for i in range(n1)]
        b = [100.0 + i for i in range(n2)]
        stat, p, _ = scipy_ks(a, b)
        res = ks_2samp(a, b)
        assert res.statistic == 1.0 == stat
        assert 0 < res.pvalue < 0.11
        assert res.pvalue == pytest.approx(p, rel=EXACT_REL, abs=0)


def test_ks_2samp_hand_checked_values() -> None:
    # Two samples of 2, disjoint: 2 of the C(4, 2) = 6 orderings are this extreme.
    assert ks_2samp([1.0, 2.0], [3.0, 4.0]) == pytest.approx((1.0, 1 / 3))
    # One vs two, disjoint: 2 of 3 orderings put the lone point at an end.
    assert ks_2samp([1.0], [2.0, 3.0]) == pytest.approx((1.0, 2 / 3))
    assert ks_2samp([1.0], [1.0]) == (0.0, 1.0)


def test_ks_2samp_is_symmetric_and_order_free() -> None:
    rng = np.random.default_rng(11)
    a = [float(v) for v in rng.normal(0, 1, 23)]
    b = [float(v) for v in rng.normal(0.8, 1, 31)]
    assert ks_2samp(a, b) == ks_2samp(b, a)
    assert ks_2samp(a, b) == ks_2samp(a[::-1], sorted(b))
    assert ks_2samp([int(v * 10) for v in a], b) == ks_2samp([float(int(v * 10)) for v in a], b)


def test_ks_2samp_rejects_empty_and_nan() -> None:
    with pytest.raises(ValueError, match="non-empty"):
        ks_2samp([], [1.0])
    with pytest.raises(ValueError, match="NaN"):
        ks_2samp([1.0, math.nan], [1.0, 2.0])


def test_ks_2samp_exact_up_to_10000() -> None:
    """max(n1, n2) == 10000 is still exact in scipy: same here, and quick enough."""
    rng = np.random.default_rng(5)
    a = [float(v) for v in rng.normal(0, 1, 10000)]
    b = [float(v) for v in rng.normal(0.4, 1, 25)]
    stat, p, fell_back = scipy_ks(a, b)
    assert not fell_back
    res = ks_2samp(a, b)
    assert res.statistic == pytest.approx(stat, rel=1e-14)
    assert res.pvalue == pytest.approx(p, rel=EXACT_REL)


# -- two-sample KS: where scipy (and we) use the asymptotic formula ----------------------------


@pytest.mark.parametrize(("n", "h"), [(5, 1), (7, 1), (13, 1), (60, 2), (135, 3), (1000, 8)])
def test_ks_2samp_equal_size_fallback(n: int, h: int) -> None:
    """Equal sizes, D = h/n far below 1/sqrt(n): the exact alternating sum overshoots 1 by an
    ulp, scipy falls back to kstwo.sf(D, round(n/2)); we do the same, to the same value."""
    a = [float(i) for i in range(n)]
    b = [i + h - 0.5 for i in range(n)]
    stat, p, fell_back = scipy_ks(a, b)
    assert fell_back  # this really is scipy's asymptotic path
    res = ks_2samp(a, b)
    assert res.statistic == pytest.approx(h / n, rel=1e-15) == stat
    assert 0.99 < res.pvalue <= 1.0  # the true p-value is 1
    assert res.pvalue == pytest.approx(p, rel=ASYMP_REL)


@pytest.mark.parametrize(
    ("n1", "n2", "shift"),
    [
        (10001, 7, 1.0),
        (10001, 40, 0.3),
        (10001, 300, 0.1),
        (12000, 11000, 0.0),
        (12000, 11000, 0.05),
    ],
)
def test_ks_2samp_large_samples_use_scipys_asymptotic_formula(
    n1: int, n2: int, shift: float
) -> None:
    rng = np.random.default_rng(n1 + n2)
    a = [float(v) for v in rng.normal(0, 1, n1)]
    b = [float(v) for v in rng.normal(shift, 1, n2)]
    stat, p, _ = scipy_ks(a, b)
    res = ks_2samp(a, b)
    assert res.statistic == pytest.approx(stat, rel=1e-12)
    assert res.pvalue == pytest.approx(p, rel=ASYMP_REL)


# One (n, x) point in each branch of the Simard-L'Ecuyer selection that kstwo.sf makes.
KSTWO_BRANCHES = {
    "t<=0.5": (10, 0.04),
    "ruben-gambino-low": (10, 0.08),
    "ruben-gambino-low-stirling": (300, 0.003),
    "ruben-gambino-high": (10, 0.95),
    "x>=0.5-smirnov": (10, 0.6),
    "small-n-durbin": (50, 0.1),
    "small-n-pomeranz": (50, 0.2),
    "small-n-miller": (50, 0.35),
    "large-n-zero": (2000, 0.45),
    "large-n-miller": (1000, 0.06),
    "large-n-durbin": (1000, 0.01),
    "large-n-pelz-good": (1000, 0.03),
    "huge-n-pelz-good": (200000, 0.001),
}


@pytest.mark.parametrize(("n", "x"), KSTWO_BRANCHES.values(), ids=KSTWO_BRANCHES.keys())
def test_kolmogorov_sf_matches_scipy_kstwo_in_every_branch(n: int, x: float) -> None:
    expected = float(sps.kstwo.sf(x, n))
    got = ks._kolmogorov_sf(n, x)
    assert got == pytest.approx(expected, rel=ASYMP_REL, abs=1e-300)


def test_kolmogorov_sf_matches_scipy_kstwo_random() -> None:
    rng = np.random.default_rng(2024)
    for _ in range(150):
        n = int(np.exp(rng.uniform(0, np.log(3000))))
        x = float(rng.uniform(0.3, 2.5) / math.sqrt(n)) if rng.random() < 0.7 else rng.random()
        expected = float(sps.kstwo.sf(x, n))
        assert ks._kolmogorov_sf(n, x) == pytest.approx(expected, rel=ASYMP_REL, abs=1e-300), (
            n,
            x,
        )


@pytest.mark.parametrize("n", [1, 2, 5, 40, 141, 2000])
def test_one_sided_smirnov_matches_scipy_special(n: int) -> None:
    for x in np.linspace(0.001, 0.999, 37):
        expected = float(special.smirnov(n, x))
        assert ks._smirnov_sf(n, float(x)) == pytest.approx(expected, rel=1e-10, abs=1e-300)


# -- linear fit and crossing time --------------------------------------------------------------


def _exact_ols(ts: list[float], ys: list[float]) -> tuple[float, float]:
    """OLS slope and intercept in exact rational arithmetic: the ground truth."""
    tq, yq = [Fraction(t) for t in ts], [Fraction(y) for y in ys]
    tm, ym = sum(tq) / len(tq), sum(yq) / len(yq)
    slope = sum((t - tm) * (y - ym) for t, y in zip(tq, yq, strict=True)) / sum(
        (t - tm) ** 2 for t in tq
    )
    return float(slope), float(ym - slope * tm)


@pytest.mark.parametrize("seed", range(5))
def test_linear_fit_matches_polyfit_on_posix_times(seed: int) -> None:
    rng = np.random.default_rng(seed)
    for _ in range(30):
        n = int(rng.integers(2, 60))
        ts = np.sort(T0 + rng.uniform(0, 30 * DAY, n))
        ys = 60 + rng.normal(0, 2, n) + (ts - T0) * rng.normal(0, 1e-5)
        fit = linear_fit(list(ts), list(ys))
        assert isinstance(fit, Fit) and fit.n == n
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", np.exceptions.RankWarning)
            slope, intercept = np.polyfit(ts, ys, 1)
        assert fit.slope == pytest.approx(slope, rel=1e-9)
        assert fit.intercept == pytest.approx(intercept, rel=1e-9)
        exact_slope, exact_intercept = _exact_ols(list(ts), list(ys))
        assert fit.slope == pytest.approx(exact_slope, rel=1e-12)
        assert fit.intercept == pytest.approx(exact_intercept, rel=1e-12)
        assert fit.r2 == pytest.approx(sps.linregress(ts, ys).rvalue ** 2, rel=1e-9, abs=1e-12)
        assert 0.0 <= fit.r2 <= 1.0


def test_linear_fit_perfect_and_flat_lines() -> None:
    fit = linear_fit([0, 1, 2, 3], [10, 12, 14, 16])
    assert fit == Fit(slope=2.0, intercept=10.0, r2=1.0, n=4)
    flat = linear_fit([0.0, 1.0, 2.0], [5.0, 5.0, 5.0])
    assert flat == Fit(slope=0.0, intercept=5.0, r2=0.0, n=3)
    assert math.isnan(sps.linregress([0.0, 1.0, 2.0], [5.0, 5.0, 5.0]).rvalue)  # ours: 0.0


def test_linear_fit_without_a_defined_line_returns_none() -> None:
    assert linear_fit([], []) is None
    assert linear_fit([T0], [1.0]) is None
    assert linear_fit([T0, T0, T0], [1.0, 2.0, 3.0]) is None  # all samples at one time


def test_linear_fit_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="2 times but 3 values"):
        linear_fit([1.0, 2.0], [1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="finite"):
        linear_fit([1.0, 2.0], [1.0, math.nan])
    with pytest.raises(ValueError, match="finite"):
        linear_fit([1.0, math.inf], [1.0, 2.0])


def test_crossing_time_rising_metric() -> None:
    # GPU temperature rising 1 degree a day from 60 C: reaches 85 C in 25 days.
    ts = [T0 + k * DAY / 4 for k in range(40)]
    ys = [60.0 + (t - T0) / DAY for t in ts]
    fit = linear_fit(ts, ys)
    assert fit is not None
    when = crossing_time(fit, 85.0)
    assert when is not None
    assert when == pytest.approx(T0 + 25 * DAY, abs=1.0)


def test_crossing_time_only_for_rising_lines() -> None:
    falling = linear_fit([0.0, 1.0, 2.0], [3.0, 2.0, 1.0])
    flat = linear_fit([0.0, 1.0, 2.0], [3.0, 3.0, 3.0])
    assert falling is not None and flat is not None
    assert crossing_time(falling, 10.0) is None  # moving away from an upper threshold
    assert crossing_time(falling, 0.0) is None  # falling toward a lower one: not our rule
    assert crossing_time(flat, 10.0) is None


def test_crossing_time_already_past_and_never() -> None:
    fit = Fit(slope=2.0, intercept=10.0, r2=1.0, n=5)
    assert crossing_time(fit, 4.0) == -3.0  # line already above: a time in the past
    assert crossing_time(fit, math.inf) is None
    assert crossing_time(fit, -math.inf) is None
    assert crossing_time(Fit(slope=1e-320, intercept=0.0, r2=1.0, n=2), 1e300) is None
    with pytest.raises(ValueError, match="NaN"):
        crossing_time(fit, math.nan)


# -- counters ------------------------------------------------------------------------------------


def test_counter_delta_growth_and_reset() -> None:
    assert counter_delta(10, 15) == CounterDelta(delta=5, reset=False)
    assert isinstance(counter_delta(10, 15).delta, int)  # integer counters stay integers
    assert counter_delta(7, 7) == CounterDelta(delta=0, reset=False)
    assert counter_delta(1000, 3) == CounterDelta(delta=3, reset=True)  # perfquery -R, reboot
    assert counter_delta(1000, 0) == CounterDelta(delta=0, reset=True)
    assert counter_delta(1.5, 4.0) == CounterDelta(delta=2.5, reset=False)


def test_counter_delta_over_a_series_is_never_negative() -> None:
    rng = np.random.default_rng(9)
    value, readings, truth, resets = 0, [0], 0, 0
    for _ in range(500):
        if value >= 50 and rng.random() < 0.05:
            value, resets = 0, resets + 1  # the next reading (< 50) is visibly below the last
        step = int(rng.integers(0, 50))
        value += step
        truth += step
        readings.append(value)
    deltas = [counter_delta(p, c) for p, c in zip(readings, readings[1:], strict=False)]
    assert all(d.delta >= 0 for d in deltas)
    assert sum(d.reset for d in deltas) == resets > 5
    # Each reset happened right before a reading, so nothing was lost: the sum is exact.
    assert sum(d.delta for d in deltas) == truth


@pytest.mark.parametrize(
    ("previous", "current"), [(-1, 5), (5, -1), (math.nan, 5), (5, math.nan), (5, math.inf)]
)
def test_counter_delta_rejects_impossible_readings(previous: float, current: float) -> None:
    with pytest.raises(ValueError, match="not a counter value"):
        counter_delta(previous, current)


def test_rate_per_day() -> None:
    assert rate_per_day(10, 12 * 3600) == pytest.approx(20.0)
    assert rate_per_day(0, 60) == 0.0
    assert rate_per_day(3, 3 * DAY) == pytest.approx(1.0)
    for seconds in (0.0, -5.0, math.inf, math.nan):
        with pytest.raises(ValueError, match="interval"):
            rate_per_day(1, seconds)
    for delta in (-1.0, math.nan, math.inf):
        with pytest.raises(ValueError, match="delta"):
            rate_per_day(delta, 60.0)


# -- cost ------------------------------------------------------------------------------------------


def _one_node(series: list[tuple[list[float], list[float]]]) -> int:
    """What a drift check does per node: per metric a robust z of the newest sample, a KS test
    of the last 10 samples against the 20 before, and a trend with its crossing time."""
    flagged = 0
    for ts, ys in series:
        ref, recent = ys[:20], ys[20:]
        z = robust_z(ys[-1], ref)
        ks = ks_2samp(ref, recent)
        fit = linear_fit(ts, ys)
        when = crossing_time(fit, 90.0) if fit is not None else None
        flagged += (z is not None and abs(z) > 3.5) + (ks.pvalue < 0.01) + (when is not None)
    return flagged


def test_a_node_of_100_metrics_flags_its_drifted_ones() -> None:
    """What the drift check does per node finds the 10 metrics (of 100) that stepped up by
    five units, and flags none of the others twice over. What it costs is measured by
    bench/drift_cost.py (a median against a floor), never asserted here: a time limit in a test
    fails on a loaded machine."""
    rng = np.random.default_rng(1)
    series = []
    for k in range(100):
        ts = [T0 + 3600.0 * i for i in range(30)]
        drift = 5.0 if k % 10 == 0 else 0.0
        ys = [float(v) + drift * (i >= 20) for i, v in enumerate(rng.normal(60, 1, 30))]
        series.append((ts, ys))
    drifted = [series[k] for k in range(0, 100, 10)]
    steady = [series[k] for k in range(100) if k % 10]
    assert all(_one_node([s]) >= 1 for s in drifted)
    assert _one_node(steady) < len(steady)


def test_robust_z_floor_makes_a_gauge_finite() -> None:
    """Issue 18: a week at 30 C then 31 C is one resolution step, not infinitely surprising."""
    flat = [30.0] * 7
    assert robust_z(31.0, flat) == math.inf  # no floor: the strict rule, kept for counters
    assert robust_z(31.0, flat, floor=1.0) == 1.0
    assert robust_z(27.0, flat, floor=0.75) == -4.0
    assert robust_z(30.0, flat, floor=1.0) == 0.0
    spread = [40.0, 42.0, 44.0, 46.0, 48.0]  # MAD 2: 1.4826 * 2 beats a 1.0 floor
    assert robust_z(50.0, spread, floor=1.0) == pytest.approx(0.6745 * 6 / 2)
    assert robust_z(50.0, spread, floor=10.0) == pytest.approx(0.6)  # the floor wins


def test_robust_z_rejects_a_bad_floor() -> None:
    for bad in (-1.0, math.nan):
        with pytest.raises(ValueError, match="floor"):
            robust_z(1.0, [1.0, 2.0, 3.0], floor=bad)
