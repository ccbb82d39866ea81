"""A pre-job gate for 64 nodes decided from fresh history, on a database holding a year of
nightly sweeps of 1,024 nodes: median wall time of the whole command, Python start-up included.

Uses the database bench/history.py builds (run it first with --keep), adds one whole sweep of
fresh results now (a result for every check pre-job needs, per GPU, port and device) and, an
hour later, a prolog's narrow run (its quick checks only) for every other node, then times
`stetho gate --policy pre-job --nodes 'gpu[0001-0064]'`: per node and check the newest fresh
result (the completeness rule), so both runs are read. The floor, `python -c pass`, is measured
in the same run; `--baseline-src DIR` also times another source tree (say, main's) on the same
database, interleaved.

    python bench/history.py --keep && python bench/gate.py [--db /tmp/stetho-history-bench.db]
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.history import node_metrics, results_for  # noqa: E402
from stetho.gate import policy  # noqa: E402
from stetho.history.store import History, NodeRun  # noqa: E402
from stetho.results import Result  # noqa: E402

#: subjects per check on an 8-GPU, 9-port node (what a real sweep records)
_SUBJECTS = {"gpu": [f"gpu{g}" for g in range(8)], "ib": [f"mlx5_{p}:1" for p in range(9)],
             "pcie": [f"0000:{b:02x}:00.0" for b in range(16)],
             "versions": ["driver", "cuda", "nccl", "ofed", "kernel"]}
_PER = {"gpu_xid": "gpu", "gpu_ecc": "gpu", "gpu_throttle": "gpu", "gpu_temperature": "gpu",
        "gpu_clocks": "gpu", "gpu_nvlink": "gpu", "ib_port_state": "ib", "ib_counters": "ib",
        "pcie_link": "pcie", "versions": "versions", "disk_rotational": "disk"}


def whole_run(node: str, checks: list[str]) -> list[Result]:
    out = []
    for check in checks:
        subjects = _SUBJECTS.get(_PER.get(check, ""), ["nvme0n1", "nvme1n1"]
                                 if check == "disk_rotational" else [""])
        out += [Result(node, check, s, "pass", "ok", 1.0, "") for s in subjects]
    return out


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, int]:
    start = time.perf_counter()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(argv, env=env, capture_output=True, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    CPU.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    return time.perf_counter() - start, proc.returncode


#: CPU seconds (user + system) of each timed command, in order: on a loaded machine the wall
#: time mostly measures the queue for a core, the CPU time what the command itself costs
CPU: list[float] = []


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--db", default="/tmp/stetho-history-bench.db")
    ap.add_argument("--runs", type=int, default=9)
    ap.add_argument("--baseline-src", help="also time this source tree (PYTHONPATH) as a "
                    "baseline, interleaved with this one")
    args = ap.parse_args()
    db = Path(args.db)
    if not db.exists():
        sys.exit(f"{db} does not exist: run `python bench/history.py --keep` first")
    rng = random.Random(3)
    pre_job = [c for c in policy.load("pre-job").checks if c != "sweep"]
    quick = list(policy.load("pre-job").local_checks)
    now = time.time()
    with History(db) as h:
        nodes = [r[0] for r in h.conn.execute("SELECT name FROM nodes ORDER BY name")]
        runs = h.conn.execute("SELECT count(*) FROM runs").fetchone()[0]
        rows = h.conn.execute("SELECT count(*) FROM metrics").fetchone()[0]
        h.record(f"gate-bench-{int(now)}", "sweep",
                 [NodeRun(n, "h100-sxm-8gpu", results_for(n) + whole_run(n, pre_job),
                          node_metrics(rng, 400)) for n in nodes], when=now - 3600)
        h.record(f"gate-bench-prolog-{int(now)}", "gate",
                 [NodeRun(n, "h100-sxm-8gpu", whole_run(n, quick), [])
                  for n in nodes[::2]], when=now - 60)
    print(f"database: {len(nodes)} nodes, {runs} runs, {rows / 1e6:.1f} M metric rows")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    # pre-job's dry-run scheduler step asks scontrol about the nodes: a stand-in that answers
    # at once, so the figure is the gate's and not a slurmctld's (or a DNS lookup's) latency
    stand_in = Path(tempfile.mkdtemp(prefix="gate-bench-bin-"))
    (stand_in / "scontrol").write_text("#!/bin/sh\nexit 0\n")
    (stand_in / "scontrol").chmod(0o755)
    env["PATH"] = f"{stand_in}{os.pathsep}{env.get('PATH', '')}"
    gate = [sys.executable, "-m", "stetho", "gate", "--policy", "pre-job", "--nodes",
            "gpu[0001-0064]", "--db", str(db), "--quiet", "--no-reports"]
    floor = [sys.executable, "-c", "pass"]
    variants = {"this tree": env}
    if args.baseline_src:
        variants[f"baseline {args.baseline_src}"] = {**env, "PYTHONPATH": args.baseline_src}
    for v in variants.values():
        timed(gate, v)
    times: dict[str, list[float]] = {k: [] for k in variants}
    cpu: dict[str, list[float]] = {k: [] for k in variants}
    codes: dict[str, set[int]] = {k: set() for k in variants}
    t_floor, cpu_floor = [], []
    for _ in range(args.runs):
        for name, v in variants.items():
            t, rc = timed(gate, v)
            times[name].append(t)
            cpu[name].append(CPU[-1])
            codes[name].add(rc)
        t_floor.append(timed(floor, env)[0])
        cpu_floor.append(CPU[-1])
    for name, ts in times.items():
        print(f"stetho gate --policy pre-job --nodes 'gpu[0001-0064]' (from history, {name}): "
              f"median {statistics.median(ts) * 1000:.0f} ms (min {min(ts) * 1000:.0f}, max "
              f"{max(ts) * 1000:.0f}; CPU median {statistics.median(cpu[name]) * 1000:.0f} ms; "
              f"exit {sorted(codes[name])})   target <= 500 ms")
    print(f"floor: python -c pass: median {statistics.median(t_floor) * 1000:.0f} ms "
          f"(CPU {statistics.median(cpu_floor) * 1000:.0f} ms)")


if __name__ == "__main__":
    main()
