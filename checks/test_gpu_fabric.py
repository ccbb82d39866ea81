"""What the driver itself says about each GPU: its NVSwitch fabric, its own recovery verdict,
and the settings the profile pins.

- gpu_fabric: on an HGX/DGX node the GPUs reach each other only through NVSwitches that
  nvidia-fabricmanager brings up; until the driver reports the GPU's fabric `Completed` with
  status `Success`, CUDA initialisation fails or hangs ("not fit for a job"). Judged only where
  the profile declares `gpu.nvswitch: true`; there an unknown (N/A) fabric state is an error.
- gpu_driver_verdict: 535+ drivers print `GPU Reset Status` (Reset Required, Drain and Reset
  Recommended) and 550+ a `GPU Recovery Action` (NVML's nvmlDeviceGetGpuRecoveryAction: None,
  Reset, Reboot, Drain P2P, Drain and Reset, ...). The driver knows the GPU better than any
  rule here: its words are believed and shown verbatim. A driver that reports neither skips.
- gpu_settings: persistence mode, MIG mode, compute mode and the power cap, where the profile
  pins them, each named with the `nvidia-smi` command that sets it; an ECC mode change pending
  until the next reset warns.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

import pytest

from stetho.facts import fabric, xid_time
from stetho.facts.base import Unavailable

if TYPE_CHECKING:
    from stetho.checking.verdict import Verdict
    from stetho.facts.node import NodeFacts
    from stetho.parsers.gpu_model import Gpu
    from stetho.parsers.sxid import SxidEvent
    from stetho.profiles import Profile

_PROBE = "nvidia-smi -q -x"
_FM_GUIDE = "docs.nvidia.com/datacenter/tesla/fabric-manager-user-guide"


def _show(value: object) -> str:
    return "N/A" if value is None else str(value)


def test_gpu_fabric(gpu: Gpu, profile: Profile, verdict: Verdict) -> None:
    state, status = gpu.fabric_state, gpu.fabric_status
    verdict.measure(state, expected="Completed")
    verdict.cite(f"{gpu.pci_bus_id}: Fabric State={_show(state)} Status={_show(status)} "
                 f"CliqueId={_show(gpu.fabric_clique_id)} "
                 f"ClusterUUID={_show(gpu.fabric_cluster_uuid)}", _PROBE)
    if not profile.gpu.nvswitch:
        pytest.skip(f"profile {profile.name} declares no NVSwitch fabric (gpu.nvswitch): the "
                    "GPUs do not depend on a fabric manager")
    fix = ("check the fabric manager: `systemctl status nvidia-fabricmanager` and "
           "`journalctl -u nvidia-fabricmanager` (its version must match the driver's); restart "
           "it, and if the state stays, reset the GPUs or reboot the node "
           f"({_FM_GUIDE})")
    if state is None:
        verdict.error(f"nvidia-smi reports no fabric state for gpu{gpu.index} (N/A), but "
                      f"profile {profile.name} declares an NVSwitch fabric", fix)
    if state != "Completed":
        verdict.fail(f"GPU fabric State {state}, Status {_show(status)}: the GPU has not "
                     "joined the NVSwitch fabric, not fit for a job", fix)
    if status is None:
        verdict.error(f"fabric State Completed but no Status for gpu{gpu.index} (N/A)", fix)
    if status != "Success":
        verdict.fail(f"GPU fabric State Completed, Status {status}: the fabric manager "
                     "failed to set up this GPU, not fit for a job", fix)
    verdict.ok("fabric Completed, Success")


def test_gpu_driver_verdict(gpu: Gpu, facts: NodeFacts, verdict: Verdict) -> None:
    required, drain = gpu.reset_required, gpu.drain_and_reset_recommended
    action = gpu.recovery_action
    verdict.measure(action if action is not None else (None if required is None else
                    ("Reset Required" if required else "None")), expected="None")
    verdict.cite(f"{gpu.pci_bus_id}: Reset Required={_show(required)} Drain and Reset "
                 f"Recommended={_show(drain)} GPU Recovery Action={_show(action)}", _PROBE)
    if required is None and drain is None and action is None:
        driver = facts.smi().driver_version or "version unknown"
        pytest.skip(f"the driver ({driver}) does not report GPU "
                    "Reset Status or GPU Recovery Action (N/A or absent): no verdict of its own")
    said = []
    if action is not None and action.lower() != "none":
        said.append(f"GPU Recovery Action: {action}")
    if required:
        said.append("Reset Required: Yes")
    if drain:
        said.append("Drain and Reset Recommended: Yes")
    if said:
        words = (action or "").lower()
        fix = ("reboot the node" if "reboot" in words else
               "drain the node, stop the GPU's processes and reset it: "
               f"`sudo nvidia-smi -r -i {gpu.pci_bus_id}`")
        verdict.fail(f"the driver says: {'; '.join(said)}", fix + " (NVIDIA, GPU memory error "
                     "management: error recovery and response flags)")
    verdict.ok("the driver asks for no recovery action")


def test_gpu_settings(gpu: Gpu, profile: Profile, verdict: Verdict) -> None:
    spec, bus = profile.gpu, gpu.pci_bus_id
    # (setting, pinned value, measured value, command that sets it)
    pins: list[tuple[str, object, object, str]] = []
    if spec.persistence_mode is not None:
        pins.append(("persistence mode", spec.persistence_mode, gpu.persistence_mode,
                     f"sudo nvidia-smi -i {bus} -pm {int(spec.persistence_mode)}"))
    if spec.mig is not None:
        pins.append(("MIG mode", spec.mig, gpu.mig_enabled,
                     f"sudo nvidia-smi -i {bus} -mig {int(spec.mig)} (then reset the GPU)"))
    if spec.compute_mode is not None:
        pins.append(("compute mode", spec.compute_mode, gpu.compute_mode,
                     f"sudo nvidia-smi -i {bus} -c {spec.compute_mode.upper()}"))
    limit, default = gpu.power_limit_w, gpu.default_power_limit_w
    verdict.measure(limit, "W", expected=f">= default {_show(default)} W"
                    if spec.power_limit else None)
    verdict.cite(f"{bus}: persistence={_show(gpu.persistence_mode)} "
                 f"MIG={_show(gpu.mig_enabled)} compute mode={_show(gpu.compute_mode)} "
                 f"power limit={_show(limit)} W default={_show(default)} W ECC current="
                 f"{_show(gpu.ecc_enabled)} pending={_show(gpu.ecc_pending)}", _PROBE)
    ecc_known = gpu.ecc_enabled is not None and gpu.ecc_pending is not None
    if not pins and spec.power_limit is None and not ecc_known:
        pytest.skip(f"profile {profile.name} pins no GPU setting and the driver reports no "
                    "pending ECC mode")
    unknown = [name for name, _, have, _ in pins if have is None]
    if spec.power_limit == "default" and (limit is None or default is None):
        unknown.append("power limit (enforced or default)")
    if unknown:
        verdict.error(f"nvidia-smi reports no {', '.join(unknown)} for gpu{gpu.index}, which "
                      f"profile {profile.name} pins")
    off = [(f"{name} is {_word(have)}, the profile pins {_word(want)}", cmd)
           for name, want, have, cmd in pins if have != want]
    if spec.power_limit == "default" and limit is not None and default is not None \
            and limit < default:
        off.append((f"power cap {limit:g} W is below the default limit {default:g} W",
                    f"sudo nvidia-smi -i {bus} -pl {default:g}"))
    if off:
        verdict.fail("; ".join(m for m, _ in off), "; ".join(c for _, c in off))
    if ecc_known and gpu.ecc_enabled != gpu.ecc_pending:
        verdict.warn(f"ECC mode pending {_word(gpu.ecc_pending)}, current "
                     f"{_word(gpu.ecc_enabled)}: a reset applies it",
                     f"drain the node and reset the GPU: `sudo nvidia-smi -r -i {bus}`")
        return
    verdict.ok("settings as pinned" if pins or spec.power_limit else "no ECC mode change pending")


def _word(value: object) -> str:
    if value is True:
        return "enabled"
    if value is False:
        return "disabled"
    return _show(value)


def test_fabric_manager(node: NodeFacts, profile: Profile, verdict: Verdict) -> None:
    """nvidia-fabricmanager must run on an NVSwitch node: it trains the fabric at boot and after
    every GPU reset, and handles NVSwitch errors while jobs run."""
    if not profile.gpu.nvswitch:
        pytest.skip(f"profile {profile.name} declares no NVSwitch fabric (gpu.nvswitch): no "
                    "fabric manager is needed")
    fix = ("`sudo systemctl enable --now nvidia-fabricmanager`; if it fails, read "
           "`journalctl -u nvidia-fabricmanager` (its version must match the driver's) "
           f"({_FM_GUIDE})")
    try:
        state = fabric.fabric_manager(node)
    except Unavailable as u:
        verdict.error(f"cannot tell whether nvidia-fabricmanager runs ({u.reason}), but profile "
                      f"{profile.name} declares an NVSwitch fabric", fix)
    verdict.measure(state.state, expected="active")
    verdict.cite(f"nvidia-fabricmanager: {state.state}"
                 + (f" (pids {', '.join(map(str, state.pids))})" if state.pids else ""),
                 "systemctl is-active nvidia-fabricmanager" if state.source == "systemctl"
                 else "pgrep -l -x nv-fabricmanager")
    if not state.active:
        verdict.fail(f"nvidia-fabricmanager is {state.state}: the NVSwitch fabric is not "
                     "managed, not fit for a job", fix)
    verdict.ok(f"nvidia-fabricmanager {state.state}")


def test_nvswitch_sxid(node: NodeFacts, profile: Profile, verdict: Verdict) -> None:
    """NVSwitch errors (SXids) in the kernel log: a Fatal one within `gpu.xid_window_h` before
    collection (or at a time the line does not carry) fails, a Non-fatal one warns, an older
    Fatal one warns as history. The severity is the driver's own word on the line; a code
    without a cited row in stetho/facts/sxid_catalog.yml is an error."""
    if not profile.gpu.nvswitch:
        pytest.skip(f"profile {profile.name} declares no NVSwitch fabric (gpu.nvswitch): no "
                    "SXid applies")
    try:
        log = node.kernel_log()
    except Unavailable as u:
        verdict.error(f"cannot read the kernel log for NVSwitch SXids ({u.reason}), but profile "
                      f"{profile.name} declares an NVSwitch fabric")
    now = xid_time.collected_at(node.bundle.collected_at)
    window = timedelta(hours=profile.gpu.xid_window_h)
    table = fabric.sxid_catalog()
    old = [e for e in log.sxids if e.time is not None and now is not None
           and now - e.time > window]
    recent = [e for e in log.sxids if e not in old]
    fatal = [e for e in recent if e.fatal]
    verdict.measure(len(fatal), "fatal SXids", expected=0,
                    threshold=f"Fatal within the {xid_time.window_words(window)}")
    if log.sxids:
        verdict.cite("\n".join(e.line for e in log.sxids[-20:]), "kernel log")
    unknown = sorted({e.code for e in log.sxids if e.code not in table})
    if unknown:
        verdict.error(f"SXid {', '.join(map(str, unknown))} has no row in stetho's SXid table: "
                      "cannot judge it", "look the code up in NVIDIA's Fabric Manager User "
                      "Guide (NVSwitch SXid errors) and add a cited row to "
                      "stetho/facts/sxid_catalog.yml")

    def said(events: list[SxidEvent]) -> str:
        return "; ".join(sorted({f"SXid {e.code} ({table[e.code].name}) on nvidia-nvswitch"
                                 f"{e.switch}" + (f" link {e.link}" if e.link is not None else "")
                                 for e in events}))

    fix = ("drain the node; NVIDIA's recovery for a fatal NVSwitch error is a reset of the GPUs "
           "and NVSwitches (reboot the node); if it recurs on the same link, reseat or replace "
           f"the baseboard ({_FM_GUIDE}, NVSwitch SXid errors)")
    if fatal:
        verdict.fail(f"{len(fatal)} fatal NVSwitch error(s) {xid_time.stamp(fatal[-1].time, now)}"
                     f": {said(fatal)}", fix)
    warned = [e for e in recent if not e.fatal] + [e for e in old if e.fatal]
    if warned:
        verdict.warn(f"NVSwitch error(s) that do not stop a job: {said(warned)}",
                     "watch the link's counters; a recurring SXid on one link points at the "
                     "baseboard")
        return
    verdict.ok("no NVSwitch SXid in the kernel log" if not log.sxids else
               "only NVSwitch SXids older than the window (non-fatal)")


def test_nvswitch_count(node: NodeFacts, profile: Profile, verdict: Verdict) -> None:
    """The NVSwitches on the PCI bus against the board's count (`gpu.nvswitch_count`: 4 on
    HGX H100, 6 on HGX A100). An NVSwitch that fell off the bus leaves the fabric manager
    unable to train the fabric: it fails to start and no GPU's fabric completes."""
    want = profile.gpu.nvswitch_count
    if not want:
        pytest.skip(f"profile {profile.name} expects no NVSwitch on the bus "
                    "(gpu.nvswitch_count unset or 0: a PCIe or NVLink-bridge node)")
    fix = ("an NVSwitch is missing from the PCI bus: reboot the node (a cold power cycle, "
           "not a warm reset); if it stays missing, the HGX baseboard needs service "
           f"({_FM_GUIDE})")
    try:
        found = fabric.nvswitches(node)
    except Unavailable as u:
        verdict.error(f"cannot count the NVSwitches ({u.reason}), but profile {profile.name} "
                      f"expects {want}", fix)
    verdict.measure(len(found), "NVSwitches", expected=want)
    verdict.cite(", ".join(f"{d.address} [{d.vendor}:{d.device}] class {d.pci_class}"
                           for d in found) or "no NVIDIA bridge 22a3/1af1 in "
                 "/sys/bus/pci/devices", "/sys/bus/pci/devices/*/{vendor,device,class}")
    if len(found) < want:
        verdict.fail(f"{len(found)} NVSwitch(es) on the PCI bus, profile {profile.name} "
                     f"expects {want}", fix)
    verdict.ok(f"{len(found)} NVSwitches on the bus")
