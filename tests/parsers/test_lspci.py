"""lspci -vvv parser: PCIe link capability vs status on every real sample."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from stetho.parsers import ParseError
from stetho.parsers.lspci import PciDevice, PcieLink, parse
from tests.conftest import REAL, real_files, real_ids

FOLDER = "09-lspci"
#: the -vvv recordings carry link capability and status; the -Dnn listings (one line per device,
#: used for NVSwitch presence) carry neither and are tested on their own below.
FILES = real_files(FOLDER, "lspci-vvv-*")
LISTINGS = real_files(FOLDER, "lspci-Dnn-*")
OTHER_TOOLS = [
    p for d in sorted(REAL.iterdir()) if d.is_dir() and d.name != FOLDER for p in real_files(d.name)
]


def _only(name: str) -> PciDevice:
    (device,) = parse((REAL / FOLDER / name).read_text())
    return device


def test_there_are_real_samples() -> None:
    assert len(FILES) == 5
    assert len(LISTINGS) == 2


@pytest.mark.parametrize("path", LISTINGS, ids=real_ids(LISTINGS))
def test_a_one_line_listing_parses_to_devices_without_links(path: Path) -> None:
    """`lspci -Dnn` prints one line per device: each is a device, none has a link to judge."""
    devices = parse(path.read_text())
    lines = [ln for ln in path.read_text().splitlines() if ln.strip()]
    assert len(devices) == len(lines)
    assert all(d.link_cap is None and d.link_sta is None for d in devices)
    switches = [d for d in devices if "NVSwitch" in d.description]
    expected = int(re.search(r"(\d+)nvswitch", path.name).group(1))  # type: ignore[union-attr]
    assert len(switches) == expected


@pytest.mark.parametrize("path", FILES, ids=real_ids(FILES))
def test_every_real_file_parses(path: Path) -> None:
    devices = parse(path.read_text())
    assert len(devices) == 1
    (d,) = devices
    assert d.link_cap is not None and d.link_sta is not None
    assert d.link_cap.gen in (4, 5)
    assert d.link_sta.gen is not None
    assert d.sta_speed_downgraded is not None and d.sta_width_downgraded is not None
    assert d.caps_denied is False
    assert parse(path.read_bytes()) == devices


def test_h100_gen5_x16_ok() -> None:
    d = _only("lspci-vvv-h100-gpu-gen5x16-ok.txt")
    assert d.address == "19:00.0"
    assert d.class_name == "3D controller"
    assert d.description == "NVIDIA Corporation Device 2330 (rev a1)"
    assert d.link_cap == PcieLink(32.0, 16)
    assert d.link_sta == PcieLink(32.0, 16)
    assert d.link_sta.gen == 5
    assert (d.sta_speed_downgraded, d.sta_width_downgraded) == (False, False)
    assert d.target_speed_gts == 32.0
    assert d.is_nvidia_gpu and not d.is_hca


def test_intel_root_port_width_downgraded() -> None:
    d = _only("lspci-vvv-intel-rootport-width-downgraded-x16-to-x2.txt")
    assert d.address == "80:01.0"
    assert d.class_name == "PCI bridge"
    assert d.description is not None and d.description.startswith("Intel Corporation Device 352a")
    assert d.link_cap == PcieLink(16.0, 16)
    assert d.link_sta == PcieLink(16.0, 2)
    assert (d.sta_speed_downgraded, d.sta_width_downgraded) == (False, True)
    assert d.target_speed_gts == 16.0
    assert d.link_cap.gen == 4
    assert not d.is_nvidia_gpu and not d.is_hca


def test_pex_switch_speed_downgraded() -> None:
    d = _only("lspci-vvv-pex890xx-switch-speed-downgraded.txt")
    assert d.address == "17:00.0"
    assert d.link_cap == PcieLink(32.0, 4)
    assert d.link_sta == PcieLink(16.0, 4)
    assert (d.sta_speed_downgraded, d.sta_width_downgraded) == (True, False)
    assert (d.link_cap.gen, d.link_sta.gen) == (5, 4)
    assert d.target_speed_gts == 32.0


def test_rtx3090_grep_excerpt_both_downgraded() -> None:
    d = _only("lspci-vvv-rtx3090-grep-lnk-gen1-x8-both-downgraded-EXCERPT.txt")
    assert (d.address, d.class_name, d.description) == (None, None, None)
    assert d.link_cap == PcieLink(16.0, 16)
    assert d.link_sta == PcieLink(2.5, 8)
    assert d.link_sta.gen == 1
    assert (d.sta_speed_downgraded, d.sta_width_downgraded) == (True, True)
    assert d.target_speed_gts is None  # LnkCtl2 was not in the grep
    assert not d.is_nvidia_gpu


def test_gen_table() -> None:
    gens = [PcieLink(s, 16).gen for s in (2.5, 5.0, 8.0, 16.0, 32.0, 64.0)]
    assert gens == [1, 2, 3, 4, 5, 6]
    assert PcieLink(3.0, 1).gen is None


# --- shapes with no real sample: hand-written, marked as such --------------------------------

# HAND-WRITTEN: `lspci -D -vvv` as non-root (access denied), a ConnectX HCA, an Ethernet
# ConnectX, an old lspci without (ok)/(downgraded) verdicts, and a link that is down.
HAND_WRITTEN = """\
0000:19:00.0 3D controller: NVIDIA Corporation GH100 [H100 SXM5 80GB] (rev a1)
\tSubsystem: NVIDIA Corporation Device 16c1
\tCapabilities: <access denied>
\tKernel driver in use: nvidia

0000:1a:00.0 Infiniband controller: Mellanox Technologies MT2910 Family [ConnectX-7]
\tCapabilities: [60] Express (v2) Endpoint, MSI 00
\t\tLnkCap:\tPort #0, Speed 32GT/s, Width x16, ASPM not supported
\t\tLnkSta:\tSpeed 32GT/s, Width x16, TrErr- Train- SlotClk+ DLActive- BWMgmt- ABWMgmt-

0000:2b:00.1 Ethernet controller: Mellanox Technologies MT43244 BlueField-3 (rev 01)
\t\tLnkCap:\tPort #0, Speed 32GT/s, Width x16, ASPM not supported
\t\tLnkSta:\tSpeed 16GT/s, Width x8, TrErr- Train- SlotClk+ DLActive- BWMgmt- ABWMgmt-

0000:3b:00.0 VGA compatible controller: NVIDIA Corporation Device 2204 (rev a1)
\t\tLnkCap:\tPort #0, Speed 16GT/s, Width x16, ASPM L0s L1
\t\tLnkSta:\tSpeed unknown (downgraded), Width x0 (downgraded)
"""


def test_hand_written_blocks() -> None:
    gpu, hca, eth, down = parse(HAND_WRITTEN)
    assert gpu.address == "0000:19:00.0"
    assert gpu.caps_denied is True
    assert gpu.link_cap is None and gpu.link_sta is None
    assert gpu.sta_speed_downgraded is None
    assert gpu.is_nvidia_gpu
    assert hca.is_hca and not hca.is_nvidia_gpu
    assert (hca.sta_speed_downgraded, hca.sta_width_downgraded) == (False, False)  # derived
    assert eth.is_hca
    assert (eth.sta_speed_downgraded, eth.sta_width_downgraded) == (True, True)  # derived
    assert down.is_nvidia_gpu
    assert down.link_sta is None  # link down: no speed to report
    assert (down.sta_speed_downgraded, down.sta_width_downgraded) == (True, True)


def test_plain_lspci_without_v_parses_without_links() -> None:
    # HAND-WRITTEN: plain `lspci` lines
    devices = parse("00:00.0 Host bridge: Intel Corporation Device 09a2 (rev 04)\n"
                    "17:00.0 PCI bridge: Broadcom / LSI PEX890xx PCIe Gen 5 Switch (rev b0)\n")
    assert [d.address for d in devices] == ["00:00.0", "17:00.0"]
    assert all(d.link_cap is None for d in devices)


# --- garbage -----------------------------------------------------------------------------------

@pytest.mark.parametrize("data", ["", " \n\t\n", b"", b"\x00abc"], ids=repr)
def test_empty_and_binary_raise(data: str | bytes) -> None:
    with pytest.raises(ParseError) as info:
        parse(data)
    assert info.value.tool == "lspci -vvv"


def test_random_bytes_raise() -> None:
    rng = random.Random(0)
    for _ in range(20):
        with pytest.raises(ParseError):
            parse(rng.randbytes(rng.randint(1, 4096)))


@pytest.mark.parametrize(
    "text",
    [
        "\tLnkSta:\tSpeed 16GT/s (ok), Width x16 (ok)\n",  # indented line before any header
        "DevSta:\tCorrErr- NonFatalErr-\n",  # excerpt with no link lines
        "LnkCap: Port #0, Speed fast, Width wide\n",  # a link line we cannot read
        "19:00.0 3D controller: NVIDIA\n\t\tLnkSta:\tSpeed 16GT/s (ok)\n",  # no width
        "hello world\n",
    ],
    ids=["indent-first", "no-link-lines", "bad-lnkcap", "lnksta-no-width", "prose"],
)
def test_malformed_raise(text: str) -> None:
    with pytest.raises(ParseError):
        parse(text)


@pytest.mark.parametrize("path", OTHER_TOOLS, ids=real_ids(OTHER_TOOLS))
def test_other_tools_output_raises(path: Path) -> None:
    with pytest.raises(ParseError) as info:
        parse(path.read_bytes())
    assert info.value.tool == "lspci -vvv"


def test_acs_controls() -> None:
    """ACSCtl's enabled flags: the kernel's ACS enabling on an AMD bridge (SrcValid, ReqRedir,
    CmpltRedir, UpstreamFwd), all off on the PEX890xx switch port and the Intel root port, and
    no ACS capability on a GPU."""
    amd = _only("lspci-vvv-amd-matisse-gpp-bridge-acs-redirect-enabled-EXCERPT.txt")
    assert amd.acs_ctl == {"SrcValid", "ReqRedir", "CmpltRedir", "UpstreamFwd"}
    assert amd.class_name == "PCI bridge"
    pex = _only("lspci-vvv-pex890xx-switch-speed-downgraded.txt")
    assert pex.acs_ctl == frozenset()
    gpu = _only("lspci-vvv-h100-gpu-gen5x16-ok.txt")
    assert gpu.acs_ctl is None
    with pytest.raises(ParseError, match="ACSCtl without flags"):
        parse("00:01.0 PCI bridge: X\n\t\tACSCtl:\tnothing here\n")
