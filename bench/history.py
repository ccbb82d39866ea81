"""The history database at one year of nightly sweeps of 1,024 nodes x 100 metrics, or (--bulk)
of a fleet of real-size nodes.

Builds the database (about 37 million metric rows; kept with --keep for a later run). With
--bulk it is written by bench/history_build.py: each node-night one real healthy 8x H100
node's results and metrics as `stetho check --sim` records them (227 results, a 9.9 KB blob;
264 metrics), signed and chained as History.record writes them; the newest --full-days nights
with their results, older ones as `stetho history prune` leaves them, metrics for the newest
--metric-days nights (the figures say what was built and what is extrapolated). Then it
prints: the insert time of one more sweep, the p50/p95 of `stetho history NODE --since 30d`
(query and table render, in process; and the CLI's wall time with Python start-up, apart),
the p50/p95 of the drift computation for one node, of the checks' counter window read for one
node (the one query a node a run that `check --local` adds, stetho.checking.counter_history),
and the database size.

    python bench/history.py [--nodes 1024] [--days 365] [--db /tmp/stetho-history-bench.db --keep]
    python bench/history.py --bulk --nodes 10240 --keep      # the fleet year (~15 min, ~8 GB)
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sqlite3
import statistics
import subprocess
import sys
import time
import zlib
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from stetho import profiles  # noqa: E402
from stetho.history import drift
from stetho.history import view as historyview
from stetho.history.store import History, NodeRun  # noqa: E402
from stetho.results import Result  # noqa: E402

DAY = 86400
GPU_METRICS = [("temperature_c", "C", 35.0), ("power_w", "W", 120.0),
               ("sm_clock_mhz", "MHz", 1980.0), ("app_sm_clock_mhz", "MHz", 1980.0),
               ("ecc_correctable", "", 0.0), ("pcie_replays", "", 50.0),
               ("nvlink_replay", "", 0.0), ("nvlink_crc", "", 0.0)]
IB_METRICS = [("SymbolErrorCounter", 0.0), ("PortRcvErrors", 14.0),
              ("LinkDownedCounter", 0.0), ("rate_gbps", 400.0)]


def node_metrics(rng: random.Random, day: int) -> list[list[object]]:
    out: list[list[object]] = []
    for g in range(8):
        for name, unit, base in GPU_METRICS:
            drift_ = day * 0.1 if name in ("ecc_correctable", "pcie_replays") else 0.0
            out.append(["gpu", f"gpu{g}", name, base + drift_ + rng.random(), unit])
    for p in (0, 1, 4, 5, 6, 7, 8, 9, 10):
        for name, base in IB_METRICS:
            out.append(["ib", f"mlx5_{p}:1", name, base + (0 if name == "rate_gbps"
                                                          else rng.random()), ""])
    return out[:100]


def results_for(node: str) -> list[Result]:
    return [Result(node, "gpu_clocks", f"gpu{g}", "pass", "clocks locked to target",
                   "SM 1980 / mem 2619", "MHz", "SM 1980 / mem 2619 MHz") for g in range(8)] + \
        [Result(node, "ib_counters", f"mlx5_{p}:1", "pass", "error counters under thresholds",
                14, "errors") for p in range(9)]


def sweep(h: History, nodes: list[str], day: int, t0: float, rng: random.Random,
          run_id: str | None = None, night: Any = None, when: float | None = None) -> float:
    """One sweep through History.record; `night` (--bulk): the real node's results and
    metrics for every node, else the small synthetic ones."""
    if night is not None:
        runs = [NodeRun(n, "h100-sxm-8gpu", [Result.from_json({**d, "node": n})
                                             for d in night.results], night.metrics)
                for n in nodes]
    else:
        runs = [NodeRun(n, "h100-sxm-8gpu", results_for(n), node_metrics(rng, day))
                for n in nodes]
    start = time.perf_counter()
    h.record(run_id or f"bench-{day:04d}", "sweep", runs,
             when=when if when is not None else t0 + day * DAY)
    return time.perf_counter() - start


def bulk(path: Path, n: int, days: int, full_days: int, metric_days: int, now: float) -> Any:
    """The fleet year, unless a kept database already holds it; returns the real node-night."""
    from bench import history_build

    night = history_build.real_node()
    if path.exists():
        with History(path) as h:
            have = h.conn.execute("SELECT count(*) FROM node_runs").fetchone()[0]
        if have >= n * days:
            print(f"reusing {path}: {have:,} node-runs")
            return night
    blob = len(zlib.compress(json.dumps(night.results).encode(), 6))
    print(f"one real node-night (stetho check --sim, healthy 8x H100): {len(night.results)} "
          f"results, a {blob / 1024:.1f} KiB blob, {len(night.metrics)} metrics", flush=True)
    print(f"building {days} nights x {n:,} nodes: {n * days / 1e6:.2f} M node-runs "
          f"({n * days * len(night.results) / 1e6:.0f} M results, "
          f"{n * len(night.results) / 1e6:.2f} M a night), the newest {full_days} nights "
          f"with their results, older pruned; metrics for the newest "
          f"{metric_days} nights", flush=True)
    start = time.perf_counter()
    counts = history_build.build(path, n, days, night, now - 3600, metric_days=metric_days,
                                 full_days=full_days)
    size = sum(p.stat().st_size for p in path.parent.glob(path.name + "*"))
    rows = counts["metric_rows"]
    year = n * days * len(night.metrics)
    print(f"  built in {time.perf_counter() - start:.0f} s: {size / 2**30:.2f} GiB, "
          f"{counts['node_runs']:,} node-runs, {rows / 1e6:.1f} M metric rows")
    with History(path) as h:
        per_row = _bytes_per_metric_row(h)
    print(f"  extrapolated, not built: metrics for all {days} nights would be "
          f"{year / 1e6:.0f} M rows, about {(year - rows) * per_row / 2**30:.1f} GiB more "
          f"({per_row:.0f} bytes a row as built); full results for all {days} nights "
          f"about {n * (days - full_days) * blob / 2**30:.1f} GiB more", flush=True)
    return night


def _bytes_per_metric_row(h: History) -> float:
    """The metrics table's bytes per row, from SQLite's own page count (dbstat where built,
    else the file's share)."""
    try:
        size = h.conn.execute("SELECT sum(pgsize) FROM dbstat WHERE name = 'metrics'"
                              ).fetchone()[0]
    except sqlite3.OperationalError:  # dbstat is a compile-time option
        return float("nan")
    rows = h.conn.execute("SELECT count(*) FROM metrics").fetchone()[0]
    return float(size or 0) / max(rows, 1)


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=1024)
    ap.add_argument("--days", type=int, default=365)
    ap.add_argument("--db", default="/tmp/stetho-history-bench.db")
    ap.add_argument("--keep", action="store_true", help="reuse/keep the built database")
    ap.add_argument("--bulk", action="store_true", help="real-size nodes, written in bulk "
                    "(bench/history_build.py): the fleet-scale year")
    ap.add_argument("--full-days", type=int, default=30, help="--bulk: nights that keep "
                    "their full results (older: pruned)")
    ap.add_argument("--metric-days", type=int, default=30, help="--bulk: nights with metrics")
    ap.add_argument("--build-only", action="store_true", help="--bulk: build (or reuse) the "
                    "database and stop (for bench/gate.py)")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes: proves it runs")
    args = ap.parse_args()
    if args.smoke:
        args.nodes, args.days = min(args.nodes, 16), min(args.days, 10)
        args.full_days, args.metric_days = min(args.full_days, 4), min(args.metric_days, 4)
    path = Path(args.db)
    nodes = [f"gpu{i:04d}" for i in range(1, args.nodes + 1)]
    rng = random.Random(7)
    now = time.time()
    t0 = now - args.days * DAY
    if path.exists() and not args.keep:
        for p in path.parent.glob(path.name + "*"):
            p.unlink()
    night = bulk(path, args.nodes, args.days, args.full_days, args.metric_days, now) \
        if args.bulk else None
    if args.build_only:
        return
    with History(path) as h:
        have = h.conn.execute("SELECT count(*) FROM runs WHERE id NOT LIKE 'bench-timed-%'"
                              ).fetchone()[0]
        if have < args.days:
            print(f"building {args.days} nightly sweeps x {args.nodes} nodes x 100 metrics "
                  f"({args.days * args.nodes * 100 / 1e6:.1f} M metric rows)...", flush=True)
            start = time.perf_counter()
            for day in range(have, args.days):
                sweep(h, nodes, day, t0, rng)
                if day % 50 == 49:
                    print(f"  {day + 1} sweeps, {time.perf_counter() - start:.0f} s", flush=True)
            print(f"  built in {time.perf_counter() - start:.0f} s")
        rows = h.conn.execute("SELECT count(*) FROM metrics").fetchone()[0]
        # The timed sweeps get ids of their own, so a kept database can be benched again.
        stamp = time.time_ns()
        inserts = [sweep(h, nodes, args.days + i, t0, rng, run_id=f"bench-timed-{stamp}-{i}",
                         night=night, when=now - 1800 + 60 * i if night else None)
                   for i in range(1 if night else 3)]
        what = (f"{len(night.results)} results and {len(night.metrics)} metrics each"
                if night else "17 results and 100 metrics each")
        print(f"metric rows: {rows / 1e6:.1f} M; one more sweep ({args.nodes} nodes, "
              f"{what}, History.record) inserted in: median {statistics.median(inserts):.2f} s "
              f"({', '.join(f'{x:.2f}' for x in inserts)})   target <= 3 s")
        sample = rng.sample(nodes, min(50, len(nodes)))
        q = []
        for n in sample:
            s = time.perf_counter()
            table = historyview.rows(h, n, since_s=30 * DAY, now=now + 4 * DAY)
            historyview.render(n, table)
            q.append(time.perf_counter() - s)
        print(f"history NODE --since 30d (query + table, in process, {len(sample)} nodes): "
              f"p50 {pct(q, 50) * 1000:.1f} ms  p95 {pct(q, 95) * 1000:.1f} ms   "
              f"target <= 100 ms p95")
        prof = profiles.load("h100-sxm-8gpu")
        d = []
        for n in sample:
            current = node_metrics(rng, args.days + 3)
            s = time.perf_counter()
            drift.evaluate(h, n, prof, current, now=now + 4 * DAY)
            d.append(time.perf_counter() - s)
        print(f"drift for one node ({len(sample)} nodes): p50 {pct(d, 50) * 1000:.1f} ms  "
              f"p95 {pct(d, 95) * 1000:.1f} ms   target <= 100 ms p95")
    from stetho.checking import counter_history

    w = []
    for n in sample:
        s = time.perf_counter()
        window = counter_history.load(path, n, now + 4 * DAY, prof.counters.window_h * 3600)
        w.append(time.perf_counter() - s)
    print(f"counter window for one node, one query ({len(sample)} nodes, "
          f"{sum(len(v) for v in window.readings.values())} readings the last): "
          f"p50 {pct(w, 50) * 1000:.1f} ms  p95 {pct(w, 95) * 1000:.1f} ms")
    cli = []
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    for n in sample[:7]:
        s = time.perf_counter()
        subprocess.run([sys.executable, "-m", "stetho", "history", n, "--since", "30d", "--db",
                        str(path)], capture_output=True, env=env, check=True)
        cli.append(time.perf_counter() - s)
    print(f"stetho history NODE --since 30d as a command (with Python start-up): "
          f"median {statistics.median(cli) * 1000:.0f} ms")
    size = sum(p.stat().st_size for p in path.parent.glob(path.name + "*"))
    print(f"database size: {size / 2**30:.2f} GiB ({path})")
    if not args.keep:
        for p in path.parent.glob(path.name + "*"):
            p.unlink()


if __name__ == "__main__":
    main()
