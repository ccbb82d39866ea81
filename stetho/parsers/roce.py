"""Parse what a RoCE (Ethernet RDMA) port's congestion control is judged from: the netdev's
`ethtool -S` statistics (PFC pause frames and physical discards, mlx5 names) and `mlnx_qos -i
<netdev>` (the priority trust state and which priorities PFC makes lossless).

The RDMA side of congestion (CNPs sent and handled, ECN-marked packets, out-of-sequence and
sequence-error NAKs) is in /sys/class/infiniband/<dev>/ports/<p>/hw_counters/, which
stetho.parsers.ib_sysfs already reads into `IbPort.hw_counters`.

Both formats as the tools print them (fixtures/real/14-roce): ethtool's `NIC statistics:` header
(absent where the output was grep-filtered) and indented `name: count` lines; mlnx_qos's
`Priority trust state: dscp` and the `PFC configuration:` table of `priority`/`enabled`/`buffer`
rows, eight columns each.
"""

from __future__ import annotations

import re

from stetho.core.record import record
from stetho.parsers import ParseError

ETHTOOL = "ethtool -S"
MLNX_QOS = "mlnx_qos"

_STAT = re.compile(r"^\s*([A-Za-z0-9_.\[\]:-]+?):\s+(-?\d+)\s*$")
_TRUST = re.compile(r"^Priority trust state:\s*(\S+)\s*$", re.MULTILINE)
_DCBX = re.compile(r"^DCBX mode:\s*(.+?)\s*$", re.MULTILINE)
_ROW = re.compile(r"^\s*(priority|enabled|buffer)((?:\s+\d+){8})\s*$")
TRUST_STATES = ("pcp", "dscp")


def parse_ethtool_stats(text: str) -> dict[str, int]:
    """`ethtool -S <netdev>` -> counter name -> count. Lines that are not `name: count` (the
    `NIC statistics:` header) are skipped; a text with no counter at all, or with binary, is
    not ethtool's."""
    if "\x00" in text:
        raise ParseError(ETHTOOL, "binary data, not ethtool statistics")
    out: dict[str, int] = {}
    other = 0
    for line in text.splitlines():
        if not line.strip():
            continue
        m = _STAT.match(line)
        if m is None:
            if line.strip() != "NIC statistics:":
                other += 1
            continue
        out[m.group(1)] = int(m.group(2))
    if not out:
        raise ParseError(ETHTOOL, "no `name: count` statistics lines")
    if other > len(out):
        raise ParseError(ETHTOOL, f"{other} lines are not statistics, {len(out)} are: "
                         "not ethtool -S output")
    return out


@record
class MlnxQos:
    """What `mlnx_qos -i <netdev>` reports about a port's lossless configuration."""

    trust: str  # "dscp" or "pcp"
    pfc_enabled: tuple[int, ...]  # priorities (0-7) PFC is enabled on
    dcbx: str | None = None  # "Firmware controlled", "OS controlled"; older tools omit it

    def pfc_on(self, priority: int) -> bool:
        return priority in self.pfc_enabled


def parse_mlnx_qos(text: str) -> MlnxQos:
    if "\x00" in text:
        raise ParseError(MLNX_QOS, "binary data, not mlnx_qos output")
    trust = _TRUST.search(text)
    if trust is None:
        raise ParseError(MLNX_QOS, "no 'Priority trust state:' line")
    state = trust.group(1).lower()
    if state not in TRUST_STATES:
        raise ParseError(MLNX_QOS, f"trust state {trust.group(1)!r}, expected pcp or dscp")
    rows: dict[str, tuple[int, ...]] = {}
    in_pfc = False
    for line in text.splitlines():
        if line.startswith("PFC configuration:"):
            in_pfc = True
            continue
        if in_pfc:
            m = _ROW.match(line)
            if m is None:
                break
            rows[m.group(1)] = tuple(int(x) for x in m.group(2).split())
    if "enabled" not in rows:
        raise ParseError(MLNX_QOS, "no 'PFC configuration:' table with an 'enabled' row")
    if rows.get("priority", tuple(range(8))) != tuple(range(8)):
        raise ParseError(MLNX_QOS, f"PFC priority row {rows['priority']}, expected 0..7")
    flags = rows["enabled"]
    if any(f not in (0, 1) for f in flags):
        raise ParseError(MLNX_QOS, f"PFC enabled row {flags}: expected 0 or 1 per priority")
    dcbx = _DCBX.search(text)
    return MlnxQos(state, tuple(p for p, f in enumerate(flags) if f),
                   dcbx.group(1) if dcbx else None)
