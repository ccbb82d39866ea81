"""Mounted filesystems: `/proc/mounts`, and `df -P -B1` / `df -P -i` (POSIX output format).

`-P` keeps each filesystem on one line (a long device name does not wrap), which is what lets
a line be split by columns; the mount point is the rest of the line, spaces and all.
"""

from __future__ import annotations

import re

from stetho.core.record import record
from stetho.parsers import ParseError

#: The two headers `df -P` prints: bytes (-B1) and inodes (-i). GNU coreutils words.
_BYTES_HEADER = re.compile(r"^Filesystem\s+1-blocks\s+Used\s+Available\s+Capacity\s+Mounted on$")
_INODES_HEADER = re.compile(r"^Filesystem\s+Inodes\s+IUsed\s+IFree\s+IUse%\s+Mounted on$")
_ROW = re.compile(r"^(\S+)\s+(\d+|-)\s+(\d+|-)\s+(\d+|-)\s+(\d+%|-)\s+(/.*)$")
_OCTAL = re.compile(r"\\([0-7]{3})")


@record
class Mount:
    device: str
    mountpoint: str
    fstype: str
    options: tuple[str, ...]

    @property
    def read_only(self) -> bool:
        return "ro" in self.options


@record
class DfRow:
    """One `df -P` line. `total`, `used`, `free` are bytes (-B1) or inodes (-i); None where df
    prints '-' (a filesystem without a fixed inode table)."""

    filesystem: str
    total: int | None
    used: int | None
    free: int | None
    mountpoint: str

    @property
    def free_pct(self) -> float | None:
        """Free as df's Capacity counts it: of what is usable by users (used + available),
        so blocks reserved for root are not counted as free."""
        if self.used is None or self.free is None or self.used + self.free == 0:
            return None
        return 100.0 * self.free / (self.used + self.free)


def parse_mounts(text: str) -> tuple[Mount, ...]:
    """/proc/mounts: 'device mountpoint fstype options dump pass', spaces in names as \\040."""
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        fields = line.split()
        if len(fields) != 6 or not fields[1].startswith("/") or \
                not fields[4].isdigit() or not fields[5].isdigit():
            raise ParseError("/proc/mounts", f"line {n} is not 'device mountpoint fstype "
                             f"options dump pass': {line[:80]!r}")
        out.append(Mount(_unescape(fields[0]), _unescape(fields[1]), fields[2],
                         tuple(fields[3].split(","))))
    if not out:
        raise ParseError("/proc/mounts", "no mounts listed (not /proc/mounts?)")
    return tuple(out)


def parse_df(text: str, inodes: bool = False) -> tuple[DfRow, ...]:
    """`df -P -B1` (inodes False) or `df -P -i` output."""
    tool = "df -P -i" if inodes else "df -P -B1"
    header = _INODES_HEADER if inodes else _BYTES_HEADER
    lines = [ln.rstrip() for ln in text.splitlines() if ln.strip()]
    if not lines or not header.match(lines[0]):
        raise ParseError(tool, f"first line is not df's header: {(lines or [''])[0][:80]!r}")
    out = []
    for line in lines[1:]:
        m = _ROW.match(line)
        if not m:
            raise ParseError(tool, f"not a df -P row: {line[:80]!r}")
        fs, total, used, free, _pct, mountpoint = m.groups()
        out.append(DfRow(fs, _num(total), _num(used), _num(free), mountpoint))
    if not out:
        raise ParseError(tool, "no filesystems listed")
    return tuple(out)


def holding(mountpoints: list[str], path: str) -> str | None:
    """The mount point whose filesystem holds `path`: the longest one it lies under."""
    best = None
    for mp in mountpoints:
        under = path == mp or mp == "/" or path.startswith(mp.rstrip("/") + "/")
        if under and (best is None or len(mp) > len(best)):
            best = mp
    return best


def _num(field: str) -> int | None:
    return None if field == "-" else int(field)


def _unescape(field: str) -> str:
    return _OCTAL.sub(lambda m: chr(int(m.group(1), 8)), field)
