"""NVSwitch SXid lines of the kernel log, read by stetho.parsers.kernel_log.

The nvswitch driver reports each NVSwitch error as a group of lines, all prefixed
`nvidia-nvswitchN: SXid (PCI:dddd:bb:dd.f): CODE, `: the event itself (`Fatal, Link 48 LTSSM
Fault Up`, `Non-fatal, Link 44 Minion Link DLREQ interrupt`; older drivers print no link:
`Non-fatal, PRI WRITE SYSB error, instance=3`), then `Severity N Engine instance ...` and
`Data {0x..., ...}` detail lines. Only the event line is an event; the detail lines are
recognised and left out, so none is mistaken for another event.
"""

from __future__ import annotations

import re
from datetime import datetime

from stetho.core.record import record

_SXID = re.compile(
    r"nvidia-nvswitch(?P<switch>\d+): SXid \(PCI:(?P<pci>[0-9a-fA-F]{1,8}:[0-9a-fA-F]{2}:"
    r"[0-9a-fA-F]{2}\.[0-7])\): (?P<code>\d+), (?P<rest>.*)$")
_EVENT = re.compile(r"^(?P<sev>Fatal|Non-fatal),\s*(?:Link (?P<link>\d+)\s*)?,?\s*(?P<msg>.*)$")


@record
class SxidEvent:
    switch: int  # N of nvidia-nvswitchN
    pci_id: str  # "0000:06:00.0", lower case
    code: int
    fatal: bool
    link: int | None
    message: str
    timestamp: str | None
    line: str
    time: datetime | None = None
    seq: int = 0


def match(message: str) -> re.Match[str] | None:
    """The SXid prefix of a kernel log message (an event or one of its detail lines)."""
    return _SXID.search(message)


def event(m: re.Match[str], timestamp: str | None, time: datetime | None, line: str,
          seq: int) -> SxidEvent | None:
    """The event an SXid line reports; None for its Severity/Data detail lines."""
    e = _EVENT.match(m.group("rest").strip())
    if e is None:
        return None
    return SxidEvent(int(m.group("switch")), m.group("pci").lower(), int(m.group("code")),
                     e.group("sev") == "Fatal",
                     None if e.group("link") is None else int(e.group("link")),
                     e.group("msg").strip(), timestamp, line, time, seq)
