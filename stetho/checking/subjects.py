"""What checks are parametrized over: nodes, GPUs, IB ports, disks, PCIe devices, versions.

A check asks for a subject by naming a fixture (`gpu`, `ib_port`, `disk`, ...); the plugin
expands it to one test per subject per node, with ids like `node07/gpu3` or `node07/mlx5_2:1`.
When a node has none to offer (no GPU, no IB) the check still gets one test for that node, which
skips or errors with the reason: a node is never silently left out of a check.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable
from dataclasses import field
from typing import TYPE_CHECKING

from stetho.checking.nodes import CheckNode
from stetho.core.record import record
from stetho.facts.bench import BenchRun
from stetho.facts.node import Unavailable

if TYPE_CHECKING:  # benchmark definitions load only for a bundle with benchmark runs
    from stetho.benchmarks.spec import Metric


@record
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
    """Every GPU nvidia-smi lists; one whose section could not be read is an error subject of
    its own (`gpu3`), the others still judged."""
    subjects = [Subject(n, f"gpu{g.index}", g) for g in n.facts.gpus()]
    for bad in n.facts.smi().unreadable:
        subjects.append(Subject(n, f"gpu{bad.index}", None, Unavailable(
            "error", f"cannot parse nvidia-smi output for GPU {bad.index} "
            f"({bad.pci_bus_id or 'no bus id'}): {bad.reason}", "nvidia_smi")))
    return sorted(subjects, key=lambda s: int(s.id[3:]))


def _ib_ports(n: CheckNode) -> list[Subject]:
    return [Subject(n, p.id, p) for p in n.facts.ib_ports()]


def _disks(n: CheckNode) -> list[Subject]:
    patterns = n.profile.host.rotational_devices
    devices = [d for d in n.facts.block_devices()
               if any(fnmatch.fnmatch(d.name, p) for p in patterns)]
    bad = {name: why for name, why in n.facts.unreadable_block_devices().items()
           if any(fnmatch.fnmatch(name, p) for p in patterns)}
    if not devices and not bad:
        raise Unavailable("skip", f"no block device matches {', '.join(patterns)}", "block_queue")
    return sorted([Subject(n, d.name, d) for d in devices] + [
        Subject(n, name, None, Unavailable("error", f"cannot parse sysfs block output for "
                                           f"{name}: {why}", "block_queue"))
        for name, why in bad.items()], key=lambda s: s.id)


def _pcie_devices(n: CheckNode) -> list[Subject]:
    devices = [d for d in n.facts.lspci() if d.is_nvidia_gpu or d.is_hca]
    try:
        by_bus = {_short_bus(g.pci_bus_id): g.index for g in n.facts.gpus()}
    except Unavailable:
        by_bus = {}
    if not devices and by_bus:
        raise Unavailable("error", f"lspci shows no NVIDIA GPU, but nvidia-smi lists "
                          f"{len(by_bus)}: lspci's output was not read as lspci -vvv", "lspci")
    if not devices:
        raise Unavailable("skip", "lspci shows no NVIDIA GPU and no HCA", "lspci")
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
    """Every version component: the profile's pinned ones are judged, the others reported (so
    each version probe collected is read, and an unreadable one is an error, not silence)."""
    from stetho.profiles import VERSION_COMPONENTS

    pinned = list(n.profile.versions)
    return [Subject(n, c, c) for c in pinned + [c for c in VERSION_COMPONENTS if c not in pinned]]


def _nccl_sizes(n: CheckNode) -> list[Subject]:
    """Message sizes of the baseline recorded for the run's shape. A run whose shape has no
    baseline is one skip that says so, never a regression; a failed or cut run is judged (as an
    error) on the profile's first baseline. A run whose collective nothing tells (neither the
    output nor a declaration: NodeFacts.nccl_collective) is one error saying how to declare it:
    a regression of exactly the baseline's shape must not pass as `skip`."""
    from stetho.parsers.nccl_tests import format_size
    from stetho.profiles import BusbwPoint

    spec = n.profile.nccl
    if not spec.enabled:
        raise Unavailable("skip", f"profile {n.profile.name} does not enable nccl-tests")
    if spec.baseline is None:
        raise Unavailable("skip", f"profile {n.profile.name} has no NCCL busbw baseline")
    base = spec.baseline
    try:
        run = n.facts.nccl_run()
    except Unavailable:
        run = None
    if run is not None and not (run.failed or run.truncated) and run.rows:
        collective, signals = n.facts.nccl_collective()  # an error when contradicted
        shape = run.shape
        if collective is None:
            raise Unavailable(
                "error", "nccl-tests output does not say which collective it ran (no "
                "'# Collective test starting' marker, no binary named"
                + (f"; {'; '.join(signals)}" if signals else "")
                + (f"; it could be {' or '.join(run.collective_candidates)}"
                   if run.collective_candidates else "")
                + "): no baseline can be chosen, so busbw cannot be judged", "nccl_tests",
                remediation=f"declare it in profile {n.profile.name}: `nccl.collective: "
                f"{base.shape.collective}` (or whichever the run performs), or run the "
                "nccl-tests binary by name in `nccl.argv`")
        if shape.ranks is not None:
            found = spec.baseline_for(collective, shape.ranks, shape.nodes,
                                      shape.gpus_per_node)
            if found is None:
                described = shape.describe().replace("unknown collective", collective, 1) \
                    if shape.collective is None else shape.describe()
                raise Unavailable("skip", f"no baseline for {described} in profile "
                                  f"{n.profile.name} (it has "
                                  + "; ".join(b.shape.describe() for b in spec.baselines)
                                  + "): record one with `stetho baseline record`", "nccl_tests")
            base = found
        elif base.shape.collective != collective:
            raise Unavailable("skip", f"no baseline for {collective} (a run that lists no "
                              f"ranks) in profile {n.profile.name}: its baseline is "
                              f"{base.shape.describe()}", "nccl_tests")
    sizes = sorted(s for s in base.busbw_gbps if s >= spec.min_size_bytes)
    label = base.shape.collective.replace("_", "")
    return [Subject(n, f"{label}@{format_size(s).replace(' ', '')}", BusbwPoint(base, s))
            for s in sizes]


@record
class BenchMetric:
    """One metric of one benchmark run: what a `bench_metric` check judges."""

    run: BenchRun
    metric: Metric


def _runs(n: CheckNode) -> list[BenchRun]:
    """The node's benchmark runs; none is a skip for every benchmark check."""
    from stetho.facts import bench

    runs = bench.runs(n.facts)
    if not runs:
        raise Unavailable("skip", "no benchmarks in this run (`stetho bench run --suite ...`)")
    return list(runs)


def _bench_metrics(n: CheckNode) -> list[Subject]:
    out = []
    for run in _runs(n):
        if run.definition is None:
            out.append(_undefined(n, run))
            continue
        for m in run.definition.metrics:
            sid = f"{run.key}.{m.name}"
            if run.skipped is not None:
                out.append(Subject(n, sid, None, Unavailable("skip", run.skipped,
                                                             PLAN_PROBE + run.name)))
            else:
                out.append(Subject(n, sid, BenchMetric(run, m)))
    return out


def _undefined(n: CheckNode, run: BenchRun) -> Subject:
    """A benchmark that ran but that no definition names now: its subject is an error."""
    return Subject(n, run.key, None, Unavailable(
        "error", f"benchmark {run.name} ran, but no benchmarks/*.yml defines it now "
        "(add its folder to STETHO_BENCHMARKS)", PLAN_PROBE + run.name))


def _bench_runs(n: CheckNode) -> list[Subject]:
    """Each benchmark run (per device for per: hca/gpu), for the tool's own verdict: a
    benchmark that did not run skips with the reason, one no definition names is an error."""
    out = []
    for run in _runs(n):
        if run.definition is None:
            out.append(_undefined(n, run))
        elif run.skipped is not None:
            out.append(Subject(n, run.key, None, Unavailable("skip", run.skipped,
                                                             PLAN_PROBE + run.name)))
        else:
            out.append(Subject(n, run.key, run))
    return out


PLAN_PROBE = "bench:"


def _filesystems(n: CheckNode) -> list[Subject]:
    """Each filesystem the profile names (`host.filesystems`, `host.mounts`), as a FsLimit:
    a mount that is only required to be there has no free-space limits."""
    from stetho.profiles import FsLimit

    host = n.profile.host
    limits = {f.path: f for f in host.filesystems}
    for path in host.mounts:
        limits.setdefault(path, FsLimit(path))
    if not limits:
        raise Unavailable("skip", f"profile {n.profile.name} names no filesystems "
                          "(host.filesystems, host.mounts)")
    return [Subject(n, path, limit) for path, limit in limits.items()]


def _services(n: CheckNode) -> list[Subject]:
    """Each systemd unit the profile lists (`host.services`), by name."""
    units = n.profile.host.services
    if not units:
        raise Unavailable("skip", f"profile {n.profile.name} lists no services (host.services)")
    return [Subject(n, u, u) for u in units]


def _nvme(n: CheckNode) -> list[Subject]:
    """Each NVMe controller (nvme0, ...) whose name matches the profile's `host.nvme_devices`."""
    from stetho.facts import nvme

    patterns = n.profile.host.nvme_devices
    if not patterns:
        raise Unavailable("skip", f"profile {n.profile.name} judges no NVMe drive "
                          "(host.nvme_devices: [])")
    found = [c for c in nvme.controllers(n.facts) if any(fnmatch.fnmatch(c, p) for p in patterns)]
    if not found:
        raise Unavailable("skip", f"no NVMe controller matches {', '.join(patterns)} (no "
                          "/sys/block/nvme*)", "block_queue")
    return [Subject(n, c, c) for c in found]
def _nccl_envs(n: CheckNode) -> list[Subject]:
    """The job environments the profile names (`nccl.container_image`, `nccl.env_module`)."""
    spec = n.profile.nccl
    envs = [Subject(n, kind, (kind, name)) for kind, name in (("container", spec.container_image),
                                                       ("module", spec.env_module)) if name]
    if not envs:
        raise Unavailable("skip", f"profile {n.profile.name} names no job environment "
                          "(nccl.container_image, nccl.env_module): the host's NCCL is the "
                          "job's")
    return envs


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
    "bench_run": _bench_runs,
    "filesystem": _filesystems,
    "service": _services,
    "nvme": _nvme,
    "nccl_env": _nccl_envs,
}


def expand(kind: str, node: CheckNode) -> list[Subject]:
    if node.problem is not None:
        return [Subject(node, kind.replace("_", "-"), None, Unavailable("error", node.problem))]
    try:
        subjects = KINDS[kind](node)
    except Unavailable as u:
        return [Subject(node, kind.replace("_", "-"), None, u)]
    if not subjects:
        return [Subject(node, kind.replace("_", "-"), None,
                        Unavailable("skip", f"no {kind.replace('_', ' ')} on this node"))]
    return subjects
