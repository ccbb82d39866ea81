"""Xid events from the kernel log, mapped through NVIDIA's Xid catalog (stetho.facts.xid).

Per GPU: critical Xids (48 DBE, 79 off the bus, 74 NVLink, 94/95 contained/uncontained ECC,
119/120 GSP, ...) fail with the catalog's action; application-level ones (13, 31, 43) warn.
Per node: a GPU that fell off the bus may no longer be listed by nvidia-smi at all, so losses
and Xids on PCI addresses no listed GPU owns are checked separately.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from stetho.facts import xid
from stetho.facts.node import Unavailable

if TYPE_CHECKING:
    from collections.abc import Sequence

    from stetho.checking.verdict import Verdict
    from stetho.facts.node import NodeFacts
    from stetho.parsers.gpu_model import Gpu
    from stetho.parsers.kernel_log import BusLoss, XidEvent


def _excerpt(events: Sequence[XidEvent | BusLoss], limit: int = 5) -> str:
    lines = [e.line for e in events[-limit:]]
    more = len(events) - len(lines)
    return ("... %d earlier lines\n" % more if more > 0 else "") + "\n".join(lines)


def test_gpu_xid(gpu: Gpu, facts: NodeFacts, verdict: Verdict) -> None:
    log = facts.kernel_log()
    events = log.xids_for(gpu.pci_bus_id)
    codes = sorted({e.code for e in events})
    verdict.measure(", ".join(str(c) for c in codes) or "none", expected="no critical Xid")
    if not events:
        verdict.cite(f"no Xid for {gpu.pci_bus_id} in {log.lines} kernel log lines", "kernel_log")
        verdict.ok("no Xid events")
        return
    verdict.cite(_excerpt(events), "kernel_log")
    infos = [xid.lookup(c) for c in codes]
    critical = [i for i in infos if xid.severity_of(i.code, _message(events, i.code)) == "critical"]
    summary = "; ".join(f"Xid {i.code} x{sum(e.code == i.code for e in events)} ({i.name})"
                        for i in infos)
    if critical:
        worst = critical[0]
        verdict.fail(f"critical Xid on {gpu.pci_bus_id}: {summary}",
                     remediation=f"Xid {worst.code}: {worst.action}")
    warn = [i for i in infos if i.severity == "warning" or not i.known]
    if warn:
        verdict.warn(f"Xid on {gpu.pci_bus_id}: {summary}",
                     remediation=f"Xid {warn[0].code}: {warn[0].action}")
        return
    verdict.ok(f"informational Xid only: {summary}")


def _message(events: Sequence[XidEvent], code: int) -> str:
    return next((e.message for e in events if e.code == code), "")


def test_gpu_bus_loss(node: NodeFacts, facts: NodeFacts, verdict: Verdict) -> None:
    """GPUs that fell off the bus, and Xids on PCI addresses no listed GPU owns."""
    log = facts.kernel_log()
    try:
        listed = [g.pci_bus_id for g in facts.gpus()]
    except Unavailable:  # no GPU listed at all: every GPU event is then an orphan
        listed = []
    orphans = [e for e in log.xids if not any(log.xids_for(b) and e in log.xids_for(b)
                                               for b in listed)]
    lost = sorted({b.pci_id for b in log.fallen_off_bus})
    verdict.measure(len(lost), "GPUs lost", expected=0)
    if not lost and not orphans:
        verdict.cite(f"no bus-loss message in {log.lines} kernel log lines", "kernel_log")
        verdict.ok("no GPU fell off the bus")
        return
    events: list[XidEvent | BusLoss] = [*log.fallen_off_bus, *orphans]
    verdict.cite(_excerpt(events), "kernel_log")
    if lost:
        verdict.fail(f"GPU fell off the bus: {', '.join(lost)}",
                     remediation="drain the node; check the PCIe AER lines before the loss "
                     "(riser, slot, power); reseat or RMA the GPU; a reboot is required")
    critical = sorted({e.code for e in orphans if xid.lookup(e.code).severity == "critical"})
    if critical:
        verdict.fail(f"critical Xid {', '.join(map(str, critical))} on PCI addresses that no "
                     f"listed GPU owns ({', '.join(sorted({e.pci_id for e in orphans}))})",
                     remediation="a GPU may be missing from nvidia-smi: compare `lspci | grep "
                     "NVIDIA` with `nvidia-smi -L`; drain the node")
    verdict.warn(f"Xid on PCI addresses no listed GPU owns: "
                 f"{', '.join(sorted({e.pci_id for e in orphans}))}")
