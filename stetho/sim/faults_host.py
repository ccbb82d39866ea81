"""Host hygiene faults: a full or read-only filesystem (and the other host-wide settings a
job relies on). Each edits the draft's model of the node (stetho.sim.hostfs)."""

from __future__ import annotations

import re

from stetho.errors import ConfigError
from stetho.sim.draft import NodeDraft
from stetho.sim.hostfs import SimFs


def _fs(d: NodeDraft, mountpoint: str) -> SimFs:
    for f in d.filesystems:
        if f.mountpoint == mountpoint:
            return f
    raise ConfigError(f"simulated node mounts no {mountpoint} (it has "
                      f"{', '.join(f.mountpoint for f in d.filesystems)})")


def disk_full(d: NodeDraft, arg: str | None) -> None:
    """The filesystem at 99% of its usable space (checkpoints, core dumps): what df then
    prints, used + available unchanged."""
    f = _fs(d, arg or "/")
    usable = f.used + f.avail
    f.avail = usable // 100
    f.used = usable - f.avail


def fs_readonly(d: NodeDraft, arg: str | None) -> None:
    """ext4 remounted read-only after an I/O error (errors=remount-ro): its mount options turn
    `ro`, and the kernel says why. The lines follow fs/ext4/super.c's messages."""
    f = _fs(d, arg or "/raid")
    f.options = "ro" + f.options[2:] if f.options.startswith("rw") else "ro," + f.options
    dev = f.device.rsplit("/", 1)[-1]
    d.kernel_message(f"EXT4-fs error (device {dev}): ext4_journal_check_start:83: "
                     "comm kworker/u256:2: Detected aborted journal")
    d.kernel_message(f"EXT4-fs ({dev}): Remounting filesystem read-only")


def service_down(d: NodeDraft, arg: str | None) -> None:
    """A unit whose main process exited with an error: systemd marks it `failed`."""
    unit = arg or "nvidia-fabricmanager"
    if unit not in d.services:
        raise ConfigError(f"simulated node runs no unit {unit} (it runs "
                          f"{', '.join(d.services)})")
    d.services[unit] = "failed"


def clock_unsynced(d: NodeDraft, arg: str | None) -> None:
    """chronyd lost its sources (a firewall on UDP 123, a dead NTP server): it reports what
    an unsynchronised chronyd does (reference 00000000, stratum 0, Not synchronised) and the
    clock has drifted 2.5 s behind (the recorded drift of an unsynchronised clock is ppm:
    days without a source)."""
    edits = {"Reference ID": "00000000 ()", "Stratum": "0",
             "System time": "2.500000000 seconds slow of NTP time",
             "Leap status": "Not synchronised"}
    text = d.chrony_tracking
    for key, value in edits.items():
        text, n = re.subn(rf"^({re.escape(key)}\s*: ).*$", rf"\g<1>{value}", text, flags=re.M)
        if n != 1:
            raise ConfigError(f"the chronyc tracking recording has {n} {key!r} lines")
    d.chrony_tracking = text


def memlock_limited(d: NodeDraft, arg: str | None) -> None:
    """The collector (and so a job started the same way) under the recorded VM's 8 MiB
    locked-memory limit, the default a PAM login gets without limits.d: RDMA cannot pin."""
    from stetho.core.resources import shipped
    from stetho.sim.hostfs import LIMITS

    (d.sysroot / "proc/self/limits").write_text(
        (shipped("fixtures/recorded") / LIMITS).read_text())


def edac_ue(d: NodeDraft, arg: str | None) -> None:
    """A DIMM on the second socket failing: corrected errors, then an uncorrected one."""
    mc = arg or "mc1"
    base = d.sysroot / f"sys/devices/system/edac/mc/{mc}"
    if not base.is_dir():
        raise ConfigError(f"simulated node has no memory controller {mc} (mc0, mc1)")
    (base / "ce_count").write_text("12\n")
    (base / "ue_count").write_text("1\n")


def _nvme_log(d: NodeDraft, arg: str | None, default: str) -> str:
    ctrl = arg or default
    if ctrl not in d.nvme_smart:
        raise ConfigError(f"simulated node has no NVMe controller {ctrl} (it has "
                          f"{', '.join(d.nvme_smart)})")
    return ctrl


def nvme_media_errors(d: NodeDraft, arg: str | None) -> None:
    """A drive returning unrecovered reads: the controller counts each in media_errors and
    logs it in its error information log (num_err_log_entries grows with it)."""
    from stetho.sim import nvme

    ctrl = _nvme_log(d, arg, "nvme3")
    text = d.nvme_smart[ctrl]
    d.nvme_smart[ctrl] = nvme.edit(text, {
        "media_errors": nvme.read(text, "media_errors") + 24,
        "num_err_log_entries": nvme.read(text, "num_err_log_entries") + 24})


def nvme_critical_warning(d: NodeDraft, arg: str | None) -> None:
    """A drive that has used up its spare blocks: available_spare under the drive's own
    threshold, and critical warning bit 0 (spare below threshold) set, as the drive reports
    it; the blocks retired on the way there show as wear."""
    from stetho.sim import nvme

    ctrl = _nvme_log(d, arg, "nvme5")
    text = d.nvme_smart[ctrl]
    threshold = nvme.read(text, "spare_thresh")
    d.nvme_smart[ctrl] = nvme.edit(text, {"avail_spare": max(threshold - 1, 0),
                                          "critical_warning": 1})


MCE_CORRECTED = "05-kernel-log/dmesg-mce-corrected-amd-bank17-then-logged-notices-EXCERPT.log"
MCE_FATAL = "05-kernel-log/journal-mce-uncorrected-pcc-bank4-j5005-EXCERPT.log"


def _mce_lines(d: NodeDraft, rel: str, count: int) -> list[str]:
    """The first `count` machine-check lines of a recording, their prefixes taken off."""
    lines = [ln[ln.index("mce: "):] for ln in d.real(rel).splitlines() if "mce: [" in ln]
    return lines[:count]


def mce_corrected_storm(d: NodeDraft, arg: str | None) -> None:
    """A CPU's unified memory controller bank correcting an error again and again: the
    recorded corrected machine check (CPU 0 bank 17, its notice and detail lines), logged 12
    times in the last hour, 5 minutes apart."""
    group = _mce_lines(d, MCE_CORRECTED, 4)
    for n in range(12):
        for i, line in enumerate(group):
            d.kernel_message(line, ago_s=3600.0 - n * 300.0 - i * 0.001)


def mce_uncorrected(d: NodeDraft, arg: str | None) -> None:
    """An uncorrected machine check with the processor context corrupt: the recorded record
    (bank 4, MCi_STATUS a600000000020408: UC and PCC set), minutes before collection."""
    for i, line in enumerate(_mce_lines(d, MCE_FATAL, 4)):
        d.kernel_message(line, ago_s=300.0 - i * 0.001)
def nccl_env_skew(d: NodeDraft, arg: str | None) -> None:
    """The job's container image brings another NCCL than the host's: by default the real
    recorded image environment as it is (NCCL 2.20.5 against the host's 2.21.5); `VERSION`
    sets the image's, `module:VERSION` the environment module's instead."""
    from stetho.sim import jobenv

    where, _, version = (arg or "").rpartition(":")
    version = version or jobenv.RECORDED_NCCL
    if not re.fullmatch(r"\d+\.\d+\.\d+", version) or where not in ("", "image", "module"):
        raise ConfigError(f"nccl-env-skew takes VERSION or module:VERSION, got {arg!r}")
    if where == "module":
        d.module_nccl = version
    else:
        d.image_nccl = version


ACS_OFF = "ACSCtl:\tSrcValid- TransBlk- ReqRedir- CmpltRedir- UpstreamFwd- EgressCtrl- " \
    "DirectTrans-"
#: what the kernel enables on a port with ACS (the recorded AMD bridge in fixtures/real/09-lspci)
ACS_ON = "ACSCtl:\tSrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- " \
    "DirectTrans-"


def acs_enabled(d: NodeDraft, arg: str | None) -> None:
    """ACS redirect on a PCIe switch port between GPUs and NICs: the recorded PEX890xx port
    (ACS off as recorded) with the kernel's ACS enabling, at `arg` (default 17:00.0, its
    recorded address)."""
    block = d.lspci_extra[0]  # the healthy node's switch port, as recorded
    if ACS_OFF not in block:
        raise ConfigError(f"the recorded switch block has no {ACS_OFF!r}")
    block = block.replace(ACS_OFF, ACS_ON)
    if arg:
        if not re.fullmatch(r"[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]", arg):
            raise ConfigError(f"acs-enabled takes a bridge address like 17:00.0, got {arg!r}")
        block = block.replace("17:00.0", arg, 1)
    d.lspci_extra[0] = block


def iommu_translated(d: NodeDraft, arg: str | None) -> None:
    """The kernel booted with the IOMMU on and without iommu=pt: every group translates DMA
    (type DMA-FQ, the default since 5.16 with intel_iommu=on)."""
    from stetho.sim import hostfs

    hostfs.iommu(d.sysroot, "DMA-FQ", hostfs.CMDLINE.replace("iommu=pt", "intel_iommu=on"))
