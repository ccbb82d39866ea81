"""`stetho stats --since 365d` over a year of nightly sweeps of 1,024 nodes (~373k node_runs
rows, signed): median wall time of the whole command, Python start-up included, against the
floor measured in the same run, interleaved: one Python process that opens the database and
reads node_runs' summary columns (node, time, run, fail, error, warn) once, which any answer
must do. Goal: <= 10 s (README, "Reliability figures"); `--before REF` times that checkout's
`stetho stats` too, interleaved.

The history is built with bench/history.py's results (what bench/gate.py uses), without the
metric rows (stats does not read them, and they take minutes to write), plus faults: on
about 0.3% of node-nights a failing check for one to three nights, and a warning on 1%.

    python bench/stats.py [--db /tmp/stetho-stats-bench.db] [--keep] [--runs 5] [--before REF]
    python bench/stats.py --smoke --runs 1     # 6 nodes x 12 nights: the smoke test
"""

from __future__ import annotations

import atexit
import json
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import harness  # noqa: E402
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


def main() -> None:
    ap = harness.parser(__doc__, runs=3)
    ap.add_argument("--db", default="/tmp/stetho-stats-bench.db")
    ap.add_argument("--nodes", type=int, default=1024)
    ap.add_argument("--days", type=int, default=365)
    ap.add_argument("--keep", action="store_true", help="reuse the database if it is there")
    args = ap.parse_args()
    if args.smoke:
        args.nodes, args.days = 6, 12
        tmp = tempfile.mkdtemp(prefix="stetho-stats-smoke-")
        atexit.register(shutil.rmtree, tmp, True)
        args.db = str(Path(tmp) / "h.db")
    db = Path(args.db)
    if db.exists() and not args.keep:
        for p in db.parent.glob(db.name + "*"):
            p.unlink()
    if not db.exists():
        build(db, args.nodes, args.days)
    base = {k: v for k, v in os.environ.items() if not k.startswith("STETHO_")}
    sides: dict[str, harness.Side] = {}
    for tree in harness.trees(args.before):
        sides[f"stetho stats ({tree.label})"] = harness.Side(
            tree.stetho("stats", "--db", str(db), "--since", f"{args.days + 1}d", "--json"),
            env=tree.env(base), cwd=tree.root)
    sides["floor"] = harness.Side([sys.executable, "-c", FLOOR, str(db)], env=base)
    harness.header(f"stetho stats --since {args.days + 1}d over {args.days} nightly sweeps x "
                   f"{args.nodes} nodes")
    times = harness.interleave(sides, max(1, args.runs), warm=not args.smoke)
    names = list(sides)
    for name, side in sides.items():
        if side.codes != {0}:
            sys.exit(f"{name} exited {sorted(side.codes)}: {side.last_output[-800:]}")
    got = json.loads(sides[names[0]].last_output)
    print(f"history: {got['rows']['read']:,} node_runs rows, {got['incidents']:,} incidents")
    for name in names:
        print(harness.line(name, times[name], sides[name].cpu))
    for name in names[:-1]:
        harness.judge(name, times[name], times["floor"], None)
        harness.judge(name + " CPU", sides[name].cpu, sides["floor"].cpu, None,
                      "the floor's CPU")
    harness.absolute(names[0], times[names[0]], 10.0)
    if len(names) == 3:
        harness.judge(names[0], times[names[0]], times[names[1]], 1.0, "the checkout before")


if __name__ == "__main__":
    main()
