"""A real fabric on this machine: network namespaces as nodes on Linux bridges as leaf switches.

Twelve namespaces ("nodes") on three leaf bridges of four, each leaf joined to a spine bridge by
one veth pair (its uplink); addresses from 198.18.0.0/15, the range set aside for benchmark
networks, on bridges attached to no real interface, so no traffic leaves the machine. Faults are
real `tc` qdiscs: a `tbf` rate limit on a node's veth (both directions) or on an uplink (both
ends), and an `htb` class limiting the path between two nodes only (a u32 filter on each end's
destination; this kernel has no sch_netem for the issue's `netem loss`). Names carry a random
tag, so two test sessions never collide; everything is deleted by name at the end (shared
TESTBED.md recipe).
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
from dataclasses import dataclass, field

LEAVES = 3
PER_LEAF = 4


def missing() -> list[str]:
    """Why this fabric cannot be built here, or nothing."""
    out = [p for p in ("ip", "tc", "iperf3") if shutil.which(p) is None]
    if os.geteuid() != 0:
        out.append("root (network namespaces)")
    return out


def sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=30)
    if check and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {proc.stderr.strip()}")
    return proc


@dataclass
class NetnsFabric:
    tag: str = field(default_factory=lambda: secrets.token_hex(2))
    nodes: list[str] = field(default_factory=list)
    leaves: dict[str, list[str]] = field(default_factory=dict)
    address: dict[str, str] = field(default_factory=dict)
    faults: list[tuple[str, ...]] = field(default_factory=list)  # (namespace or "", dev)

    def leaf_name(self, i: int) -> str:
        return f"lz{self.tag}L{i}"

    def uplink_dev(self, i: int, end: str) -> str:
        return f"lz{self.tag}u{i}{end}"

    def build(self) -> None:
        spine = f"lz{self.tag}S"
        sh("ip", "link", "add", spine, "type", "bridge")
        sh("ip", "link", "set", spine, "up")
        for i in range(LEAVES):
            leaf = self.leaf_name(i)
            sh("ip", "link", "add", leaf, "type", "bridge")
            sh("ip", "link", "set", leaf, "up")
            a, b = self.uplink_dev(i, "a"), self.uplink_dev(i, "b")
            sh("ip", "link", "add", a, "type", "veth", "peer", "name", b)
            sh("ip", "link", "set", a, "master", leaf, "up")
            sh("ip", "link", "set", b, "master", spine, "up")
            self.leaves[leaf] = []
            for k in range(PER_LEAF):
                idx = i * PER_LEAF + k + 1
                node = f"lz{self.tag}n{idx:02d}"
                port = f"lz{self.tag}p{idx:02d}"
                sh("ip", "netns", "add", node)
                self.nodes.append(node)
                sh("ip", "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns",
                   node)
                sh("ip", "link", "set", port, "master", leaf, "up")
                addr = f"198.18.0.{idx}"
                sh("ip", "netns", "exec", node, "ip", "addr", "add", f"{addr}/24", "dev", "eth0")
                sh("ip", "netns", "exec", node, "ip", "link", "set", "eth0", "up")
                sh("ip", "netns", "exec", node, "ip", "link", "set", "lo", "up")
                self.address[node] = addr
                self.leaves[leaf].append(node)

    def port(self, node: str) -> str:
        return f"lz{self.tag}p{node[-2:]}"

    def _tbf(self, ns: str, dev: str, mbit: int) -> None:
        prefix = ["ip", "netns", "exec", ns] if ns else []
        sh(*prefix, "tc", "qdisc", "add", "dev", dev, "root", "tbf", "rate", f"{mbit}mbit",
           "burst", "32kbit", "latency", "50ms")
        self.faults.append((ns, dev))

    def slow_node(self, node: str, mbit: int = 10) -> None:
        self._tbf("", self.port(node), mbit)
        self._tbf(node, "eth0", mbit)

    def slow_uplink(self, leaf_index: int, mbit: int = 10) -> None:
        self._tbf("", self.uplink_dev(leaf_index, "a"), mbit)
        self._tbf("", self.uplink_dev(leaf_index, "b"), mbit)

    def slow_pair(self, a: str, b: str, mbit: int = 10) -> None:
        """The path between a and b only: an htb class at `mbit` that a u32 filter sends each
        end's traffic for the other into (everything else takes the unlimited default).
        `netem loss` would do too, but this kernel has no sch_netem (and loads no modules)."""
        for src, dst in ((a, b), (b, a)):
            ns = ["ip", "netns", "exec", src]
            sh(*ns, "tc", "qdisc", "add", "dev", "eth0", "root", "handle", "1:", "htb",
               "default", "10", "r2q", "10000")
            sh(*ns, "tc", "class", "add", "dev", "eth0", "parent", "1:", "classid", "1:10",
               "htb", "rate", "10gbit")
            sh(*ns, "tc", "class", "add", "dev", "eth0", "parent", "1:", "classid", "1:30",
               "htb", "rate", f"{mbit}mbit", "ceil", f"{mbit}mbit")
            sh(*ns, "tc", "filter", "add", "dev", "eth0", "parent", "1:", "protocol", "ip",
               "u32", "match", "ip", "dst", f"{self.address[dst]}/32", "flowid", "1:30")
            self.faults.append((src, "eth0"))

    def clear_faults(self) -> None:
        for ns, dev in self.faults:
            prefix = ["ip", "netns", "exec", ns] if ns else []
            sh(*prefix, "tc", "qdisc", "del", "dev", dev, "root", check=False)
        self.faults.clear()

    def inventory(self) -> str:
        """An Ansible YAML inventory: one group per leaf, each node's address."""
        lines = ["all:", "  children:"]
        for leaf, members in self.leaves.items():
            lines += [f"    {leaf}:", "      hosts:"]
            lines += [f"        {n}: {{localize_address: {self.address[n]}}}" for n in members]
        return "\n".join(lines) + "\n"

    def destroy(self) -> None:
        for node in self.nodes:
            sh("ip", "netns", "del", node, check=False)
        for i in range(LEAVES):
            sh("ip", "link", "del", self.uplink_dev(i, "a"), check=False)
            sh("ip", "link", "del", self.leaf_name(i), check=False)
        sh("ip", "link", "del", f"lz{self.tag}S", check=False)
