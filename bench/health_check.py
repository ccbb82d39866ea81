"""Wall time of one Slurm health check on a healthy simulated node (issue target: <= 5 s;
Slurm kills a HealthCheckProgram after 60 s).

Starts the multi-node test cluster (tests/slurm_cluster.py: a real slurmctld and slurmd per
network namespace, needs root, slurm-wlm and munge), then runs the node's HealthCheckProgram
wrapper (contrib/slurm/healthcheck.sh on the node's simulated hardware, its own history, the
shared ledger and result spool) inside the node's namespace, as slurmd runs it, N times in a
row on one node, and prints the median, p95 and max wall and CPU seconds.

    python bench/health_check.py [--runs 15] [--node n03]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests import slurm_cluster as sc  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--node", default="n03")
    args = ap.parse_args()
    if sc.missing():
        sys.exit(f"cannot start the test cluster here: {', '.join(sc.missing())}")
    c = sc.start(Path(tempfile.mkdtemp(prefix="stetho-bench-hc-")), count=8)
    try:
        print(f"cluster of {len(c.nodes)} slurmd up in {c.startup_s:.1f} s")
        walls: list[float] = []
        cpus: list[float] = []
        c.run_hook(args.node, "health-check")  # warm the bytecode and page caches
        for _ in range(args.runs):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            t0 = time.perf_counter()
            r = subprocess.run(c.hook_argv(args.node, "health-check"),
                               env=c.hook_env(args.node), capture_output=True, text=True,
                               timeout=120)
            walls.append(time.perf_counter() - t0)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
            if r.returncode != 0:
                sys.exit(f"health check exited {r.returncode}: {r.stdout}{r.stderr}")
        walls.sort()
        p95 = walls[min(len(walls) - 1, round(0.95 * (len(walls) - 1)))]
        print(f"health check on a healthy simulated node ({args.node}), {args.runs} runs: "
              f"median {statistics.median(walls):.2f} s wall, p95 {p95:.2f} s, "
              f"max {walls[-1]:.2f} s; median {statistics.median(cpus):.2f} s CPU "
              "(target: <= 5 s wall)")
    finally:
        sc.stop(c)


if __name__ == "__main__":
    main()
