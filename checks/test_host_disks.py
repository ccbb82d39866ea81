"""Rotational flag: NVMe (and profile-listed) block devices report themselves non-rotational.

An SSD flagged rotational gets the rotational I/O path (larger read-ahead, different
scheduling heuristics, no discard batching), which slows checkpoint and dataset reads.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from stetho.checking.verdict import Verdict
    from stetho.parsers.sysfs_host import BlockDevice


def test_disk_rotational(disk: BlockDevice, verdict: Verdict) -> None:
    verdict.measure(int(disk.rotational) if disk.rotational is not None else None,
                    expected=0)
    verdict.cite(f"/sys/block/{disk.name}/queue/rotational: "
                 f"{int(disk.rotational) if disk.rotational is not None else 'missing'}; "
                 f"scheduler: {disk.scheduler}", "block_queue")
    if disk.rotational is None:
        verdict.error(f"/sys/block/{disk.name}/queue/rotational is missing")
    if disk.rotational:
        verdict.fail(f"{disk.name} reports rotational=1",
                     remediation=f"echo 0 | sudo tee /sys/block/{disk.name}/queue/rotational; "
                     "persist with a udev rule in /etc/udev/rules.d/60-stetho-nonrot.rules: "
                     'ACTION=="add|change", KERNEL=="nvme[0-9]*n[0-9]*", '
                     'ATTR{queue/rotational}="0"')
    verdict.ok(f"{disk.name} non-rotational")
