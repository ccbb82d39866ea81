"""Replay of N simulated nodes' evidence bundles: wall time and peak memory.

Builds 16 distinct simulated nodes (a few carrying faults), collects their bundles for real
through the shims, then clones them under new node names up to N (256 and 1,024 by default)
and times `stetho check --evidence DIR -n auto` over each set. Peak memory is the largest sum
of RSS over the whole process tree (controller and xdist workers), sampled every 20 ms.

    python bench/replay.py [--nodes 256 1024] [--workers auto]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

FAULTS = {3: ["busbw-drop=15"], 7: ["hca-fw-old"], 11: ["xid=48"], 13: ["nvme-rotational"]}


def tree_rss(pid: int) -> int:
    """Resident bytes of a process and all its descendants."""
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/statm") as fh:
                total += int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
            with open(f"/proc/{p}/task/{p}/children") as fh:
                todo += [int(c) for c in fh.read().split()]
        except OSError:
            continue
    return total


def run(argv: list[str]) -> tuple[float, int, int]:
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    peak = 0
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, tree_rss(proc.pid))
            time.sleep(0.02)

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    _, err = proc.communicate()
    done.set()
    t.join()
    if proc.returncode not in (0, 1, 3):
        sys.exit(f"replay exited {proc.returncode}: {err[-800:]}")
    return time.perf_counter() - start, peak, proc.returncode


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, nargs="+", default=[256, 1024])
    ap.add_argument("--workers", default="auto")
    args = ap.parse_args()
    from stetho import profiles
    from stetho.evidence import collect
    from stetho.sim.builder import build_node

    prof = profiles.load("h100-sxm-8gpu")
    with tempfile.TemporaryDirectory() as tmp:
        seeds = []
        for i in range(16):
            root = build_node(Path(tmp) / "sim" / f"seed{i:02d}", f"seed{i:02d}",
                              FAULTS.get(i, []))
            env, name = collect.sim_environment(str(root))
            seeds.append(collect.collect(prof, env, name).to_json())
        size = len(json.dumps(seeds[0]))
        print(f"bundle size: {size / 1024:.0f} KiB per node")
        for n in args.nodes:
            folder = Path(tmp) / f"run{n}"
            folder.mkdir()
            for i in range(n):
                doc = dict(seeds[i % len(seeds)], node=f"gpu{i + 1:04d}")
                (folder / f"gpu{i + 1:04d}.json").write_text(json.dumps(doc))
            argv = [sys.executable, "-m", "stetho", "check", "--evidence", str(folder),
                    "-n", args.workers, "--json", str(Path(tmp) / f"r{n}.json"), "-q"]
            wall, peak, rc = run(argv)
            results = json.loads((Path(tmp) / f"r{n}.json").read_text())["counts"]
            print(f"replay {n:5d} nodes: wall {wall:6.1f} s  peak RSS {peak / 2**20:7.0f} MiB  "
                  f"({wall / n * 1000:.1f} ms/node, exit {rc}, {sum(results.values())} results,"
                  f" {results['fail']} fail)")


if __name__ == "__main__":
    main()
