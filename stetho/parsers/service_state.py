"""Parse whether a systemd service runs: `systemctl is-active UNIT`, or `pgrep -l -x NAME`
where there is no systemd (a container).

`systemctl is-active` prints one of systemd's unit active states (`active`, `reloading`,
`inactive`, `failed`, `activating`, `deactivating`, `maintenance`, `refreshing`; man
systemctl, "is-active") and exits 0 only for active; a unit systemd does not know reads
`inactive`. `pgrep -l -x` prints `PID NAME` per matching process. Anything else is a ParseError.
"""

from __future__ import annotations

import re

from stetho.core.record import record
from stetho.parsers import ParseError
from stetho.parsers._text import guarded

TOOL = "systemctl is-active"

#: systemd's unit active states (man systemctl, is-active; `maintenance` and `refreshing`
#: since systemd 250/254).
STATES = ("active", "reloading", "inactive", "failed", "activating", "deactivating",
          "maintenance", "refreshing")
_PGREP = re.compile(r"^(\d+)\s+(\S+)$")


@record
class ServiceState:
    state: str  # one of STATES, or "running" where only pgrep saw the process
    source: str  # "systemctl" or "pgrep"
    pids: tuple[int, ...] = ()

    @property
    def active(self) -> bool:
        return self.state in ("active", "reloading", "running")


def parse(text: str | bytes) -> ServiceState:
    return guarded(TOOL, text, _parse, prefix="")


def _parse(data: str) -> ServiceState:
    lines = [ln.strip() for ln in data.splitlines() if ln.strip()]
    if not lines:
        raise ParseError(TOOL, "empty output")
    if len(lines) == 1 and lines[0] in STATES:
        return ServiceState(lines[0], "systemctl")
    found = [_PGREP.match(ln) for ln in lines]
    if all(found):
        return ServiceState("running", "pgrep", tuple(int(m.group(1)) for m in found if m))
    raise ParseError(TOOL, f"not a unit state or a pgrep listing: {lines[0][:80]!r}")
