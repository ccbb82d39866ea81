"""PCI devices by vendor, device and class id: the kernel's sysfs attributes
(/sys/bus/pci/devices/<addr>/{vendor,device,class}, read with no binary) and `lspci -nn`
lines, which print the same ids in brackets. Used to count NVSwitches: an HGX H100 board has 4
(NVIDIA 10de:22a3), an HGX A100 board 6 (10de:1af1), each a PCI "Bridge" (class 0680).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from stetho.core.record import record
from stetho.parsers import ParseError

NVIDIA = "10de"
BRIDGE_OTHER = "0680"  # PCI class 06 (bridge), subclass 80 (other): lspci's "Bridge [0680]"
#: NVSwitch device ids (pci.ids: "GH100 [H100 NVSwitch]", "GA100 [A100 NVSwitch]")
NVSWITCH_IDS = {"22a3": "H100 NVSwitch", "1af1": "A100 NVSwitch"}

_ATTR = re.compile(r"/sys/bus/pci/devices/([0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])"
                   r"/(vendor|device|class)$")
_HEX = re.compile(r"0x[0-9a-fA-F]{4,6}")
_LSPCI = re.compile(r"^((?:[0-9a-fA-F]{4}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]) .*?"
                    r"\[([0-9a-fA-F]{4})\]: .*\[([0-9a-fA-F]{4}):([0-9a-fA-F]{4})\]")


@record
class PciDevice:
    address: str  # 0000:07:00.0
    vendor: str  # 4 lowercase hex digits, no 0x
    device: str
    pci_class: str  # class and subclass, 4 hex digits: "0680"

    @property
    def nvswitch(self) -> bool:
        return self.vendor == NVIDIA and self.pci_class == BRIDGE_OTHER \
            and self.device in NVSWITCH_IDS


def parse_sysfs(files: Mapping[str, str]) -> tuple[PciDevice, ...]:
    """Devices from {path: content} of the vendor/device/class attributes. A device with one
    attribute missing or not hex is a ParseError (a half-read bus is no count)."""
    attrs: dict[str, dict[str, str]] = {}
    for path, text in files.items():
        m = _ATTR.search(path)
        if not m:
            continue
        value = text.strip()
        if not _HEX.fullmatch(value):
            raise ParseError("pci sysfs", f"{path}: not a hex id: {value[:40]!r}")
        attrs.setdefault(m.group(1).lower(), {})[m.group(2)] = value[2:].lower()
    devices = []
    for addr, a in sorted(attrs.items()):
        if set(a) != {"vendor", "device", "class"}:
            raise ParseError("pci sysfs", f"{addr}: only {', '.join(sorted(a))} readable")
        devices.append(PciDevice(addr, a["vendor"][-4:], a["device"][-4:], a["class"][:4]))
    return tuple(devices)


def parse_lspci_nn(text: str) -> tuple[PciDevice, ...]:
    """Devices from `lspci -nn` (or `-Dnn`) lines: `ADDR CLASS NAME [cccc]: VENDOR NAME
    [vvvv:dddd] (rev xx)`. Lines of other formats are a ParseError, so is no line at all."""
    devices = []
    for line in text.splitlines():
        if not line.strip():
            continue
        m = _LSPCI.match(line)
        if not m:
            raise ParseError("lspci -nn", f"not an lspci -nn device line: {line[:80]!r}")
        addr = m.group(1).lower()
        devices.append(PciDevice(addr if addr.count(":") == 2 else f"0000:{addr}",
                                 m.group(3).lower(), m.group(4).lower(), m.group(2).lower()))
    if not devices:
        raise ParseError("lspci -nn", "no device line")
    return tuple(devices)


def nvswitches(devices: tuple[PciDevice, ...]) -> tuple[PciDevice, ...]:
    return tuple(d for d in devices if d.nvswitch)
