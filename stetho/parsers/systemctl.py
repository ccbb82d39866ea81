"""`systemctl is-active UNIT...`: one unit state per line, in the order the units were named.

The states are systemd's ActiveState values (src/basic/unit-def.c: active, reloading,
inactive, failed, activating, deactivating, maintenance, refreshing); a unit systemd does not
know prints `inactive`. The exit code only says whether all were active, so the lines are the
evidence. Without systemd as PID 1 nothing is printed on stdout (the message goes to stderr).
"""

from __future__ import annotations

from stetho.parsers import ParseError

STATES = ("active", "reloading", "inactive", "failed", "activating", "deactivating",
          "maintenance", "refreshing")


def parse_is_active(text: str, units: tuple[str, ...]) -> dict[str, str]:
    """{unit: state} for `units`, the arguments the command was given, in order."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if len(lines) != len(units):
        raise ParseError("systemctl is-active", f"{len(lines)} state lines for {len(units)} "
                         f"units ({', '.join(units)})")
    for line in lines:
        if line not in STATES:
            raise ParseError("systemctl is-active", f"not a unit state: {line[:60]!r}")
    return dict(zip(units, lines, strict=True))
