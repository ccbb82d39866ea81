"""What `stetho localize` costs on the simulated fabric, and how often it is right.

For N = 64, 232, 1,024 and 4,096 nodes (leaves of 16, as a fat tree's leaf switches), with
0, 1, 2 and 4 bad nodes (15-50% slow), one bad link (a pair of nodes slow together), one bad
leaf uplink (half speed) and one bad leaf switch (15-50% slow), ±3% uniform measurement noise
on every run, seeded trials each: group tests and rounds (median, p95), wall time at 4 min a
round (disjoint groups run at once), detection (every injected fault named, exactly) and false
accusations (trials naming anything not injected), beside the cost of testing every pair.

The measurement is the fabric model's number (`SimRunner(render=False)`): the rendered
nccl-tests text and its parse, which the tests exercise, would dominate 28,000 trials. The
floor is NVIDIA's published adaptive design: 22-57 tests and ~28 min at 232 nodes.

    python bench/localize.py [--trials 1000] [--sizes 64,232,1024,4096]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from stetho.localize import fabric, runners, topology  # noqa: E402
from stetho.localize.engine import Engine  # noqa: E402

PER_LEAF = 16
MINUTES_PER_ROUND = 4


def inject(kind: str, k: int) -> Callable[[fabric.Fabric, random.Random], None]:
    def node(fab: fabric.Fabric, rng: random.Random) -> None:
        for n in rng.sample(list(fab.topo.nodes), k):
            fab.nodes[n] = rng.uniform(0.5, 0.85)

    def pair(fab: fabric.Fabric, rng: random.Random) -> None:
        a, b = rng.sample(list(fab.topo.nodes), 2)
        fab.pairs[frozenset((a, b))] = rng.uniform(0.5, 0.85)

    def uplink(fab: fabric.Fabric, rng: random.Random) -> None:
        fab.uplinks[fab.topo.leaf(rng.choice(fab.topo.nodes))] = 0.5

    def switch(fab: fabric.Fabric, rng: random.Random) -> None:
        fab.switches[fab.topo.leaf(rng.choice(fab.topo.nodes))] = rng.uniform(0.5, 0.85)

    return {"node": node, "pair": pair, "uplink": uplink, "switch": switch}[kind]


SCENARIOS = [("healthy", "node", 0), ("1 bad node", "node", 1), ("2 bad nodes", "node", 2),
             ("4 bad nodes", "node", 4), ("1 bad link", "pair", 1),
             ("1 bad uplink", "uplink", 1), ("1 bad switch", "switch", 1)]


def named(loc_findings: list[object]) -> set[tuple[str, str]]:
    out = set()
    for f in loc_findings:
        kind, nodes, subject = f.kind, f.nodes, f.subject  # type: ignore[attr-defined]
        out.add((kind, "<->".join(sorted(nodes)) if kind == "pair" else subject))
    return out


def p95(values: list[float]) -> float:
    return statistics.quantiles(values, n=20, method="inclusive")[18] if len(values) > 1 \
        else values[0]


def run(n: int, label: str, kind: str, k: int, trials: int) -> dict[str, float]:
    nodes = [f"gpu{i:04d}" for i in range(1, n + 1)]
    topo = topology.uniform(nodes, PER_LEAF)
    tests, rounds, cpu = [], [], []
    detected = false_acc = unfinished = 0
    for seed in range(trials):
        rng = random.Random(seed * 7919 + n)
        fab = fabric.Fabric(topo, noise=0.03, seed=seed)
        if k:
            inject(kind, k)(fab, rng)
        truth = {(kd, s) for kd, subjects in fab.faulty().items() for s in subjects}
        start = time.perf_counter()
        loc = Engine(topo, runners.SimRunner(fab, render=False)).run()
        cpu.append(time.perf_counter() - start)
        got = named(loc.findings)
        tests.append(len(loc.tests))
        rounds.append(loc.rounds)
        detected += truth <= got and loc.exit_code == (1 if k else 0)
        false_acc += bool(got - truth)
        unfinished += loc.exit_code == 3
    return {"tests_med": statistics.median(tests), "tests_p95": p95(tests),
            "rounds_med": statistics.median(rounds), "rounds_p95": p95(rounds),
            "detect": detected / trials, "false": false_acc, "unfinished": unfinished,
            "cpu_ms": statistics.median(cpu) * 1e3}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=1000)
    ap.add_argument("--sizes", default="64,232,1024,4096")
    args = ap.parse_args()
    print(f"{args.trials} seeded trials per line; ±3% noise; leaves of {PER_LEAF}; "
          f"{MINUTES_PER_ROUND} min per round of concurrent group tests")
    print(f"{'N':>5} {'scenario':<13} {'tests med/p95':>13} {'rounds med/p95':>14} "
          f"{'min med/p95':>11} {'detect':>7} {'false':>5} {'unfin':>5} {'search ms':>9} "
          f"{'every pair':>10}")
    per_node: dict[int, float] = {}
    for n in (int(s) for s in args.sizes.split(",")):
        for label, kind, k in SCENARIOS:
            r = run(n, label, kind, k, args.trials)
            if label == "1 bad node":
                per_node[n] = r["tests_med"]
            print(f"{n:>5} {label:<13} {r['tests_med']:>6.0f}/{r['tests_p95']:<6.0f} "
                  f"{r['rounds_med']:>7.0f}/{r['rounds_p95']:<6.0f} "
                  f"{r['rounds_med'] * MINUTES_PER_ROUND:>5.0f}/"
                  f"{r['rounds_p95'] * MINUTES_PER_ROUND:<5.0f} {r['detect']:>7.1%} "
                  f"{r['false']:>5.0f} {r['unfinished']:>5.0f} {r['cpu_ms']:>9.1f} "
                  f"{n * (n - 1) // 2:>10}", flush=True)
    if per_node:
        import math

        print("tests for one bad node / log2(N): " + ", ".join(
            f"N={n}: {t / math.log2(n):.2f}" for n, t in per_node.items()))
    print("floor (NVIDIA's adaptive design, published): 22-57 tests, ~28 min at N=232")


if __name__ == "__main__":
    main()
