"""EDAC memory controller counters: /sys/devices/system/edac/mc/mc*/{ce_count,ue_count}.

Each file holds one decimal count since the EDAC driver loaded (boot, in practice): errors
the memory controller corrected (ce) and could not correct (ue). Input is {node path: file
content}, as the collector read it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from stetho.core.record import record
from stetho.parsers import ParseError

TOOL = "sysfs edac"
_PATH = re.compile(r"/edac/mc/(mc\d+)/(ce_count|ue_count)$")


@record
class MemoryController:
    name: str  # mc0
    ce: int
    ue: int


def parse_edac(files: Mapping[str, str]) -> tuple[MemoryController, ...]:
    counts: dict[str, dict[str, int]] = {}
    for path, text in files.items():
        m = _PATH.search(path)
        if not m:
            raise ParseError(TOOL, f"unexpected path {path}")
        value = text.strip()
        if not value.isdigit():
            raise ParseError(TOOL, f"{path}: expected a count, got {value[:40]!r}")
        counts.setdefault(m.group(1), {})[m.group(2)] = int(value)
    out = []
    for name, c in counts.items():
        if set(c) != {"ce_count", "ue_count"}:
            missing = ({"ce_count", "ue_count"} - set(c)).pop()
            raise ParseError(TOOL, f"{name} has no {missing}")
        out.append(MemoryController(name, c["ce_count"], c["ue_count"]))
    return tuple(sorted(out, key=lambda mc: int(mc.name[2:])))
