"""`stetho stats --since 365d` over a year of nightly sweeps of 1,024 nodes (~373k node_runs
rows, signed): median wall time of the whole command, Python start-up included, against the
floor measured in the same run, interleaved: one Python process that opens the database and
reads node_runs' summary columns (node, time, run, fail, error, warn) once, which any answer
must do. Goal: <= 10 s.

The history is built with bench/history.py's results (what bench/gate.py uses), without the
metric rows (stats does not read them, and they take minutes to write), plus faults: on
about 0.3% of node-nights a failing check for one to three nights, and a warning on 1%.

    python bench/stats.py [--db /tmp/stetho-stats-bench.db] [--keep] [--runs 5]
    python bench/stats.py --nodes 8 --days 20 --runs 1     # the smoke test's tiny mode
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.history import results_for  # noqa: E402
from stetho.history.store import History, NodeRun  # noqa: E402
from stetho.results import Result  # noqa: E402

DAY = 86400
CAUSES = ["gpu_xid", "gpu_ecc", "ib_port_state", "ib_counters", "pcie_link", "gpu_nvlink"]
FLOOR = ("import sqlite3, sys\n"
         "con = sqlite3.connect(sys.argv[1])\n"
         "n = 0\n"
         "for row in con.execute('SELECT node_id, time, run_key, fail, error, warn FROM "
         "node_runs ORDER BY node_id, time, run_key'):\n"
         "    n += 1\n"
         "print(n)\n")


def build(path: Path, nodes: int, days: int) -> None:
    names = [f"gpu{i:04d}" for i in range(1, nodes + 1)]
    rng = random.Random(11)
    t0 = time.time() - days * DAY
    failing: dict[str, tuple[int, str]] = {}  # node -> (nights left, cause)
    start = time.perf_counter()
    with History(path) as h:
        for day in range(days):
            runs = []
            for n in names:
                res = results_for(n)
                left, cause = failing.get(n, (0, ""))
                if not left and rng.random() < 0.003:
                    left, cause = rng.randint(1, 3), rng.choice(CAUSES)
                if left:
                    res.append(Result(n, cause, "gpu0", "fail", "injected"))
                    failing[n] = (left - 1, cause)
                elif rng.random() < 0.01:
                    res.append(Result(n, rng.choice(CAUSES), "gpu0", "warn", "injected"))
                runs.append(NodeRun(n, "h100-sxm-8gpu", res, []))
            h.record(f"stats-bench-{day:04d}", "sweep", runs, when=t0 + day * DAY)
            if day % 50 == 49:
                print(f"  {day + 1} sweeps, {time.perf_counter() - start:.0f} s", flush=True)
    print(f"built {days} sweeps x {nodes} nodes in {time.perf_counter() - start:.0f} s")


def timed(argv: list[str], env: dict[str, str]
          ) -> tuple[float, float, subprocess.CompletedProcess[str]]:
    """(wall, CPU seconds user + system, the process): on a loaded machine the wall time
    mostly measures the queue for a core, the CPU time what the command itself costs."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(argv, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, proc


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--db", default="/tmp/stetho-stats-bench.db")
    ap.add_argument("--nodes", type=int, default=1024)
    ap.add_argument("--days", type=int, default=365)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--keep", action="store_true", help="reuse the database if it is there")
    args = ap.parse_args()
    db = Path(args.db)
    if db.exists() and not args.keep:
        for p in db.parent.glob(db.name + "*"):
            p.unlink()
    if not db.exists():
        build(db, args.nodes, args.days)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.pop("STETHO_KB_REPO", None)
    env.pop("STETHO_OVERRIDE_REPO", None)
    stats = [sys.executable, "-m", "stetho", "stats", "--db", str(db), "--since",
             f"{args.days + 1}d", "--json"]
    floor = [sys.executable, "-c", FLOOR, str(db)]
    timed(floor, env)  # warm the page cache for both
    t_stats, t_floor, c_stats, c_floor = [], [], [], []
    rows = incidents = "?"
    for _ in range(max(1, args.runs)):
        t, c, proc = timed(stats, env)
        if proc.returncode != 0:
            sys.exit(f"stetho stats failed ({proc.returncode}): {proc.stderr.strip()}")
        t_stats.append(t)
        c_stats.append(c)
        got = json.loads(proc.stdout)
        rows, incidents = got["rows"]["read"], got["incidents"]
        t, c, proc = timed(floor, env)
        t_floor.append(t)
        c_floor.append(c)
    ms, mf = statistics.median(t_stats), statistics.median(t_floor)
    cs, cf = statistics.median(c_stats), statistics.median(c_floor)
    print(f"history: {rows:,} node_runs rows, {incidents:,} incidents; load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(f"stetho stats --since {args.days + 1}d: median {ms:.2f} s over {len(t_stats)} runs "
          f"(min {min(t_stats):.2f}, max {max(t_stats):.2f}; CPU median {cs:.2f} s)   "
          "goal <= 10 s")
    print(f"floor (one scan of node_runs' summary columns, python start-up included): median "
          f"{mf:.2f} s (min {min(t_floor):.2f}, max {max(t_floor):.2f}; CPU median {cf:.2f} s)")
    print(f"ratio stats / floor: {ms / mf:.2f} wall, {cs / cf:.2f} CPU")


if __name__ == "__main__":
    main()
