"""`stetho job` for a 512-node job over 24 h of history: median wall time of the whole command,
Python start-up included, against a floor measured in the same run, interleaved: the same
SQLite query alone (the job's nodes' node_runs rows in the window, in a fresh Python with only
sqlite3), so the ratio says what stetho adds to reading the rows at all.

The database holds a health check of every one of 1,024 nodes each hour for 36 h (pre-job's
checks per GPU, port and device, as bench/gate.py builds them), one node of the job failing its
IB port from 6 h ago and drift warnings on another; the job is gpu[0017-0528], started 23 h
ago, still running; topology.conf puts 32 nodes under each leaf (so the job's first and last
leaves hold other nodes, whose failures are read too). sacct and scontrol are stand-ins that
answer at once, with scontrol's recorded line shape (fixtures/recorded/slurm-jobs-testbed/),
so the figure is stetho's and not a slurmctld's. Goal: <= 2 s (README, `stetho job`);
`--before REF` times that checkout's `stetho job` too, interleaved.

    python bench/job.py [--runs 7] [--keep DIR] [--before REF]
    python bench/job.py --smoke --runs 1     # 16 nodes, 6 h: the smoke test
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import harness  # noqa: E402
from bench.gate import whole_run  # noqa: E402
from stetho.core import hostlist  # noqa: E402
from stetho.gate import policy  # noqa: E402
from stetho.history.store import History, NodeRun  # noqa: E402
from stetho.results import Result  # noqa: E402

HOUR = 3600
_JOB_LINE = ("JobId=4242 JobName=pretrain UserId=alice(1000) GroupId=alice(1000) "
             "JobState=RUNNING Reason=None Partition=gpu StartTime={start} EndTime=Unknown "
             "NodeList={nodes} BatchHost={first} NumNodes={n} TRES=cpu={cpus},node={n},"
             "billing={cpus},gres/gpu={gpus} Command=(null) WorkDir=/home/alice")


def _stand_ins(folder: Path, nodes: str, first: str, n: int, start: float) -> None:
    line = _JOB_LINE.format(start=time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(start)),
                            nodes=nodes, first=first, n=n, cpus=n * 64, gpus=n * 8)
    (folder / "sacct").write_text("#!/bin/sh\necho 'Slurm accounting storage is disabled' "
                                  ">&2\nexit 1\n")
    (folder / "scontrol").write_text(
        f"#!/bin/sh\nif [ \"$2\" = job ]; then echo '{line}'; fi\nexit 0\n")
    for name in ("sacct", "scontrol"):
        (folder / name).chmod(0o755)


def build(db: Path, names: list[str], hours: int, failing: str, drifting: str,
          now: float) -> None:
    checks = [c for c in policy.load("pre-job").checks if c != "sweep"]
    healthy = {n: whole_run(n, checks) for n in names}
    with History(db) as h:
        for k in range(hours, 0, -1):
            t = now - k * HOUR
            runs = []
            for n in names:
                results = healthy[n]
                if n == failing and k <= 6:
                    results = [Result(n, "ib_port_state", "mlx5_0:1", "fail",
                                      "mlx5_0 port at 200 Gb/s, expected 400 Gb/s"),
                               *results[1:]]
                elif n == drifting and k <= 3:
                    results = [Result(n, "drift_shift", "gpu2", "warn",
                                      "temperature_c shifted +6 C"), *results]
                runs.append(NodeRun(n, "h100-sxm-8gpu", results, []))
            h.record(f"job-bench-{int(t)}", "gate-health-check", runs, when=t)


_FLOOR = """import sqlite3, sys
nodes = sys.argv[2].split(",")
con = sqlite3.connect(sys.argv[1])
n = 0
for i in range(0, len(nodes), 500):
    chunk = nodes[i:i + 500]
    q = ",".join("?" * len(chunk))
    n += len(con.execute(
        "SELECT n.name, nr.time, r.id, r.run_dir, nr.run_key, nr.profile, nr.exit_code, "
        "nr.fail, nr.error, nr.warn, nr.skip, nr.pass, nr.results, nr.mac FROM nodes n "
        "JOIN node_runs nr ON nr.node_id = n.id JOIN runs r ON r.key = nr.run_key "
        f"WHERE n.name IN ({q}) AND nr.time >= ? AND nr.time <= ? ORDER BY nr.time",
        [*chunk, int(sys.argv[3]), int(sys.argv[4])]).fetchall())
print(n)
"""


def main() -> None:
    ap = harness.parser(__doc__)
    ap.add_argument("--keep", help="build (or reuse) the database in this folder")
    args = ap.parse_args()
    fleet, job_n, hours, per_leaf, first = ((16, 8, 6, 4, 3) if args.smoke
                                             else (1024, 512, 36, 32, 17))
    names = [f"gpu{i:04d}" for i in range(1, fleet + 1)]
    job = names[first - 1:first - 1 + job_n]
    failing, drifting = job[3], job[5]
    folder = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="job-bench-"))
    folder.mkdir(parents=True, exist_ok=True)
    db = folder / "history.db"
    now = time.time()
    try:
        t0 = time.perf_counter()
        if db.exists():
            db.unlink()
            for p in folder.glob("history.db*"):
                p.unlink()
        build(db, names, hours, failing, drifting, now)
        built = time.perf_counter() - t0
        start = now - (hours - 13 if not args.smoke else 3) * HOUR
        (folder / "topology.conf").write_text("".join(
            f"SwitchName=leaf{k:02d} Nodes={hostlist.compress(names[i:i + per_leaf])}\n"
            for k, i in enumerate(range(0, fleet, per_leaf))))
        bin_dir = folder / "bin"
        bin_dir.mkdir(exist_ok=True)
        expr = hostlist.compress(job)
        _stand_ins(bin_dir, expr, job[0], job_n, start)
        base = {k: v for k, v in os.environ.items() if not k.startswith("STETHO_")}
        base["PATH"] = f"{bin_dir}{os.pathsep}{base.get('PATH', '')}"
        base["STETHO_DRAIN_LEDGER"] = str(folder / "ledger.db")
        sides: dict[str, harness.Side] = {}
        for tree in harness.trees(args.before):
            sides[f"stetho job 4242 ({tree.label})"] = harness.Side(
                tree.stetho("job", "4242", "--db", str(db), "--topology",
                            str(folder / "topology.conf"), "--margin", "1h"),
                env=tree.env(base), cwd=tree.root)
        sides["floor: the same SQLite query alone"] = harness.Side(
            [sys.executable, "-c", _FLOOR, str(db), ",".join(job), str(int(start - HOUR)),
             str(int(now + 3600))], env=base)
        with History(db) as h:
            rows = h.conn.execute("SELECT count(*) FROM node_runs").fetchone()[0]
        span = (now - start + HOUR) / HOUR
        harness.header(f"stetho job for a {job_n}-node job over {span:.0f} h of hourly checks "
                       f"of {fleet} nodes")
        print(f"database: {fleet} nodes, {hours} h of hourly health checks, {rows} node rows "
              f"({db.stat().st_size / 1e6:.0f} MB; built in {built:.1f} s); job: {job_n} "
              f"nodes {expr}, started {(now - start) / HOUR:.0f} h ago, margin 1 h")
        times = harness.interleave(sides, args.runs, warm=not args.smoke)
        names_ = list(sides)
        out = sides[names_[0]].last_output
        print("stetho job says: " + out.splitlines()[0] if out else "(no output)")
        for name in names_:
            side = sides[name]
            extra = (f" rows {side.last_output.strip()}" if name.startswith("floor")
                     else f" exit {sorted(side.codes)}")
            print(harness.line(name, times[name], side.cpu) + extra)
        floor = times[names_[-1]]
        harness.judge(names_[0], times[names_[0]], floor, None)
        harness.absolute(names_[0], times[names_[0]], 2.0)
        if len(names_) == 3:
            harness.judge(names_[0], times[names_[0]], times[names_[1]], 1.0,
                          "the checkout before")
    finally:
        if not args.keep:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
