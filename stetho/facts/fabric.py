"""Facts of a node's NVSwitch fabric, read beside NodeFacts (whose module is full): the
fabric manager's service state, the NVSwitches on the PCI bus, the NVIDIA kernel module. Each
function takes the NodeFacts and caches through `facts.parsed`, so a probe that is missing,
failed or unparsable is a skip or an error by the same rules as every other fact."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from stetho.core import yamlconf
from stetho.core.record import record
from stetho.parsers import nvidia_version, pci_devices, service_state

if TYPE_CHECKING:
    from stetho.facts.base import Facts
    from stetho.parsers.nvidia_version import KernelModule
    from stetho.parsers.pci_devices import PciDevice
    from stetho.parsers.service_state import ServiceState

FABRIC_MANAGER = "fabric_manager"
PCI_DEVICES = "pci_devices"
NVIDIA_VERSION = "nvidia_version"
SXID_TABLE = Path(__file__).with_name("sxid_catalog.yml")


def fabric_manager(facts: Facts) -> ServiceState:
    """Whether nvidia-fabricmanager runs (systemctl, or pgrep without systemd)."""
    return facts.parsed(FABRIC_MANAGER,
                        lambda: service_state.parse(facts.text(FABRIC_MANAGER)))


def nvswitches(facts: Facts) -> tuple[PciDevice, ...]:
    """The NVSwitches on the PCI bus (NVIDIA bridges 22a3/1af1), from sysfs."""
    return facts.parsed(PCI_DEVICES, lambda: pci_devices.nvswitches(
        pci_devices.parse_sysfs(facts.files(PCI_DEVICES))))


def kernel_module(facts: Facts) -> KernelModule:
    """The loaded NVIDIA kernel module (/proc/driver/nvidia/version): open or proprietary."""
    return facts.parsed(NVIDIA_VERSION, lambda: nvidia_version.parse(
        "".join(facts.files(NVIDIA_VERSION).values())))


@record
class SxidRow:
    code: int
    name: str
    meaning: str
    source: str
    #: the guide's class: non-fatal (D.4), fatal (D.5) or always fatal (D.6)
    documented: str = ""


@lru_cache(maxsize=1)
def sxid_catalog() -> dict[int, SxidRow]:
    """The cited SXid rows (sxid_catalog.yml beside this module), by code."""
    # every check process reads the table: parsed once, then from the parse cache
    data = yamlconf.load_plain(SXID_TABLE.read_text(encoding="utf-8"), "sxid")
    return {int(r["code"]): SxidRow(int(r["code"]), str(r["name"]), str(r["meaning"]),
                                    str(r["source"]), str(r.get("documented", "")))
            for r in data["sxids"]}
