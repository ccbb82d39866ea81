"""Parse `ibstat`: every HCA with its firmware and the state, physical state and rate of its ports.

ibstat indents with tabs or with spaces depending on the build, so structure is read from the
`CA '...'` and `Port N:` headers, never from indentation. When ibstat cannot stat a device it
prints the CAs it managed, then an `ibpanic:` line (on stderr, so it may land anywhere when the
streams are merged), and exits 255: the CAs still parse and the panic is kept for the check to
report (a node that loses an HCA mid-listing is not healthy).
"""

from __future__ import annotations

import re

from stetho.core.record import record
from stetho.parsers import ParseError
from stetho.parsers._text import is_na, require_text
from stetho.parsers.ib_common import IbDevice, IbPort, build_port

TOOL = "ibstat"

# "CA 'mlx5_0'"; "CA: 'mlx5_0'" when one port is asked for; Switch/Router/... on other nodes.
_CA = re.compile(r"^(CA|Switch|Router|iWARP RNIC|\?\?\?):? '([^']+)'$")
_PORT = re.compile(r"^Port (\d+):$")
_KV = re.compile(r"^([^:]+?):\s*(.*)$")
_PANIC = re.compile(r"^ibpanic:\s*(.*)$")
_WARN = re.compile(r"^ibwarn:\s*(.*)$")


@record
class IbCa:
    """One channel adapter (HCA). `num_ports` is what ibstat claims; `ports` what it listed.
    `node_type` is "CA" on hosts ("Switch", "Router" elsewhere); fields ibstat did not print
    (`ibstat mlx5_0 1` prints only the port) are None."""

    name: str
    ca_type: str | None
    num_ports: int | None
    firmware: str | None
    hardware_version: str | None
    node_guid: str | None
    ports: tuple[IbPort, ...]
    system_image_guid: str | None = None
    node_type: str = "CA"


@record
class IbstatReport:
    """All CAs ibstat printed; `panic` is the text of a trailing `ibpanic:` line, if any."""

    cas: tuple[IbCa, ...]
    panic: str | None
    warnings: tuple[str, ...] = ()

    @property
    def ports(self) -> tuple[IbPort, ...]:
        """Every port of every CA, in output order."""
        return tuple(p for ca in self.cas for p in ca.ports)

    @property
    def devices(self) -> tuple[IbDevice, ...]:
        """The CAs as the same IbDevice records /sys/class/infiniband gives (firmware, CA type,
        ports with state, physical state, rate and link layer; ibstat prints no board id and no
        counters), so a node without the sysfs tree can be judged from ibstat alone."""
        return tuple(IbDevice(name=ca.name, fw_ver=ca.firmware, hca_type=ca.ca_type,
                              board_id=None, ports=ca.ports, source="ibstat") for ca in self.cas)


class _Ca:
    def __init__(self, name: str, node_type: str) -> None:
        self.name, self.node_type = name, node_type
        self.fields: dict[str, str] = {}
        self.ports: list[tuple[int, dict[str, str]]] = []


def parse(text: str | bytes) -> IbstatReport:
    """Parse ibstat output (all CAs, or one CA named on the command line)."""
    data = require_text(TOOL, text)
    cas: list[_Ca] = []
    panic: str | None = None
    warnings: list[str] = []
    for lineno, raw in enumerate(data.splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        if m := _PANIC.match(line):
            panic = m.group(1) or line
            continue
        if m := _WARN.match(line):
            warnings.append(m.group(1))
            continue
        if m := _CA.match(line):
            cas.append(_Ca(m.group(2), m.group(1)))
            continue
        if not cas:
            raise ParseError(TOOL, f"line {lineno}: expected CA '<name>', got {line[:80]!r}")
        ca = cas[-1]
        if m := _PORT.match(line):
            ca.ports.append((int(m.group(1)), {}))
            continue
        m = _KV.match(line)
        if not m:
            raise ParseError(TOOL, f"line {lineno}: not 'Key: value': {line[:80]!r}")
        target = ca.ports[-1][1] if ca.ports else ca.fields
        target[m.group(1).lower()] = m.group(2).strip()
    if not cas and panic is None:
        raise ParseError(TOOL, "no CA '<name>' in the output")
    return IbstatReport(tuple(_build_ca(ca) for ca in cas), panic, tuple(warnings))


def _opt(fields: dict[str, str], key: str) -> str | None:
    value = fields.get(key)
    return None if value is None or is_na(value) else value


def _int(value: str | None, what: str) -> int | None:
    if value is None:
        return None
    try:
        return int(value, 16) if value.lower().startswith("0x") else int(value)
    except ValueError:
        raise ParseError(TOOL, f"{what} is not a number: {value!r}") from None


def _build_ca(ca: _Ca) -> IbCa:
    f = ca.fields
    return IbCa(
        name=ca.name,
        ca_type=_opt(f, f"{ca.node_type.lower()} type"),
        num_ports=_int(_opt(f, "number of ports"), f"CA '{ca.name}' Number of ports"),
        firmware=_opt(f, "firmware version"),
        hardware_version=_opt(f, "hardware version"),
        node_guid=_opt(f, "node guid"),
        system_image_guid=_opt(f, "system image guid"),
        ports=tuple(_build_port(ca.name, num, pf) for num, pf in ca.ports),
        node_type=ca.node_type,
    )


def _build_port(device: str, num: int, f: dict[str, str]) -> IbPort:
    where = f"{device}:{num}"
    state_text = f.get("state")
    if state_text is None:
        raise ParseError(TOOL, f"port {where} has no State line")
    lid = _int(_opt(f, "base lid"), f"port {where} Base lid")
    sm_lid = _int(_opt(f, "sm lid"), f"port {where} SM lid")
    try:
        return build_port(device, num, state=state_text, phys=f.get("physical state"),
                          rate=_opt(f, "rate"), layer=f.get("link layer"), lid=lid,
                          sm_lid=sm_lid, port_guid=_opt(f, "port guid"))
    except ValueError as exc:
        raise ParseError(TOOL, f"port {where}: {exc}") from None
