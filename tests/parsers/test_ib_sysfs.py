"""/sys/class/infiniband parser, fed the real recorded sysfs trees."""

from __future__ import annotations

import dataclasses
import random
import string
from pathlib import Path

import pytest

from stetho.parsers import ParseError, ib_sysfs
from stetho.parsers.ib_common import COUNTERS, ERROR_COUNTER_NAMES
from tests.conftest import REAL, real_files

TREES = sorted(p for p in (REAL / "04-infiniband").glob("sysfs-class-infiniband-*") if p.is_dir())
H100 = REAL / "04-infiniband" / "sysfs-class-infiniband-h100"
PROCFS = REAL / "04-infiniband" / "sysfs-class-infiniband-procfs-fixtures"


def load(root: Path) -> dict[str, str]:
    """What the collector hands over: every file under the tree, by path relative to it."""
    return {p.relative_to(root).as_posix(): p.read_text() for p in root.rglob("*") if p.is_file()}


def test_every_sysfs_tree_is_covered() -> None:
    assert TREES == [H100, PROCFS]


@pytest.mark.parametrize("root", TREES, ids=[p.name for p in TREES])
def test_every_real_tree_parses(root: Path) -> None:
    devices = ib_sysfs.parse(load(root))
    assert devices
    assert len({d.name for d in devices}) == len(devices)
    for dev in devices:
        assert dev.fw_ver and dev.board_id
        assert dev.ports
        for port in dev.ports:
            assert port.device == dev.name
            assert (port.state, port.state_code) == ("ACTIVE", 4)
            assert port.rate_text is not None and port.rate_gbps is not None
            assert port.speed is not None and port.width is not None
            assert set(ERROR_COUNTER_NAMES) <= set(port.counters)  # all 13 files are there
            assert not {s for _, s in COUNTERS} & set(port.counters)  # renamed, none left
            assert set(port.data_words) == {"PortXmitData", "PortRcvData"}
            assert port.xmit_bytes == 4 * port.data_words["PortXmitData"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        devices[0].fw_ver = "x"  # type: ignore[misc]


def test_h100_tree() -> None:
    devices = ib_sysfs.parse(load(H100))
    names = [d.name for d in devices]
    assert names == ["mlx5_0", "mlx5_1", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_7", "mlx5_8",
                     "mlx5_9", "mlx5_bond_0"]
    ib = [d for d in devices if d.ports[0].link_layer == "InfiniBand"]
    assert len(ib) == 8
    for dev in ib:
        assert (dev.fw_ver, dev.hca_type, dev.board_id) == ("28.41.1000", "MT4129",
                                                            "MT_0000000838")
        (p,) = dev.ports
        assert (p.port, p.state, p.state_code, p.phys_state, p.phys_state_code) == (
            1, "ACTIVE", 4, "LinkUp", 5)
        assert (p.rate_gbps, p.rate_text, p.speed, p.width) == (
            400.0, "400 Gb/sec (4X NDR)", "NDR", 4)
    bond = devices[-1]
    assert (bond.fw_ver, bond.hca_type, bond.board_id) == ("32.38.3056", "MT41692",
                                                           "MT_0000000884")
    bp = bond.ports[0]
    assert (bp.link_layer, bp.rate_gbps, bp.speed, bp.width) == ("Ethernet", 200.0, "NDR", 2)
    assert "2X NDR" in (bp.rate_text or "")


def test_h100_counters() -> None:
    devices = {d.name: d for d in ib_sysfs.parse(load(H100))}
    mlx5_0 = devices["mlx5_0"].ports[0]
    assert mlx5_0.counters["PortRcvErrors"] == 14
    assert mlx5_0.counters["ExcessiveBufferOverrunErrors"] == 15
    assert mlx5_0.counters["PortRcvSwitchRelayErrors"] == 1
    assert mlx5_0.counters["PortXmitWait"] == 2489603687
    assert mlx5_0.counters["LinkDownedCounter"] == 0
    assert mlx5_0.counters["VL15Dropped"] == 0
    assert mlx5_0.data_words == {"PortXmitData": 230442669431839,
                                 "PortRcvData": 230539874932483}
    assert mlx5_0.packets["PortUnicastRcvPkts"] == 317548853677
    assert mlx5_0.packets["PortMulticastXmitPkts"] == 0
    assert mlx5_0.hw_counters["rx_write_requests"] == 3809045607
    assert mlx5_0.hw_counters["out_of_buffer"] == 0
    assert len(mlx5_0.hw_counters) == 26
    # mlx5_1 is the one with a saturated 8-bit link_downed (255) and 2 relay errors.
    mlx5_1 = devices["mlx5_1"].ports[0]
    assert mlx5_1.counters["LinkDownedCounter"] == 255
    assert mlx5_1.counters["PortRcvSwitchRelayErrors"] == 2
    assert mlx5_1.data_words["PortRcvData"] == 205128687774249
    assert {n: d.ports[0].counters["LinkDownedCounter"] for n, d in devices.items()
            if d.ports[0].counters["LinkDownedCounter"]} == {"mlx5_1": 255}
    assert {d.ports[0].counters["PortRcvErrors"] for d in devices.values()} == {14}


def test_procfs_tree() -> None:
    devices = {d.name: d for d in ib_sysfs.parse(load(PROCFS))}
    assert list(devices) == ["hfi1_0", "mlx4_0", "mlx5_0"]
    mlx4 = devices["mlx4_0"]
    assert (mlx4.hca_type, mlx4.fw_ver, mlx4.board_id) == ("MT4099", "2.31.5050",
                                                           "SM_1141000001000")
    assert [p.port for p in mlx4.ports] == [1, 2]
    assert {(p.rate_gbps, p.speed, p.width) for p in mlx4.ports} == {(40.0, "QDR", 4)}
    assert [p.counters["PortXmitWait"] for p in mlx4.ports] == [3599, 3846]
    assert mlx4.ports[1].data_words["PortXmitData"] == 26540356890
    assert mlx4.ports[0].hw_counters == {}
    hfi = devices["hfi1_0"]
    assert hfi.hca_type is None  # Omni-Path has no hca_type file
    assert (hfi.fw_ver, hfi.ports[0].rate_gbps, hfi.ports[0].speed) == ("1.27.0", 100.0, "EDR")
    assert hfi.board_id is not None and "Omni-Path" in hfi.board_id
    mlx5 = devices["mlx5_0"]
    (p,) = mlx5.ports
    assert (mlx5.hca_type, mlx5.fw_ver) == ("MT4118", "14.28.2006")
    assert (p.rate_gbps, p.rate_text, p.width) == (25.0, "25 Gb/sec (1X EDR)", 1)
    assert (p.phys_state, p.phys_state_code) == ("ACTIVE", 4)  # the fixture's own oddity
    assert p.hw_counters["req_cqe_error"] == 3481
    assert p.packets["PortXmitPkts"] == 10907922116


def test_empty_mapping_means_no_devices() -> None:
    assert ib_sysfs.parse({}) == ()


def test_absolute_collector_paths_and_extras() -> None:
    rel = load(PROCFS)
    absolute = {f"/sys/class/infiniband/{k}": v for k, v in rel.items()}
    absolute["/sys/class/infiniband/mlx4_0/ports/1/gids/0"] = "fe80::1"
    assert ib_sysfs.parse(absolute) == ib_sysfs.parse(rel)


def test_lid_files() -> None:
    files = {"mlx5_0/ports/1/state": "4: ACTIVE", "mlx5_0/ports/1/lid": "0x33bf\n",
             "mlx5_0/ports/1/sm_lid": "0x1"}
    (dev,) = ib_sysfs.parse(files)
    assert (dev.fw_ver, dev.ports[0].lid, dev.ports[0].sm_lid) == (None, 13247, 1)
    assert dev.ports[0].rate_gbps is None and dev.ports[0].phys_state is None


def test_unknown_counter_keeps_sysfs_name() -> None:
    files = {"mlx5_0/ports/1/state": "1: DOWN", "mlx5_0/ports/1/counters/new_error": "3"}
    (dev,) = ib_sysfs.parse(files)
    assert dev.ports[0].counters == {"new_error": 3}
    assert dev.ports[0].errors() == {}
    assert (dev.ports[0].state, dev.ports[0].state_code) == ("DOWN", 1)


@pytest.mark.parametrize(
    ("path", "value", "needle"),
    [
        ("mlx5_0/ports/1/counters/symbol_error", "abc", "mlx5_0/ports/1/counters/symbol_error"),
        ("mlx5_0/ports/1/counters/link_downed", "-1", "counters/link_downed"),
        ("mlx5_0/ports/1/counters/port_xmit_data", "", "counters/port_xmit_data"),
        ("mlx5_0/ports/1/hw_counters/out_of_buffer", "N/A", "hw_counters/out_of_buffer"),
        ("mlx5_0/ports/1/rate", "fast", "mlx5_0/ports/1/rate"),
        ("mlx5_0/ports/1/state", "4:", "mlx5_0/ports/1/state"),
        ("mlx5_0/ports/1/phys_state", "5: Link-Up", "mlx5_0/ports/1/phys_state"),
        ("mlx5_0/ports/1/lid", "zz", "mlx5_0/ports/1/lid"),
        ("mlx5_0/ports/one/state", "4: ACTIVE", "not a number"),
        ("mlx5_0/ports/1/counters/symbol_error", "1\x002", "NUL"),
    ],
)
def test_garbage_in_known_file(path: str, value: str, needle: str) -> None:
    files = load(H100)
    files[path] = value
    with pytest.raises(ParseError, match=needle) as exc:
        ib_sysfs.parse(files)
    assert exc.value.tool == "/sys/class/infiniband"


def test_port_without_state() -> None:
    files = load(H100)
    del files["mlx5_4/ports/1/state"]
    with pytest.raises(ParseError, match="mlx5_4/ports/1/state missing"):
        ib_sysfs.parse(files)


def test_random_bytes() -> None:
    rng = random.Random(0)
    junk = rng.randbytes(512).decode("latin-1")
    files = load(H100)
    files["mlx5_0/ports/1/counters/symbol_error"] = junk
    with pytest.raises(ParseError, match="symbol_error"):
        ib_sysfs.parse(files)
    files = load(H100)
    files["mlx5_0/ports/1/state"] = rng.randbytes(512).decode("latin-1")
    with pytest.raises(ParseError, match="mlx5_0/ports/1/state"):
        ib_sysfs.parse(files)


@pytest.mark.parametrize(
    "files",
    [
        {"09-lspci/" + p.name: p.read_text() for p in real_files("09-lspci")},
        {"nvidia-smi": "GPU 0: NVIDIA H100"},
        {"/proc/sys/kernel/osrelease": "6.5.0"},
        {" ": "\n"},
    ],
    ids=["lspci", "one-file", "outside-sysfs", "whitespace"],
)
def test_not_infiniband(files: dict[str, str]) -> None:
    with pytest.raises(ParseError):
        ib_sysfs.parse(files)


@pytest.mark.parametrize("root", TREES, ids=[p.name for p in TREES])
def test_mutated_real_tree_raises_only_parse_error(root: Path) -> None:
    """Seeded random edits of file contents and paths either parse or raise ParseError."""
    rng = random.Random(0)
    base = load(root)
    outcomes = set()
    for _ in range(300):
        files = dict(base)
        for _ in range(rng.randint(1, 3)):
            key = rng.choice(list(files))
            if rng.random() < 0.5:
                value = list(files[key]) or ["x"]
                value[rng.randrange(len(value))] = rng.choice(string.printable)
                files[key] = "".join(value)
            else:
                path = list(key)
                path[rng.randrange(len(path))] = rng.choice(string.printable)
                files["".join(path)] = files.pop(key)
        try:
            ib_sysfs.parse(files)
            outcomes.add("parsed")
        except ParseError as exc:
            assert exc.tool == ib_sysfs.TOOL
            outcomes.add("error")
    assert outcomes == {"parsed", "error"}


def test_ibstat_gives_what_sysfs_gives() -> None:
    """A node without /sys/class/infiniband is judged from ibstat: same IbDevice records, same
    spellings of state, physical state, rate and link layer (H100 CX-7 NDR nodes, both)."""
    from stetho.parsers import ibstat
    from stetho.parsers.ib_common import IbDevice

    sysfs = ib_sysfs.parse(load(H100))
    tool = ibstat.parse((REAL / "04-infiniband" / "ibstat-h100-node-some-ports-down.txt")
                        .read_text()).devices
    assert ib_sysfs.IbDevice is IbDevice
    assert {d.source for d in sysfs} == {"sysfs"} and {d.source for d in tool} == {"ibstat"}

    def ib(devices: tuple[IbDevice, ...]) -> set[tuple[object, ...]]:
        return {(d.hca_type, p.state, p.state_code, p.phys_state, p.phys_state_code,
                 p.rate_gbps, p.link_layer)
                for d in devices for p in d.ports if p.link_layer == "InfiniBand"}

    assert ib(sysfs) == ib(tool) == {("MT4129", "ACTIVE", 4, "LinkUp", 5, 400.0, "InfiniBand")}
    assert all(d.fw_ver for d in sysfs + tool)
