"""What `stetho bench` costs beyond the benchmarks themselves.

1. Wall of `stetho check --local --sim <8-GPU node> --bench quick` against the floor
   `stetho check --local --sim <same node>`, interleaved in fresh processes, medians of N runs
   with CPU (goal: the quick suite adds <= 2 s, README "stetho bench"), and `stetho bench run
   --suite quick --sim` alone; `--before REF` times that checkout's `--bench quick` run too.
2. Per benchmark, in process: the wall of running it (needs checks, busy probe, temp folder,
   server start/stop, repeats) minus the tool's own time (the sum of its processes' durations),
   median over rounds: the overhead stetho adds. The GPU benchmarks run on the simulated node
   (their tools print real recorded outputs); fio and iperf3 run for real (127.0.0.1 peer) with
   `--runtime` seconds each (default 2; the shipped default is 10), so their rows also show
   that a run is bounded by the tool's configured runtime.

    python bench/bench_suite.py [--runs 5] [--rounds 3] [--runtime 2] [--before REF]
    python bench/bench_suite.py --smoke --runs 1
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import harness  # noqa: E402


def cli_walls(node: Path, args: argparse.Namespace, tmp: str) -> None:
    common = ("--sim", str(node), "--profile", "h100-sxm-8gpu", "--no-history", "-q")
    base = {k: v for k, v in os.environ.items() if not k.startswith("STETHO_")}
    sides: dict[str, harness.Side] = {}
    for tree in harness.trees(args.before):
        env, label = tree.env(base), tree.label
        if label == "this tree":
            sides["check --local (floor)"] = harness.Side(
                tree.stetho("check", "--local", *common), env=env, cwd=tmp)
            sides["bench run --suite quick"] = harness.Side(
                tree.stetho("bench", "run", "--suite", "quick", *common), env=env, cwd=tmp)
        sides[f"check --local --bench quick ({label})"] = harness.Side(
            tree.stetho("check", "--local", *common, "--bench", "quick"), env=env, cwd=tmp)
    harness.header("stetho bench's quick suite on a simulated 8x H100 node")
    times = harness.interleave(sides, args.runs, warm=not args.smoke)
    for name, side in sides.items():
        if not side.codes <= {0, 1}:
            sys.exit(f"{name} exited {sorted(side.codes)}: {side.last_output[-500:]}")
        print(harness.line(name, times[name], side.cpu))
    names = list(sides)
    floor, with_bench = "check --local (floor)", names[2]
    extra = statistics.median(times[with_bench]) - statistics.median(times[floor])
    extra_cpu = statistics.median(sides[with_bench].cpu) - statistics.median(sides[floor].cpu)
    print(f"goal: the quick suite adds {extra:+.3f} s wall ({extra_cpu:+.3f} s CPU) beyond "
          f"check --local (goal <= 2 s wall): {'met' if extra <= 2 else 'NOT MET'}")
    if len(names) == 4:
        harness.judge(with_bench, times[with_bench], times[names[3]], 1.0, "the checkout before")


def per_benchmark(node: Path, rounds: int, runtime: float, smoke: bool) -> None:
    from dataclasses import replace

    from stetho import config
    from stetho.evidence import bench_run
    from stetho.evidence.collect import sim_environment

    config.activate(config.load().with_flags(busy_probe="gpu"))
    sim_env, _ = sim_environment(str(node))
    host_env = replace(sim_env, sysroot="/")  # fio/iperf3 on this machine's disk and loopback
    picks = {"dcgmi-diag-r1": sim_env, "gpu-burn": sim_env, "nvbandwidth": sim_env,
             "nccl-all-reduce": sim_env, "fio-randread-4k": host_env,
             "fio-seqwrite-1m": host_env, "iperf3-tcp": host_env}
    if smoke:  # the tiny mode: simulated tools only (fio lays out its file for half a minute)
        picks = {"dcgmi-diag-r1": sim_env, "nvbandwidth": sim_env}
    known = {b.name: b for b in bench_run.suite("acceptance")}
    ctx = bench_run.BenchContext(node="node01", suite="acceptance", gpus=8, peer="127.0.0.1",
                                 runtime_s=runtime)
    print(f"\nper benchmark (median of {rounds} rounds; fio/iperf3 real, --runtime {runtime:g} s)")
    print(f"{'benchmark':<18} {'runs':>4} {'wall s':>8} {'tool s':>8} {'overhead s':>10} "
          f"{'per run ms':>10}")
    for name, env in picks.items():
        bench = known[name]
        walls, tools, reps = [], [], 0
        for _ in range(rounds):
            start = time.perf_counter()
            records = bench_run.run_benchmark(bench, ctx, env)
            walls.append(time.perf_counter() - start)
            ran = [r for n, r in records.items() if "#" in n]
            bad = [f"{r.name}: {r.status} {r.reason}" for r in ran if r.status != "ok"]
            plan = records[bench_run.PLAN + name]
            if plan.status != "ok" or bad:
                sys.exit(f"{name} did not run cleanly: {plan.reason or bad}")
            tools.append(sum(r.duration_s for r in ran))
            reps = len(ran)
        wall, tool = statistics.median(walls), statistics.median(tools)
        over = statistics.median(w - t for w, t in zip(walls, tools, strict=True))
        print(f"{name:<18} {reps:>4} {wall:>8.3f} {tool:>8.3f} {over:>10.3f} "
              f"{over / reps * 1000:>10.1f}")


def main() -> None:
    ap = harness.parser(__doc__, runs=5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--runtime", type=float, default=2.0)
    args = ap.parse_args()
    if args.smoke:
        args.rounds, args.runtime = 1, 0.5
    with tempfile.TemporaryDirectory() as tmp:
        from stetho.sim.builder import build_node

        node = build_node(Path(tmp) / "node01", "node01")
        cli_walls(node, args, tmp)
        per_benchmark(node, args.rounds, args.runtime, args.smoke)


if __name__ == "__main__":
    main()
