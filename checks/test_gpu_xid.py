"""Xid events from the kernel log, mapped through stetho's Xid table (stetho.facts.xid), judged
as the GPU is now (stetho.facts.xid_time).

Per GPU: an Xid since the GPU's last (re)initialisation and within the profile's window
(`gpu.xid_window_h`, default 24 h before collection) is judged by its severity: critical Xids
(48 DBE, 79 off the bus, 74 NVLink, 95 uncontained ECC, 119/120 GSP, ...) fail with the table's
action; application-level ones (13, 31, 43) warn. An Xid whose time is unknown counts as present
(fail closed). One older than the window warns; one before the GPU's last reset is history and
never fails nor prescribes another reset. A code the table has no row for is `error`.
Per node: a GPU that fell off the bus may no longer be listed by nvidia-smi at all, so losses
and Xids on PCI addresses no listed GPU owns are checked separately, with the same placement.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

from stetho.facts import xid, xid_time
from stetho.facts.node import Unavailable
from stetho.parsers.kernel_log import XidEvent

if TYPE_CHECKING:
    from collections.abc import Sequence
    from datetime import datetime

    from stetho.checking.verdict import Verdict
    from stetho.facts.node import NodeFacts
    from stetho.facts.xid_time import Placed
    from stetho.parsers.gpu_model import Gpu
    from stetho.parsers.kernel_log import BusLoss
    from stetho.profiles import Profile


def _excerpt(events: Sequence[XidEvent | BusLoss], limit: int = 5) -> str:
    lines = [e.line for e in events[-limit:]]
    more = len(events) - len(lines)
    return ("... %d earlier lines\n" % more if more > 0 else "") + "\n".join(lines)


def _window(profile: Profile | None) -> timedelta:
    hours = profile.gpu.xid_window_h if profile is not None else 24.0
    return timedelta(hours=hours)


def _summary(placed: Sequence[Placed], now: datetime | None) -> str:
    """'Xid 48 x1 (Double Bit ECC Error) at 2026-...Z (0.1 h ago)' per code, latest time."""
    parts = []
    events = _xids(placed)
    for code in sorted({e.code for e in events}):
        mine = [e for e in events if e.code == code]
        last = mine[-1]
        parts.append(f"Xid {code} x{len(mine)} ({xid.lookup(code).name}) "
                     f"{xid_time.stamp(last.time, now)}")
    return "; ".join(parts)


def _xids(placed: Sequence[Placed]) -> list[XidEvent]:
    return [p.event for p in placed if isinstance(p.event, XidEvent)]


def test_gpu_xid(gpu: Gpu, facts: NodeFacts, profile: Profile | None, verdict: Verdict) -> None:
    log = facts.kernel_log()
    events = log.xids_for(gpu.pci_bus_id)
    codes = sorted({e.code for e in events})
    verdict.measure(", ".join(str(c) for c in codes) or "none", expected="no critical Xid")
    if not events:
        verdict.cite(f"no Xid for {gpu.pci_bus_id} in {log.lines} kernel log lines", "kernel_log")
        verdict.ok("no Xid events")
        return
    verdict.cite(_excerpt(events), "kernel_log")
    now = xid_time.collected_at(facts.bundle.collected_at)
    window = _window(profile)
    placed = xid_time.place(events, log, now, window)
    where = f"on {gpu.pci_bus_id} ({xid_time.window_words(window)})"
    present = [p for p in placed if p.present]
    _judge_present(present, now, where, verdict)
    old = [p for p in placed if p.placement == "old"]
    history = [p for p in placed if p.placement == "before-reset"]
    if old:
        verdict.warn(f"Xid {where} older than the window, with no reset since: "
                     f"{_summary(old, now)}; not judged as present",
                     remediation="watch for repeats; a GPU with repeated old Xids may need "
                     "diagnostics (dcgmi diag -r 3)")
    if history:
        reset = history[-1].reset
        when = xid_time.stamp(reset.time if reset else None, now)
        how = ("the driver was loaded" if reset and reset.kind == "driver-load"
               else "the GPU was re-initialised (the driver printed its identity line again)")
        verdict.warn(f"Xid {where} before {how} {when}: {_summary(history, now)}; "
                     "history, not a present fault")
    if verdict.status == "pass":
        verdict.ok(f"informational Xid only {where}: {_summary(present, now)}")


def _judge_present(present: Sequence[Placed], now: datetime | None, where: str,
                   verdict: Verdict) -> None:
    """Fail on a critical present Xid, error on one the table cannot judge, warn on the rest."""
    if not present:
        return
    summary = _summary(present, now)
    events = _xids(present)
    infos = [xid.lookup(c) for c in sorted({e.code for e in events})]
    message = {i.code: next(e.message for e in events if e.code == i.code) for i in infos}
    critical = [i for i in infos
                if i.known and xid.severity_of(i.code, message[i.code]) == "critical"]
    if critical:
        worst = critical[0]
        verdict.fail(f"critical Xid {where}: {summary}",
                     remediation=f"Xid {worst.code}: {worst.action}")
    unknown = [i for i in infos if not i.known]
    if unknown:
        verdict.error(f"{where}: {summary}. " + " ".join(i.action for i in unknown))
    warn = [i for i in infos if i.severity == "warning"]
    if warn:
        verdict.warn(f"Xid {where}: {summary}",
                     remediation=f"Xid {warn[0].code}: {warn[0].action}")


def test_gpu_bus_loss(node: NodeFacts, facts: NodeFacts, profile: Profile | None,
                      verdict: Verdict) -> None:
    """GPUs that fell off the bus, and Xids on PCI addresses no listed GPU owns."""
    log = facts.kernel_log()
    try:
        listed = [g.pci_bus_id for g in facts.gpus()]
    except Unavailable:  # no GPU listed at all: every GPU event is then an orphan
        listed = []
    orphans = [e for e in log.xids if not any(log.xids_for(b) and e in log.xids_for(b)
                                               for b in listed)]
    now = xid_time.collected_at(facts.bundle.collected_at)
    window = _window(profile)
    losses = xid_time.place(log.fallen_off_bus, log, now, window)
    lost = sorted({p.event.pci_id for p in losses if p.present})
    verdict.measure(len(lost), "GPUs lost", expected=0)
    if not log.fallen_off_bus and not orphans:
        verdict.cite(f"no bus-loss message in {log.lines} kernel log lines", "kernel_log")
        verdict.ok("no GPU fell off the bus")
        return
    events: list[XidEvent | BusLoss] = [*log.fallen_off_bus, *orphans]
    verdict.cite(_excerpt(events), "kernel_log")
    span = xid_time.window_words(window)
    if lost:
        whens = "; ".join(f"{b} {xid_time.stamp(_last(losses, b), now)}" for b in lost)
        verdict.fail(f"GPU fell off the bus ({span}): {whens}",
                     remediation="drain the node; check the PCIe AER lines before the loss "
                     "(riser, slot, power); reseat or RMA the GPU; a reboot is required")
    placed = xid_time.place(orphans, log, now, window)
    live = [p for p in placed if p.present]
    critical = sorted({e.code for e in _xids(live) if xid.lookup(e.code).severity == "critical"})
    if critical:
        verdict.fail(f"critical Xid {', '.join(map(str, critical))} on PCI addresses that no "
                     f"listed GPU owns ({', '.join(sorted({p.event.pci_id for p in live}))}; "
                     f"{span}): {_summary(live, now)}",
                     remediation="a GPU may be missing from nvidia-smi: compare `lspci | grep "
                     "NVIDIA` with `nvidia-smi -L`; drain the node")
    notes = []
    past = [p for p in losses if not p.present]
    if past:
        notes.append("GPU fell off the bus in the past, not now: " + "; ".join(
            f"{p.event.pci_id} {xid_time.stamp(p.event.time, now)}, "
            + ("before its last (re)initialisation" if p.placement == "before-reset"
               else f"older than the {span}") for p in past))
    if orphans:
        notes.append(f"Xid on PCI addresses no listed GPU owns: "
                     f"{', '.join(sorted({e.pci_id for e in orphans}))}: "
                     f"{_summary(placed, now)}")
    verdict.warn("; ".join(notes))


def _last(placed: Sequence[Placed], pci: str) -> datetime | None:
    return [p.event.time for p in placed if p.present and p.event.pci_id == pci][-1]
