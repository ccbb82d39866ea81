"""iblinkinfo: each port's link and the port at its far end (the cable's other end).

Two layouts, both as infiniband-diags prints them (fixtures/real/04-infiniband/iblinkinfo-*):

- line mode (`-l`), one link a line, the own port GUID and node description first:
  `0x248a07030017b128 "      thing4 HCA-1"    612    1[  ] ==( 4X  25.78125 Gbps Active/  LinkUp)==>
  0xec0d9a030002b810    496   20[  ] "SwitchIB Mellanox Technologies" ( )`
- header mode: `CA: <desc>:` or `Switch: 0x<guid> <desc>:` and then one line per port (a CA's
  lines start with its port GUID, a switch's with its LID).

A Down port has no far end (`==(   Down/ Polling)==>   [  ] "" ( )`); an up port whose peer
was not discovered prints `"Port not available"`. The speed field may carry `(FDR10)`, and `-p`
adds `(HOQ:n VL_Stall:n)` after the link.
"""

from __future__ import annotations

import re

from stetho.core.record import record
from stetho.parsers import ParseError

TOOL = "iblinkinfo"

_LINK = re.compile(r"^(?P<near>.*?)==\((?P<link>.*?[A-Za-z?]+/\s*[A-Za-z?]+)\s*\)"
                   r"(?:\s*\(HOQ:[^)]*\))?==>(?P<far>.*)$")
_NEAR_LINE = re.compile(r'^\s*(?P<guid>0x[0-9a-fA-F]+)\s+"(?P<desc>.*)"\s+(?P<lid>\d+)\s+'
                        r"(?P<port>\d+)\[(?P<ext>[^\]]*)\]\s*$")
_NEAR_CA = re.compile(r"^\s*(?P<guid>0x[0-9a-fA-F]+)\s+(?P<lid>\d+)\s+(?P<port>\d+)"
                      r"\[(?P<ext>[^\]]*)\]\s*$")
_NEAR_SW = re.compile(r"^\s*(?P<lid>\d+)\s+(?P<port>\d+)\[(?P<ext>[^\]]*)\]\s*$")
_STATE = re.compile(r"^\s*(?:(?P<width>\d+X)\s+(?P<speed>.*?)\s+)?(?P<state>[A-Za-z?]+)/\s*"
                    r"(?P<phys>[A-Za-z?]+)\s*$")
_FAR = re.compile(r'^\s*(?:(?P<guid>0x[0-9a-fA-F]+)\s+)?(?P<lid>\d+)\s+(?P<port>\d+)'
                  r'\[(?P<ext>[^\]]*)\]\s+"(?P<desc>.*)"\s+\((?P<note>.*)\)\s*$')
_NONE = re.compile(r'^\s*\[\s*\]\s+""\s+\(\s*\)\s*$')
_NOT_AVAILABLE = re.compile(r'^\s*"Port not available"\s*$')
_HEADER = re.compile(r"^(?P<kind>CA|Switch|Router): (?:(?P<guid>0x[0-9a-fA-F]+) )?(?P<desc>.*):$")


@record
class FarEnd:
    """The port at the other end of the cable: its node's description (a switch's name, as
    the fabric knows it), LID and port number; its GUID where line mode prints it."""

    desc: str
    lid: int
    port: int
    guid: str | None = None
    ext_port: str = ""  # a switch's external (front-panel) port, where it differs

    def describe(self) -> str:
        """'MF0;leaf-r3:MQM9700/U1 port 17 (GUID 0x...)'."""
        ext = f" (front panel {self.ext_port})" if self.ext_port else ""
        guid = f" (GUID {self.guid})" if self.guid else f" (LID {self.lid})"
        return f"{self.desc or '(no node description)'} port {self.port}{ext}{guid}"


@record
class Link:
    """One port's line: the own node and port, the link's state, and its far end (None for a
    Down port, or an up port whose peer the scan did not reach: `not_available`)."""

    port: int
    lid: int
    state: str
    phys_state: str
    node_desc: str | None = None
    guid: str | None = None
    width: str | None = None
    speed: str | None = None
    far: FarEnd | None = None
    not_available: bool = False


def parse(text: str) -> tuple[Link, ...]:
    """Every link line of `iblinkinfo` (line or header mode); ParseError on anything else, and
    on output with no link line (a partial scan that found nothing prints only to stderr)."""
    if "\x00" in text:
        raise ParseError(TOOL, "binary output")
    links: list[Link] = []
    desc: str | None = None
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.rstrip()
        if not line.strip():
            continue
        head = _HEADER.match(line)
        if head:
            desc = head.group("desc").strip()
            continue
        m = _LINK.match(line)
        if m is None:
            raise ParseError(TOOL, f"line {n}: not a link line: {line[:80]!r}")
        links.append(_link(n, m, desc))
    if not links:
        raise ParseError(TOOL, "no link line in the output")
    return tuple(links)


def _link(n: int, m: re.Match[str], header_desc: str | None) -> Link:
    near = m.group("near")
    own = _NEAR_LINE.match(near) or _NEAR_CA.match(near) or _NEAR_SW.match(near)
    state = _STATE.match(m.group("link"))
    if own is None or state is None:
        raise ParseError(TOOL, f"line {n}: unreadable port or link: {m.group(0)[:80]!r}")
    groups = own.groupdict()
    far_text = m.group("far")
    far, missing = None, False
    f = _FAR.match(far_text)
    if f is not None:
        far = FarEnd(desc=f.group("desc").strip(), lid=int(f.group("lid")),
                     port=int(f.group("port")), guid=f.group("guid"),
                     ext_port=f.group("ext").strip())
    elif _NOT_AVAILABLE.match(far_text):
        missing = True
    elif not _NONE.match(far_text):
        raise ParseError(TOOL, f"line {n}: unreadable far end: {far_text.strip()[:80]!r}")
    desc = groups.get("desc")
    return Link(port=int(groups["port"]), lid=int(groups["lid"]),
                state=state.group("state"), phys_state=state.group("phys"),
                node_desc=desc.strip() if desc is not None else header_desc,
                guid=groups.get("guid"), width=state.group("width"),
                speed=(state.group("speed") or None), far=far, not_available=missing)
