"""What one nccl-tests job step prints on simulated nodes, as `srun` runs it on each of them.

Why: a release gate compares single-node all-reduce (NVLink inside the node) with multi-node
all-reduce (through the NICs and the leaf switches); a fault in a NIC changes only the
second. Each task of the step runs this; only rank 0 prints, as nccl-tests under MPI does:
- one node: that node's own recorded `all_reduce_perf` output (its `busbw-drop` included);
- several: the real recorded 2-node run (stetho.localize.fabric.render) re-hosted on the
  step's nodes, at the slowest node's NIC factor (`nic-busbw-drop`), with NCCL's version line.
`--noise` adds run-to-run variation (uniform, in ± that fraction), as a real fabric has.

    srun ... sh -c 'python -m stetho.sim.nccl_step --nodes-root DIR
                    --rank "$SLURM_PROCID" --hosts "$SLURM_STEP_NODELIST"'
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

from stetho.core import hostlist
from stetho.sim.draft import NCCL_VERSION


def nic_scale(node_root: Path) -> float:
    f = node_root / "data" / "nic-busbw-scale.txt"
    return float(f.read_text().strip()) if f.is_file() else 1.0


def output(nodes_root: Path, hosts: list[str], noise: float, rng: random.Random) -> str:
    """The text rank 0 prints for a step over `hosts`."""
    from stetho.localize import fabric

    if len(hosts) == 1:
        return (nodes_root / hosts[0] / "data" / "all_reduce_perf.txt").read_text()
    factor = min(nic_scale(nodes_root / h) for h in hosts)
    factor *= 1 + rng.uniform(-noise, noise)
    version = f"{hosts[0]}:1:1 [0] NCCL INFO NCCL version {NCCL_VERSION}+cuda12.2\n"
    return version + fabric.render(hosts, factor)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m stetho.sim.nccl_step")
    ap.add_argument("--nodes-root", type=Path, required=True,
                    help="folder with one simulated node (stetho sim) per host name")
    ap.add_argument("--rank", type=int, default=0)
    ap.add_argument("--hosts", required=True, help="the step's nodes, a Slurm hostlist")
    ap.add_argument("--noise", type=float, default=0.01)
    args = ap.parse_args(argv)
    if args.rank != 0:
        return 0
    try:
        hosts = hostlist.expand(args.hosts)
        sys.stdout.write(output(args.nodes_root, hosts, args.noise, random.Random()))
    except (OSError, ValueError) as exc:
        print(f"nccl_step: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
