"""A pre-job gate for 64 nodes decided from fresh history, on a database holding a year of
nightly sweeps of 1,024 nodes: median wall time of the whole command, Python start-up included.

Uses the database bench/history.py builds (run it first with --keep), adds one sweep of fresh
results now, then times `stetho gate --policy pre-job --nodes 'gpu[0001-0064]'`. The floor,
`python -c pass`, is measured in the same run.

    python bench/history.py --keep && python bench/gate.py [--db /tmp/stetho-history-bench.db]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.history import node_metrics, results_for  # noqa: E402
from stetho.history.store import History, NodeRun  # noqa: E402


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, int]:
    start = time.perf_counter()
    proc = subprocess.run(argv, env=env, capture_output=True, text=True)
    return time.perf_counter() - start, proc.returncode


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--db", default="/tmp/stetho-history-bench.db")
    ap.add_argument("--runs", type=int, default=9)
    args = ap.parse_args()
    db = Path(args.db)
    if not db.exists():
        sys.exit(f"{db} does not exist: run `python bench/history.py --keep` first")
    rng = random.Random(3)
    with History(db) as h:
        nodes = [r[0] for r in h.conn.execute("SELECT name FROM nodes ORDER BY name")]
        runs = h.conn.execute("SELECT count(*) FROM runs").fetchone()[0]
        rows = h.conn.execute("SELECT count(*) FROM metrics").fetchone()[0]
        h.record(f"gate-bench-{int(time.time())}", "sweep",
                 [NodeRun(n, "h100-sxm-8gpu", results_for(n), node_metrics(rng, 400))
                  for n in nodes], when=time.time())
    print(f"database: {len(nodes)} nodes, {runs} runs, {rows / 1e6:.1f} M metric rows")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    gate = [sys.executable, "-m", "stetho", "gate", "--policy", "pre-job", "--nodes",
            "gpu[0001-0064]", "--db", str(db), "--quiet"]
    floor = [sys.executable, "-c", "pass"]
    timed(gate, env)
    t_gate, t_floor, codes = [], [], set()
    for _ in range(args.runs):
        t, rc = timed(gate, env)
        t_gate.append(t)
        codes.add(rc)
        t_floor.append(timed(floor, env)[0])
    print(f"stetho gate --policy pre-job --nodes 'gpu[0001-0064]' (from history): median "
          f"{statistics.median(t_gate) * 1000:.0f} ms (min {min(t_gate) * 1000:.0f}, max "
          f"{max(t_gate) * 1000:.0f}; exit {sorted(codes)})   target <= 500 ms")
    print(f"floor: python -c pass: median {statistics.median(t_floor) * 1000:.0f} ms")


if __name__ == "__main__":
    main()
