"""`/proc/<pid>/limits` (the resource limits of one process) and single-number procfs files
such as `/proc/sys/vm/nr_hugepages`.

/proc/self/limits is the reading process's own limits: read by the collector, it shows what
the collector inherited (from sshd and PAM, a Slurm prolog, a systemd unit), which is what a
job started the same way inherits, not a node-wide setting.
"""

from __future__ import annotations

import re

from stetho.core.record import record
from stetho.parsers import ParseError

_HEADER = re.compile(r"^Limit\s+Soft Limit\s+Hard Limit\s+Units\s*$")
#: the name is words; soft and hard are a number or 'unlimited'; the unit may be absent
_ROW = re.compile(r"^(\S.*?)\s{2,}(\d+|unlimited)\s+(\d+|unlimited)(?:\s+(\S+))?\s*$")


@record
class Limit:
    name: str
    soft: int | None  # None: unlimited
    hard: int | None
    unit: str


def parse_limits(text: str) -> dict[str, Limit]:
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines or not _HEADER.match(lines[0]):
        raise ParseError("/proc/self/limits", f"first line is not the limits header: "
                         f"{(lines or [''])[0][:60]!r}")
    out = {}
    for line in lines[1:]:
        m = _ROW.match(line)
        if not m:
            raise ParseError("/proc/self/limits", f"not a limit row: {line[:80]!r}")
        name, soft, hard, unit = m.groups()
        out[name] = Limit(name, _value(soft), _value(hard), unit or "")
    if "Max locked memory" not in out:
        raise ParseError("/proc/self/limits", "no 'Max locked memory' row")
    return out


def parse_count(text: str, what: str) -> int:
    """A procfs file holding one non-negative integer (nr_hugepages)."""
    value = text.strip()
    if not value.isdigit():
        raise ParseError(what, f"expected a number, got {value[:40]!r}")
    return int(value)


def _value(field: str) -> int | None:
    return None if field == "unlimited" else int(field)
