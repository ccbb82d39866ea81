"""The node's PCIe topology as `nvidia-smi topo -m` reports it: which NIC each GPU reaches at
PIX/PXB (its own PCIe switch) and which only across a host bridge or the CPU interconnect.
A function of the node's facts rather than a NodeFacts method: parsed once through its cache."""

from __future__ import annotations

from typing import TYPE_CHECKING

from stetho.parsers import nvidia_topo

if TYPE_CHECKING:
    from stetho.facts.node import NodeFacts
    from stetho.parsers.nvidia_topo import Topology

PROBE = "nvidia_topo"


def topology(facts: NodeFacts) -> Topology:
    return facts.parsed(PROBE, lambda: nvidia_topo.parse(facts.text(PROBE)))
