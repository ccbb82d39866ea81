"""The simulated node's filesystems: /proc/mounts, `df -P -B1` and `df -P -i`, printed the
way GNU coreutils df and the kernel print them (the format of the recordings in
fixtures/recorded/host-debian12-vm)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from stetho.core.resources import shipped

CHRONY_TRACKING = "14-host/chronyc-tracking-synced-stratum3-lan.txt"

#: The units a healthy simulated node runs: the h100 profile's (NVIDIA's persistence daemon
#: and the NVSwitch fabric manager an HGX node needs), and sshd, which every node runs.
UNITS = ("nvidia-persistenced", "nvidia-fabricmanager", "sshd")

#: `systemctl is-active UNIT...`: each unit's state from data/units.tsv, `inactive` for one
#: systemd does not know (as systemctl prints), exit 3 unless all are active (systemctl's
#: "not running" code).
SYSTEMCTL_SHIM = [
    '[ "$1" = "is-active" ] || { echo "simulated systemctl: unsupported arguments: $*" >&2; '
    'exit 2; }', "shift", "rc=0",
    'for u in "$@"; do',
    "  s=$(awk -F '\\t' -v u=\"$u\" '$1 == u { print $2 }' \"$D/units.tsv\")",
    '  [ -n "$s" ] || s=inactive', '  echo "$s"', '  [ "$s" = active ] || rc=3', "done",
    'exit "$rc"',
]


LIMITS = "host-debian12-vm/limits"  # fixtures/recorded: this project's VM, 8 MiB memlock


def limits(sysroot: Path) -> None:
    """No hugepages reserved (as recorded: an H100 node's jobs do not ask for them), and the
    recorded process limits with memlock unlimited: what a GPU node's job launcher sets for
    RDMA (NVIDIA's and Slurm's guidance for GPUDirect RDMA), so the healthy node passes."""
    rec = shipped("fixtures/recorded")
    (sysroot / "proc/sys/vm").mkdir(parents=True, exist_ok=True)
    (sysroot / "proc/sys/vm/nr_hugepages").write_text((rec / "host-debian12-vm/nr_hugepages")
                                                      .read_text())
    text = re.sub(r"^(Max locked memory\s+)\S+(\s+)\S+", _unlimited,
                  (rec / LIMITS).read_text(), flags=re.M)
    (sysroot / "proc/self").mkdir(parents=True, exist_ok=True)
    (sysroot / "proc/self/limits").write_text(text)


def _unlimited(m: re.Match[str]) -> str:
    """The recorded row's numbers replaced by `unlimited`, the columns kept aligned."""
    return f"{m.group(1)}{'unlimited':<21}unlimited"


@dataclass
class SimFs:
    device: str
    mountpoint: str
    fstype: str
    options: str
    size: int  # bytes
    used: int
    avail: int  # what df prints as Available: size - used - blocks reserved for root
    inodes: int
    iused: int


def healthy() -> list[SimFs]:
    """Why these are healthy: `/` is the recorded VM root filesystem's numbers
    (fixtures/recorded/host-debian12-vm/df-P-*.txt: 27% of its usable space used, 6% of its
    inodes), on the NVMe device an HGX node boots from; /raid is the local NVMe RAID-0 scratch
    a DGX mounts there (8 x 3.84 TB), a third full, ext4's default one inode per 16 KiB, rw.
    Both clear the h100 profile's limits (10% and 5% free) by far."""
    raid = 8 * 3_840_000_000_000
    return [
        SimFs("/dev/nvme0n1p2", "/", "ext4", "rw,relatime,errors=remount-ro",
              270553174016, 29737553920, 79206739968, 16777216, 977068),
        SimFs("/dev/md0", "/raid", "ext4", "rw,relatime,stripe=256",
              raid, raid // 3, raid - raid // 3 - raid // 20, raid // 16384, 411022),
    ]


def mounts(fss: list[SimFs]) -> str:
    """The pseudo filesystems every node lists (as recorded), then the node's own."""
    lines = ["proc /proc proc rw,relatime 0 0", "sysfs /sys sysfs rw,relatime 0 0",
             "devtmpfs /dev devtmpfs rw,relatime,size=1056763916k,nr_inodes=264190979,"
             "mode=755 0 0", "tmpfs /dev/shm tmpfs rw,relatime 0 0"]
    lines += [f"{f.device} {f.mountpoint} {f.fstype} {f.options} 0 0" for f in fss]
    return "\n".join(lines) + "\n"


def df_bytes(fss: list[SimFs]) -> str:
    rows: list[tuple[str, ...]] = [
        ("Filesystem", "1-blocks", "Used", "Available", "Capacity", "Mounted on")]
    rows += [(f.device, str(f.size), str(f.used), str(f.avail),
              f"{_ceil_pct(f.used, f.used + f.avail)}%", f.mountpoint) for f in fss]
    return _table(rows)


def df_inodes(fss: list[SimFs]) -> str:
    rows: list[tuple[str, ...]] = [
        ("Filesystem", "Inodes", "IUsed", "IFree", "IUse%", "Mounted on")]
    rows += [(f.device, str(f.inodes), str(f.iused), str(f.inodes - f.iused),
              f"{_ceil_pct(f.iused, f.inodes)}%", f.mountpoint) for f in fss]
    return _table(rows)


def _ceil_pct(part: int, whole: int) -> int:
    """df rounds its percentages up (coreutils df.c: a filesystem 99.1% full prints 100%)."""
    return -(-100 * part // whole) if whole else 0


def _table(rows: list[tuple[str, ...]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    out = []
    for r in rows:
        cells = [r[0].ljust(widths[0])] + [r[i].rjust(widths[i]) for i in range(1, 5)]
        out.append(" ".join(cells) + " " + r[5])
    return "\n".join(out) + "\n"


#: the recorded Broadcom PEX890xx Gen5 switch port (an HGX board's GPU/NIC switch), ACS off;
#: its upstream link trained below capability as recorded (a bridge: pcie_link judges none)
PEX_SWITCH = "09-lspci/lspci-vvv-pex890xx-switch-speed-downgraded.txt"

#: the kernel command line of the recorded boot (stetho.sim.render.healthy_kernel_log)
CMDLINE = "BOOT_IMAGE=/vmlinuz-5.15.0-105-generic root=UUID=0 ro iommu=pt"
IOMMU_GROUPS = 24  # a group per GPU, NIC, NVSwitch and NVMe drive, roughly an HGX node's


def iommu(sysroot: Path, mode: str, cmdline: str = CMDLINE) -> None:
    """/proc/cmdline and each IOMMU group's type: `identity` under iommu=pt (healthy),
    `DMA-FQ` where the kernel translates (the kernel's default with the IOMMU on)."""
    (sysroot / "proc").mkdir(parents=True, exist_ok=True)
    (sysroot / "proc/cmdline").write_text(cmdline + "\n", encoding="utf-8")
    for g in range(IOMMU_GROUPS):
        path = sysroot / f"sys/kernel/iommu_groups/{g}/type"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(mode + "\n", encoding="utf-8")
