"""ibstatus parser on the real recorded output."""

from __future__ import annotations

import dataclasses
import random
import string
from pathlib import Path

import pytest

from stetho.parsers import ParseError, ibstatus
from tests.conftest import REAL, mutation_outcomes, real_files, real_ids

FILES = real_files("04-infiniband", "ibstatus-*.txt")
HDR = REAL / "04-infiniband" / "ibstatus-a100-azure-hdr.txt"


def test_every_ibstatus_file_is_covered() -> None:
    assert FILES == [HDR]


@pytest.mark.parametrize("path", FILES, ids=real_ids(FILES))
def test_every_real_file_parses(path: Path) -> None:
    ports = ibstatus.parse(path.read_text())
    assert ports
    for port in ports:
        assert port.device.startswith("mlx5_") and port.port == 1
        assert port.state_code is not None and port.phys_state_code is not None
        assert port.rate_text is not None and "Gb/sec" in port.rate_text
        assert port.speed is not None and port.width == 4
        assert port.link_layer in {"InfiniBand", "Ethernet"}
    assert len({p.id for p in ports}) == len(ports)
    with pytest.raises(dataclasses.FrozenInstanceError):
        ports[0].rate_gbps = 0.0  # type: ignore[misc]


def test_a100_hdr_values() -> None:
    ports = ibstatus.parse(HDR.read_text())
    assert [p.id for p in ports] == [f"mlx5_{i}:1" for i in range(9)]
    ib = ports[:8]
    for p in ib:
        assert (p.state, p.state_code, p.phys_state, p.phys_state_code) == (
            "ACTIVE", 4, "LinkUp", 5)
        assert (p.rate_gbps, p.rate_text, p.speed) == (200.0, "200 Gb/sec (4X HDR)", "HDR")
        assert p.link_layer == "InfiniBand"
        assert p.sm_lid == 1
    assert ports[0].lid == 13247  # '0x33bf'; ibstat prints 'Base lid: 13247' for this port
    assert ports[7].lid == 0x33F9
    eth = ports[8]
    assert (eth.device, eth.link_layer, eth.rate_gbps, eth.speed) == (
        "mlx5_8", "Ethernet", 40.0, "QDR")
    assert (eth.state, eth.lid, eth.sm_lid) == ("ACTIVE", 0, 0)


def test_down_port_block() -> None:
    text = (
        "Infiniband device 'mlx5_2' port 1 status:\n"
        "\tdefault gid:\t fe80:0000:0000:0000:0000:0000:0000:0000\n"
        "\tbase lid:\t 0xffff\n\tsm lid:\t\t 0x0\n\tstate:\t\t 1: DOWN\n"
        "\tphys state:\t 3: Disabled\n\trate:\t\t 10 Gb/sec (4X SDR)\n"
        "\tlink_layer:\t InfiniBand\n"
    )
    (port,) = ibstatus.parse(text)
    assert (port.state, port.state_code, port.phys_state, port.phys_state_code) == (
        "DOWN", 1, "Disabled", 3)
    assert (port.rate_gbps, port.speed, port.lid) == (10.0, "SDR", 0xFFFF)


def test_empty_input() -> None:
    for text in ("", " \n\n\t "):
        with pytest.raises(ParseError, match="empty") as exc:
            ibstatus.parse(text)
        assert exc.value.tool == "ibstatus"


def test_random_bytes() -> None:
    data = random.Random(0).randbytes(4096)
    with pytest.raises(ParseError, match="binary"):
        ibstatus.parse(data)
    with pytest.raises(ParseError, match="NUL"):
        ibstatus.parse(data.decode("latin-1"))
    rng = random.Random(0)
    printable = "".join(rng.choice(string.printable) for _ in range(4096))
    with pytest.raises(ParseError) as exc:
        ibstatus.parse(printable)
    assert exc.value.tool == ibstatus.TOOL


@pytest.mark.parametrize(
    "path",
    [*real_files("09-lspci"), *real_files("04-infiniband", "ibstat-*"),
     *real_files("04-infiniband", "perfquery-*")],
    ids=lambda p: p.name,
)
def test_other_tools_output(path: Path) -> None:
    with pytest.raises(ParseError, match="Infiniband device") as exc:
        ibstatus.parse(path.read_text())
    assert exc.value.tool == "ibstatus"


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ("\tstate:\t 4: ACTIVE\n\trate:\t fast\n", "not a link rate"),
        ("\tphys state:\t 5: LinkUp\n", "no state line"),
        ("\tstate:\t 4: ACTIVE\n\tbase lid:\t 0xZZ\n", "mlx5_0:1"),
        ("\tstate:\t ??!\n", "not a port state"),
        ("\tthis line has no colon\n", "not 'key: value'"),
    ],
)
def test_malformed_content(body: str, needle: str) -> None:
    text = "Infiniband device 'mlx5_0' port 1 status:\n" + body
    with pytest.raises(ParseError, match=needle):
        ibstatus.parse(text)


def test_fatal_error_line() -> None:
    text = "Fatal error:  device 'mlx5_9': sys files not found (/sys/class/infiniband/mlx5_9)\n"
    with pytest.raises(ParseError, match="Fatal error"):
        ibstatus.parse(text)


@pytest.mark.parametrize("path", FILES, ids=real_ids(FILES))
def test_mutated_real_output_raises_only_parse_error(path: Path) -> None:
    """Seeded random edits of a real file either still parse or raise ParseError, nothing else."""
    outcomes = mutation_outcomes(ibstatus.parse, path.read_text(), ibstatus.TOOL, rounds=300)
    assert outcomes == {"parsed", "error"}
