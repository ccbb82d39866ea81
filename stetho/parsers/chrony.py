"""`chronyc tracking`: what chronyd believes about the system clock.

Lines are `Name<spaces>: value`. The clock's offset is `System time : N seconds fast|slow of
NTP time` (fast: the system clock is ahead, a positive offset here). `Leap status` is Normal,
Insert second, Delete second or Not synchronised; an unsynchronised chronyd also reports the
reference ID 00000000 and stratum 0.
"""

from __future__ import annotations

import re

from stetho.core.record import record
from stetho.parsers import ParseError

TOOL = "chronyc tracking"
_LINE = re.compile(r"^([A-Za-z][A-Za-z ()]*?)\s*:\s?(.*)$")
_SYSTEM_TIME = re.compile(r"^(\d+\.\d+) seconds (fast|slow) of NTP time$")
_SECONDS = re.compile(r"^([+-]?\d+\.\d+) seconds$")
_REFERENCE = re.compile(r"^([0-9A-Fa-f]{1,8})\s*\((.*)\)$")
LEAP_STATES = ("Normal", "Insert second", "Delete second", "Not synchronised")


@record
class Tracking:
    reference_id: str
    reference_name: str
    stratum: int
    offset_s: float  # the system clock minus NTP time: positive when it runs ahead
    last_offset_s: float | None
    leap_status: str

    @property
    def synchronised(self) -> bool:
        return self.leap_status != "Not synchronised" and int(self.reference_id, 16) != 0


def parse_tracking(text: str) -> Tracking:
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        m = _LINE.match(line.strip())
        if not m:
            raise ParseError(TOOL, f"not a 'Name : value' line: {line[:80]!r}")
        fields[m.group(1)] = m.group(2).strip()
    for key in ("Reference ID", "Stratum", "System time", "Leap status"):
        if key not in fields:
            raise ParseError(TOOL, f"no {key!r} line (not chronyc tracking output?)")
    ref = _REFERENCE.match(fields["Reference ID"])
    offset = _SYSTEM_TIME.match(fields["System time"])
    if not ref:
        raise ParseError(TOOL, f"Reference ID: {fields['Reference ID'][:60]!r}")
    if not offset:
        raise ParseError(TOOL, f"System time: {fields['System time'][:60]!r}")
    if not fields["Stratum"].isdigit():
        raise ParseError(TOOL, f"Stratum: {fields['Stratum'][:20]!r}")
    if fields["Leap status"] not in LEAP_STATES:
        raise ParseError(TOOL, f"Leap status: {fields['Leap status'][:40]!r}")
    last = _SECONDS.match(fields.get("Last offset", ""))
    seconds = float(offset.group(1))
    return Tracking(ref.group(1).upper(), ref.group(2), int(fields["Stratum"]),
                    seconds if offset.group(2) == "fast" else -seconds,
                    float(last.group(1)) if last else None, fields["Leap status"])
