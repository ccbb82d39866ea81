"""What checks are parametrized over: nodes, GPUs, IB ports, disks, PCIe devices, versions.

A check asks for a subject by naming a fixture (`gpu`, `ib_port`, `disk`, ...); the plugin
expands it to one test per subject per node, with ids like `node07/gpu3` or `node07/mlx5_2:1`.
When a node has none to offer (no GPU, no IB) the check still gets one test for that node, which
skips or errors with the reason: a node is never silently left out of a check.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable
from dataclasses import dataclass, field

from stetho.benchmarks.spec import Metric
from stetho.checking.nodes import CheckNode
from stetho.facts.bench import BenchRun
from stetho.facts.node import Unavailable


@dataclass(frozen=True)
class Subject:
    """One thing a check judges. `item` is what the check's subject fixture receives: the
    parser's own typed record (a Gpu, an IbPort, a BlockDevice, ...), a version component's
    name, a message size, or the node itself."""

    node: CheckNode = field(compare=False)
    id: str
    item: object = field(compare=False, default=None)
    unavailable: Unavailable | None = field(compare=False, default=None)

    @property
    def test_id(self) -> str:
        return f"{self.node.name}/{self.id}" if self.id else self.node.name


def _node(n: CheckNode) -> list[Subject]:
    return [Subject(n, "", n.facts)]


def _gpus(n: CheckNode) -> list[Subject]:
    return [Subject(n, f"gpu{g.index}", g) for g in n.facts.gpus()]


def _ib_ports(n: CheckNode) -> list[Subject]:
    return [Subject(n, p.id, p) for p in n.facts.ib_ports()]


def _disks(n: CheckNode) -> list[Subject]:
    patterns = n.profile.host.rotational_devices
    devices = [d for d in n.facts.block_devices()
               if any(fnmatch.fnmatch(d.name, p) for p in patterns)]
    if not devices:
        raise Unavailable("skip", f"no block device matches {', '.join(patterns)}", "block_queue")
    return [Subject(n, d.name, d) for d in devices]


def _pcie_devices(n: CheckNode) -> list[Subject]:
    devices = [d for d in n.facts.lspci() if d.is_nvidia_gpu or d.is_hca]
    if not devices:
        raise Unavailable("skip", "lspci shows no NVIDIA GPU and no HCA", "lspci")
    try:
        by_bus = {_short_bus(g.pci_bus_id): g.index for g in n.facts.gpus()}
    except Unavailable:
        by_bus = {}
    out = []
    for d in devices:
        addr = d.address or "?"
        if d.is_nvidia_gpu and _short_bus(addr) in by_bus:
            sid = f"gpu{by_bus[_short_bus(addr)]}"
        else:
            sid = f"{'gpu' if d.is_nvidia_gpu else 'hca'}@{addr}"
        out.append(Subject(n, sid, d))
    return out


def _short_bus(addr: str) -> str:
    """'00000000:19:00.0' and '19:00.0' -> '19:00.0' (lower case)."""
    parts = addr.lower().split(":")
    return ":".join(parts[-2:])


def _versions(n: CheckNode) -> list[Subject]:
    comps = list(n.profile.versions)
    if not comps:
        raise Unavailable("skip", f"profile {n.profile.name} declares no version requirements")
    return [Subject(n, c, c) for c in comps]


def _nccl_sizes(n: CheckNode) -> list[Subject]:
    from stetho.parsers.nccl_tests import format_size

    spec = n.profile.nccl
    if not spec.enabled:
        raise Unavailable("skip", f"profile {n.profile.name} does not enable nccl-tests")
    if spec.baseline is None:
        raise Unavailable("skip", f"profile {n.profile.name} has no NCCL busbw baseline")
    sizes = sorted(s for s in spec.baseline.busbw_gbps if s >= spec.min_size_bytes)
    return [Subject(n, f"allreduce@{format_size(s).replace(' ', '')}", s) for s in sizes]


@dataclass(frozen=True)
class BenchMetric:
    """One metric of one benchmark run: what a `bench_metric` check judges."""

    run: BenchRun
    metric: Metric


def _bench_metrics(n: CheckNode) -> list[Subject]:
    from stetho.facts import bench

    runs = bench.runs(n.facts)
    if not runs:
        raise Unavailable("skip", "no benchmarks in this run (`stetho bench run --suite ...`)")
    out = []
    for run in runs:
        if run.definition is None:
            out.append(Subject(n, run.key, None, Unavailable(
                "error", f"benchmark {run.name} ran, but no benchmarks/*.yml defines it now "
                "(add its folder to STETHO_BENCHMARKS)", PLAN_PROBE + run.name)))
            continue
        for m in run.definition.metrics:
            sid = f"{run.key}.{m.name}"
            if run.skipped is not None:
                out.append(Subject(n, sid, None, Unavailable("skip", run.skipped,
                                                             PLAN_PROBE + run.name)))
            else:
                out.append(Subject(n, sid, BenchMetric(run, m)))
    return out


PLAN_PROBE = "bench:"


#: fixture name -> how to list a node's subjects of that kind.
KINDS: dict[str, Callable[[CheckNode], list[Subject]]] = {
    "node": _node,
    "gpu": _gpus,
    "ib_port": _ib_ports,
    "disk": _disks,
    "pcie_device": _pcie_devices,
    "version_component": _versions,
    "nccl_size": _nccl_sizes,
    "bench_metric": _bench_metrics,
}


def expand(kind: str, node: CheckNode) -> list[Subject]:
    try:
        subjects = KINDS[kind](node)
    except Unavailable as u:
        return [Subject(node, kind.replace("_", "-"), None, u)]
    if not subjects:
        return [Subject(node, kind.replace("_", "-"), None,
                        Unavailable("skip", f"no {kind.replace('_', ' ')} on this node"))]
    return subjects
