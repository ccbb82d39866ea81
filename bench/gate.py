"""The pre-job gate for 64 nodes decided from history, on a year of nightly sweeps of a fleet:
p50/p95 wall and CPU of the whole command (Python start-up included), against the floor.

Uses the database `bench/history.py --bulk` builds (real-size node-nights: 227 results each,
signed and chained; the newest 30 nights with their results, older ones pruned). Records,
through the history interface (stetho.history.backend), a fresh whole sweep of the 64 nodes an
hour ago and, a minute ago, a prolog's narrow run (its quick checks only) on every other one,
then times `stetho gate --policy pre-job --nodes 'gpu[0001-0064]'`: per node and check the
newest fresh result, each row's signature and the node's chain up to the seal verified. The
floor is the same SQLite query and the decode of the same blobs in a fresh Python process,
without verifying anything; interleaved with the gate (bench/harness.py). `--before REF` times
that git ref's checkout on the same database (a real worktree, run from its own root).

    python bench/history.py --bulk --nodes 10240 --build-only --keep --db /tmp/stetho-fleet.db
    python bench/gate.py --db /tmp/stetho-fleet.db [--runs 21] [--before main]
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import harness  # noqa: E402
from stetho.gate import policy  # noqa: E402
from stetho.history.backend import open_history  # noqa: E402
from stetho.history.store import NodeRun  # noqa: E402
from stetho.results import Result  # noqa: E402

GOAL_P95_S = 0.200
NODES = [f"gpu{i:04d}" for i in range(1, 65)]

#: the floor: the gate's query for the 64 nodes' rows in the freshness window, each blob
#: decompressed and parsed, nothing verified
FLOOR = r"""
import json, sqlite3, sys, zlib
db, since, until = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
names = [f"gpu{i:04d}" for i in range(1, 65)]
c = sqlite3.connect(db)
n = 0
for name, t, run, blob in c.execute(
        "SELECT n.name, nr.time, r.id, nr.results FROM nodes n JOIN node_runs nr ON "
        "nr.node_id = n.id JOIN runs r ON r.key = nr.run_key WHERE n.name IN (%s) AND "
        "nr.time >= ? AND nr.time <= ? ORDER BY n.name, nr.time DESC" % ",".join("?" * 64),
        [*names, since, until]):
    n += len(json.loads(zlib.decompress(blob)))
print(n, "results")
"""


#: subjects per check on an 8-GPU, 9-port node (what a real sweep records), for the benches
#: that build a history of pre-job checks (bench/job.py, bench/overrides.py)
_SUBJECTS = {"gpu": [f"gpu{g}" for g in range(8)], "ib": [f"mlx5_{p}:1" for p in range(9)],
             "pcie": [f"0000:{b:02x}:00.0" for b in range(16)],
             "versions": ["driver", "cuda", "nccl", "ofed", "kernel"]}
_PER = {"gpu_xid": "gpu", "gpu_ecc": "gpu", "gpu_throttle": "gpu", "gpu_temperature": "gpu",
        "gpu_clocks": "gpu", "gpu_nvlink": "gpu", "ib_port_state": "ib", "ib_counters": "ib",
        "pcie_link": "pcie", "versions": "versions", "disk_rotational": "disk"}


def whole_run(node: str, checks: list[str]) -> list[Result]:
    """A passing result per check and subject, as a node's sweep records them."""
    out = []
    for check in checks:
        subjects = _SUBJECTS.get(_PER.get(check, ""), ["nvme0n1", "nvme1n1"]
                                 if check == "disk_rotational" else [""])
        out += [Result(node, check, s, "pass", "ok", 1.0, "") for s in subjects]
    return out

def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def fresh(db: Path, now: float) -> int:
    """A whole sweep of the 64 nodes an hour ago and a prolog on every other one a minute ago,
    recorded through the history interface. Returns the results recorded."""
    from bench.history_build import PROFILE, real_node

    night = real_node()
    quick = set(policy.load("pre-job").local_checks)
    whole = {n: [Result.from_json({**d, "node": n}) for d in night.results] for n in NODES}
    with open_history(db) as h:
        h.record(f"gate-bench-sweep-{int(now)}", "sweep",
                 [NodeRun(n, PROFILE, rs, night.metrics) for n, rs in whole.items()],
                 when=now - 3600)
        h.record(f"gate-bench-prolog-{int(now)}", "gate",
                 [NodeRun(n, PROFILE, [r for r in whole[n] if r.check in quick], [])
                  for n in NODES[::2]], when=now - 60)
    return sum(map(len, whole.values()))


def counts(db: Path) -> str:
    import sqlite3

    c = sqlite3.connect(db)
    nodes, runs = (c.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in ("nodes", "runs"))
    node_runs, pruned = c.execute("SELECT count(*), sum(substr(results, 1, 14) = "
                                  "CAST('stetho-pruned:' AS BLOB)) FROM node_runs").fetchone()
    metrics = c.execute("SELECT count(*) FROM metrics").fetchone()[0]
    c.close()
    size = sum(p.stat().st_size for p in db.parent.glob(db.name + "*"))
    return (f"database: {size / 2**30:.2f} GiB; {nodes:,} nodes, {runs:,} runs, {node_runs:,} "
            f"node-runs ({pruned or 0:,} pruned to their verdict), {metrics / 1e6:.1f} M metric "
            f"rows")


def in_process(db: Path, now: float, runs: int) -> tuple[list[float], list[float]]:
    """Wall seconds of the gate's history read and of the floor's query + decode, in this
    process, interleaved (no start-up, no run folder: what the read itself costs)."""
    import json
    import sqlite3
    import zlib

    from stetho.gate.decision import required_checks

    pre_job = policy.load("pre-job")
    wanted = required_checks(pre_job)
    read: list[float] = []
    bare: list[float] = []
    q = ",".join("?" * len(NODES))
    for _ in range(runs):
        start = time.perf_counter()
        with open_history(db) as h:
            got = h.latest_per_check(NODES, pre_job.freshness_s, now=now, checks=wanted)
        read.append(time.perf_counter() - start)
        assert len(got) == len(NODES) and not any(v.distrusted for v in got.values())
        start = time.perf_counter()
        c = sqlite3.connect(db)
        for *_, blob in c.execute(
                "SELECT n.name, nr.time, r.id, nr.results FROM nodes n JOIN node_runs nr ON "
                "nr.node_id = n.id JOIN runs r ON r.key = nr.run_key WHERE n.name IN "
                f"({q}) AND nr.time >= ? AND nr.time <= ? ORDER BY n.name, nr.time DESC",
                [*NODES, int(now - pre_job.freshness_s), int(now + 300)]):
            json.loads(zlib.decompress(blob))
        c.close()
        bare.append(time.perf_counter() - start)
    return read, bare


def seal_reads(db: Path, runs: int) -> list[float]:
    """Wall seconds of the seal's first read in a process: a new history, the process's
    cache of verified seals emptied (stetho.history.chain), the seal read and checked."""
    from stetho.history import chain

    out = []
    for _ in range(runs):
        with open_history(db) as h:
            chain._VERIFIED.clear()
            start = time.perf_counter()
            h.chained.seal()  # type: ignore[attr-defined]
            out.append(time.perf_counter() - start)
    return out


def smoke_db() -> Path:
    from bench import history_build

    db = Path(tempfile.mkdtemp(prefix="gate-bench-smoke-")) / "h.db"
    history_build.build(db, 64, 10, history_build.real_node(), time.time() - 86400,
                        metric_days=2, full_days=4, say=lambda *a, **k: None)
    return db


def main() -> None:
    ap = harness.parser(__doc__, runs=21)
    ap.add_argument("--db", default="/tmp/stetho-fleet.db")
    args = ap.parse_args()
    db = smoke_db() if args.smoke else Path(args.db)
    runs = 2 if args.smoke else args.runs
    if not db.exists():
        sys.exit(f"{db} does not exist: run `python bench/history.py --bulk --nodes 10240 "
                 f"--build-only --keep --db {db}` first")
    harness.header("stetho gate --policy pre-job, 64 nodes, from history")
    # the bench records its fresh sweep into a copy: recording into --db itself would pile one
    # more sweep of the 64 nodes into the freshness window on every run, and the gate and its
    # floor would read a different history each time
    scratch = Path(tempfile.mkdtemp(prefix="gate-bench-", dir=db.parent))
    start = time.perf_counter()
    for part in db.parent.glob(db.name + "*"):  # the -wal file too, if one was left
        shutil.copy2(part, scratch / part.name)  # the key keeps its 0600
    print(f"copied {db} to {scratch / db.name} in {time.perf_counter() - start:.1f} s")
    source, db = db, scratch / db.name
    now = time.time()
    print(f"recorded through the history interface: {fresh(db, now):,} results (a sweep of "
          f"the 64 nodes 1 h ago, a prolog on 32 of them 1 min ago)")
    print(counts(db))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    # pre-job's dry-run scheduler step asks scontrol about the nodes: a stand-in that answers
    # at once, so the figure is the gate's and not a slurmctld's (or a DNS lookup's) latency
    (scratch / "bin").mkdir()
    (scratch / "bin" / "scontrol").write_text("#!/bin/sh\nexit 0\n")
    (scratch / "bin" / "scontrol").chmod(0o755)
    env["PATH"] = f"{scratch / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    fresh_s = policy.load("pre-job").freshness_s
    sides: dict[str, harness.Side] = {}
    for tree in harness.trees(args.before):
        sides[f"gate ({tree.label})"] = harness.Side(
            tree.stetho("gate", "--policy", "pre-job", "--nodes", "gpu[0001-0064]", "--db",
                        str(db), "--quiet", "--no-reports", "--out", str(scratch / "runs")),
            env=tree.env(env), cwd=tree.root)
    sides["floor"] = harness.Side([sys.executable, "-c", FLOOR, str(db),
                                   str(int(now - fresh_s)), str(int(now + 300))], env=env,
                                  cwd=scratch)
    times = harness.interleave(sides, runs)
    for name, side in sides.items():
        ts = times[name]
        print(f"{name}: p50 {pct(ts, 50) * 1000:.0f} ms, p95 {pct(ts, 95) * 1000:.0f} ms wall; "
              f"CPU p50 {pct(side.cpu, 50) * 1000:.0f} ms, p95 {pct(side.cpu, 95) * 1000:.0f} "
              f"ms; {len(ts)} runs; exit {sorted(side.codes)}")
        print(f"  {side.last_output.strip().splitlines()[-1] if side.last_output.strip() else ''}")
    gate = times["gate (this tree)"]
    floor = times["floor"]
    print(f"ratio: the gate's p50 is {statistics.median(gate) / statistics.median(floor):.2f}x "
          f"the floor's, its p95 {pct(gate, 95) / pct(floor, 95):.2f}x")
    read, bare = in_process(db, now, runs)
    seal = seal_reads(db, runs)
    print(f"the gate's history read alone, in process (open_history + latest_per_check, every "
          f"row and chain verified): p50 {pct(read, 50) * 1000:.0f} ms, p95 "
          f"{pct(read, 95) * 1000:.0f} ms; the same query + decode unverified: p50 "
          f"{pct(bare, 50) * 1000:.0f} ms, p95 {pct(bare, 95) * 1000:.0f} ms "
          f"({statistics.median(read) / statistics.median(bare):.2f}x)")
    print(f"the seal's first read in a process (read whole and its MAC checked, as every gate "
          f"does whatever its nodes): p50 {pct(seal, 50) * 1000:.1f} ms, p95 "
          f"{pct(seal, 95) * 1000:.1f} ms")
    p95 = pct(gate, 95)
    print(f"goal: gate p95 {p95 * 1000:.0f} ms (goal <= {GOAL_P95_S * 1000:.0f} ms): "
          f"{'met' if p95 <= GOAL_P95_S else 'NOT MET'}")
    print(harness.load())
    shutil.rmtree(scratch, ignore_errors=True)
    if args.smoke:
        shutil.rmtree(source.parent, ignore_errors=True)


if __name__ == "__main__":
    main()
