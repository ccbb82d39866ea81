"""A dry run's plan: the first round's groups, and what the search costs on this fabric.

The estimate runs the real search against the simulated fabric laid over the same topology:
once all healthy, and over seeded trials with one bad node (median), so the numbers are the
ones the search would spend, not a formula's.
"""

from __future__ import annotations

from dataclasses import dataclass
from statistics import median

from stetho.localize.engine import Engine
from stetho.localize.fabric import Fabric
from stetho.localize.judge import Judge
from stetho.localize.runners import SimRunner
from stetho.localize.topology import Topology


@dataclass(frozen=True)
class Plan:
    nodes: int
    first_round: list[list[str]]
    healthy_rounds: int
    healthy_tests: int
    one_bad_rounds: float
    one_bad_tests: float
    pairwise_tests: int

    def minutes(self, rounds: float, per_test_s: float) -> float:
        return rounds * per_test_s / 60


def estimate(topo: Topology, *, arity: int = 4, survey: bool = True, judge: Judge | None = None,
             trials: int = 9) -> Plan:
    judge = judge or Judge()
    nodes = list(topo.nodes)
    first = topo.split(nodes, arity) if survey else [nodes]

    def run(bad: str | None, seed: int) -> tuple[int, int]:
        fab = Fabric(topo, noise=judge.noise, seed=seed,
                     model="heavy" if judge.tail else "uniform", tail_p=judge.tail)
        if bad is not None:
            fab.nodes[bad] = 1 - judge.min_slowdown
        loc = Engine(topo, SimRunner(fab, render=False), judge, arity=arity,
                     survey=survey).run()
        return loc.rounds, len(loc.tests)

    healthy = run(None, 0)
    step = max(1, len(nodes) // trials)
    bad = [run(nodes[(i * step + step // 2) % len(nodes)], i) for i in range(trials)]
    n = len(nodes)
    return Plan(n, first, healthy[0], healthy[1], median(r for r, _ in bad),
                median(t for _, t in bad), n * (n - 1) // 2)
