"""Parse `perfquery`, `perfquery -x` and `perfquery -E`: IBA counters of one or more ports.

Every supported counter set prints one block per port under a header naming the set and the
port, with `Name:.....value` lines:

- plain: `# Port counters: Lid N port P (CapMask: 0x..)` (the basic 32-bit set);
- `-x`: `# Port extended counters: Lid N port P (CapMask: .. CapMask2: ..)` (64-bit);
- `-E`: `# PortRcvErrorDetails counters: Lid N port P` (what made PortRcvErrors count).

Counters are split three ways so a check that sums errors cannot pick up traffic by mistake:
error counters, data counters (4-byte words) and packet counters. OFED 1.x printed the basic
set under short names (`SymbolErrors`, `XmtData`, ...); they are renamed to today's names, so an
old node's errors are not silently missed. perfquery's other sets (`-D` PortXmitDiscardDetails,
`-T` extended speeds, per-SL/VL counters, ...) are a ParseError that names the set: an output
this parser cannot read must never look like a clean port.
"""

from __future__ import annotations

import re
from dataclasses import field

from stetho.core.record import record
from stetho.parsers import ParseError
from stetho.parsers._text import guarded
from stetho.parsers.ib_common import (
    DATA_COUNTERS,
    ERROR_COUNTER_NAMES,
    PACKET_COUNTERS,
    RCV_ERROR_DETAILS,
    words_to_bytes,
)

TOOL = "perfquery"

#: Counter sets this parser reads, by the name perfquery prints in the block header.
BASIC, EXTENDED, RCV_ERROR_DETAILS_SET = "basic", "extended", "rcv_error_details"

_HEADER = re.compile(
    r"^#\s*Port (extended )?counters:\s*Lid (\d+) port (\d+)(?:\s*\((.*)\))?\s*$", re.IGNORECASE
)
_DETAILS_HEADER = re.compile(
    r"^#\s*(Port[A-Za-z]+|Port extended speeds(?: RSFEC)?) counters:\s*Lid (\d+) port (\d+)"
    r"(?:\s*\((.*)\))?\s*$", re.IGNORECASE
)
_ANY_HEADER = re.compile(r"^#\s*(.+?) counters:", re.IGNORECASE)
_LINE = re.compile(r"^([A-Za-z][A-Za-z0-9_]*):\.*\s*(\S*)\s*$")
_DECIMAL = re.compile(r"^\d+$")
_HEX = re.compile(r"^0x[0-9a-fA-F]+$")
_FAILURE = re.compile(r"^(?:[\w.-]+:\s*)?(iberror|ibpanic)\b", re.IGNORECASE)
_WARNING = re.compile(r"^ibwarn\b", re.IGNORECASE)

_DATA = frozenset(p for p, _ in DATA_COUNTERS)
_PACKETS = frozenset(p for p, _ in PACKET_COUNTERS)
# Selector fields echoed back by perfquery: not counters.
_SELECTORS = frozenset({"PortSelect", "CounterSelect", "CounterSelect2"})
# OFED 1.x infiniband-diags names of the basic set -> today's names.
_LEGACY = {
    "SymbolErrors": "SymbolErrorCounter",
    "LinkRecovers": "LinkErrorRecoveryCounter",
    "LinkDowned": "LinkDownedCounter",
    "RcvErrors": "PortRcvErrors",
    "RcvRemotePhysErrors": "PortRcvRemotePhysicalErrors",
    "RcvSwRelayErrors": "PortRcvSwitchRelayErrors",
    "XmtDiscards": "PortXmitDiscards",
    "XmtConstraintErrors": "PortXmitConstraintErrors",
    "RcvConstraintErrors": "PortRcvConstraintErrors",
    "LinkIntegrityErrors": "LocalLinkIntegrityErrors",
    "ExcBufOverrunErrors": "ExcessiveBufferOverrunErrors",
    "XmtData": "PortXmitData",
    "RcvData": "PortRcvData",
    "XmtPkts": "PortXmitPkts",
    "RcvPkts": "PortRcvPkts",
    "XmtWait": "PortXmitWait",
}
# perfquery's other counter sets, by header name -> the option that prints them.
_UNSUPPORTED = {
    "portxmitdiscarddetails": "-D (PortXmitDiscardDetails)",
    "portoprcvcounters": "-O (PortOpRcvCounters)",
    "portflowctlcounters": "-F (PortFlowCtlCounters)",
    "portvloppackets": "-p (PortVLOpPackets)",
    "portvlopdata": "-a (PortVLOpData)",
    "portvlxmitflowctlupdateerrors": "-u (PortVLXmitFlowCtlUpdateErrors)",
    "portvlxmitwaitcounters": "-w (PortVLXmitWaitCounters)",
    "portrcvdatasl": "--rcvsl (PortRcvDataSL)",
    "portxmitdatasl": "-X (PortXmitDataSL)",
    "port extended speeds": "-T (PortExtendedSpeedsCounters)",
    "port extended speeds rsfec": "-T (PortExtendedSpeedsCounters RS-FEC)",
}


@record
class PerfqueryPort:
    """Counters of one port in one counter set. `counters`: error counters (ERROR_COUNTER_NAMES,
    or RCV_ERROR_DETAILS for `-E`) and any other non-traffic counter (e.g. QP1Dropped);
    `data_words`: PortXmitData/PortRcvData in 4-byte words (see `xmit_bytes`); `packets`:
    PortXmitPkts, PortUnicastRcvPkts, ...; `extended`: from `perfquery -x` (64-bit counters);
    `cap_mask`: the header's parenthesised 'CapMask: ...' text; `counter_set`: "basic",
    "extended" or "rcv_error_details"; `legacy_names`: printed under OFED 1.x names (renamed)."""

    lid: int
    port: int
    counters: dict[str, int] = field(default_factory=dict, hash=False)
    data_words: dict[str, int] = field(default_factory=dict, hash=False)
    packets: dict[str, int] = field(default_factory=dict, hash=False)
    extended: bool = True
    cap_mask: str | None = None
    counter_set: str = EXTENDED
    legacy_names: bool = False

    @property
    def id(self) -> str:
        """'lid 2052 port 1'."""
        return f"lid {self.lid} port {self.port}"

    @property
    def xmit_bytes(self) -> int | None:
        return words_to_bytes(self.data_words.get("PortXmitData"))

    @property
    def rcv_bytes(self) -> int | None:
        return words_to_bytes(self.data_words.get("PortRcvData"))

    def errors(self) -> dict[str, int]:
        """The error counters present in this block, by perfquery name: the COUNTERS set
        (plain, -x) or the PortRcvErrorDetails set (-E). A counter perfquery did not print is
        absent (unknown), never 0: `-x` on old firmware prints only the traffic counters."""
        names = RCV_ERROR_DETAILS if self.counter_set == RCV_ERROR_DETAILS_SET \
            else ERROR_COUNTER_NAMES
        return {n: self.counters[n] for n in names if n in self.counters}


class _Block:
    def __init__(self, lid: int, port: int, counter_set: str, cap_mask: str | None) -> None:
        self.lid, self.port, self.counter_set, self.cap_mask = lid, port, counter_set, cap_mask
        self.counters: dict[str, int] = {}
        self.data_words: dict[str, int] = {}
        self.packets: dict[str, int] = {}
        self.legacy = False


def parse(text: str | bytes) -> tuple[PerfqueryPort, ...]:
    """Parse perfquery output: one PerfqueryPort per counter block (several ports, and several
    sets, may follow each other). `ibwarn` lines are skipped; `iberror`/`ibpanic` lines mean the
    query failed: ParseError. A counter set this parser does not read is a ParseError naming it.
    """
    return guarded(TOOL, text, _parse)


# The fast path: a text made only of `#` headers, unindented `Name:....value` lines and blank
# lines, `\n` line ends, no ibwarn/iberror/ibpanic anywhere, is cut by one `split` into its
# lines' groups instead of three or four regexes per line. Anything else, and any text whose
# reading would raise, goes the general per-line path, so what is returned or raised is the same.
_FAST_LINE = re.compile(r"(#[^\n]*)\n|([A-Za-z][A-Za-z0-9_]*):\.*(\d+|0x[0-9a-fA-F]+)\n|[ \t]*\n")
# Line breaks of str.splitlines other than \n, which the fast path does not expect.
_OTHER_BREAKS = re.compile("[\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")


def _fast(data: str) -> tuple[PerfqueryPort, ...] | None:
    """`_parse` of a plain text in one regex pass; None when the general path must read it."""
    lowered = data.lower()
    if "ibwarn" in lowered or "iberror" in lowered or "ibpanic" in lowered \
            or _OTHER_BREAKS.search(data):
        return None
    parts = _FAST_LINE.split(data if data.endswith("\n") else data + "\n")
    if any(parts[::4]):  # text no fast-path line took
        return None
    blocks: list[_Block] = []
    try:
        for head, name, value in zip(parts[1::4], parts[2::4], parts[3::4], strict=True):
            if head:
                blocks.append(_header(head.strip(), 0))
            elif name:
                if not blocks:
                    return None
                _add(blocks[-1], name, value, 0)
    except ParseError:
        return None
    if not blocks or any(not (b.counters or b.data_words or b.packets) for b in blocks):
        return None
    return _ports(blocks)


def _ports(blocks: list[_Block]) -> tuple[PerfqueryPort, ...]:
    return tuple(
        PerfqueryPort(b.lid, b.port, b.counters, b.data_words, b.packets,
                      extended=b.counter_set == EXTENDED, cap_mask=b.cap_mask,
                      counter_set=b.counter_set, legacy_names=b.legacy)
        for b in blocks
    )


def _parse(data: str) -> tuple[PerfqueryPort, ...]:
    fast = _fast(data)
    if fast is not None:
        return fast
    blocks: list[_Block] = []
    for lineno, raw in enumerate(data.splitlines(), 1):
        line = raw.strip()
        if not line or _WARNING.match(line):
            continue
        if _FAILURE.match(line):
            raise ParseError(TOOL, f"line {lineno}: perfquery failed: {line[:200]}")
        if line.startswith("#"):
            blocks.append(_header(line, lineno))
            continue
        if not blocks:
            raise ParseError(TOOL, f"line {lineno}: expected '# Port counters: Lid N port P', "
                                   f"got {line[:80]!r}")
        m = _LINE.match(line)
        if not m:
            raise ParseError(TOOL, f"line {lineno}: not 'Name:....value': {line[:80]!r}")
        _add(blocks[-1], m.group(1), m.group(2), lineno)
    if not blocks:
        raise ParseError(TOOL, "no '# Port counters' block in the output")
    for b in blocks:
        if not (b.counters or b.data_words or b.packets):
            raise ParseError(TOOL, f"lid {b.lid} port {b.port}: block has no counters")
    return _ports(blocks)


def _header(line: str, lineno: int) -> _Block:
    if m := _HEADER.match(line):
        cap = m.group(4).strip() if m.group(4) else None
        return _Block(int(m.group(2)), int(m.group(3)), EXTENDED if m.group(1) else BASIC, cap)
    if (m := _DETAILS_HEADER.match(line)) and m.group(1).lower() == "portrcverrordetails":
        cap = m.group(4).strip() if m.group(4) else None
        return _Block(int(m.group(2)), int(m.group(3)), RCV_ERROR_DETAILS_SET, cap)
    if m := _ANY_HEADER.match(line):
        name = " ".join(m.group(1).split())
        if name.lower() in ("port", "port extended", "portrcverrordetails"):
            raise ParseError(TOOL, f"line {lineno}: unreadable header (expected "
                                   f"'Lid N port P'): {line[:80]!r}")
        option = _UNSUPPORTED.get(name.lower())
        what = f"perfquery {option}" if option else f"'{name} counters'"
        raise ParseError(TOOL, f"line {lineno}: unsupported perfquery format: {what} "
                               "(read: plain, -x, -E)")
    raise ParseError(TOOL, f"line {lineno}: expected '# Port counters: Lid N port P', "
                           f"got {line[:80]!r}")


def _add(block: _Block, name: str, value: str, lineno: int) -> None:
    if name in _SELECTORS:
        if not (_DECIMAL.match(value) or _HEX.match(value)):
            raise ParseError(TOOL, f"line {lineno}: {name} is not a number: {value!r}")
        return
    if not _DECIMAL.match(value):
        raise ParseError(TOOL, f"line {lineno}: counter {name} is not a count: {value!r}")
    if block.counter_set == BASIC and name in _LEGACY:
        name = _LEGACY[name]
        block.legacy = True
    target = (block.data_words if name in _DATA
              else block.packets if name in _PACKETS else block.counters)
    if name in target:
        raise ParseError(TOOL, f"line {lineno}: counter {name} repeated in one block")
    target[name] = int(value)
