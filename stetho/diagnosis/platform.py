"""Signals of the host platform and its cabling, each read from its check's structured result
(check, subject, status), never from the message: an NVMe drive failing its SMART health, a
machine check, PCIe peer-to-peer routed through the root complex, an HCA cabled to another
rail's leaf.
"""

from __future__ import annotations

from dataclasses import replace

from stetho.diagnosis.context import NodeContext, facts_of, from_results
from stetho.diagnosis.model import Evidence


def _smart_value(ctx: NodeContext, dev: str) -> tuple[str, str] | None:
    """(what the drive's SMART log says is wrong, what it should say), from its own log."""
    if ctx.facts is None:
        return None
    from stetho.facts import nvme
    from stetho.facts.node import Unavailable
    from stetho.parsers import ParseError

    try:
        log = nvme.smart(ctx.facts, dev)
    except (Unavailable, ParseError):
        return None
    said = ([f"critical warning 0x{log.critical_warning:02x}"] if log.critical_warning
            else []) + ([f"spare {log.available_spare}% < {log.spare_threshold}%"]
                        if log.available_spare < log.spare_threshold else []) + (
        [f"{log.media_errors} media errors"] if log.media_errors else [])
    return (", ".join(said), "no critical warning, spare over its threshold, 0 media errors") \
        if said else None


def nvme_failing(ctx: NodeContext) -> list[Evidence]:
    """host_nvme_health failing on a drive: a critical warning, spare under its threshold or
    unrecovered reads (media errors), named from the drive's SMART log. Its subject is the
    controller (nvme3)."""
    out = []
    for e in from_results(ctx, ctx.results_of("host_nvme_health", ("fail",)), "nvme_failing"):
        dev = e.subject or "nvme0"
        value, expected = _smart_value(ctx, dev) or ("SMART health failing",
                                                      "SMART health passing")
        out.append(replace(e, where=(("disk", dev),), value=value, expected=expected,
                           command=f"nvme smart-log /dev/{dev}; nvme error-log /dev/{dev} "
                                   f"| head -40; nvme id-ctrl /dev/{dev} | grep -E '^(mn|sn) '"))
    return out


_MCE_CMD = ("ras-mc-ctl --errors; mcelog --client; journalctl -k | grep -i 'machine check'; "
            "ipmitool sel list")


def mce_uncorrected(ctx: NodeContext) -> list[Evidence]:
    """host_mce failing: an uncorrected machine check within the window (its value counts
    them): a CPU, its cache or a memory controller lost data."""
    return from_results(ctx, ctx.results_of("host_mce", ("fail",)), "mce_uncorrected",
                        _MCE_CMD)


def mce_corrected_storm(ctx: NodeContext) -> list[Evidence]:
    """host_mce warning with no uncorrected machine check in the window (its value, 0): a
    storm of corrected ones, or an uncorrected one older than the window. Still working."""
    rows = [r for r in ctx.results_of("host_mce", ("warn",)) if r.value == 0]
    log = facts_of(ctx, "kernel_log")
    n = sum(e.severity == "corrected" and e.kind == "record" for e in log.mces) if log else 0
    return [replace(e, value=f"{n} corrected machine checks" if n else "corrected machine "
                    "checks over counters.mce_corrected_max",
                    expected="under counters.mce_corrected_max")
            for e in from_results(ctx, rows, "mce_corrected_storm", _MCE_CMD)]


def p2p_redirected(ctx: NodeContext) -> list[Evidence]:
    """pcie_p2p_settings failing: ACS redirect on a PCIe bridge or the IOMMU translating DMA,
    which send GPU peer-to-peer and GPUDirect RDMA through the root complex."""
    return from_results(ctx, ctx.results_of("pcie_p2p_settings", ("fail",)), "p2p_redirected",
                        "lspci -vvv | grep -E '^[0-9a-f]|ACSCtl'; cat /proc/cmdline; "
                        "cat /sys/kernel/iommu_groups/*/type | sort | uniq -c")


def ib_miscabled(ctx: NodeContext) -> list[Evidence]:
    """ib_rail_cabling failing (its value counts the miscabled HCAs): an HCA's cable reaches
    another rail's leaf, though every link trains ACTIVE at its rate."""
    return from_results(ctx, ctx.results_of("ib_rail_cabling", ("fail",)), "ib_miscabled",
                        "iblinkinfo | grep -i \"$(hostname -s)\"; ibstat | grep -E \"CA '|GUID\"")


SIGNALS = (nvme_failing, mce_uncorrected, mce_corrected_storm, p2p_redirected, ib_miscabled)
