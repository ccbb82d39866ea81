"""The drift check's cost per node: 100 metrics of 30 nightly samples each, per metric a robust
z of the newest sample, a KS test of the last 10 against the 20 before, and a trend with its
crossing time. Prints the median over many repeats and, as the floor measured in the same
run, one pass that only reads every sample (the cost of touching the data at all).

Target: well under 10 ms per node on an idle core (a 1,024-node fleet in about 10 s).

    python bench/drift_cost.py [--repeats 50]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from stetho.history.ks import ks_2samp  # noqa: E402
from stetho.history.stats import crossing_time, linear_fit, robust_z  # noqa: E402

T0 = 1.7e9


def node_series(rng: random.Random, metrics: int = 100) -> list[tuple[list[float], list[float]]]:
    out = []
    for k in range(metrics):
        ts = [T0 + 3600.0 * i for i in range(30)]
        drift = 0.5 if k % 10 == 0 else 0.0
        out.append((ts, [rng.gauss(60, 1) + drift * (i >= 20) for i in range(30)]))
    return out


def one_node(series: list[tuple[list[float], list[float]]]) -> int:
    flagged = 0
    for ts, ys in series:
        ref, recent = ys[:20], ys[20:]
        z = robust_z(ys[-1], ref)
        ks = ks_2samp(ref, recent)
        fit = linear_fit(ts, ys)
        when = crossing_time(fit, 90.0) if fit is not None else None
        flagged += (z is not None and abs(z) > 3.5) + (ks.pvalue < 0.01) + (when is not None)
    return flagged


def floor(series: list[tuple[list[float], list[float]]]) -> int:
    return sum(len(ts) + int(sum(ys)) for ts, ys in series)


def median_s(fn: object, series: list[tuple[list[float], list[float]]], repeats: int) -> float:
    assert callable(fn)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn(series)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=50)
    args = ap.parse_args()
    series = node_series(random.Random(1))
    one_node(series)  # warm up
    check = median_s(one_node, series, args.repeats)
    base = median_s(floor, series, args.repeats)
    print(f"drift check, 100 metrics x 30 samples: median {check * 1e3:.2f} ms per node "
          f"({args.repeats} repeats)")
    print(f"floor (read every sample once):        median {base * 1e3:.3f} ms")
    print(f"ratio: {check / base:.0f}x the floor; 1,024 nodes: {check * 1024:.1f} s")


if __name__ == "__main__":
    main()
