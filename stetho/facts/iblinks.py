"""The far end of each HCA's cable: the switch and port iblinkinfo names beside the HCA's own
port (the `iblinkinfo:<device>` probe, a partial scan one hop out from that port). Functions
over NodeFacts, cached there (`facts.parsed`), read beside NodeFacts (whose module is full).

`far_end` is for a check that judges the cabling: a missing tool, a failed scan or unreadable
output is Unavailable (skip or error by the usual rules). `cable` is for every other IB check's
message: the far end in words where it is known, else what is known about why not, so a
technician is told which cable to pull; it never raises.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from stetho.facts.base import Unavailable

if TYPE_CHECKING:
    from stetho.facts.node import NodeFacts
    from stetho.parsers.iblinkinfo import Link

PROBE = "iblinkinfo"


def link(facts: NodeFacts, device: str, port: int = 1) -> Link:
    """The device's own line for `port` in its iblinkinfo output."""
    from stetho.parsers import iblinkinfo

    name = f"{PROBE}:{device}"
    if facts.bundle.probe(name) is None:
        facts.text(PROBE)  # raises: iblinkinfo missing (skip), why it did not run, or absent
        raise Unavailable("error", f"iblinkinfo was not run on {device}", name)
    links = facts.parsed(name, lambda: iblinkinfo.parse(facts.text(name)))
    own = [x for x in links if x.port == port]
    if not own:
        raise Unavailable("error", f"{name}: no line for port {port} of {device} (the scan "
                          f"printed ports {', '.join(str(x.port) for x in links)})", name)
    return own[0]


def cable(facts: NodeFacts, device: str, port: int = 1) -> str:
    """'mlx5_3 port 1 -> cable to MF0;leaf-r3:MQM9700/U1 port 17 (GUID 0x...)', or why the
    far end is not known; '' where iblinkinfo was not collected at all."""
    try:
        own = link(facts, device, port)
    except Unavailable as u:
        return "" if u.status == "skip" else f"{device} port {port} -> far end unknown ({u})"
    if own.far is None:
        why = ("the scan did not reach the peer" if own.not_available else
               f"the port reads {own.state}/{own.phys_state}, so no far end answers through it")
        return f"{device} port {port} -> far end unknown ({why})"
    return f"{device} port {port} -> cable to {own.far.describe()}"


def with_cable(message: str, facts: NodeFacts, device: str, port: int = 1) -> str:
    """A failure message with the cable's far end appended, where anything is known of it."""
    text = cable(facts, device, port)
    return f"{message}; {text}" if text else message
