"""The drift check's cost per node: 100 metrics of 30 nightly samples each, per metric a robust
z of the newest sample, a KS test of the last 10 against the 20 before, and a trend with its
crossing time. Prints the median over many repeats and, as the floor measured in the same
run, one pass that only reads every sample (the cost of touching the data at all).

The two are timed in process (drift runs inside a long-lived check), interleaved. Goal (the
one this bench was written with; no issue states a tighter one): <= 10 ms per node on an idle
core, a 1,024-node fleet in about 10 s.

    python bench/drift_cost.py [--runs 50]
    python bench/drift_cost.py --smoke --runs 1
"""

from __future__ import annotations

import random
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import harness  # noqa: E402
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


def main() -> None:
    ap = harness.parser(__doc__, runs=50)
    args = ap.parse_args()
    harness.in_process(ap, args.before)
    series = node_series(random.Random(1))
    sides = {"drift check, 100 metrics x 30 samples, one node": harness.Call(
                 lambda: one_node(series)),
             "floor: read every sample once": harness.Call(lambda: floor(series))}
    harness.header("the drift check's cost per node, in process")
    times = harness.interleave(sides, args.runs)
    for name, call in sides.items():
        print(harness.line(name, times[name], call.cpu))
    names = list(sides)
    harness.judge(names[0], times[names[0]], times[names[1]], None)
    harness.absolute(names[0], times[names[0]], 0.010)
    print(f"1,024 nodes: {statistics.median(times[names[0]]) * 1024:.1f} s")


if __name__ == "__main__":
    main()
