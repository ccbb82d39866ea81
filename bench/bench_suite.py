"""What `stetho bench` costs beyond the benchmarks themselves.

1. Wall of `stetho check --local --sim <8-GPU node> --bench quick` against the floor
   `stetho check --local --sim <same node>`, interleaved, medians of N runs (target: the quick
   suite adds <= 2 s), and `stetho bench run --suite quick --sim` alone.
2. Per benchmark, in process: the wall of running it (needs checks, busy probe, temp folder,
   server start/stop, repeats) minus the tool's own time (the sum of its processes' durations),
   median over rounds: the overhead stetho adds. The GPU benchmarks run on the simulated node
   (their tools print real recorded outputs); fio and iperf3 run for real (127.0.0.1 peer) with
   `--runtime` seconds each (default 2; the shipped default is 10), so their rows also show
   that a run is bounded by the tool's configured runtime.

    python bench/bench_suite.py [--runs 5] [--rounds 3] [--runtime 2]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def timed(argv: list[str], env: dict[str, str], cwd: str) -> tuple[float, float]:
    """(wall, CPU seconds of the command and its children): on a shared machine the CPU time
    is the steadier figure."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True)
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode not in (0, 1):
        sys.exit(f"{' '.join(argv)} exited {proc.returncode}: {proc.stderr[-500:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return elapsed, cpu


def cli_walls(node: Path, runs: int, env: dict[str, str], cwd: str) -> None:
    base = [sys.executable, "-m", "stetho"]
    common = ["--sim", str(node), "--profile", "h100-sxm-8gpu", "--no-history", "-q"]
    floor = [*base, "check", "--local", *common]
    with_bench = [*base, "check", "--local", *common, "--bench", "quick"]
    bench_only = [*base, "bench", "run", "--suite", "quick", *common]
    argvs = {"check --local (floor)": floor, "check --local --bench quick": with_bench,
             "bench run --suite quick": bench_only}
    for argv in argvs.values():  # warm the bytecode and page caches
        timed(argv, env, cwd)
    walls: dict[str, list[float]] = {k: [] for k in argvs}
    cpus: dict[str, list[float]] = {k: [] for k in argvs}
    for _ in range(runs):  # interleaved, so machine noise hits all alike
        for name, argv in argvs.items():
            wall, cpu = timed(argv, env, cwd)
            walls[name].append(wall)
            cpus[name].append(cpu)
    med = {k: statistics.median(v) for k, v in walls.items()}
    cpu_med = {k: statistics.median(v) for k, v in cpus.items()}
    for name, values in walls.items():
        print(f"{name:<30} wall median {med[name]:.3f} s (min {min(values):.3f}, max "
              f"{max(values):.3f}, n={runs})  CPU median {cpu_med[name]:.3f} s")
    extra = med["check --local --bench quick"] - med["check --local (floor)"]
    extra_cpu = cpu_med["check --local --bench quick"] - cpu_med["check --local (floor)"]
    print(f"quick suite beyond check --local: wall {extra:+.3f} s, CPU {extra_cpu:+.3f} s   "
          "(target <= 2 s wall)")


def per_benchmark(node: Path, rounds: int, runtime: float) -> None:
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
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--runtime", type=float, default=2.0)
    args = ap.parse_args()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    with tempfile.TemporaryDirectory() as tmp:
        from stetho.sim.builder import build_node

        node = build_node(Path(tmp) / "node01", "node01")
        cli_walls(node, args.runs, env, tmp)
        per_benchmark(node, args.rounds, args.runtime)


if __name__ == "__main__":
    main()
