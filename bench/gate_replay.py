"""`stetho gate replay` of DAYS nightly sweeps of NODES nodes under two policies (a current one
and a candidate that tightens a threshold): median seconds of the command (Python start-up,
reading, verifying, deciding, scoring, split over the cores as the command does) against a
floor interleaved with it in fresh processes: one Python process reading and decoding the same
rows (SELECT, zlib, json) and nothing else. Goal: <= 10 s for 30 days, <= 60 s for a year
(README, "Replay and shadow"). `--before REF` times that checkout's command too.

The history is built the way bench/history.py builds it (the same 17 results per node and
night: gpu_clocks on 8 GPUs, ib_counters on 9 ports), without the metrics the replay never
reads, with 0.5% of the nights failing a check and the counters drawn around the candidate's
limit, so both policies block some nodes and the comparison lists changes. Kept with --keep.

    python bench/gate_replay.py [--nodes 1024] [--days 30] [--runs 3] [--db PATH --keep]
    python bench/gate_replay.py --days 365        # the year figure (goal <= 60 s)
    python bench/gate_replay.py --smoke --runs 1  # 8 nodes x 3 nights
"""

from __future__ import annotations

import json
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import harness  # noqa: E402
from bench.history import DAY, results_for  # noqa: E402
from stetho.history.store import History, NodeRun  # noqa: E402
from stetho.results import Result  # noqa: E402

CURRENT = "policy: bench-current\nchecks: [gpu_clocks, ib_counters]\nblock_on: [fail, error]\n" \
          "freshness: 36h\n"
CANDIDATE = CURRENT.replace("bench-current", "bench-candidate") + \
    "tighten:\n  ib_counters:\n    max: 14.99\n"


def night(node: str, rng: random.Random) -> list[Result]:
    out = results_for(node)
    bad = rng.random() < 0.005
    return [Result(r.node, r.check, r.subject, "fail" if bad and i == 0 else r.status,
                   r.message, round(14 + rng.random(), 2) if r.check == "ib_counters"
                   else r.value, r.unit, r.expected) for i, r in enumerate(out)]


def build(db: Path, nodes: int, days: int, now: float) -> None:
    names = [f"gpu{i:04d}" for i in range(1, nodes + 1)]
    rng = random.Random(11)
    with History(db) as h:
        have = h.conn.execute("SELECT count(*) FROM runs").fetchone()[0]
        if have >= days:
            return
        start = time.perf_counter()
        print(f"building {days} nightly sweeps x {nodes} nodes x 17 results...", flush=True)
        for day in range(have, days):
            h.record(f"replay-bench-{day:04d}", "sweep",
                     [NodeRun(n, "h100-sxm-8gpu", night(n, rng), []) for n in names],
                     when=now - (days - day) * DAY + 3600)
        print(f"  built in {time.perf_counter() - start:.0f} s", flush=True)


FLOOR = """import json, sqlite3, sys, zlib
con = sqlite3.connect(sys.argv[1])
n = 0
for (blob,) in con.execute(
        "SELECT nr.results FROM node_runs nr JOIN runs r ON r.key = nr.run_key "
        "WHERE nr.time >= ? AND nr.time <= ? ORDER BY nr.node_id, nr.time, nr.run_key",
        (int(sys.argv[2]), int(sys.argv[3]))):
    n += len(json.loads(zlib.decompress(blob)))
print(n)
"""


def main() -> None:
    ap = harness.parser(__doc__, runs=3)
    ap.add_argument("--nodes", type=int, default=1024)
    ap.add_argument("--days", type=int, default=30)
    ap.add_argument("--db", help="history database (default: a temporary one)")
    ap.add_argument("--keep", action="store_true", help="reuse/keep the built database")
    args = ap.parse_args()
    if args.smoke:
        args.nodes, args.days = 8, 3
    tmp = Path(tempfile.mkdtemp(prefix="replay-bench-"))
    try:
        db = Path(args.db) if args.db else tmp / "h.db"
        if db.exists() and not args.keep:
            for p in db.parent.glob(db.name + "*"):
                p.unlink()
        now = time.time()
        build(db, args.nodes, args.days, now)
        (tmp / "current.yml").write_text(CURRENT)
        (tmp / "candidate.yml").write_text(CANDIDATE)
        base = {k: v for k, v in os.environ.items() if not k.startswith("STETHO_")}
        sides: dict[str, harness.Side] = {}
        for k, tree in enumerate(harness.trees(args.before)):
            sides[f"stetho gate replay ({tree.label})"] = harness.Side(
                tree.stetho("gate", "replay", "--policy", str(tmp / "candidate.yml"),
                            "--against", str(tmp / "current.yml"), "--since",
                            f"{args.days + 1}d", "--db", str(db), "--json",
                            str(tmp / f"replay{k}.json")), env=tree.env(base), cwd=tmp)
        since = int(now - (args.days + 1) * DAY)
        sides["floor: read + decode the same rows"] = harness.Side(
            [sys.executable, "-c", FLOOR, str(db), str(since), str(int(now) + 3600)], env=base)
        harness.header(f"stetho gate replay, 2 policies, {args.days} d x {args.nodes} nodes")
        times = harness.interleave(sides, args.runs, warm=not args.smoke)
        names = list(sides)
        for name, side in sides.items():
            if side.codes != {0}:
                sys.exit(f"{name} exited {sorted(side.codes)}: {side.last_output[-800:]}")
        doc = json.loads((tmp / "replay0.json").read_text())
        cand = doc["policies"][0]
        print(f"history: {args.days} days x {args.nodes} nodes = {doc['decision_points']} "
              f"decision points, {sides[names[-1]].last_output.strip()} stored results")
        print(f"candidate: {cand['decision_points']}, {len(cand['added'])} blocks added, "
              f"{len(cand['removed'])} removed")
        for name in names:
            print(harness.line(name, times[name], sides[name].cpu))
        harness.judge(names[0], times[names[0]], times[names[-1]], None)
        harness.absolute(names[0], times[names[0]], 10.0 if args.days <= 30 else 60.0)
        if len(names) == 3:
            harness.judge(names[0], times[names[0]], times[names[1]], 1.0, "the checkout before")
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
