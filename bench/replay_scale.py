"""Replay at fleet scale: wall, CPU and peak RSS of the whole process tree (issue 32: 10,240
nodes in <= 60 s and <= 2 GiB on a 2-core machine).

The fleets are bench/replay.py's: 16 simulated nodes collected for real (4 with faults),
cloned under new names up to N. Each round runs, in fresh processes and in an order that
alternates between rounds (bench/harness.py):
  * the floor: reading and JSON-parsing every bundle once in one process (what no replay can
    avoid), so the page cache warming or a neighbour's load falls on it as on the replays;
  * `stetho check --evidence DIR -n WORKERS --json OUT -q` with this tree;
  * with `--before REF`, the same with REF's checkout (a real git worktree), whose results'
    digest (node, check, subject, status, message, value of every result) must equal this
    tree's: a faster replay that says anything else is wrong.

    python -m bench.replay_scale [--nodes 10240] [--runs 3] [--before main] [--keep DIR]
    python -m bench.replay_scale --smoke      # 32 nodes, one round: proves it runs
"""

from __future__ import annotations

import hashlib
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench import harness
from bench.replay import FAULTS, tree_rss

FLOOR = ("import json, pathlib, sys\n"
         "for p in sorted(pathlib.Path(sys.argv[1]).glob('*.json')):\n"
         "    json.loads(p.read_bytes())\n")
GOAL_S = 60.0
GOAL_BYTES = 2 * 2**30


def seeds() -> list[dict[str, object]]:
    from stetho import profiles
    from stetho.evidence import collect
    from stetho.sim.builder import build_node

    prof = profiles.load("h100-sxm-8gpu")
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(16):
            root = build_node(Path(tmp) / f"seed{i:02d}", f"seed{i:02d}", FAULTS.get(i, []))
            env, name = collect.sim_environment(str(root))
            out.append(collect.collect(prof, env, name).to_json())
    return out


def fleet(folder: Path, n: int, docs: list[dict[str, object]]) -> Path:
    if folder.is_dir() and len(list(folder.glob("*.json"))) == n:
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        doc = dict(docs[i % len(docs)], node=f"gpu{i + 1:05d}")
        (folder / f"gpu{i + 1:05d}.json").write_text(json.dumps(doc))
    return folder


def digest(results_json: Path) -> tuple[str, dict[str, int]]:
    """What the results say, without timings: equal digests are identical verdicts."""
    doc = json.loads(results_json.read_text())
    rows = sorted(json.dumps([r["node"], r["check"], r["subject"], r["status"], r["message"],
                              r.get("value")], default=str) for r in doc["results"])
    return hashlib.sha256("\n".join(rows).encode()).hexdigest()[:12], doc["counts"]


class Replay(harness.Side):
    """A replay side: timed as harness.Side times (wall; CPU of the process tree from the
    children's rusage), and its peak RSS summed over the tree, sampled every 20 ms."""

    def __init__(self, tree: harness.Tree, folder: Path, out: Path, workers: str) -> None:
        super().__init__(tree.stetho("check", "--evidence", str(folder), "-n", workers,
                                     "--json", str(out), "-q"),
                         env=tree.env(), cwd=tree.root)
        self.out = out
        self.peaks: list[int] = []

    def __call__(self) -> float:
        self.out.unlink(missing_ok=True)
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        proc = subprocess.Popen(list(self.argv), env=dict(self.env or os.environ),
                                cwd=self.cwd, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
        done = threading.Event()
        peak = 0

        def sample() -> None:
            nonlocal peak
            while not done.is_set():
                peak = max(peak, tree_rss(proc.pid))
                done.wait(0.02)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        output, _ = proc.communicate()
        wall = time.perf_counter() - start
        done.set()
        sampler.join()
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        self.cpu.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
        self.codes.add(proc.returncode)
        self.last_output = output
        self.peaks.append(peak)
        if proc.returncode not in (0, 1, 3):
            sys.exit(f"replay exited {proc.returncode}: {output[-800:]}")
        return wall


def main() -> None:
    ap = harness.parser(__doc__, runs=3)
    ap.add_argument("--nodes", type=int, nargs="+", default=[10240])
    ap.add_argument("--workers", default="2", help="-n for the replays (2: this machine)")
    ap.add_argument("--keep", type=Path, help="keep the generated fleets here, reuse them")
    ap.add_argument("--no-warm", action="store_true",
                    help="no untimed first round (a loaded machine where a round takes minutes)")
    args = ap.parse_args()
    if args.smoke:
        args.nodes, args.runs = [32], 1
    work = args.keep or Path(tempfile.mkdtemp(prefix="stetho-replay-scale-"))
    harness.header(f"replay scale: stetho check --evidence, -n {args.workers}, "
                   f"{args.runs} interleaved rounds (medians)")
    docs = seeds()
    print(f"bundle size: {len(json.dumps(docs[0])) / 1024:.0f} KiB per node (16 simulated "
          f"nodes collected for real, {len(FAULTS)} faulty, cloned to N)")
    trees = harness.trees(args.before)
    for n in args.nodes:
        folder = fleet(work / f"fleet{n}", n, docs)
        sides: dict[str, harness.Side] = {
            "floor": harness.Side([sys.executable, "-c", FLOOR, str(folder)])}
        for i, tree in enumerate(trees):
            sides[tree.label] = Replay(tree, folder, work / f"results{i}-{n}.json", args.workers)
        times = harness.interleave(sides, args.runs, warm=not (args.smoke or args.no_warm))
        floor = statistics.median(times["floor"])
        print(f"{n} nodes, {harness.load()}")
        print("  " + harness.line("floor (read + JSON-parse every bundle)", times["floor"],
                                  sides["floor"].cpu))
        digests = {}
        for tree in trees:
            side = sides[tree.label]
            assert isinstance(side, Replay)
            med = statistics.median(times[tree.label])
            cpu = statistics.median(side.cpu)
            peak = statistics.median(side.peaks)
            d, counts = digest(side.out)
            digests[tree.label] = d
            print("  " + harness.line(tree.label, times[tree.label], side.cpu))
            print(f"    {med / floor:.1f}x the floor; CPU {cpu / n * 1000:.1f} ms/node; peak RSS "
                  f"{peak / 2**20:.0f} MiB ({peak / n / 1024:.0f} KiB/node); exit "
                  f"{sorted(side.codes)}; {sum(counts.values())} results ({counts['fail']} fail, "
                  f"{counts['error']} error); digest {d}")
        this = trees[0].label
        main_side = sides[this]
        assert isinstance(main_side, Replay)
        med, peak = statistics.median(times[this]), statistics.median(main_side.peaks)
        print(f"  goal (issue 32, {n} nodes): wall median {med:.1f} s (<= {GOAL_S:g} s): "
              f"{'met' if med <= GOAL_S else 'NOT MET'}; CPU median "
              f"{statistics.median(sides[this].cpu):.1f} s (2 cores x {GOAL_S:g} s = "
              f"{2 * GOAL_S:g} CPU-s is the ceiling); peak RSS {peak / 2**30:.2f} GiB "
              f"(<= 2 GiB): {'met' if peak <= GOAL_BYTES else 'NOT MET'}")
        if len(digests) == 2:
            same = len(set(digests.values())) == 1
            print(f"  results: {'identical' if same else 'DIFFER'} ({', '.join(digests.values())})")
            if not same:
                sys.exit(1)
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
