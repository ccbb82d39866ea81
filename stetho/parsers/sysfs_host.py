"""Host sysfs facts: the cpufreq governor of each CPU and the queue flags of each block device.

Input is the mapping {node path: file content} the collector read (paths as on the node,
e.g. "/sys/block/nvme0n1/queue/rotational"), so these stay pure and replayable.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from stetho.core.record import record
from stetho.parsers import ParseError

_CPU = re.compile(r"/cpu(\d+)/cpufreq/scaling_governor$")
_BLOCK = re.compile(r"/sys/block/([^/]+)/queue/(rotational|scheduler)$")
_GOVERNOR = re.compile(r"^[a-z][a-z0-9_]*$")


@record
class CpuGovernor:
    cpu: int
    governor: str


@record
class BlockDevice:
    name: str
    rotational: bool | None
    scheduler: str | None  # the active one, shown in [brackets] by the kernel
    schedulers: tuple[str, ...] = ()


def parse_governors(files: Mapping[str, str]) -> tuple[CpuGovernor, ...]:
    out = []
    for path, text in files.items():
        m = _CPU.search(path)
        if not m:
            raise ParseError("cpufreq", f"unexpected path {path}")
        gov = text.strip()
        if not _GOVERNOR.match(gov):
            raise ParseError("cpufreq", f"{path}: not a governor name: {gov[:40]!r}")
        out.append(CpuGovernor(int(m.group(1)), gov))
    return tuple(sorted(out, key=lambda g: g.cpu))


def parse_block(files: Mapping[str, str]) -> tuple[BlockDevice, ...]:
    rot: dict[str, bool] = {}
    sched: dict[str, tuple[str | None, tuple[str, ...]]] = {}
    for path, text in files.items():
        m = _BLOCK.search(path)
        if not m:
            raise ParseError("sysfs block", f"unexpected path {path}")
        dev, attr = m.groups()
        value = text.strip()
        if attr == "rotational":
            if value not in ("0", "1"):
                raise ParseError("sysfs block", f"{path}: expected 0 or 1, got {value[:40]!r}")
            rot[dev] = value == "1"
        else:
            sched[dev] = _scheduler(path, value)
    names = sorted(set(rot) | set(sched))
    return tuple(BlockDevice(n, rot.get(n), *sched.get(n, (None, ()))) for n in names)


def _scheduler(path: str, value: str) -> tuple[str | None, tuple[str, ...]]:
    words = value.split()
    if not all(re.match(r"^\[?[a-z][a-z0-9_-]*\]?$", w) for w in words):
        raise ParseError("sysfs block", f"{path}: not a scheduler list: {value[:40]!r}")
    active = next((w.strip("[]") for w in words if w.startswith("[")), None)
    if active is None and len(words) == 1:
        active = words[0]
    return active, tuple(w.strip("[]") for w in words)


@record
class Pressure:
    """Linux PSI (/proc/pressure/<resource>): share of time tasks stalled on it, in percent."""

    resource: str  # io | memory | cpu
    some_avg10: float
    some_avg60: float
    some_avg300: float
    full_avg60: float | None


_PSI = re.compile(r"^(some|full) avg10=([\d.]+) avg60=([\d.]+) avg300=([\d.]+) total=\d+$")


def parse_pressure(files: Mapping[str, str]) -> tuple[Pressure, ...]:
    out = []
    for path, text in sorted(files.items()):
        resource = path.rstrip("/").rsplit("/", 1)[-1]
        if "/pressure/" not in path:
            continue
        rows: dict[str, tuple[float, float, float]] = {}
        for line in text.strip().splitlines():
            m = _PSI.match(line.strip())
            if not m:
                raise ParseError("/proc/pressure", f"{path}: not a PSI line: {line[:60]!r}")
            rows[m.group(1)] = (float(m.group(2)), float(m.group(3)), float(m.group(4)))
        if "some" not in rows:
            raise ParseError("/proc/pressure", f"{path}: no 'some' line")
        some = rows["some"]
        out.append(Pressure(resource, some[0], some[1], some[2],
                            rows["full"][1] if "full" in rows else None))
    return tuple(out)


_MEMINFO = re.compile(r"^([A-Za-z0-9_()]+):\s+(\d+)(?:\s+kB)?$")


def parse_meminfo(text: str) -> dict[str, int]:
    """/proc/meminfo -> {field: kB} (HugePages_* counts are plain numbers)."""
    out = {}
    for line in text.strip().splitlines():
        m = _MEMINFO.match(line.strip())
        if not m:
            raise ParseError("/proc/meminfo", f"not a meminfo line: {line[:60]!r}")
        out[m.group(1)] = int(m.group(2))
    if "MemTotal" not in out:
        raise ParseError("/proc/meminfo", "no MemTotal")
    return out
