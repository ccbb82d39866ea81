"""PCI devices from sysfs and from `lspci -nn`: the NVSwitch count of real recorded HGX H100
outputs, and garbage refused."""

from __future__ import annotations

import pytest

from stetho.parsers import ParseError, pci_devices
from tests.conftest import REAL

SAMPLES = sorted((REAL / "09-lspci").glob("lspci-Dnn-*"))


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.name)
def test_every_lspci_nn_sample_parses(path):
    devices = pci_devices.parse_lspci_nn(path.read_text())
    assert devices and all(len(d.vendor) == len(d.device) == len(d.pci_class) == 4
                           for d in devices)


def test_hgx_h100_host_has_four_nvswitches_and_the_guest_two():
    host, guest = (pci_devices.parse_lspci_nn((REAL / "09-lspci" / n).read_text()) for n in (
        "lspci-Dnn-grep-nvidia-vga-hgx-h100-8gpu-4nvswitch-EXCERPT.txt",
        "lspci-Dnn-grep-nvidia-vga-kvm-guest-4xh100-2nvswitch-EXCERPT.txt"))
    switches = pci_devices.nvswitches(host)
    assert [d.address for d in switches] == ["0000:07:00.0", "0000:08:00.0", "0000:09:00.0",
                                             "0000:0a:00.0"]
    assert {(d.vendor, d.device, d.pci_class) for d in switches} == {("10de", "22a3", "0680")}
    assert len([d for d in host if d.device == "2330"]) == 8  # the GPUs are not switches
    assert len(pci_devices.nvswitches(guest)) == 2


def test_sysfs_attributes(tmp_path):
    base = "/sys/bus/pci/devices"
    files = {f"{base}/0000:07:00.0/vendor": "0x10de\n", f"{base}/0000:07:00.0/device": "0x22a3\n",
             f"{base}/0000:07:00.0/class": "0x068000\n",
             f"{base}/0000:1b:00.0/vendor": "0x10de\n", f"{base}/0000:1b:00.0/device": "0x2330\n",
             f"{base}/0000:1b:00.0/class": "0x030200\n"}
    # Intel VMD puts the devices behind it in a 5-digit domain
    files |= {f"{base}/10000:e1:00.0/{a}": v for a, v in (("vendor", "0x8086\n"),
              ("device", "0x0b60\n"), ("class", "0x010802\n"))}
    devices = pci_devices.parse_sysfs(files)
    assert len(devices) == 3
    assert [d.address for d in pci_devices.nvswitches(devices)] == ["0000:07:00.0"]
    del files[f"{base}/0000:1b:00.0/class"]
    with pytest.raises(ParseError, match="only device, vendor"):
        pci_devices.parse_sysfs(files)


@pytest.mark.parametrize("text", ["", "\x00\x01garbage", "Attached GPUs : 8\n",
                                  "0000:07:00.0 Bridge: NVIDIA Corporation Device 22a3\n"])
def test_garbage(text):
    with pytest.raises(ParseError):
        pci_devices.parse_lspci_nn(text)
    with pytest.raises(ParseError):
        pci_devices.parse_sysfs({"/sys/bus/pci/devices/0000:07:00.0/class": text or "zz"})


def test_recorded_sysfs_tree_of_a_vm():
    """This project's own recording: a VM's PCI bus, read as the probe reads it."""
    root = REAL.parent / "recorded" / "pci-sysfs-debian12-vm"
    files = {"/" + p.relative_to(root).as_posix(): p.read_text()
             for p in sorted(root.rglob("*")) if p.is_file()}
    devices = pci_devices.parse_sysfs(files)
    assert len(devices) == 6 and devices[0] == pci_devices.PciDevice("0000:00:00.0", "8086",
                                                                     "0d57", "0600")
    assert pci_devices.nvswitches(devices) == ()
