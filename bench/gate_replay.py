"""`stetho gate replay` of DAYS nightly sweeps of NODES nodes under two policies (a current one
and a candidate that tightens a threshold), in process: median seconds of the replay (reading,
verifying, deciding, scoring) against a floor measured in the same run, interleaved: reading
and decoding the same rows (SELECT, zlib, json) and nothing else.

The history is built the way bench/history.py builds it (the same 17 results per node and
night: gpu_clocks on 8 GPUs, ib_counters on 9 ports), without the metrics the replay never
reads, with 0.5% of the nights failing a check and the counters drawn around the candidate's
limit, so both policies block some nodes and the comparison lists changes. Kept with --keep.

    python bench/gate_replay.py [--nodes 1024] [--days 30] [--runs 3] [--db PATH --keep]
    python bench/gate_replay.py --days 365        # the year figure (target <= 60 s)
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
import zlib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

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


def floor(db: Path, since: int, until: int) -> int:
    """Reading and decoding the same rows, nothing else: what no replay can beat."""
    with History(db) as h:
        n = 0
        for (blob,) in h.conn.execute(
                "SELECT nr.results FROM node_runs nr JOIN runs r ON r.key = nr.run_key "
                "WHERE nr.time >= ? AND nr.time <= ? ORDER BY nr.node_id, nr.time, "
                "nr.run_key", (since, until)):
            n += len(json.loads(zlib.decompress(blob)))
    return n


def _cpu() -> float:
    """CPU seconds of this process and the workers it waited for."""
    import resource

    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + kids.ru_utime + kids.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=1024)
    ap.add_argument("--days", type=int, default=30)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--db", help="history database (default: a temporary one)")
    ap.add_argument("--keep", action="store_true", help="reuse/keep the built database")
    ap.add_argument("--workers", type=int, default=min(8, os.cpu_count() or 1),
                    help="processes, as `stetho gate replay` uses (default: the cores, at "
                    "most 8); the floor is one process")
    args = ap.parse_args()
    from stetho import config
    from stetho.gate import policy as policies
    from stetho.gate import replay, replay_score

    tmp = Path(tempfile.mkdtemp(prefix="replay-bench-"))
    db = Path(args.db) if args.db else tmp / "h.db"
    if db.exists() and not args.keep:
        for p in db.parent.glob(db.name + "*"):
            p.unlink()
    now = time.time()
    build(db, args.nodes, args.days, now)
    (tmp / "current.yml").write_text(CURRENT)
    (tmp / "candidate.yml").write_text(CANDIDATE)
    config.activate(config.load())
    pols = [policies.load(str(tmp / "candidate.yml")), policies.load(str(tmp / "current.yml"))]
    since, until = int(now - args.days * DAY), int(now)
    t_replay, t_floor, c_replay, c_floor = [], [], [], []
    doc: dict[str, object] = {}
    for _ in range(args.runs):
        s, c = time.perf_counter(), _cpu()
        result = replay.run(db, pols, since, until, workers=args.workers)
        doc = replay_score.score(result, against=1, horizon_s=48 * 3600,
                                 events=[], outcome_sources={})
        t_replay.append(time.perf_counter() - s)
        c_replay.append(_cpu() - c)
        del result
        s, c = time.perf_counter(), time.process_time()
        decoded = floor(db, since, until)
        t_floor.append(time.perf_counter() - s)
        c_floor.append(time.process_time() - c)
    points = doc["decision_points"]
    rows = doc["policies"]
    assert isinstance(rows, list)
    cand = rows[0]
    print(f"history: {args.days} days x {args.nodes} nodes = {points} decision points, "
          f"{decoded} stored results")
    print(f"candidate: {cand['decision_points']}, {len(cand['added'])} blocks added, "
          f"{len(cand['removed'])} removed")
    med, low = statistics.median(t_replay), statistics.median(t_floor)
    target = 10 if args.days <= 30 else 60
    # CPU seconds beside the wall: on a shared machine the wall mostly measures the queue
    print(f"gate replay, 2 policies, {args.days} d x {args.nodes} nodes, {args.workers} "
          f"processes: median {med:.2f} s "
          f"({', '.join(f'{x:.2f}' for x in t_replay)}; CPU median "
          f"{statistics.median(c_replay):.2f} s)   target <= {target} s")
    print(f"floor (read + decode the same rows): median {low:.2f} s (CPU "
          f"{statistics.median(c_floor):.2f} s); replay / floor = {med / low:.2f}")


if __name__ == "__main__":
    main()
