"""The simulated node's PCI bus and NVIDIA kernel module, in its sysroot.

NVSwitches: the 4 H100 NVSwitch bridges of the real recorded HGX H100 host (`lspci -Dnn`,
fixtures/real/09-lspci), each written as the kernel's sysfs attributes print them
(`vendor` 0x10de, `device` 0x22a3, `class` 0x068000). The NVIDIA kernel module: the real
recorded /proc/driver/nvidia/version of the proprietary module, at the node's driver version.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable
from pathlib import Path

from stetho.parsers import pci_devices

HGX_LSPCI = "09-lspci/lspci-Dnn-grep-nvidia-vga-hgx-h100-8gpu-4nvswitch-EXCERPT.txt"
VERSION_PROPRIETARY = "14-fabric/proc-driver-nvidia-version-proprietary-535.161.08.txt"
VERSION_OPEN = "14-fabric/proc-driver-nvidia-version-open-555.42.02-t4.txt"
DEVICES = "sys/bus/pci/devices"


def write_nvswitches(sysroot: Path, real: Callable[[str], str]) -> None:
    for d in pci_devices.nvswitches(pci_devices.parse_lspci_nn(real(HGX_LSPCI))):
        dev = sysroot / DEVICES / d.address
        dev.mkdir(parents=True, exist_ok=True)
        (dev / "vendor").write_text(f"0x{d.vendor}\n")
        (dev / "device").write_text(f"0x{d.device}\n")
        (dev / "class").write_text(f"0x{d.pci_class}00\n")


def drop_nvswitch(sysroot: Path, index: int) -> str:
    """Remove the index-th NVSwitch from the bus (as after it fell off); its address."""
    addrs = sorted(p.name for p in (sysroot / DEVICES).iterdir())
    shutil.rmtree(sysroot / DEVICES / addrs[index])
    return addrs[index]


def write_version(sysroot: Path, real: Callable[[str], str], driver: str,
                  open_module: bool = False) -> None:
    """The recorded version file of that module flavour, its version replaced by `driver`."""
    text = real(VERSION_OPEN if open_module else VERSION_PROPRIETARY)
    text = re.sub(r"(Kernel Module(?: for \S+)?\s+)\d+\.\d+(?:\.\d+)?", rf"\g<1>{driver}", text,
                  count=1)
    path = sysroot / "proc/driver/nvidia/version"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
