"""lspci -vvv parser: the PCIe link each device could run (LnkCap) and the one it trained to.

nvidia-smi reports an idle GPU at gen 1 although it is healthy; lspci's LnkSta, with its own
"(downgraded)" verdict, is what shows a riser, slot or retimer that trained a link too slow or too
narrow. Also accepts `lspci -vvv | grep Lnk` excerpts, which carry no device header.
"""

from __future__ import annotations

import re

from stetho.core.record import record
from stetho.parsers import ParseError
from stetho.parsers._text import require_text

TOOL = "lspci -vvv"

_GENS = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6, 128.0: 7}


@record
class PcieLink:
    speed_gts: float
    width: int

    @property
    def gen(self) -> int | None:
        """PCIe generation of the speed (2.5 GT/s -> 1 ... 64 GT/s -> 6); None if unheard of."""
        return _GENS.get(self.speed_gts)


@record
class PciDevice:
    address: str | None  # "19:00.0", or "0000:19:00.0" as printed; None for a grep'd excerpt
    class_name: str | None  # "3D controller", "PCI bridge", "Infiniband controller"
    description: str | None  # "NVIDIA Corporation Device 2330 (rev a1)"
    link_cap: PcieLink | None
    link_sta: PcieLink | None  # None also when the link is down ("Speed unknown")
    sta_speed_downgraded: bool | None  # lspci's verdict; derived from LnkCap if it printed none
    sta_width_downgraded: bool | None
    target_speed_gts: float | None  # LnkCtl2 "Target Link Speed"
    caps_denied: bool = False  # "Capabilities: <access denied>": lspci was not run as root
    #: the ACS controls enabled (`ACSCtl:` flags with +: 'SrcValid', 'ReqRedir', ...); None
    #: where the device prints no ACS capability
    acs_ctl: frozenset[str] | None = None

    @property
    def is_nvidia_gpu(self) -> bool:
        cls = self.class_name or ""
        return _is_nvidia(self.description) and cls.startswith(
            ("3D controller", "VGA compatible controller")
        )

    @property
    def is_hca(self) -> bool:
        cls = self.class_name or ""
        desc = self.description or ""
        if cls.startswith("Infiniband controller"):
            return True
        return cls.startswith("Ethernet controller") and (
            "Mellanox" in desc or (_is_nvidia(desc) and "ConnectX" in desc)
        )


def _is_nvidia(desc: str | None) -> bool:
    return desc is not None and (desc.startswith("NVIDIA") or "[10de:" in desc)


_ADDR = r"(?:[0-9a-fA-F]{4,8}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]"
_HEADER = re.compile(rf"^(?P<addr>{_ADDR})\s+(?P<cls>[^:]+?):\s+(?P<desc>.*?)\s*$")
_CAP = re.compile(r"Speed (?P<speed>\d+(?:\.\d+)?)GT/s, Width x(?P<width>\d+)")
_STA = re.compile(
    r"Speed (?P<speed>\d+(?:\.\d+)?GT/s|unknown)(?: \((?P<sv>[a-z]+)\))?,"
    r"\s*Width x(?P<width>\d+)(?: \((?P<wv>[a-z]+)\))?"
)
_ACS_FLAG = re.compile(r"(\w+)([+-])")
_TARGET = re.compile(r"Target Link Speed: (?P<speed>\d+(?:\.\d+)?)GT/s")
# What a `lspci -vvv | grep ...` excerpt may hold at the top level, without a device header.
_EXCERPT_KEY = re.compile(r"^(?:Lnk\w+|Dev\w+|Slt\w+):")


class _Dev:
    def __init__(self, address: str | None, cls: str | None, desc: str | None) -> None:
        self.address, self.cls, self.desc = address, cls, desc
        self.cap: PcieLink | None = None
        self.sta: PcieLink | None = None
        self.speed_verdict: str | None = None
        self.width_verdict: str | None = None
        self.target: float | None = None
        self.denied = False
        self.acs: frozenset[str] | None = None

    def feed(self, line: str) -> None:
        key, _, value = line.strip().partition(":")
        value = value.strip()
        if key == "Capabilities" and value == "<access denied>":
            self.denied = True
        elif key == "LnkCap":
            m = _CAP.search(value)
            if m is None:
                raise ParseError(TOOL, f"LnkCap without speed and width: {line.strip()!r}")
            self.cap = PcieLink(float(m.group("speed")), int(m.group("width")))
        elif key == "LnkSta":
            m = _STA.search(value)
            if m is None:
                raise ParseError(TOOL, f"LnkSta without speed and width: {line.strip()!r}")
            speed = m.group("speed")
            if speed != "unknown":
                self.sta = PcieLink(float(speed.removesuffix("GT/s")), int(m.group("width")))
            self.speed_verdict, self.width_verdict = m.group("sv"), m.group("wv")
        elif key == "ACSCtl":
            flags = _ACS_FLAG.findall(value)
            if not flags:
                raise ParseError(TOOL, f"ACSCtl without flags: {line.strip()!r}")
            self.acs = frozenset(name for name, on in flags if on == "+")
        elif key == "LnkCtl2":
            m = _TARGET.search(value)
            if m is not None:
                self.target = float(m.group("speed"))

    def freeze(self) -> PciDevice:
        cap, sta = self.cap, self.sta
        speed_down = _verdict(self.speed_verdict)
        width_down = _verdict(self.width_verdict)
        if cap is not None and sta is not None:  # older lspci prints no verdict: derive one
            if self.speed_verdict is None:
                speed_down = sta.speed_gts < cap.speed_gts
            if self.width_verdict is None:
                width_down = sta.width < cap.width
        return PciDevice(
            address=self.address,
            class_name=self.cls,
            description=self.desc,
            link_cap=cap,
            link_sta=sta,
            sta_speed_downgraded=speed_down,
            sta_width_downgraded=width_down,
            target_speed_gts=self.target,
            caps_denied=self.denied,
            acs_ctl=self.acs,
        )


def _verdict(word: str | None) -> bool | None:
    if word == "downgraded":
        return True
    if word in ("ok", "overdriven"):
        return False
    return None


def parse(data: str | bytes) -> tuple[PciDevice, ...]:
    """Parse `lspci -vvv` (any number of device blocks) or a grep'd LnkCap/LnkSta excerpt."""
    text = require_text(TOOL, data)
    try:
        return _parse(text)
    except ParseError:
        raise
    except (ValueError, KeyError, IndexError, AttributeError) as exc:
        raise ParseError(TOOL, f"unexpected lspci content: {exc}") from None


def _parse(text: str) -> tuple[PciDevice, ...]:
    devices: list[_Dev] = []
    current: _Dev | None = None
    for number, raw in enumerate(text.replace("\r\n", "\n").split("\n"), 1):
        if not raw.strip():
            continue
        if raw[:1] in (" ", "\t"):
            if current is None:
                raise ParseError(TOOL, f"line {number}: indented line before any device header")
            # feed reads only Capabilities, LnkCap, LnkSta and LnkCtl2 and does nothing with
            # any other line: most of -vvv's lines are skipped by two substring tests.
            if "Lnk" in raw or "Capabilities" in raw or "ACSCtl" in raw:
                current.feed(raw)
            continue
        header = _HEADER.match(raw)
        if header is not None:
            current = _Dev(header.group("addr"), header.group("cls"), header.group("desc"))
            devices.append(current)
        elif raw.startswith("pcilib: "):
            continue  # a warning lspci printed on stderr
        elif _EXCERPT_KEY.match(raw) and (current is None or current.address is None):
            if current is None:
                current = _Dev(None, None, None)
                devices.append(current)
            current.feed(raw)
        else:
            raise ParseError(TOOL, f"line {number}: not an lspci device line: {raw[:80]!r}")
    if not devices:
        raise ParseError(TOOL, "no PCI devices found")
    headerless = [d for d in devices if d.address is None]
    if headerless and headerless[0].cap is None and headerless[0].sta is None:
        raise ParseError(TOOL, "excerpt without LnkCap or LnkSta lines")
    return tuple(d.freeze() for d in devices)
