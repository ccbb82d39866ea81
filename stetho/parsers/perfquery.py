"""Parse `perfquery` / `perfquery -x`: the IBA error and traffic counters of one or more ports.

Both the extended (`-x`, 64-bit) and the basic counter sets print one block per port under a
`# Port [extended ]counters: Lid N port P (CapMask: ...)` header, with `Name:.....value` lines.
Counters are split three ways so a check that sums errors cannot pick up traffic by mistake:
error counters, data counters (4-byte words) and packet counters.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from stetho.parsers import ParseError
from stetho.parsers._text import require_text
from stetho.parsers.ib_common import (
    DATA_COUNTERS,
    ERROR_COUNTER_NAMES,
    PACKET_COUNTERS,
    words_to_bytes,
)

TOOL = "perfquery -x"

_HEADER = re.compile(
    r"^#\s*Port (extended )?counters:\s*Lid (\d+) port (\d+)(?:\s*\((.*)\))?\s*$", re.IGNORECASE
)
_LINE = re.compile(r"^([A-Za-z][A-Za-z0-9_]*):\.*\s*(\S*)\s*$")
_DECIMAL = re.compile(r"^\d+$")
_HEX = re.compile(r"^0x[0-9a-fA-F]+$")
_FAILURE = re.compile(r"^(?:[\w.-]+:\s*)?(iberror|ibpanic)\b", re.IGNORECASE)
_WARNING = re.compile(r"^ibwarn\b", re.IGNORECASE)

_DATA = frozenset(p for p, _ in DATA_COUNTERS)
_PACKETS = frozenset(p for p, _ in PACKET_COUNTERS)
# Selector fields echoed back by perfquery: not counters.
_SELECTORS = frozenset({"PortSelect", "CounterSelect", "CounterSelect2"})


@dataclass(frozen=True)
class PerfqueryPort:
    """Counters of one port. `counters`: error counters (ERROR_COUNTER_NAMES) and any other
    non-traffic counter (e.g. QP1Dropped); `data_words`: PortXmitData/PortRcvData in 4-byte words
    (see `xmit_bytes`); `packets`: PortXmitPkts, PortUnicastRcvPkts, ...; `extended`: from
    `perfquery -x` (64-bit counters) rather than the basic set; `cap_mask`: the header's
    parenthesised 'CapMask: ...' text."""

    lid: int
    port: int
    counters: dict[str, int] = field(default_factory=dict, hash=False)
    data_words: dict[str, int] = field(default_factory=dict, hash=False)
    packets: dict[str, int] = field(default_factory=dict, hash=False)
    extended: bool = True
    cap_mask: str | None = None

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
        """The COUNTERS error counters present in this block, by perfquery name."""
        return {n: self.counters[n] for n in ERROR_COUNTER_NAMES if n in self.counters}


class _Block:
    def __init__(self, lid: int, port: int, extended: bool, cap_mask: str | None) -> None:
        self.lid, self.port, self.extended, self.cap_mask = lid, port, extended, cap_mask
        self.counters: dict[str, int] = {}
        self.data_words: dict[str, int] = {}
        self.packets: dict[str, int] = {}


def parse(text: str | bytes) -> tuple[PerfqueryPort, ...]:
    """Parse perfquery output: one PerfqueryPort per `# Port ... counters:` block.

    `ibwarn` lines are skipped; `iberror`/`ibpanic` lines mean the query failed: ParseError.
    """
    data = require_text(TOOL, text)
    blocks: list[_Block] = []
    for lineno, raw in enumerate(data.splitlines(), 1):
        line = raw.strip()
        if not line or _WARNING.match(line):
            continue
        if _FAILURE.match(line):
            raise ParseError(TOOL, f"line {lineno}: perfquery failed: {line[:200]}")
        if m := _HEADER.match(line):
            cap = m.group(4).strip() if m.group(4) else None
            blocks.append(_Block(int(m.group(2)), int(m.group(3)), bool(m.group(1)), cap))
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
    return tuple(
        PerfqueryPort(b.lid, b.port, b.counters, b.data_words, b.packets, b.extended, b.cap_mask)
        for b in blocks
    )


def _add(block: _Block, name: str, value: str, lineno: int) -> None:
    if name in _SELECTORS:
        if not (_DECIMAL.match(value) or _HEX.match(value)):
            raise ParseError(TOOL, f"line {lineno}: {name} is not a number: {value!r}")
        return
    if not _DECIMAL.match(value):
        raise ParseError(TOOL, f"line {lineno}: counter {name} is not a count: {value!r}")
    target = (block.data_words if name in _DATA
              else block.packets if name in _PACKETS else block.counters)
    if name in target:
        raise ParseError(TOOL, f"line {lineno}: counter {name} repeated in one block")
    target[name] = int(value)
