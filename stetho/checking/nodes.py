"""A node as the checking stage sees it: its facts, read with what its profile expects, and the
summary it sends to the controller (versions, busbw and metrics, for fleet checks and history).
"""

from __future__ import annotations

from typing import TypedDict

from stetho.evidence.bundle import Bundle
from stetho.facts import bench, metrics
from stetho.facts.metrics import MetricRow
from stetho.facts.node import Expected, NodeFacts, Unavailable
from stetho.profiles import Profile


class NodeSummary(TypedDict):
    """What a node sends to the controller beside its results (JSON-ready)."""

    node: str
    profile: str
    versions: dict[str, list[str]]  # component -> distinct versions on the node
    busbw: dict[str, float]  # message size in bytes (as text) -> out-of-place busbw GB/s
    metrics: list[MetricRow]
    collected_at: str  # the bundle's own timestamp: evidence, checked against the controller



def expected(profile: Profile) -> Expected:
    """What the profile promises, in the terms facts need to tell a skip from an error."""
    ib = profile.ib
    return Expected(profile=profile.name, gpus=profile.gpu.count, ib_ports=ib.ports,
                    ib_link_layer=ib.link_layer, nccl=profile.nccl.enabled,
                    nccl_collective=profile.nccl.collective,
                    ib_devices=tuple(pat for g in ib.port_groups if g.link_layer == ib.link_layer
                                     for pat in g.devices))


def node_facts(bundle: Bundle, profile: Profile) -> NodeFacts:
    return NodeFacts(bundle, expected(profile))


def summary(facts: NodeFacts, profile: Profile, with_metrics: bool = True) -> NodeSummary:
    """What fleet checks compare across nodes: versions, and busbw per message size.

    Small and JSON-ready; built from facts the node checks parse anyway. Anything the node
    cannot tell is simply absent (its own checks already report why)."""
    versions = {comp: list(found) for comp, found in facts.versions().items()}
    busbw: dict[str, float] = {}
    try:
        run = facts.nccl_run()
        if not run.failed and not run.truncated:
            for row in run.rows:
                if row.oop_busbw_gbps is not None and row.size_bytes >= (1 << 20):
                    busbw[str(row.size_bytes)] = row.oop_busbw_gbps
    except Unavailable:
        pass
    return {"node": facts.name, "profile": profile.name, "versions": versions,
            "busbw": busbw,
            "metrics": [m.to_row() for m in [*metrics.extract(facts), *bench.metrics(facts)]]
            if with_metrics else [],
            "collected_at": facts.bundle.collected_at}


class CheckNode:
    """One node under check: its facts and its profile (what the checks judge it against)."""

    __slots__ = ("facts", "problem", "profile")

    def __init__(self, facts: NodeFacts, profile: Profile, problem: str | None = None) -> None:
        self.facts = facts
        self.profile = profile
        self.problem = problem  # why its evidence cannot be judged: every check errors

    @property
    def name(self) -> str:
        return self.facts.name

    @classmethod
    def of(cls, bundle: Bundle, profile: Profile) -> CheckNode:
        return cls(node_facts(bundle, profile), profile)

    @classmethod
    def unreadable(cls, name: str, profile: Profile, problem: str) -> CheckNode:
        """A node whose bundle cannot be used: no facts, and `problem` as every check's error."""
        empty = Bundle(node=name, collected_at="", stetho_version="?", profile=profile.name,
                       probes={})
        return cls(node_facts(empty, profile), profile, problem)

    def summary(self, metrics: bool = True) -> NodeSummary:
        return summary(self.facts, self.profile, metrics)
