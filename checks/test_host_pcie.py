"""PCIe health: GPU and HCA links at their capability, and AER errors in the kernel log.

A link that trained at x8 instead of x16, or Gen4 instead of Gen5, halves host<->device and
GPUDirect RDMA bandwidth. An idle GPU may lower its link *speed* to save power, so a GPU's speed
downgrade only warns (recheck under load); a width downgrade, or any HCA downgrade, fails.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from stetho.checking.verdict import Verdict
    from stetho.facts.node import NodeFacts
    from stetho.parsers.lspci import PciDevice
    from stetho.profiles import Profile


def test_pcie_link(pcie_device: PciDevice, profile: Profile, verdict: Verdict) -> None:
    d = pcie_device
    cap, sta = d.link_cap, d.link_sta
    if d.caps_denied:
        verdict.error("lspci could not read the PCIe capabilities (run stetho as root)")
    if cap is None or sta is None:
        verdict.error(f"lspci shows no LnkCap/LnkSta for {d.address}")
    if cap.gen is None or sta.gen is None:
        verdict.error(f"{d.address}: unknown PCIe link speed (LnkCap {cap.speed_gts:g} GT/s, "
                      f"LnkSta {sta.speed_gts:g} GT/s)")
    is_gpu = d.is_nvidia_gpu
    want_gen = profile.gpu.pcie_gen if is_gpu and profile.gpu.pcie_gen else cap.gen
    want_width = profile.gpu.pcie_width if is_gpu and profile.gpu.pcie_width else cap.width
    verdict.measure(f"Gen{sta.gen} x{sta.width}", expected=f"Gen{want_gen} x{want_width}",
                    threshold=f"capability Gen{cap.gen} x{cap.width}")
    verdict.cite(f"{d.address} {d.description}\n  LnkCap: Speed {cap.speed_gts:g}GT/s, Width "
                 f"x{cap.width}\n  LnkSta: Speed {sta.speed_gts:g}GT/s, Width x{sta.width}",
                 "lspci -vvv")
    fix = ("reseat the card and its riser/cable, check the slot's BIOS link settings; "
           f"`lspci -vvv -s {d.address} | grep Lnk` to recheck after a reboot")
    if sta.width < want_width or cap.width < want_width:
        verdict.fail(f"link width x{sta.width} below x{want_width}", remediation=fix)
    if cap.gen < want_gen:
        verdict.fail(f"link capability Gen{cap.gen} below Gen{want_gen} (slot or retimer)",
                     remediation=fix)
    if sta.gen < want_gen:
        if is_gpu:
            verdict.warn(f"link at Gen{sta.gen}, capable of Gen{want_gen}: an idle GPU may "
                         "lower its link speed; recheck under load",
                         remediation="run a load (nccl-tests) and recheck `nvidia-smi -q -d PCI`"
                         "; if it stays low: " + fix)
            return
        verdict.fail(f"link at Gen{sta.gen}, capable of Gen{want_gen}", remediation=fix)
    verdict.ok(f"Gen{sta.gen} x{sta.width}")


def test_pcie_aer(node: NodeFacts, facts: NodeFacts, profile: Profile,
                  verdict: Verdict) -> None:
    log = facts.kernel_log()
    fatal = [e for e in log.aer if e.severity == "uncorrected-fatal"]
    nonfatal = [e for e in log.aer if e.severity == "uncorrected-nonfatal"]
    corrected = [e for e in log.aer if e.severity == "corrected"]
    verdict.measure(f"{len(fatal)} fatal, {len(nonfatal)} non-fatal, {len(corrected)} corrected",
                    expected="no uncorrected AER errors")
    events = fatal + nonfatal + corrected
    verdict.cite("\n".join(e.line for e in events[:6]) or
                 f"no AER line in {log.lines} kernel log lines", "kernel_log")
    fix = ("find the device behind the port (`lspci -t`), reseat its riser/cable, check the slot; "
           "correlate with the GPU's Xid and busbw")
    if fatal:
        devs = sorted({e.device for e in fatal})
        verdict.fail(f"uncorrected fatal PCIe errors on {', '.join(devs)}: "
                     + ", ".join(sorted({x for e in fatal for x in e.errors})), remediation=fix)
    if nonfatal:
        verdict.warn(f"uncorrected non-fatal PCIe errors on "
                     f"{', '.join(sorted({e.device for e in nonfatal}))}", remediation=fix)
        return
    # corrected errors count since boot (the kernel log's lines): their growth within the
    # counter window where history has an earlier count, a time base either way
    w = facts.windows()
    limit = profile.counters.aer_corrected_max
    counted = w.count(("kernel", "", "aer_corrected"), len(corrected))
    if counted.amount > limit:
        verdict.warn(f"{counted.describe('corrected PCIe errors')} (max {limit}): a marginal "
                     f"link; {w.basis()}", remediation=fix)
        return
    verdict.ok(f"no uncorrected PCIe errors; {counted.describe('corrected')} ({w.basis()})")


def test_pcie_p2p_settings(node: NodeFacts, facts: NodeFacts, profile: Profile,
                           verdict: Verdict) -> None:
    """ACS redirect on the PCIe bridges (`host.pcie_acs: disabled`) and the IOMMU's DMA mode
    (`host.iommu: passthrough|off`), where the profile pins them: both route GPU peer-to-peer
    and GPUDirect RDMA through the root complex."""
    from stetho.facts import p2p

    acs, mode = profile.host.pcie_acs, profile.host.iommu
    if acs in (None, "any") and mode in (None, "any"):
        pytest.skip(f"profile {profile.name} pins neither host.pcie_acs nor host.iommu")
    found, bad, cited, probe = [], [], [], "lspci"
    if acs == "disabled":
        bridges = p2p.bridges(facts)
        if any(b.caps_denied for b in bridges):
            verdict.error("lspci could not read the bridges' capabilities (run stetho as root)")
        on = p2p.acs_redirecting(bridges)
        with_acs = sum(b.acs_ctl is not None for b in bridges)
        found.append(f"ACS redirect on {len(on)} of {with_acs} bridges with ACS")
        cited += [f"{a} ACSCtl: {' '.join(f + '+' for f in fs)}" for a, fs in on.items()] or \
            [f"lspci -vvv: {len(bridges)} bridges, none with SrcValid+/ReqRedir+/CmpltRedir+"]
        if on:
            bad.append("ACS redirect enabled on " + ", ".join(
                f"{a} ({'+ '.join(fs)}+)" for a, fs in on.items()))
    if mode in ("passthrough", "off"):
        state = p2p.iommu(facts)
        groups = len(state.groups)
        found.append(f"{groups} IOMMU groups" + (f", {len(state.translated)} translated"
                                                  if groups else ""))
        cited += [f"/proc/cmdline: {state.cmdline}", (
            f"iommu_groups/*/type: {', '.join(sorted(set(state.groups.values())))}"
            if groups else "no IOMMU group")]
        probe = probe if bad else "iommu"
        if mode == "off" and groups:
            bad.append(f"IOMMU active ({groups} groups), profile expects none")
        elif state.translated:
            bad.append(f"IOMMU translates DMA in {len(state.translated)} of {groups} groups "
                       f"(type {state.groups[state.translated[0]]})")
        elif not groups and state.on_by_cmdline and not state.passthrough_by_cmdline:
            bad.append("the kernel command line turns the IOMMU on without iommu=pt (and no "
                       "group says its DMA mode)")
    verdict.cite("\n".join(cited), probe)
    verdict.measure("; ".join(found), expected=", ".join(
        x for x in ((f"ACS {acs}" if acs == "disabled" else ""),
                    (f"IOMMU {mode}" if mode in ("passthrough", "off") else "")) if x))
    if bad:
        verdict.fail("; ".join(bad), remediation=(
            "peer-to-peer goes through the root complex: disable ACS on the PCIe switch ports "
            "in the BIOS (PCIe ACS / 'ACS Control' off), or at every boot `sudo setpci -s BDF "
            "ECAP_ACS+0x6.w=0000` for each bridge named; boot with `iommu=pt` (Intel: "
            "`intel_iommu=on iommu=pt`) on the kernel command line (GRUB_CMDLINE_LINUX, "
            "`update-grub`, reboot)"))
    verdict.ok("; ".join(found))
