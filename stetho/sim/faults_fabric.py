"""Faults of what the driver says about a GPU itself (issue 24): its NVSwitch fabric, its own
recovery verdict, the settings a profile pins. Each is one field of the real recorded H100
`nvidia-smi -q` output, edited as a real failure changes it; stetho.sim.faults lists them.

The recording is already a healthy HGX H100 on these fields, so the healthy node needs no edit:
every GPU reads Fabric State Completed / Status Success (the fabric manager had trained the
NVSwitches), Reset Required No, Persistence Mode Enabled, Compute Mode Default and a 700 W
current power limit equal to its default.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from stetho.sim.faults_facts import _gpu

if TYPE_CHECKING:
    from stetho.sim.draft import NodeDraft


def fabric_not_started(d: NodeDraft, arg: str | None) -> None:
    """nvidia-fabricmanager never ran (or died before training the NVSwitches): the driver
    reports every GPU's fabric State `Not Started`, with no status yet (N/A)."""
    for g in range(d.gpu_count):
        d.smi.set(g, ("Fabric", "State"), "Not Started")
        d.smi.set(g, ("Fabric", "Status"), "N/A")


def reset_required(d: NodeDraft, arg: str | None) -> None:
    """The driver flags one GPU for a reset after an uncorrectable fault (GPU Reset Status:
    Reset Required Yes, Drain and Reset Recommended Yes, as a 535 driver prints them)."""
    g = _gpu(arg, 2, d)
    d.smi.set(g, ("GPU Reset Status", "Reset Required"), "Yes")
    d.smi.set(g, ("GPU Reset Status", "Drain and Reset Recommended"), "Yes")


def persistence_off(d: NodeDraft, arg: str | None) -> None:
    """Persistence mode disabled on one GPU (a reboot without the persistenced unit)."""
    d.smi.set(_gpu(arg, 1, d), ("Persistence Mode",), "Disabled")


def power_capped(d: NodeDraft, arg: str | None) -> None:
    """One GPU capped at 500 W (`nvidia-smi -pl 500`) below its 700 W default limit: the
    current and requested limits move, the default and the range stay as recorded."""
    g = _gpu(arg, 6, d)
    d.smi.set(g, ("GPU Power Readings", "Current Power Limit"), "500.00 W")
    d.smi.set(g, ("GPU Power Readings", "Requested Power Limit"), "500.00 W")


def fabric_manager_down(d: NodeDraft, arg: str | None) -> None:
    """nvidia-fabricmanager exited on an error after it had trained the NVSwitches
    (`systemctl is-active` prints `failed`): the GPUs still read Fabric Completed/Success, so
    only the service state shows that nothing now handles NVSwitch errors or new GPU
    partitions, nor trains the fabric again after a GPU reset."""
    d.services["nvidia-fabricmanager"] = "failed"


#: The recorded fatal SXid (leptonai/gpud's quoted LTSSM Fault Up log, fixtures/real/05-kernel-
#: log/dmesg-nvswitch-sxid-20034-fatal-ltssm-EXCERPT.log), its uptime stamp left to the shim.
_SXID_LOG = "05-kernel-log/dmesg-nvswitch-sxid-20034-fatal-ltssm-EXCERPT.log"


def sxid_fatal(d: NodeDraft, arg: str | None) -> None:
    """An NVSwitch link went down 10 minutes before collection: the recorded SXid 20034 Fatal
    line and its Severity/Data detail lines, as the nvswitch driver printed them."""
    for raw in d.real(_SXID_LOG).splitlines()[:4]:
        d.kernel_message(raw.split("] ", 1)[1], ago_s=600.0)


def ecc_pending_off(d: NodeDraft, arg: str | None) -> None:
    """Someone ran `nvidia-smi -e 0` on a GPU: ECC still Enabled now, Disabled pending until
    the next reset (ECC Mode: Current Enabled, Pending Disabled)."""
    d.smi.set(_gpu(arg, 4, d), ("ECC Mode", "Pending"), "Disabled")


def nvswitch_missing(d: NodeDraft, arg: str | None) -> None:
    """One NVSwitch fell off the PCI bus (default the last, 0000:0a:00.0): its sysfs device
    is gone, and what follows on an HGX board: nvidia-fabricmanager cannot train a fabric with
    a switch missing and exits (unit `failed`), so no GPU's fabric completes (State Not
    Started, as in fabric-not-started)."""
    from stetho.sim import pcibus

    pcibus.drop_nvswitch(d.sysroot, int(arg) if arg else 3)
    fabric_manager_down(d, None)
    fabric_not_started(d, None)


def dmabuf_only(d: NodeDraft, arg: str | None) -> None:
    """The open kernel module loaded and no nvidia_peermem: GPUDirect RDMA only through
    DMA-BUF (kernel 5.15 here, >= 5.12)."""
    import shutil

    from stetho.sim import pcibus

    pcibus.write_version(d.sysroot, d.real, d.driver, open_module=True)
    shutil.rmtree(d.sysroot / "sys/module/nvidia_peermem")


def gpudirect_none(d: NodeDraft, arg: str | None) -> None:
    """Neither GPUDirect RDMA path: nvidia_peermem not loaded, and the open kernel module
    loaded on a kernel too old for DMA-BUF (5.4, before 5.12)."""
    dmabuf_only(d, None)
    (d.sysroot / "proc/sys/kernel/osrelease").write_text("5.4.0-150-generic\n")


#: NVLinks per GPU on the simulated board (H100 SXM5: 18, as `nvidia-smi nvlink -s` lists).
NVLINKS = 18


def nvlink_down(d: NodeDraft, arg: str | None) -> None:
    """NVLink 7 of a GPU did not train: the single-node all-reduce (over NVLink) runs at the
    pace of that GPU's 17 of 18 links from 1 MiB up."""
    d.nvlink_down.add((_gpu(arg, 0, d), 7))
    down = max(sum(1 for g, _ in d.nvlink_down if g == gpu) for gpu, _ in d.nvlink_down)
    d.nccl_scale = (NVLINKS - down) / NVLINKS


def nvlink_errors(d: NodeDraft, arg: str | None) -> None:
    """One NVLink of a GPU retraining: replay, recovery and CRC counts past the per-link
    limits, the link still up (what precedes a link loss)."""
    d.nvlink_counters[(_gpu(arg, 2, d), 3)] = {
        "Replay Errors": 2400, "Recovery Errors": 12, "CRC Errors": 1800}
