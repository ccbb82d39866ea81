"""Simulated nights of a fleet's history, for drift's false-alarm and detection figures.

A healthy node's metrics come from a real node's evidence (`real_metrics`: the simulator's
8x H100 node, built from real recorded outputs). Each night every node is swept around 02:00
with realistic noise (gauges jitter by their resolution, temperature and power follow a daily
cycle, BER wanders by ±20 %, a few counters creep up within their limits), and some days also
get an afternoon check, hotter with the cycle. Drift runs on each run against the history before
it is recorded, as `stetho sweep` does. Slow real drifts can be injected on chosen nodes.

Used by bench/drift.py (256 nodes x 30 nights) and, smaller, by tests/test_drift.py.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from stetho.facts.metrics import MetricRow
from stetho.history import drift
from stetho.history.store import History, NodeRun
from stetho.profiles import Profile
from stetho.results import Result

DAY = 86400.0
#: 2027-01-01 00:00 UTC (a Friday): night n's sweep is at T0 + n days + ~2 h.
T0 = 1_798_761_600.0


def real_metrics(workdir: Path) -> list[MetricRow]:
    """A healthy node's metrics, measured for real: build the simulator's node from real
    recorded outputs, collect its evidence through the shims, extract its metrics."""
    from dataclasses import replace

    from stetho import profiles
    from stetho.checking.nodes import node_facts
    from stetho.evidence import collect
    from stetho.facts import metrics
    from stetho.sim.builder import build_node

    root = build_node(workdir / "healthy", "healthy")
    prof = profiles.load("h100-sxm-8gpu")
    env, node = collect.sim_environment(str(root))
    bundle = collect.collect(prof, replace(env, timeout_cap=5.0), node)
    return [m.to_row() for m in metrics.extract(node_facts(bundle, prof))]


#: A drift injected from night `start`: (metric row, nights since start) -> the new value.
Change = Callable[[MetricRow, int], float]


@dataclass(frozen=True)
class Drift:
    """A slow real fault: `change` applies to the node's rows that `applies` selects."""

    name: str
    node: str
    start: int
    applies: Callable[[MetricRow], bool]
    change: Change
    metric: str  # the metric name detection looks for in drift results


def standard_drifts(nodes: Sequence[str], base: Sequence[MetricRow]) -> list[Drift]:
    """The issue's four: busbw -0.5 %/night, SBE +2/night, BER x1.5/night (from night 8), one
    GPU 8 °C hotter from night 20."""
    port = next(str(r[1]) for r in base if r[2] == "SymbolErrorCounter")
    ber_port = next((str(r[1]) for r in base if r[2] == "pre_fec_ber"), "")

    def ib(metric: str, subject: str) -> Callable[[MetricRow], bool]:
        return lambda r: r[2] == metric and r[1] == subject

    return [
        Drift("busbw -0.5 %/night", nodes[0], 8, lambda r: r[2] == "busbw_gbps",
              lambda r, n: float(r[3]) * (1 - 0.005 * (n + 1)), "busbw_gbps"),
        Drift("SBE +2/night", nodes[1], 8, ib("SymbolErrorCounter", port),
              lambda r, n: float(r[3]) + 2 * (n + 1), "SymbolErrorCounter"),
        Drift("BER x1.5/night", nodes[2], 8, ib("pre_fec_ber", ber_port),
              lambda r, n: float(r[3]) * 1.5 ** (n + 1), "pre_fec_ber"),
        Drift("GPU 8 C hotter from night 20", nodes[3], 20,
              lambda r: r[2] == "temperature_c" and r[1] == "gpu3",
              lambda r, n: float(r[3]) + 8, "temperature_c"),
    ]


def _cycle(t: float) -> float:
    """The daily cycle, -1 at 03:00 and +1 at 15:00 (ambient and inlet temperature)."""
    return -math.cos(2 * math.pi * ((t % DAY) / DAY - 3 / 24))


def _round(v: float, step: float) -> float:
    return round(round(v / step) * step, 6) if step else v


def noisy(base: Sequence[MetricRow], t: float, night: int, rng: random.Random
          ) -> list[MetricRow]:
    """One healthy reading of a node at time t: the base values with realistic noise."""
    out: list[MetricRow] = []
    for check, subject, metric, value, unit in base:
        v = float(value)
        if metric in ("temperature_c", "memory_temperature_c"):
            v = _round(v + 2.0 * _cycle(t) + rng.choice((-1, 0, 0, 1)), 1.0)
        elif metric == "power_w":
            v = _round(v * (1 + 0.01 * _cycle(t) + rng.gauss(0, 0.003)), 0.01)
        elif metric == "busbw_gbps":
            v = _round(v * (1 + rng.gauss(0, 0.003)), 0.01)
        elif metric == "sm_clock_mhz":
            v = _round(v + rng.choice((-1, 0, 1)) * 15, 1.0)
        elif metric == "pre_fec_ber":
            v = float(f"{v * math.exp(rng.gauss(0, 0.2)):.2g}")
        elif metric in ("PortRcvErrors", "pcie_replays", "nvlink_replay"):
            v += night // 3  # creeping, far under the growth limits
        out.append([check, subject, metric, v, unit])
    return out


@dataclass
class Outcome:
    runs: int = 0
    healthy_runs: int = 0
    healthy_warnings: list[Result] = field(default_factory=list)  # false alarms
    detected: dict[str, int | None] = field(default_factory=dict)  # drift -> nights to detect
    skips: int = 0


def _mentions(r: Result, metric: str) -> bool:
    return metric in r.subject or metric in r.message


def simulate(db: Path, base: Sequence[MetricRow], profile: Profile, healthy: Sequence[str],
             drifts: Sequence[Drift] = (), nights: int = 30, afternoons_every: int = 3,
             seed: int = 7) -> Outcome:
    """Run `nights` of sweeps (and an afternoon check every few days) over the healthy nodes
    and the drifting ones; drift judges every run before it is recorded."""
    rng = random.Random(seed)
    out = Outcome(detected={d.name: None for d in drifts})
    drift_nodes = {d.node for d in drifts}
    nodes = list(healthy) + sorted(drift_nodes - set(healthy))
    with History(db) as history:
        for night in range(nights):
            times = [T0 + night * DAY + 2 * 3600 + rng.uniform(-2700, 2700)]
            if afternoons_every and night % afternoons_every == afternoons_every - 1:
                times.append(T0 + night * DAY + 14 * 3600 + rng.uniform(-3600, 3600))
            for i, t in enumerate(times):
                runs = []
                for node in nodes:
                    rows = noisy(base, t, night, rng)
                    for d in drifts:
                        if d.node == node and night >= d.start:
                            rows = [[*r[:3], d.change(r, night - d.start), r[4]]
                                    if d.applies(r) else r for r in rows]
                    results = drift.evaluate(history, node, profile, rows, now=t)
                    out.runs += 1
                    out.skips += sum(r.status == "skip" for r in results)
                    alarms = [r for r in results if r.status in ("warn", "fail")]
                    if node not in drift_nodes:
                        out.healthy_runs += 1
                        out.healthy_warnings += alarms
                    for d in drifts:
                        if d.node == node and night >= d.start and out.detected[d.name] is None \
                                and any(_mentions(r, d.metric) for r in alarms):
                            out.detected[d.name] = night - d.start + 1
                    runs.append(NodeRun(node, profile.name, results, rows))
                history.record(f"night{night:03d}-{i}", "sweep", runs, when=t)
    return out
