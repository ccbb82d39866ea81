"""A simulated fabric: which faults slow which groups, and nccl-tests output that says so.

The model is a bottleneck one, as a ring or tree collective sees it: a group runs at the speed
of its slowest member, its slowest pair, and the slowest switch or uplink its traffic crosses.

- node fault: every group containing the node is slow (a bad NIC, a link that trained down).
- pair fault: groups holding both ends are slow (one path between two ports).
- uplink fault: groups with members both under the switch and outside it are slow.
- switch fault: every group with a member under the switch is slow.

Noise, per run (`Noise`): `uniform` is ±`noise` around the group's speed, nothing else (the
old model: it never changes a verdict). `heavy` is what a shared fabric does: a normal body
with sd `noise`/2 (±`noise` is two sd), plus a tail: with probability `tail_p` (3%) a healthy
group runs 20-40% slow on that run only (congestion, a noisy neighbour's job), which the next
run does not repeat. A *straggler* (`stragglers`: node -> (probability, factor)) is the
injectable fault that is slow only sometimes: e.g. 30% of its runs at 0.75.

Every run also has a simulated duration (`duration`), from a model of nccl-tests' run time, so
that a bench reports minutes from the runs rather than a fixed time a round.

`render` turns a measurement into the text of the real recorded 2-node 16x A100
all_reduce_perf run (fixtures/real), with each host of the group given its own device lines and
the bandwidth columns scaled, so that the same parser that reads real output reads the
simulator's.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from stetho.core.resources import shipped
from stetho.localize.topology import Topology

RECORDED = "03-nccl/allreduce-2node-16xA100-40GB-roce-oke.txt"
_ROW = re.compile(r"^(\s*\d+\s+\d+\s+\S+\s+\S+\s+-?\d+)\s+(.*)$")
_DEVICE = re.compile(r"^(#\s+Rank\s+)(\d+)(.*? on )(\S+)( device .*)$")


#: The duration model of one nccl-tests run over a group of n nodes (`all_reduce_perf -b 1G
#: -e 1G -n 20`, 5 warm-up iterations): srun's launch and NCCL's bootstrap (STARTUP_S, plus
#: PER_NODE_S for each node: ranks' connection setup grows with the group), then 25
#: iterations of a ring all-reduce of MESSAGE bytes, each 2(n-1) latency steps plus
#: 2(n-1)/n x MESSAGE / busbw, busbw the recorded run's at the group's speed this run.
STARTUP_S, PER_NODE_S, STEP_LATENCY_S = 20.0, 0.25, 20e-6
MESSAGE, ITERATIONS = 1 << 30, 25
TAIL_SLOW = (0.60, 0.80)  # a transient's speed factor: 20-40% slow
STRAGGLER_P = 0.30  # a straggler (the `stragglers` default): slow on 30% of its runs


@dataclass
class Fabric:
    topo: Topology
    nodes: dict[str, float] = field(default_factory=dict)  # node -> speed factor
    pairs: dict[frozenset[str], float] = field(default_factory=dict)
    uplinks: dict[str, float] = field(default_factory=dict)  # switch -> factor
    switches: dict[str, float] = field(default_factory=dict)
    noise: float = 0.03
    seed: int = 0
    model: str = "uniform"  # or "heavy": normal body, heavy tail (see the module's docstring)
    tail_p: float = 0.03
    stragglers: dict[str, tuple[float, float]] = field(default_factory=dict)
    durations: list[float] = field(default_factory=list)  # every run's simulated seconds

    def __post_init__(self) -> None:
        if self.model not in ("uniform", "heavy"):
            raise ValueError(f"fabric noise model {self.model!r}: uniform or heavy")
        self.rng = random.Random(self.seed)

    def factor(self, group: Iterable[str]) -> float:
        """The group's healthy-relative speed, before noise."""
        members = list(group)
        f = min((self.nodes.get(n, 1.0) for n in members), default=1.0)
        if self.pairs:
            inside = set(members)
            f = min([f, *(v for p, v in self.pairs.items() if p <= inside)])
        if self.uplinks or self.switches:
            paths = [self.topo.paths[n] for n in members]
            for sw, v in self.switches.items():
                if any(sw in p for p in paths):
                    f = min(f, v)
            for sw, v in self.uplinks.items():
                under = sum(1 for p in paths if sw in p)
                if 0 < under < len(paths):
                    f = min(f, v)
        return f

    def measure(self, group: Iterable[str]) -> float:
        """One run's speed; its duration is appended to `durations`."""
        members = list(group)
        f = self.factor(members)
        if self.model == "uniform":
            speed = f * (1 + self.rng.uniform(-self.noise, self.noise))
        else:
            for n in members:
                p, slow = self.stragglers.get(n, (0.0, 1.0))
                if p and self.rng.random() < p:
                    f = min(f, slow)
            if self.rng.random() < self.tail_p:
                f *= self.rng.uniform(*TAIL_SLOW)
            speed = f * (1 + self.rng.gauss(0.0, self.noise / 2))
        self.durations.append(duration(len(members), speed))
        return speed

    def faulty(self) -> dict[str, set[str]]:
        """The injected faults by kind: the names a correct localization reports."""
        out = {"node": set(self.nodes), "pair": {"<->".join(sorted(p)) for p in self.pairs},
               "uplink": set(self.uplinks), "switch": set(self.switches)}
        if self.stragglers:
            out["straggler"] = set(self.stragglers)
        return out


def duration(n: int, speed: float) -> float:
    """Seconds one nccl-tests run over n nodes takes at `speed` x healthy busbw."""
    _, busbw = recorded()
    per_iter = 2 * (n - 1) * STEP_LATENCY_S + 2 * (n - 1) / n * MESSAGE / (
        busbw * 1e9 * max(speed, 0.05))
    return STARTUP_S + PER_NODE_S * n + ITERATIONS * per_iter


@cache
def recorded() -> tuple[str, float]:
    """The recorded run's text and its busbw at the largest size (the healthy reference)."""
    from stetho.parsers import nccl_tests

    text = (shipped("fixtures/real") / RECORDED).read_text()
    run = nccl_tests.parse(text)
    top = run.largest
    if top is None or top.oop_busbw_gbps is None:
        raise RuntimeError(f"{RECORDED}: no largest-size busbw")
    return text, top.oop_busbw_gbps


def render(hosts: Sequence[str], factor: float, gpus_per_node: int = 8) -> str:
    """all_reduce_perf output for these hosts at `factor` x the recorded bandwidth."""
    text, _ = recorded()
    out: list[str] = []
    devices: list[str] = []
    busbws: list[float] = []
    for line in text.splitlines():
        dev = _DEVICE.match(line)
        if dev:
            devices.append(line)
            if len(devices) == gpus_per_node:  # the first host's lines, once per host
                for h, host in enumerate(hosts):
                    for g, d in enumerate(devices):
                        m = _DEVICE.match(d)
                        assert m is not None
                        out.append(f"{m[1]}{h * gpus_per_node + g:2d}{m[3]}{host}{m[5]}")
            continue
        row = _ROW.match(line)
        if row and not line.startswith("#"):
            cells = row[2].split()
            if len(cells) == 8:
                out.append(row[1] + "  " + _scaled(cells, factor, busbws))
                continue
        if line.startswith("# Avg bus bandwidth") and busbws:
            out.append(f"# Avg bus bandwidth    : {sum(busbws) / len(busbws):.4f} ")
            continue
        out.append(line)
    return "\n".join(out) + "\n"


def _scaled(cells: list[str], factor: float, busbws: list[float]) -> str:
    parts = []
    for k in (0, 4):
        time_us, alg, bus, wrong = cells[k:k + 4]
        b = float(bus) * factor
        busbws.append(b)
        parts.append(f"{float(time_us) / factor:8.2f} {float(alg) * factor:7.2f} {b:7.2f} "
                     f"{wrong:>6}")
    return "  ".join(parts)


def reference_path() -> Path:
    return shipped("fixtures/real") / RECORDED
