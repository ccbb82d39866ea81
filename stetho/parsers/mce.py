"""Machine-check (MCE) lines of the kernel log, read by stetho.parsers.kernel_log.

The kernel reports a machine check in one of these shapes (arch/x86/kernel/cpu/mce and the
AMD decoder, drivers/edac/mce_amd.c):
- `mce: [Hardware Error]: CPU 0: Machine Check: 0 Bank 17: dc2040000000011b`, then TSC /
  ADDR / PROCESSOR detail lines (EDAC's sb_edac prints the same record as `EDAC sbridge MC1:
  CPU 1: Machine Check Event: 0 Bank 11: ...`). The severity is in MCi_STATUS: bit 61 (UC)
  set is an uncorrected error, bit 57 (PCC) set a corrupt processor context (fatal).
- the AMD decoder's `[Hardware Error]: Corrected error, no action required.` (or
  `Deferred error, ...`, `Uncorrected, software restartable error.`, `System Fatal error.`).
- `mce: [Hardware Error]: Machine check events logged`: a notice that records were logged
  (for mcelog or rasdaemon to read); it tells no severity.
- `mce: Uncorrected hardware memory error in user-access at ...`, `Memory failure: ...` and
  `Kernel panic - not syncing: Fatal machine check ...`: an uncorrected error acted upon.
Detail lines (TSC, ADDR, PROCESSOR, MCx_STATUS decode) are recognised and left out.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Literal

from stetho.core.record import record

Severity = Literal["corrected", "deferred", "uncorrected", "fatal", "unknown"]

_RECORD = re.compile(r"(?:mce: \[Hardware Error\]: |EDAC \w+ MC\d+: )CPU (?P<cpu>\d+): Machine "
                     r"Check(?: Exception| Event)?: [0-9a-fA-F]+ Bank (?P<bank>\d+): "
                     r"(?P<status>[0-9a-fA-F]{1,16})\b")
_AMD = re.compile(r"^\[Hardware Error\]: (?P<what>Corrected error, no action required|Deferred "
                  r"error, no action required|Uncorrected, software (?:restartable|containable)"
                  r" error|System Fatal error)\.")
_NOTICE = re.compile(r"mce: \[Hardware Error\]: Machine check events logged")
_ACTED = re.compile(r"^(?:mce: (?:Uncorrected hardware memory error|\[Hardware Error\]: Machine "
                    r"check: Processor context corrupt)|Memory failure: 0x[0-9a-f]+: (?:recovery "
                    r"action|Sending SIGBUS)|Kernel panic - not syncing: (?:Fatal )?[Mm]achine "
                    r"check)")
_AMD_SEVERITY: dict[str, Severity] = {"Corrected": "corrected", "Deferred": "deferred",
                                      "Uncorrected": "uncorrected", "System": "fatal"}
UC, PCC = 1 << 61, 1 << 57


@record
class MceEvent:
    severity: Severity
    kind: Literal["record", "notice"]  # a record of one error, or an 'events logged' notice
    cpu: int | None
    bank: int | None
    status: int | None  # MCi_STATUS where the line prints it
    timestamp: str | None
    line: str
    time: datetime | None = None
    seq: int = 0


def status_severity(status: int) -> Severity:
    if status & UC:
        return "fatal" if status & PCC else "uncorrected"
    return "corrected"


def event(message: str, timestamp: str | None, time: datetime | None, line: str,
          seq: int) -> MceEvent | None:
    """The machine-check event a kernel message reports, or None (not an MCE line, or one
    of a record's detail lines)."""
    if "Hardware Error" not in message and "emory" not in message and "achine" not in message:
        return None
    if (m := _RECORD.search(message)) is not None:
        status = int(m.group("status"), 16)
        return MceEvent(status_severity(status), "record", int(m.group("cpu")),
                        int(m.group("bank")), status, timestamp, line, time, seq)
    if (m := _AMD.match(message)) is not None:
        return MceEvent(_AMD_SEVERITY[m.group("what").split()[0].rstrip(",")], "record", None,
                        None, None, timestamp, line, time, seq)
    if _NOTICE.search(message):
        return MceEvent("unknown", "notice", None, None, None, timestamp, line, time, seq)
    if _ACTED.match(message):
        fatal = message.startswith("Kernel panic") or "context corrupt" in message
        return MceEvent("fatal" if fatal else "uncorrected", "record", None, None, None,
                        timestamp, line, time, seq)
    return None
