"""ibstat parser and the shared IB vocabulary (ib_common), on the real recorded outputs."""

from __future__ import annotations

import dataclasses
import random
import string
from pathlib import Path

import pytest

from stetho.parsers import ParseError, ibstat
from stetho.parsers.ib_common import (
    COUNTERS,
    ERROR_COUNTER_NAMES,
    SYSFS_TO_PERFQUERY,
    UNKNOWN,
    IbDevice,
    IbPort,
    PortFieldError,
    build_port,
    link_layer,
    link_width,
    phys_state,
    port_state,
    rate_gbps,
    speed_name,
)
from tests.conftest import REAL, mutation_outcomes, real_files, real_ids

FILES = real_files("04-infiniband", "ibstat-*.txt")
IB = REAL / "04-infiniband"
H100 = IB / "ibstat-h100-node-some-ports-down.txt"
PANIC = IB / "ibstat-a100-azure-ibpanic-exit255.txt"
ROCE = IB / "ibstat-h100-roce-cx7-400g-port-down-polling.txt"
DOWN_LINKUP = IB / "ibstat-single-ca-cx6-hdr-state-down-physical-linkup.txt"
POLLING = IB / "ibstat-cx7-ndr-ib-port-down-polling-rate10-guids-elided-EXCERPT.txt"
MLX4 = IB / "ibstat-mlx4-cx3-2ports-fdr-port1-disabled-ibwarn-debug-EXCERPT.txt"
HDR_DOWN = IB / "ibstat-cx6-hdr-ib-port-down-disabled-EXCERPT.txt"
HDR100 = IB / "ibstat-a100-cx6-8x-ib-hdr-rate100-2x.txt"


def test_every_ibstat_file_is_covered() -> None:
    assert {p.name for p in FILES} == {p.name for p in (
        PANIC, H100, ROCE, DOWN_LINKUP, POLLING, MLX4, HDR_DOWN, HDR100)}


@pytest.mark.parametrize("path", FILES, ids=real_ids(FILES))
def test_every_real_file_parses(path: Path) -> None:
    report = ibstat.parse(path.read_text())
    assert report.cas
    for ca in report.cas:
        assert ca.name.startswith(("mlx5_", "mlx4_"))
        assert ca.node_type == "CA"
        assert ca.num_ports == len(ca.ports) >= 1
        assert ca.firmware and ca.ca_type and ca.ca_type.startswith("MT")
        for port in ca.ports:
            assert port.device == ca.name
            assert port.id == f"{ca.name}:{port.port}"
            assert port.state in {"ACTIVE", "DOWN"}
            assert port.phys_state in {"LinkUp", "Disabled", "Polling"}
            assert port.rate_gbps is not None and port.rate_gbps > 0
            assert port.link_layer in {"InfiniBand", "Ethernet", None}
            assert port.counters == {} and port.hw_counters == {}
    # The same IbDevice records the sysfs parser gives, marked as coming from ibstat.
    assert [d.name for d in report.devices] == [ca.name for ca in report.cas]
    for dev, ca in zip(report.devices, report.cas, strict=True):
        assert isinstance(dev, IbDevice) and dev.source == "ibstat"
        assert (dev.fw_ver, dev.hca_type, dev.board_id, dev.ports) == (
            ca.firmware, ca.ca_type, None, ca.ports)
    assert ibstat.parse(path.read_bytes()) == report
    with pytest.raises(dataclasses.FrozenInstanceError):
        report.cas[0].ports[0].state = "DOWN"  # type: ignore[misc]


def test_h100_some_ports_down() -> None:
    report = ibstat.parse(H100.read_text())
    assert report.panic is None and report.warnings == ()
    assert len(report.cas) == 12
    assert [ca.name for ca in report.cas][:4] == ["mlx5_0", "mlx5_1", "mlx5_10", "mlx5_11"]
    ca0 = report.cas[0]
    assert (ca0.ca_type, ca0.firmware, ca0.hardware_version) == ("MT4129", "28.39.1002", "0")
    assert ca0.node_guid == ca0.system_image_guid == "0x946dae0300cde72c"
    p0 = ca0.ports[0]
    assert (p0.state, p0.state_code, p0.phys_state, p0.phys_state_code) == (
        "ACTIVE", 4, "LinkUp", 5)
    assert (p0.rate_gbps, p0.rate_text, p0.speed, p0.width) == (400.0, "400", None, None)
    assert (p0.lid, p0.sm_lid, p0.port_guid) == (75, 334, "0x946dae0300cde72c")
    assert p0.link_layer == "InfiniBand"

    down = {p.device: p for p in report.ports if p.state != "ACTIVE"}
    assert sorted(down) == ["mlx5_2", "mlx5_7", "mlx5_8"]
    for p in down.values():
        assert (p.state, p.state_code, p.phys_state, p.phys_state_code) == (
            "DOWN", 1, "Disabled", 3)
        assert p.rate_gbps == 40.0  # a Down port still prints a Rate
        assert p.link_layer == "Ethernet"
    cas = {ca.name: ca for ca in report.cas}
    assert {cas[n].ca_type for n in down} == {"MT4125"}

    eth = cas["mlx5_1"].ports[0]
    assert (eth.link_layer, eth.rate_gbps, eth.state, eth.lid) == ("Ethernet", 100.0, "ACTIVE", 0)
    ib = [p for p in report.ports if p.link_layer == "InfiniBand"]
    assert len(ib) == 8
    assert {p.rate_gbps for p in ib} == {400.0}
    assert {cas[p.device].firmware for p in ib} == {"28.39.1002"}


def test_ibpanic_keeps_cas_and_records_panic() -> None:
    report = ibstat.parse(PANIC.read_text())
    assert [ca.name for ca in report.cas] == [f"mlx5_{i}" for i in range(8)]
    assert {ca.ca_type for ca in report.cas} == {"MT4124"}
    assert {ca.firmware for ca in report.cas} == {"20.41.1000"}
    assert {p.rate_gbps for p in report.ports} == {200.0}
    assert {p.state for p in report.ports} == {"ACTIVE"}
    assert report.cas[0].ports[0].lid == 13247
    assert report.cas[0].system_image_guid == "0xb83fd203006e2704"
    assert report.panic is not None
    assert "mlx5_8" in report.panic and "No such file or directory" in report.panic
    assert report.panic.startswith("[1400444] main: stat of IB device")


def test_roce_node_every_port_ethernet_two_down() -> None:
    """A RoCE node: no InfiniBand port at all, so an IB profile must say 'link layer Ethernet'."""
    report = ibstat.parse(ROCE.read_text())
    assert len(report.cas) == 12 and report.panic is None
    assert {p.link_layer for p in report.ports} == {"Ethernet"}
    cx7 = [p for p in report.ports if p.rate_gbps == 400.0]
    assert len(cx7) == 6 and {p.state for p in cx7} == {"ACTIVE"}
    down = {p.device: (p.state, p.state_code, p.phys_state, p.phys_state_code, p.rate_gbps)
            for p in report.ports if p.state != "ACTIVE"}
    assert down == {"mlx5_11": ("DOWN", 1, "Polling", 2, 40.0),
                    "mlx5_5": ("DOWN", 1, "Disabled", 3, 40.0)}
    fw = {d.name: (d.hca_type, d.fw_ver) for d in report.devices}
    assert fw["mlx5_0"] == ("MT4129", "28.39.1002") and fw["mlx5_1"] == ("MT4125", "22.39.1002")
    assert {p.lid for p in report.ports} == {0}  # RoCE has no LIDs
    assert report.cas[-1].ports[0].port_guid == "0xa288c2fffeadeb60"  # no trailing newline


def test_ib_port_down_while_physical_link_is_up() -> None:
    """`ibstat mlx5_7`: the cable is fine (LinkUp) but no subnet manager brought it Active."""
    (ca,) = ibstat.parse(DOWN_LINKUP.read_text()).cas
    assert (ca.name, ca.ca_type, ca.firmware) == ("mlx5_7", "MT4124", "20.28.4000")
    (p,) = ca.ports
    assert (p.state, p.phys_state, p.rate_gbps, p.lid, p.sm_lid, p.link_layer) == (
        "DOWN", "LinkUp", 200.0, 65535, 1, "InfiniBand")


def test_ib_port_polling_with_guids_elided() -> None:
    (ca,) = ibstat.parse(POLLING.read_text()).cas
    assert (ca.node_guid, ca.system_image_guid) == ("...", "...")
    (p,) = ca.ports
    assert (p.state, p.state_code, p.phys_state, p.phys_state_code) == ("DOWN", 1, "Polling", 2)
    assert (p.rate_gbps, p.lid, p.sm_lid, p.port_guid, p.link_layer) == (
        10.0, 868, 334, "...", "InfiniBand")


def test_two_port_connectx3_with_ibwarn_debug_lines() -> None:
    report = ibstat.parse(MLX4.read_text())
    assert report.warnings == ("[168988] umad_init: umad_init",
                               "[168988] umad_get_ca_device_list: return 1 cas",
                               "[168988] umad_get_ca: ca_name mlx4_0",
                               "[168988] umad_get_ca: opened mlx4_0")
    (ca,) = report.cas
    assert (ca.ca_type, ca.num_ports, ca.firmware, ca.hardware_version) == (
        "MT4099", 2, "2.42.5000", "1")
    p1, p2 = ca.ports
    assert (p1.id, p1.state, p1.phys_state, p1.rate_gbps, p1.lid) == (
        "mlx4_0:1", "DOWN", "Disabled", 10.0, 38)
    # The excerpt ends after port 2's rate: what was not printed stays None.
    assert (p2.id, p2.state, p2.phys_state, p2.rate_gbps) == ("mlx4_0:2", "ACTIVE", "LinkUp", 56.0)
    assert (p2.lid, p2.link_layer, p2.port_guid) == (None, None, None)


def test_hdr_port_disabled_and_hdr_at_half_width() -> None:
    a, b = ibstat.parse(HDR_DOWN.read_text()).ports
    assert (a.state, a.rate_gbps) == ("ACTIVE", 200.0)
    assert (b.device, b.state, b.phys_state, b.rate_gbps, b.lid, b.sm_lid) == (
        "mlx5_2", "DOWN", "Disabled", 10.0, 65535, 0)
    report = ibstat.parse(HDR100.read_text())
    assert len(report.ports) == 8
    assert {(p.state, p.phys_state, p.rate_gbps, p.link_layer) for p in report.ports} == {
        ("ACTIVE", "LinkUp", 100.0, "InfiniBand")}
    assert {d.fw_ver for d in report.devices} == {"20.36.1010"}


def test_tabs_and_spaces_parse_the_same() -> None:
    tabs = H100.read_text()
    spaces = tabs.replace("\t", "        ")
    assert ibstat.parse(spaces) == ibstat.parse(tabs)
    panic_text = PANIC.read_text()
    assert ibstat.parse(panic_text.replace("        ", "\t")) == ibstat.parse(panic_text)


def test_panic_only_parses_with_no_cas() -> None:
    report = ibstat.parse("ibpanic: [77] main: can't list IB device names\n")
    assert report.cas == ()
    assert report.panic == "[77] main: can't list IB device names"


def test_panic_before_output_when_streams_merged() -> None:
    text = PANIC.read_text()
    lines = text.splitlines()
    merged = "\n".join([lines[-1], *lines[:-1]])
    report = ibstat.parse(merged)
    assert len(report.cas) == 8 and report.panic is not None and "mlx5_8" in report.panic


def test_ibwarn_lines_are_kept_as_warnings() -> None:
    text = "ibwarn: [5] umad_get_port: can't open port\n" + H100.read_text()
    report = ibstat.parse(text)
    assert report.warnings == ("[5] umad_get_port: can't open port",)
    assert len(report.cas) == 12


def test_single_port_form_and_unknown_states() -> None:
    text = (
        "CA: 'mlx5_3'\nPort 1:\nState: ???\nPhysical state: No state change\nRate: 56 (FDR10)\n"
        "Base lid: 0\nLMC: 0\nSM lid: 0\nCapability mask: 0x00010000\n"
        "Port GUID: 0x0000000000000001\nLink layer: InfiniBand\n"
    )
    report = ibstat.parse(text)
    (ca,) = report.cas
    assert (ca.name, ca.ca_type, ca.firmware, ca.num_ports) == ("mlx5_3", None, None, None)
    (port,) = ca.ports
    assert (port.state, port.state_code) == (UNKNOWN, None)
    assert (port.phys_state, port.phys_state_code) == ("NoStateChange", 0)
    assert (port.rate_gbps, port.speed) == (56.0, "FDR10")


def test_switch_node_type() -> None:
    text = ("Switch 'sw0'\n\tSwitch type: MT54000\n\tNumber of ports: 1\n\tPort 1:\n"
            "\t\tState: Armed\n")
    (ca,) = ibstat.parse(text).cas
    assert (ca.node_type, ca.ca_type, ca.ports[0].state, ca.ports[0].state_code) == (
        "Switch", "MT54000", "ARMED", 3)


GARBAGE_MESSAGES = [
    ("", "empty"),
    ("   \n\t\n", "empty"),
]


@pytest.mark.parametrize(("text", "needle"), GARBAGE_MESSAGES, ids=["empty", "whitespace"])
def test_empty_input(text: str, needle: str) -> None:
    with pytest.raises(ParseError, match=needle) as exc:
        ibstat.parse(text)
    assert exc.value.tool == "ibstat"


def test_random_bytes() -> None:
    data = random.Random(0).randbytes(4096)
    with pytest.raises(ParseError) as exc:
        ibstat.parse(data)
    assert exc.value.tool == "ibstat"
    with pytest.raises(ParseError, match="NUL"):
        ibstat.parse(data.decode("latin-1"))
    rng = random.Random(0)
    printable = "".join(rng.choice(string.printable) for _ in range(4096))
    with pytest.raises(ParseError) as exc:
        ibstat.parse(printable)
    assert exc.value.tool == ibstat.TOOL


@pytest.mark.parametrize(
    "path",
    [*real_files("09-lspci"), *real_files("04-infiniband", "ibstatus-*"),
     *real_files("04-infiniband", "perfquery-*")],
    ids=lambda p: p.name,
)
def test_other_tools_output(path: Path) -> None:
    with pytest.raises(ParseError, match="CA '<name>'"):
        ibstat.parse(path.read_text())


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("CA 'mlx5_0'\n\tNumber of ports: one\n", "Number of ports"),
        ("CA 'mlx5_0'\n\tPort 1:\n\t\tPhysical state: LinkUp\n", "no State line"),
        ("CA 'mlx5_0'\n\tPort 1:\n\t\tState: Active\n\t\tRate: fast\n", "not a link rate"),
        ("CA 'mlx5_0'\n\tPort 1:\n\t\tState: 4:\n", "mlx5_0:1"),
        ("CA 'mlx5_0'\n\tPort 1:\n\t\tState: Active\n\t\tBase lid: x\n", "Base lid"),
        ("CA 'mlx5_0'\n\tjust words\n", "not 'Key: value'"),
        ("ibwarn: [1] nothing here\n", "no CA"),
    ],
)
def test_malformed_content(text: str, needle: str) -> None:
    with pytest.raises(ParseError, match=needle):
        ibstat.parse(text)


# ib_common -----------------------------------------------------------------------------------


def test_counter_vocabulary() -> None:
    assert len(COUNTERS) == 13
    assert ("LinkDownedCounter", "link_downed") in COUNTERS
    assert ("VL15Dropped", "VL15_dropped") in COUNTERS
    assert ERROR_COUNTER_NAMES[0] == "SymbolErrorCounter"
    assert ERROR_COUNTER_NAMES[-1] == "PortXmitWait"
    assert SYSFS_TO_PERFQUERY["port_xmit_discards"] == "PortXmitDiscards"
    assert SYSFS_TO_PERFQUERY["port_xmit_data"] == "PortXmitData"
    assert SYSFS_TO_PERFQUERY["unicast_rcv_packets"] == "PortUnicastRcvPkts"


@pytest.mark.parametrize(
    ("text", "gbps", "speed", "width"),
    [
        ("400 Gb/sec (4X NDR)", 400.0, "NDR", 4),
        ("400", 400.0, None, None),
        ("25 Gb/sec (1X EDR)", 25.0, "EDR", 1),
        ("200 Gb/sec (2X NDR)", 200.0, "NDR", 2),
        ("2.5 Gb/sec (1X SDR)", 2.5, "SDR", 1),
        ("56 (FDR10)", 56.0, "FDR10", None),
        ("N/A", None, None, None),
    ],
)
def test_rate(text: str, gbps: float | None, speed: str | None, width: int | None) -> None:
    assert rate_gbps(text) == gbps
    assert speed_name(text) == speed
    assert link_width(text) == width


@pytest.mark.parametrize("text", ["fast", "400 Gb", "4X NDR", "-1"])
def test_rate_garbage(text: str) -> None:
    with pytest.raises(ValueError, match="not a link rate"):
        rate_gbps(text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("4: ACTIVE", ("ACTIVE", 4)),
        ("Active", ("ACTIVE", 4)),
        ("ACTIVE", ("ACTIVE", 4)),
        ("1: DOWN", ("DOWN", 1)),
        ("Down", ("DOWN", 1)),
        ("Initializing", ("INIT", 2)),
        ("2: INIT", ("INIT", 2)),
        ("Armed", ("ARMED", 3)),
        ("5: ACTIVE_DEFER", ("ACTIVE_DEFER", 5)),
        ("???", (UNKNOWN, None)),
        ("Mystery", ("MYSTERY", None)),
    ],
)
def test_port_state(text: str, expected: tuple[str, int | None]) -> None:
    assert port_state(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("5: LinkUp", ("LinkUp", 5)),
        ("LinkUp", ("LinkUp", 5)),
        ("Disabled", ("Disabled", 3)),
        ("3: Disabled", ("Disabled", 3)),
        ("Polling", ("Polling", 2)),
        ("7: Phy Test", ("PhyTest", 7)),
        ("PortConfigurationTraining", ("PortConfigurationTraining", 4)),
        ("0: <unknown>", (UNKNOWN, 0)),
        ("4: ACTIVE", ("ACTIVE", 4)),  # procfs mlx5_0 oddity, kept as printed
    ],
)
def test_phys_state(text: str, expected: tuple[str, int | None]) -> None:
    assert phys_state(text) == expected


@pytest.mark.parametrize("text", ["", "  ", "4:", "4: ACTIVE!", "12"])
def test_state_garbage(text: str) -> None:
    with pytest.raises(ValueError):
        port_state(text)
    with pytest.raises(ValueError):
        phys_state(text)


def test_build_port_one_constructor_for_every_source() -> None:
    sysfs = build_port("mlx5_0", 1, state="4: ACTIVE", phys="5: LinkUp",
                       rate="400 Gb/sec (4X NDR)", layer="InfiniBand", lid=0x33bf)
    tool = build_port("mlx5_0", 1, state="Active", phys="LinkUp", rate="400",
                      layer="InfiniBand", lid=13247)
    assert (sysfs.state, sysfs.state_code, sysfs.phys_state, sysfs.rate_gbps, sysfs.lid) == (
        tool.state, tool.state_code, tool.phys_state, tool.rate_gbps, tool.lid)
    assert (sysfs.speed, tool.speed) == ("NDR", None)
    bare = build_port("mlx5_1", 2, state="Down")
    assert (bare.phys_state, bare.rate_gbps, bare.rate_text, bare.link_layer) == (
        None, None, None, None)
    assert bare.counters == {} and bare.hw_counters == {}
    for kwargs, name in [({"state": "4:"}, "state"), ({"state": None}, "state"),
                         ({"state": "Active", "phys": "??!"}, "phys_state"),
                         ({"state": "Active", "rate": "fast"}, "rate")]:
        with pytest.raises(PortFieldError) as exc:
            build_port("mlx5_0", 1, **kwargs)  # type: ignore[arg-type]
        assert exc.value.field == name and isinstance(exc.value, ValueError)


def test_link_layer_and_port_helpers() -> None:
    assert link_layer("infiniband") == "InfiniBand"
    assert link_layer("Ethernet\n") == "Ethernet"
    assert link_layer("") is None
    port = IbPort("mlx5_0", 1, "ACTIVE", 4, "LinkUp", 5, 400.0, "400 Gb/sec (4X NDR)",
                  "InfiniBand", counters={"LinkDownedCounter": 2, "port_foo": 1},
                  data_words={"PortXmitData": 10})
    assert port.id == "mlx5_0:1"
    assert port.xmit_bytes == 40 and port.rcv_bytes is None
    assert port.errors() == {"LinkDownedCounter": 2}
    assert hash(port) == hash(dataclasses.replace(port, counters={}))


@pytest.mark.parametrize("path", FILES, ids=real_ids(FILES))
def test_mutated_real_output_raises_only_parse_error(path: Path) -> None:
    """Seeded random edits of a real file either still parse or raise ParseError, nothing else."""
    outcomes = mutation_outcomes(ibstat.parse, path.read_text(), ibstat.TOOL, rounds=300)
    assert outcomes == {"parsed", "error"}
