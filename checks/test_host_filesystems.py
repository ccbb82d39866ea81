"""Filesystems the profile names: mounted, writable, with free space and free inodes.

A full `/` or `/tmp` kills a job at its first checkpoint or its first temporary file, hours
in; a scratch or home filesystem that is not mounted (or fell back to read-only after an I/O
error) makes every job write into the root filesystem or fail. Each named filesystem is one
subject; the free-space limits apply to the filesystem holding the path.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from stetho.facts import hygiene
from stetho.parsers.filesystems import holding

if TYPE_CHECKING:
    from stetho.checking.verdict import Verdict
    from stetho.facts.node import NodeFacts
    from stetho.parsers.filesystems import DfRow
    from stetho.profiles import FsLimit


def test_host_filesystems(filesystem: FsLimit, facts: NodeFacts, verdict: Verdict) -> None:
    path = filesystem.path
    mounts = hygiene.mounts(facts)
    space, inodes = hygiene.df(facts, inodes=False), hygiene.df(facts, inodes=True)
    required_mount = filesystem.min_free_pct is None and filesystem.min_free_inodes_pct is None
    where = path if required_mount else holding([m.mountpoint for m in mounts], path)
    mount = hygiene.mount_at(facts, where) if where else None
    if mount is None:
        verdict.measure("not mounted", expected=f"{path} mounted read-write")
        verdict.cite(f"/proc/mounts: no line mounts {path} ({len(mounts)} mounts listed)",
                     "mounts")
        verdict.fail(f"{path} is not mounted",
                     remediation=f"sudo mount {path} (check its /etc/fstab line, or the "
                     "automounter); `journalctl -b -u '*.mount'` says why it failed")
    rows = [r for r in (space.get(mount.mountpoint), inodes.get(mount.mountpoint)) if r]
    verdict.cite("\n".join([f"/proc/mounts: {mount.device} {mount.mountpoint} {mount.fstype} "
                            f"{','.join(mount.options)}"] +
                           [f"df: {r.filesystem} {r.total} {r.used} {r.free} {r.mountpoint}"
                            for r in rows]), "df_bytes")
    problems = []
    if mount.read_only:
        problems.append(f"{mount.mountpoint} ({mount.device}, {mount.fstype}) is mounted "
                        "read-only")
    free = space.get(mount.mountpoint)
    free_pct = free.free_pct if free else None
    free_inodes = inodes.get(mount.mountpoint)
    inode_pct = _inode_free_pct(free_inodes.total, free_inodes.free) if free_inodes else None
    verdict.measure(round(free_pct, 1) if free_pct is not None else None, "% free",
                    expected=_expected(filesystem))
    if filesystem.min_free_pct is not None:
        if free is None or free_pct is None:
            verdict.error(f"df -P -B1 lists no size for {mount.mountpoint}")
        elif free_pct < filesystem.min_free_pct:
            problems.append(f"{mount.mountpoint} is {100 - free_pct:.1f}% full: "
                            f"{_gib(free.free)} GiB free of {_gib(_usable(free))} GiB usable "
                            f"({free_pct:.1f}% < {filesystem.min_free_pct:g}%)")
    if filesystem.min_free_inodes_pct is not None and free_inodes is not None and \
            inode_pct is not None and inode_pct < filesystem.min_free_inodes_pct:
        problems.append(f"{mount.mountpoint} has {free_inodes.free} of {free_inodes.total} "
                        f"inodes free ({inode_pct:.1f}% < {filesystem.min_free_inodes_pct:g}%)")
    elif filesystem.min_free_inodes_pct is not None and free_inodes is None:
        verdict.error(f"df -P -i lists no inode counts for {mount.mountpoint}")
    if problems:
        verdict.fail("; ".join(problems), remediation=_fix(mount.mountpoint, mount.read_only))
    verdict.ok(f"{mount.mountpoint} mounted read-write"
               + (f", {free_pct:.1f}% free" if free_pct is not None else "")
               + (f", {inode_pct:.1f}% inodes free" if inode_pct is not None else ""))


def _inode_free_pct(total: int | None, free: int | None) -> float | None:
    """None where the filesystem has no fixed inode table (btrfs, XFS-less tmpfs report 0)."""
    if not total or free is None:
        return None
    return 100.0 * free / total


def _expected(f: FsLimit) -> str:
    parts = ["mounted read-write"]
    if f.min_free_pct is not None:
        parts.append(f">= {f.min_free_pct:g}% free")
    if f.min_free_inodes_pct is not None:
        parts.append(f">= {f.min_free_inodes_pct:g}% inodes free")
    return ", ".join(parts)


def _usable(row: DfRow) -> int | None:
    """What users may fill: used + available (blocks reserved for root left out)."""
    return None if row.used is None or row.free is None else row.used + row.free


def _gib(n: int | None) -> str:
    return "?" if n is None else f"{n / 2**30:.1f}"


def _fix(mountpoint: str, read_only: bool) -> str:
    if read_only:
        return (f"a filesystem remounted read-only after an I/O error: find it in `dmesg | "
                f"grep -i 'remount'`, check the disk, fsck, then `sudo mount -o remount,rw "
                f"{mountpoint}`; drain the node until then")
    return (f"free space on {mountpoint}: `sudo du -xh --max-depth=2 {mountpoint} | sort -h "
            "| tail` finds what grew (old checkpoints, core dumps, container images: "
            "`docker system prune`, `journalctl --vacuum-size=1G`); `df -i` for inodes")
