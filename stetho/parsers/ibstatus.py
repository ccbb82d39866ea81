"""Parse `ibstatus`: per-port state, physical state, rate and link layer.

ibstatus is a shell script over sysfs, so it prints sysfs spellings ('4: ACTIVE',
'200 Gb/sec (4X HDR)', hex lids) rather than ibstat's; the ports come out as the same IbPort.
"""

from __future__ import annotations

import re

from stetho.parsers import ParseError
from stetho.parsers._text import is_na, require_text
from stetho.parsers.ib_common import IbPort, build_port

TOOL = "ibstatus"

_HEADER = re.compile(r"^Infiniband device '([^']+)' port (\d+) status:$")
_KV = re.compile(r"^([A-Za-z][A-Za-z_ ]*?):\s*(.*)$")


def parse(text: str | bytes) -> tuple[IbPort, ...]:
    """Parse ibstatus output into one IbPort per `Infiniband device '...' port N status:` block."""
    data = require_text(TOOL, text)
    blocks: list[tuple[str, int, dict[str, str]]] = []
    for lineno, raw in enumerate(data.splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        if m := _HEADER.match(line):
            blocks.append((m.group(1), int(m.group(2)), {}))
            continue
        if not blocks:
            raise ParseError(TOOL, f"line {lineno}: expected \"Infiniband device '<name>' port N "
                                   f"status:\", got {line[:80]!r}")
        m = _KV.match(line)
        if not m:
            raise ParseError(TOOL, f"line {lineno}: not 'key: value': {line[:80]!r}")
        blocks[-1][2][m.group(1).lower()] = m.group(2).strip()
    return tuple(_port(device, num, fields) for device, num, fields in blocks)


def _port(device: str, num: int, f: dict[str, str]) -> IbPort:
    where = f"{device}:{num}"
    if "state" not in f:
        raise ParseError(TOOL, f"port {where} has no state line")
    rate_text = None if is_na(f.get("rate")) else f.get("rate")
    try:
        lid = _lid(f.get("base lid"))
        sm_lid = _lid(f.get("sm lid"))
        return build_port(device, num, state=f["state"], phys=f.get("phys state"),
                          rate=rate_text, layer=f.get("link_layer"), lid=lid, sm_lid=sm_lid)
    except ValueError as exc:
        raise ParseError(TOOL, f"port {where}: {exc}") from None


def _lid(value: str | None) -> int | None:
    """'0x33bf' -> 13247; ibstatus prints lids in hex."""
    if value is None or is_na(value):
        return None
    return int(value, 16) if value.lower().startswith("0x") else int(value)
