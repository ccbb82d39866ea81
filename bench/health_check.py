"""Wall time of one Slurm health check on a healthy simulated node (goal, issue 26: <= 5 s;
Slurm kills a HealthCheckProgram after 60 s).

Starts the multi-node test cluster (tests/slurm_cluster.py: a real slurmctld and slurmd per
network namespace, needs root, slurm-wlm and munge), then runs the node's HealthCheckProgram
wrapper (contrib/slurm/healthcheck.sh on the node's simulated hardware, its own history, the
shared ledger and result spool) inside the node's namespace, as slurmd runs it, N times on
one node, interleaved with the floor (the interpreter starting in that namespace), and prints
the median, p95 and max wall and CPU seconds. `--before REF` runs that checkout's stetho
through the same wrapper (PYTHONPATH), interleaved.

    python bench/health_check.py [--runs 15] [--node n03] [--before REF]
    python bench/health_check.py --smoke --runs 1     # a 2-node cluster
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import harness  # noqa: E402
from tests import slurm_cluster as sc  # noqa: E402


def main() -> None:
    ap = harness.parser(__doc__, runs=15)
    ap.add_argument("--node", default="n03")
    args = ap.parse_args()
    if sc.missing():
        sys.exit(f"cannot start the test cluster here: {', '.join(sc.missing())}")
    c = sc.start(Path(tempfile.mkdtemp(prefix="stetho-bench-hc-")),
                 count=2 if args.smoke else 8)
    node = "n02" if args.smoke else args.node
    try:
        print(f"cluster of {len(c.nodes)} slurmd up in {c.startup_s:.1f} s")
        sides: dict[str, harness.Side] = {}
        for tree in harness.trees(args.before):
            extra = {} if tree.label == "this tree" else {"PYTHONPATH": str(tree.root)}
            sides[f"health check on {node} ({tree.label})"] = harness.Side(
                c.hook_argv(node, "health-check"), env=c.hook_env(node, extra))
        ns = c.hook_argv(node, "health-check")[:2]
        sides["floor: python -c pass in the node's namespace"] = harness.Side(
            [*ns, sys.executable, "-c", "pass"], env=c.hook_env(node))
        harness.header(f"one Slurm health check on a healthy simulated node ({node}), as slurmd "
                       "runs it")
        times = harness.interleave(sides, args.runs, warm=not args.smoke)
        names = list(sides)
        for name, side in sides.items():
            if side.codes != {0}:
                sys.exit(f"{name} exited {sorted(side.codes)}: {side.last_output[-1500:]}")
            print(harness.line(name, times[name], side.cpu) + f"; p95 "
                  f"{harness.ms(harness.p95(times[name]))}")
        harness.judge(names[0], times[names[0]], times[names[-1]], None)
        harness.absolute(names[0], times[names[0]], 5.0)
        if len(names) == 3:
            harness.judge(names[0], times[names[0]], times[names[1]], 1.0, "the checkout before")
    finally:
        sc.stop(c)


if __name__ == "__main__":
    main()
