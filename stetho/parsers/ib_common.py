"""InfiniBand vocabulary shared by the ibstat, ibstatus, perfquery and sysfs parsers.

The four sources spell the same facts differently ("Active" / "4: ACTIVE", "Rate: 400" /
"400 Gb/sec (4X NDR)", `LinkDownedCounter` / `link_downed`). Normalising them here lets a check
compare any source against one baseline with one set of names.

The helpers raise ValueError on text they cannot read; each parser wraps that in its ParseError.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import field

from stetho.core.record import record
from stetho.parsers._text import is_na

#: The error counters stetho checks: (perfquery name, sysfs file name under ports/N/counters/).
COUNTERS: tuple[tuple[str, str], ...] = (
    ("SymbolErrorCounter", "symbol_error"),
    ("LinkErrorRecoveryCounter", "link_error_recovery"),
    ("LinkDownedCounter", "link_downed"),
    ("PortRcvErrors", "port_rcv_errors"),
    ("PortRcvRemotePhysicalErrors", "port_rcv_remote_physical_errors"),
    ("PortRcvSwitchRelayErrors", "port_rcv_switch_relay_errors"),
    ("LocalLinkIntegrityErrors", "local_link_integrity_errors"),
    ("ExcessiveBufferOverrunErrors", "excessive_buffer_overrun_errors"),
    ("PortXmitDiscards", "port_xmit_discards"),
    ("PortXmitConstraintErrors", "port_xmit_constraint_errors"),
    ("PortRcvConstraintErrors", "port_rcv_constraint_errors"),
    ("VL15Dropped", "VL15_dropped"),
    ("PortXmitWait", "port_xmit_wait"),
)

#: Data counters, counting 4-byte words (multiply by 4 for bytes): (perfquery, sysfs) names.
DATA_COUNTERS: tuple[tuple[str, str], ...] = (
    ("PortXmitData", "port_xmit_data"),
    ("PortRcvData", "port_rcv_data"),
)

#: Packet counters: (perfquery, sysfs) names.
PACKET_COUNTERS: tuple[tuple[str, str], ...] = (
    ("PortXmitPkts", "port_xmit_packets"),
    ("PortRcvPkts", "port_rcv_packets"),
    ("PortUnicastXmitPkts", "unicast_xmit_packets"),
    ("PortUnicastRcvPkts", "unicast_rcv_packets"),
    ("PortMulticastXmitPkts", "multicast_xmit_packets"),
    ("PortMulticastRcvPkts", "multicast_rcv_packets"),
)

#: `perfquery -E` (PortRcvErrorDetails): what made PortRcvErrors count, by perfquery name.
RCV_ERROR_DETAILS: tuple[str, ...] = (
    "PortLocalPhysicalErrors",
    "PortMalformedPktErrors",
    "PortBufferOverrunErrors",
    "PortDLIDMappingErrors",
    "PortVLMappingErrors",
    "PortLoopingErrors",
)

#: The perfquery names of the error counters, in COUNTERS order.
ERROR_COUNTER_NAMES: tuple[str, ...] = tuple(p for p, _ in COUNTERS)

#: sysfs counter file name -> perfquery name, for every counter named above.
SYSFS_TO_PERFQUERY: Mapping[str, str] = {
    s: p for p, s in COUNTERS + DATA_COUNTERS + PACKET_COUNTERS
}

#: Bytes per unit of PortXmitData / PortRcvData / port_*_data.
WORD_BYTES = 4

# IBA port states (kernel sysfs codes). ibstat prints "Down", "Initializing", "Armed", "Active".
_STATES: dict[str, int] = {
    "NOP": 0, "DOWN": 1, "INIT": 2, "ARMED": 3, "ACTIVE": 4, "ACTIVE_DEFER": 5,
}
_STATE_ALIASES = {"INITIALIZING": "INIT", "INITIALIZE": "INIT", "ACTIVE DEFER": "ACTIVE_DEFER"}
#: How ibstat ("???"), the kernel ("<unknown>") and libibmad ("?(7)") print a code they cannot name.
UNKNOWN = "UNKNOWN"
_UNKNOWN = re.compile(r"^\s*(?:(\d+)\s*:\s*)?(?:\?\?\?|<unknown>|\?\((\d+)\))\s*$", re.IGNORECASE)

# IBA physical port states, spelled as ibstat prints them.
_PHYS_STATES: dict[str, int] = {
    "Sleep": 1, "Polling": 2, "Disabled": 3, "PortConfigurationTraining": 4, "LinkUp": 5,
    "LinkErrorRecovery": 6, "PhyTest": 7, "NoStateChange": 0,
}
_PHYS_BY_KEY = {name.lower(): name for name in _PHYS_STATES} | {"nochange": "NoStateChange"}

_STATE_TEXT = re.compile(r"^\s*(?:(\d+)\s*:\s*)?([A-Za-z][A-Za-z_ ]*?)\s*$")
# "400 Gb/sec (4X NDR)" (sysfs, ibstatus), "400" or "56 (FDR10)" (ibstat), "2.5 Gb/sec (1X SDR)".
_RATE = re.compile(
    r"^\s*(\d+(?:\.\d+)?)\s*(?:Gb/sec|Gb/s|Gbps)?\s*(?:\(\s*(?:\d+X)?\s*[A-Za-z0-9]*\s*\))?\s*$",
    re.IGNORECASE,
)
_SPEEDS = ("SDR", "DDR", "QDR", "FDR10", "FDR", "EDR", "HDR", "NDR", "XDR")
_SPEED = re.compile(r"\b(" + "|".join(_SPEEDS) + r")\b", re.IGNORECASE)
_WIDTH = re.compile(r"\b(\d+)X\b", re.IGNORECASE)


def rate_gbps(text: str | None) -> float | None:
    """'400 Gb/sec (4X NDR)' -> 400.0, '400' -> 400.0, '2.5 Gb/sec (1X SDR)' -> 2.5, 'N/A' -> None.

    Raises ValueError for text that is not a rate.
    """
    if is_na(text):
        return None
    assert text is not None
    m = _RATE.match(text)
    if not m:
        raise ValueError(f"not a link rate: {text!r}")
    return float(m.group(1))


def speed_name(text: str | None) -> str | None:
    """The IB speed generation in a rate text: '400 Gb/sec (4X NDR)' -> 'NDR'; '400' -> None."""
    if text is None:
        return None
    m = _SPEED.search(text)
    return m.group(1).upper() if m else None


def link_width(text: str | None) -> int | None:
    """The lane count in a rate text: '200 Gb/sec (2X NDR)' -> 2; '400' -> None."""
    if text is None:
        return None
    m = _WIDTH.search(text)
    return int(m.group(1)) if m else None


def _split_state(text: str | None, what: str) -> tuple[int | None, str]:
    if text is None or not text.strip():
        raise ValueError(f"empty {what}")
    if u := _UNKNOWN.match(text):
        code = u.group(1) or u.group(2)
        return (int(code) if code else None), UNKNOWN
    m = _STATE_TEXT.match(text)
    if not m:
        raise ValueError(f"not a {what}: {text!r}")
    code = int(m.group(1)) if m.group(1) is not None else None
    return code, " ".join(m.group(2).split())


def port_state(text: str | None) -> tuple[str, int | None]:
    """'4: ACTIVE' / 'Active' / 'ACTIVE' -> ('ACTIVE', 4); 'Initializing' -> ('INIT', 2).

    A known name without a number gets its IBA code; an unknown one keeps code None (or the
    number printed with it); '???', '<unknown>' and '?(N)' read as UNKNOWN. Raises ValueError
    for empty or malformed text.
    """
    code, name = _split_state(text, "port state")
    upper = name.upper()
    upper = _STATE_ALIASES.get(upper, upper).replace(" ", "_")
    if code is None:
        code = _STATES.get(upper)
    return upper, code


def phys_state(text: str | None) -> tuple[str, int | None]:
    """'5: LinkUp' / 'LinkUp' -> ('LinkUp', 5); 'Disabled' -> ('Disabled', 3); 'Phy Test' -> 7.

    Known names take ibstat's spelling; unknown ones are kept as printed (sysfs of one mlx5
    reads '4: ACTIVE' here, which gives ('ACTIVE', 4)); '???' / '0: <unknown>' read as UNKNOWN.
    Raises ValueError for malformed text.
    """
    code, name = _split_state(text, "physical port state")
    known = _PHYS_BY_KEY.get(name.replace(" ", "").replace("_", "").lower())
    if known is None or name == UNKNOWN:
        return name, code
    return known, code if code is not None else _PHYS_STATES[known]


def link_layer(text: str | None) -> str | None:
    """'InfiniBand' / 'infiniband' -> 'InfiniBand', 'Ethernet' -> 'Ethernet', '' -> None."""
    if text is None or not text.strip():
        return None
    t = text.strip()
    return {"infiniband": "InfiniBand", "ethernet": "Ethernet"}.get(t.lower(), t)


def words_to_bytes(words: int | None) -> int | None:
    """A PortXmitData / port_xmit_data value (4-byte words) in bytes."""
    return None if words is None else words * WORD_BYTES


@record
class IbPort:
    """One HCA port, from ibstat, ibstatus or sysfs.

    `counters` holds error counters keyed by perfquery names (COUNTERS); counters stetho has no
    perfquery name for keep their sysfs name. `data_words` holds PortXmitData/PortRcvData (in
    4-byte words; see `xmit_bytes`), `packets` the packet counters (perfquery names) and
    `hw_counters` the driver's ports/N/hw_counters files by file name. ibstat and ibstatus
    report no counters: those dicts are empty. `lid`/`sm_lid`/`port_guid` are None where the
    source does not give them.
    """

    device: str
    port: int
    state: str
    state_code: int | None
    phys_state: str | None
    phys_state_code: int | None
    rate_gbps: float | None
    rate_text: str | None
    link_layer: str | None
    counters: dict[str, int] = field(default_factory=dict, hash=False)
    data_words: dict[str, int] = field(default_factory=dict, hash=False)
    packets: dict[str, int] = field(default_factory=dict, hash=False)
    hw_counters: dict[str, int] = field(default_factory=dict, hash=False)
    lid: int | None = None
    sm_lid: int | None = None
    port_guid: str | None = None

    @property
    def id(self) -> str:
        """'mlx5_0:1'."""
        return f"{self.device}:{self.port}"

    @property
    def speed(self) -> str | None:
        """'NDR', 'HDR', ... when the source prints it (sysfs, ibstatus), else None."""
        return speed_name(self.rate_text)

    @property
    def width(self) -> int | None:
        """Lane count (4 for '4X NDR') when the source prints it, else None."""
        return link_width(self.rate_text)

    @property
    def xmit_bytes(self) -> int | None:
        return words_to_bytes(self.data_words.get("PortXmitData"))

    @property
    def rcv_bytes(self) -> int | None:
        return words_to_bytes(self.data_words.get("PortRcvData"))

    def errors(self) -> dict[str, int]:
        """The COUNTERS error counters present on this port, by perfquery name."""
        return {n: self.counters[n] for n in ERROR_COUNTER_NAMES if n in self.counters}


@record
class IbDevice:
    """One RDMA device (HCA) and its ports, from /sys/class/infiniband or from ibstat. Absent
    values read as None (hfi1 has no hca_type; ibstat prints no board id). `source` says which
    ("sysfs" or "ibstat"), so a check can name where a firmware version or a state came from."""

    name: str
    fw_ver: str | None
    hca_type: str | None
    board_id: str | None
    ports: tuple[IbPort, ...]
    source: str = "sysfs"


class PortFieldError(ValueError):
    """A port value `build_port` could not read; `field` names it ('state', 'phys_state',
    'rate'), so a caller can point at the file or line it came from."""

    def __init__(self, field_name: str, message: str) -> None:
        super().__init__(message)
        self.field = field_name


def build_port(
    device: str,
    port: int,
    *,
    state: str | None,
    phys: str | None = None,
    rate: str | None = None,
    layer: str | None = None,
    lid: int | None = None,
    sm_lid: int | None = None,
    port_guid: str | None = None,
    counters: dict[str, int] | None = None,
    data_words: dict[str, int] | None = None,
    packets: dict[str, int] | None = None,
    hw_counters: dict[str, int] | None = None,
) -> IbPort:
    """One IbPort from the texts a source printed, in whichever spelling it uses ('Active' or
    '4: ACTIVE', '400' or '400 Gb/sec (4X NDR)'). `phys`/`rate`/`layer` None mean the source
    did not print them. Raises PortFieldError (a ValueError) naming the field it could not read.
    """
    try:
        state_name, state_code = port_state(state)
    except ValueError as exc:
        raise PortFieldError("state", str(exc)) from None
    phys_name: str | None = None
    phys_code: int | None = None
    if phys is not None:
        try:
            phys_name, phys_code = phys_state(phys)
        except ValueError as exc:
            raise PortFieldError("phys_state", str(exc)) from None
    try:
        gbps = rate_gbps(rate)
    except ValueError as exc:
        raise PortFieldError("rate", str(exc)) from None
    return IbPort(
        device=device,
        port=port,
        state=state_name,
        state_code=state_code,
        phys_state=phys_name,
        phys_state_code=phys_code,
        rate_gbps=gbps,
        rate_text=rate or None,
        link_layer=link_layer(layer),
        counters={} if counters is None else counters,
        data_words={} if data_words is None else data_words,
        packets={} if packets is None else packets,
        hw_counters={} if hw_counters is None else hw_counters,
        lid=lid,
        sm_lid=sm_lid,
        port_guid=port_guid,
    )


def natural_key(name: str) -> tuple[tuple[int, int | str], ...]:
    """Sort key putting mlx5_2 before mlx5_10."""
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in re.split(r"(\d+)", name) if p)
