"""Drift's false-alarm rate and detection delay over simulated nights (issue 18).

256 healthy nodes (a real 8x H100 node's metrics from the simulator, with realistic noise:
gauges jittering by their resolution, temperature and power on a daily cycle, BER wandering,
counters creeping within limits) are swept nightly for 30 nights, with an afternoon check
every third day; drift judges every run before it is recorded. Printed: the drift warnings on
healthy nodes (target 0), per run and per node-night, and for four nodes with slow real drifts
(busbw -0.5 %/night, SBE +2/night, BER x1.5/night from night 8; one GPU 8 °C hotter from
night 20) the nights until a drift result names them (target: each found). Also the median
and p95 of one node's drift evaluation over the run, against the floor of reading that node's
history alone (the SQLite range scan every evaluation starts with), interleaved node by node.

Nodes are split into shards (one history database each, as sites shard by controller) so
`--jobs` processes can run them in parallel; the figures are summed.

    python bench/drift.py [--nodes 256] [--nights 30] [--jobs 2] [--runs 20 (nodes timed)]
    python bench/drift.py --smoke --runs 1      # 4 nodes, 3 nights: nothing drifts yet
"""

from __future__ import annotations

import random
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import harness  # noqa: E402
from stetho import profiles  # noqa: E402
from stetho.facts.metrics import MetricRow  # noqa: E402
from stetho.history import drift  # noqa: E402
from stetho.history.store import History  # noqa: E402
from stetho.sim import nights  # noqa: E402

DRIFT_NODES = ["drift-busbw", "drift-sbe", "drift-ber", "drift-hot"]


def shard(args: tuple[int, list[str], list[MetricRow], int, bool, str, int]
          ) -> dict[str, object]:
    index, healthy, base, count, with_drifts, tmp, timed = args
    prof = profiles.load("h100-sxm-8gpu")
    drifts = nights.standard_drifts(DRIFT_NODES, base) if with_drifts else []
    db = Path(tmp) / f"shard{index}.db"
    start = time.perf_counter()
    out = nights.simulate(db, base, prof, healthy, drifts, nights=count, seed=7 + index)
    wall = time.perf_counter() - start
    # The cost of one evaluation on the filled history, and its floor (the history read),
    # interleaved node by node (harness.interleave alternates which goes first).
    with History(db) as h:
        now = nights.T0 + count * nights.DAY + 2 * 3600
        rows = nights.noisy(base, now, count, random.Random(index))
        to_eval, to_read = iter(healthy[:timed]), iter(healthy[:timed])  # round k: node k

        def evaluate() -> None:
            drift.evaluate(h, next(to_eval), prof, rows, now=now)

        def read() -> None:
            node = next(to_read)
            ids = [sid for sid, *_ in h.series_of(node)]
            h.samples(node, ids, since=now - prof.drift.trend_days * nights.DAY, until=now)

        sides = {"eval": harness.Call(evaluate), "read": harness.Call(read)}
        times = harness.interleave(sides, min(timed, len(healthy)), warm=False)
    return {"runs": out.runs, "healthy_runs": out.healthy_runs,
            "warnings": [(r.node, r.check, r.subject, r.message) for r in out.healthy_warnings],
            "detected": out.detected, "wall": wall, "evals": times["eval"],
            "reads": times["read"], "skips": out.skips}


def main() -> None:
    ap = harness.parser(__doc__, runs=20)
    ap.add_argument("--nodes", type=int, default=256)
    ap.add_argument("--nights", type=int, default=30)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--shards", type=int, default=8)
    a = ap.parse_args()
    harness.in_process(ap, a.before)
    if a.smoke:
        a.nodes, a.nights, a.shards, a.jobs = 4, 3, 1, 1
    with tempfile.TemporaryDirectory() as tmp:
        print("measuring a real node's metrics (simulator, real recorded outputs)...", flush=True)
        base = nights.real_metrics(Path(tmp))
        healthy = [f"node{i:04d}" for i in range(a.nodes)]
        shards = [(i, healthy[i::a.shards], base, a.nights, i == 0, tmp, a.runs)
                  for i in range(a.shards)]
        harness.header(f"{a.nodes} healthy nodes x {len(base)} metrics x {a.nights} nights (+ "
                       f"an afternoon check every 3rd day), {len(DRIFT_NODES)} drifting nodes, "
                       f"{a.shards} shards on {a.jobs} processes")
        start = time.perf_counter()
        with ProcessPoolExecutor(a.jobs) as pool:
            parts = list(pool.map(shard, shards))
        wall = time.perf_counter() - start
    runs = sum(int(p["runs"]) for p in parts)  # type: ignore[call-overload]
    healthy_runs = sum(int(p["healthy_runs"]) for p in parts)  # type: ignore[call-overload]
    warnings = [w for p in parts for w in p["warnings"]]  # type: ignore[attr-defined]
    node_nights = a.nodes * a.nights
    print(f"runs judged: {runs} ({healthy_runs} of healthy nodes) in {wall:.0f} s")
    print(f"false alarms: {len(warnings)} drift warnings/failures on healthy nodes "
          f"({len(warnings) / max(healthy_runs, 1):.4f} per run, "
          f"{len(warnings) / node_nights:.4f} per node-night)")
    for w in warnings[:10]:
        print("   ", *w)
    print("nights to detection (the first drifted night is 1):")
    found: list[bool] = []
    for name, n in parts[0]["detected"].items():  # type: ignore[attr-defined]
        late = ("from night 20" in name and a.nights <= 20) or a.nights < 8
        print(f"   {name:32s} {n if n is not None else 'not started' if late else 'NOT FOUND'}")
        if not late:
            found.append(n is not None)
    evals = [x for p in parts for x in p["evals"]]  # type: ignore[attr-defined]
    reads = [x for p in parts for x in p["reads"]]  # type: ignore[attr-defined]
    print(harness.line(f"drift for one node on {a.nights} nights of history", evals))
    print(harness.line("floor: reading its history alone", reads))
    harness.judge("drift for one node", evals, reads, None)
    harness.goal("0 drift warnings on healthy nodes (issue 18)", not warnings)
    harness.goal("every drift that started is found (issue 18)", all(found) if found else None)


if __name__ == "__main__":
    main()
