"""What `iblinkinfo -C <device> -P 1 -D 0 -n 1 -l` prints on a simulated node: the HCA's own
line, with the switch and port at its cable's far end.

The lines are the recorded line-mode ones (fixtures/real/04-infiniband/iblinkinfo-l-*: an up
CA port and a Down port), each field re-addressed the way the tool fills it (its printf widths:
`"%30s"` node description, `%6d %4d[%2s]` LID and port, `(%3s %18s %6s/%8s)` the link): the
HCA's own port GUID (ibstat's), `<node> <device>` as node description, NDR's 106.25 Gbps per
lane, and the far end, the simulated SuperPOD's leaf of the HCA's rail
(`MF0;su1-leaf-r<rail>:MQM9700/U1`, rail = the HCA's place among the node's InfiniBand HCAs) on
the same port for every rail (the node's slot in its scalable unit). A Down port prints the
recorded Down line, with no far end; a device on Ethernet has no line: the tool cannot open it.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from stetho.sim.ibtools import _guid

if TYPE_CHECKING:
    from stetho.parsers.ib_common import IbDevice

RECORDING = "04-infiniband/iblinkinfo-l-line-mode-edr-switchib-cas-and-down-port-EXCERPT.txt"
_UP = re.compile(r'^(0x[0-9a-f]+) "\s*(.*?)" +(\d+) +(\d+)\[  \] ==\( ?(\d+X) +(.*?) '
                 r'(\w+)/ +(\w+)\)==>  (0x[0-9a-f]+) +(\d+) +(\d+)\[  \] "(.*)" \( \)$')
NDR_LANE = "106.25 Gbps"

#: The shim: `iblinkinfo -C <device> ...` prints that device's recording, else fails as the
#: tool does on a port it cannot open (an Ethernet port has no InfiniBand management port).
SHIM = ['[ "$1" = "-C" ] && [ -f "$D/iblinkinfo-$2.txt" ] && exec cat "$D/iblinkinfo-$2.txt"',
        'echo "Failed to open $2 port $4" >&2', "exit 1"]


def leaf(rail: int) -> tuple[str, str, int]:
    """The rail's leaf: its node description, GUID and LID."""
    return f"MF0;su1-leaf-r{rail}:MQM9700/U1", _guid(f"su1-leaf-r{rail}"), 1000 + rail


def up_line(guid: str, desc: str, lid: int, port: int, width: str, speed: str, state: str,
            phys: str, far_guid: str, far_lid: int, far_port: int, far_desc: str) -> str:
    """One line-mode link line as iblinkinfo's printf lays it out."""
    return (f'{guid} "{desc:>30}" {lid:6d} {port:4d}[  ] ==({width:>3} {speed:>18} '
            f'{state:>6}/{phys:>8})==>  {far_guid} {far_lid:6d} {far_port:4d}[  ] "{far_desc}" ( )')


def down_line(guid: str, desc: str, lid: int, port: int, phys: str) -> str:
    return (f'{guid} "{desc:>30}" {lid:6d} {port:4d}[  ] ==(              {"Down":>6}/'
            f'{phys:>8})==>             [  ] "" ( )')


def render(recording: str, node: str, devices: tuple[IbDevice, ...], slot: int,
           swaps: list[tuple[str, str]]) -> dict[str, str]:
    """`iblinkinfo-<device>.txt` for each InfiniBand HCA; `swaps`: pairs of HCAs whose cables
    were crossed (each lands on the other's rail leaf, on the same port)."""
    lines = recording.splitlines()
    m = _UP.match(lines[0])
    if m is None or down_line(*_down_fields(lines[3])) != lines[3]:
        raise ValueError(f"{RECORDING}: not the recorded line-mode layout")
    if up_line(*_up_fields(m)) != lines[0]:
        raise ValueError(f"{RECORDING}: the printf layout does not reproduce the recording")
    ib = [d for d in devices if d.ports and d.ports[0].link_layer in (None, "InfiniBand")]
    rails = {d.name: r for r, d in enumerate(ib)}
    for a, b in swaps:
        rails[a], rails[b] = rails[b], rails[a]
    out = {}
    for n, d in enumerate(ib):
        p = d.ports[0]
        guid, desc, lid = _guid(d.name), f"{node} {d.name}", p.lid or (100 + n)
        if p.state != "ACTIVE":
            text = down_line(guid, desc, lid, p.port, p.phys_state or "Polling")
        else:
            name, far_guid, far_lid = leaf(rails[d.name])
            text = up_line(guid, desc, lid, p.port, m.group(5), NDR_LANE, m.group(7), m.group(8),
                           far_guid, far_lid, slot, name)
        out[f"iblinkinfo-{d.name}.txt"] = text + "\n"
    return out


def _up_fields(m: re.Match[str]) -> tuple:  # type: ignore[type-arg]
    g = m.groups()
    return (g[0], g[1], int(g[2]), int(g[3]), g[4], g[5], g[6], g[7], g[8], int(g[9]),
            int(g[10]), g[11])


def _down_fields(line: str) -> tuple[str, str, int, int, str]:
    m = re.match(r'^(0x[0-9a-f]+) "\s*(.*?)" +(\d+) +(\d+)\[  \] ==\( +Down/ *(\w+)\)', line)
    if m is None:
        return ("", "", 0, 0, "")
    return (m.group(1), m.group(2), int(m.group(3)), int(m.group(4)), m.group(5))
