"""Runners: how one round of group benchmarks runs. The search never knows which one it has.

Every runner takes disjoint groups of nodes and returns one Measurement per group, running them
at once: `sim` on the simulated fabric (nccl-tests text rendered from the real recorded run and
parsed back), `srun` (nccl-tests through Slurm over exactly those nodes), `mpirun` (nccl-tests
over a host list) and `iperf3` (every pair of the group, in rounds of disjoint pairs, through a
per-node command prefix such as `ip netns exec {node}` or `ssh {node}`).
"""

from __future__ import annotations

import shlex
import subprocess
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Protocol

from stetho.localize import fabric as fabric_mod
from stetho.localize.model import Measurement

DEFAULT_NCCL = "all_reduce_perf -b 1G -e 1G -f 2 -g 1 -c 1 -n 20"


class Runner(Protocol):
    name: str

    def run(self, groups: Sequence[tuple[str, ...]]) -> list[Measurement]: ...


def nccl_measurement(text: str, expected: float, rc: int = 0) -> Measurement:
    """A group's busbw at the largest size it ran; failed when nccl-tests says so."""
    from stetho.parsers import ParseError, nccl_tests

    try:
        run = nccl_tests.parse(text)
    except ParseError as exc:
        if rc != 0:
            return Measurement(None, expected, error=f"exit {rc}: {text.strip()[-300:]}",
                               raw=text)
        return Measurement(None, expected, error=str(exc), raw=text)
    top = run.largest
    value = top.oop_busbw_gbps if top is not None else None
    return Measurement(value, expected, failed=not run.ok or value is None, raw=text)


@dataclass
class SimRunner:
    """The simulated fabric; `render=False` skips the text round trip (for large benches)."""

    fabric: fabric_mod.Fabric
    render: bool = True
    keep_raw: bool = False
    name: str = "sim"

    def run(self, groups: Sequence[tuple[str, ...]]) -> list[Measurement]:
        _, healthy = fabric_mod.recorded()
        out = []
        for g in groups:
            speed = self.fabric.measure(g)
            if not self.render:
                out.append(Measurement(healthy * speed, healthy))
                continue
            m = nccl_measurement(fabric_mod.render(g, speed), healthy)
            if not self.keep_raw:
                m.raw = ""
            out.append(m)
        return out


def _concurrently(fn: Callable[[tuple[str, ...]], Measurement],
                  groups: Sequence[tuple[str, ...]], workers: int = 32) -> list[Measurement]:
    if len(groups) == 1:
        return [fn(groups[0])]
    with ThreadPoolExecutor(max_workers=min(workers, len(groups))) as pool:
        return list(pool.map(fn, groups))


def _run(argv: list[str], timeout_s: float, env: Mapping[str, str] | None = None,
         ) -> tuple[int, str]:
    from stetho import config

    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s,
                              env=config.child_environment(env) if env else None)
    except subprocess.TimeoutExpired:
        return 124, f"timed out after {timeout_s:.0f} s: {shlex.join(argv)}"
    except OSError as exc:
        return 127, f"{argv[0]}: {exc}"
    return proc.returncode, proc.stdout + proc.stderr


@dataclass
class SrunRunner:
    """nccl-tests through Slurm: `srun -w HOSTS -N n --ntasks-per-node g COMMAND`."""

    expected: float
    command: str = DEFAULT_NCCL
    gpus_per_node: int = 8
    srun: str = "srun"
    extra: tuple[str, ...] = ()
    timeout_s: float = 900.0
    env: Mapping[str, str] | None = None  # added to the environment (SLURM_CONF, ...)
    immediate_s: int = 60  # a group whose nodes are down or busy is an error, not a wait
    name: str = "srun"

    def argv(self, group: tuple[str, ...]) -> list[str]:
        from stetho.core import hostlist

        return [self.srun, "-w", hostlist.compress(list(group)), "-N", str(len(group)),
                "--ntasks-per-node", str(self.gpus_per_node), "--label",
                f"--immediate={self.immediate_s}",
                *self.extra, *shlex.split(self.command)]

    def run(self, groups: Sequence[tuple[str, ...]]) -> list[Measurement]:
        def one(group: tuple[str, ...]) -> Measurement:
            rc, text = _run(self.argv(group), self.timeout_s, self.env)
            return nccl_measurement(text, self.expected, rc)

        return _concurrently(one, groups)


@dataclass
class MpirunRunner:
    """nccl-tests over a host list: `mpirun -np n*g -H h1:g,h2:g --tag-output COMMAND`."""

    expected: float
    command: str = DEFAULT_NCCL
    gpus_per_node: int = 8
    mpirun: str = "mpirun"
    extra: tuple[str, ...] = ()
    timeout_s: float = 900.0
    name: str = "mpirun"

    def argv(self, group: tuple[str, ...]) -> list[str]:
        hosts = ",".join(f"{h}:{self.gpus_per_node}" for h in group)
        return [self.mpirun, "-np", str(len(group) * self.gpus_per_node), "-H", hosts,
                "--tag-output", *self.extra, *shlex.split(self.command)]

    def run(self, groups: Sequence[tuple[str, ...]]) -> list[Measurement]:
        def one(group: tuple[str, ...]) -> Measurement:
            rc, text = _run(self.argv(group), self.timeout_s)
            return nccl_measurement(text, self.expected, rc)

        return _concurrently(one, groups)


@dataclass
class Iperf3Runner:
    """Every pair of a group through iperf3, in rounds of disjoint pairs (so no node carries
    two flows at once); the group's value is its slowest flow, in Mbit/s. `prefix` runs a
    command on a node ("ip netns exec {node}", "ssh {node}"); `addresses` maps node -> the
    address its iperf3 server listens on; `start()` starts one server per node. A group stops
    after the first round of pairs whose slowest flow is at or below `stop_below` of the rate
    (the judge's `fails_alone`): its value can only go lower, and every flow through a bad link
    lasts `seconds` times the slowdown, so a bad uplink no longer costs every round of pairs.
    A pass always has every pair measured."""

    addresses: Mapping[str, str]
    rate_mbps: float = 40.0
    seconds: float = 1.0
    prefix: str = "ssh {node}"
    port: int = 5201
    iperf3: str = "iperf3"
    timeout_s: float = 60.0
    stop_below: float = 0.0  # a fraction of rate_mbps; 0 measures every pair always
    name: str = "iperf3"
    _servers: list[subprocess.Popen[bytes]] = field(default_factory=list, repr=False)

    def on(self, node: str, argv: list[str]) -> list[str]:
        return [*shlex.split(self.prefix.format(node=node)), *argv]

    def start(self) -> None:
        for node in self.addresses:
            self._servers.append(subprocess.Popen(
                self.on(node, [self.iperf3, "-s", "-p", str(self.port)]),
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))

    def close(self) -> None:
        for proc in self._servers:
            proc.terminate()
        for proc in self._servers:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
        self._servers.clear()

    def flow(self, src: str, dst: str) -> float | str:
        """One flow's receiver rate in Mbit/s, or what went wrong."""
        from stetho.parsers import ParseError, iperf3

        # A byte count, not -t (whole seconds only): a healthy flow lasts `seconds`.
        size = max(64 << 10, int(self.rate_mbps * 1e6 / 8 * self.seconds))
        argv = self.on(src, [self.iperf3, "-c", self.addresses[dst], "-p", str(self.port),
                             "-n", str(size), "-b", f"{self.rate_mbps:g}M", "-J"])
        for _ in range(3):  # a server still busy with the last flow says so; ask again
            rc, text = _run(argv, self.timeout_s)
            try:
                run = iperf3.parse(text)
            except ParseError as exc:
                reason = f"{src}->{dst}: {exc}"
                continue
            rate = run.receiver_bits_per_second
            if run.ok and rate is not None:
                return rate / 1e6
            reason = f"{src}->{dst}: iperf3 failed (exit {rc})"
        return reason

    def run(self, groups: Sequence[tuple[str, ...]]) -> list[Measurement]:
        def one(group: tuple[str, ...]) -> Measurement:
            rates: list[float] = []
            for pairs in _pair_rounds(list(group)):
                with ThreadPoolExecutor(max_workers=max(1, len(pairs))) as pool:
                    got = list(pool.map(lambda p: self.flow(*p), pairs))
                for g in got:
                    if isinstance(g, str):
                        return Measurement(None, self.rate_mbps, "Mbit/s", error=g)
                    rates.append(g)
                if rates and min(rates) <= self.stop_below * self.rate_mbps:
                    break
            return Measurement(min(rates), self.rate_mbps, "Mbit/s")

        return _concurrently(one, groups)


def _pair_rounds(nodes: list[str]) -> list[list[tuple[str, str]]]:
    """Every pair once, as rounds of disjoint pairs (the circle method)."""
    ids: list[str | None] = [*nodes, *([None] if len(nodes) % 2 else [])]
    n = len(ids)
    rounds = []
    for r in range(n - 1):
        pairs = []
        for k in range(n // 2):
            a, b = ids[k], ids[n - 1 - k]
            if a is not None and b is not None:
                pairs.append((a, b) if r % 2 else (b, a))
        rounds.append(pairs)
        ids = [ids[0], ids[-1], *ids[1:-1]]
    return rounds
