"""iblinkinfo parser on the real recorded outputs (header mode and line mode) and on garbage."""

from __future__ import annotations

import dataclasses
import random
import string
from pathlib import Path

import pytest

from stetho.parsers import ParseError, iblinkinfo
from tests.conftest import REAL, mutation_outcomes, real_files, real_ids

FILES = real_files("04-infiniband", "iblinkinfo-*.txt")
HEADER = REAL / "04-infiniband" / "iblinkinfo-edr-sb7700-2cas-switch-ports-down-polling-EXCERPT.txt"
LINE = REAL / "04-infiniband" / "iblinkinfo-l-line-mode-edr-switchib-cas-and-down-port-EXCERPT.txt"


def test_every_iblinkinfo_file_is_covered() -> None:
    assert FILES == sorted([HEADER, LINE])


@pytest.mark.parametrize("path", FILES, ids=real_ids(FILES))
def test_every_real_file_parses(path: Path) -> None:
    links = iblinkinfo.parse(path.read_text())
    assert links
    for link in links:
        assert link.state in {"Active", "Down"} and link.phys_state in {"LinkUp", "Polling"}
        if link.state == "Down":
            assert link.far is None and link.width is None
        else:
            assert link.far is not None and link.far.desc and link.far.port > 0
            assert (link.width, link.speed) == ("4X", "25.78125 Gbps")
    with pytest.raises(dataclasses.FrozenInstanceError):
        links[0].port = 2  # type: ignore[misc]


def test_header_mode_values() -> None:
    links = iblinkinfo.parse(HEADER.read_text())
    assert len(links) == 2 + 18
    n02 = links[0]
    assert (n02.node_desc, n02.guid, n02.lid, n02.port) == (
        "n02 HCA-1", "0xec0d9a03003d62be", 4, 1)
    assert n02.far == iblinkinfo.FarEnd("MF0;SB7700:MSB7700/U1", 2, 17)
    assert n02.far.describe() == "MF0;SB7700:MSB7700/U1 port 17 (LID 2)"
    sw = links[2:]
    assert {s.node_desc for s in sw} == {"MF0;SB7700:MSB7700/U1"}
    assert [s.port for s in sw] == list(range(1, 19))
    assert all(s.guid is None and s.lid == 2 for s in sw)
    assert [s.state for s in sw[:16]] == ["Down"] * 16
    assert sw[17].far == iblinkinfo.FarEnd("n01 HCA-1", 1, 1)


def test_line_mode_values() -> None:
    links = iblinkinfo.parse(LINE.read_text())
    thing4 = links[0]
    assert (thing4.node_desc, thing4.guid, thing4.lid, thing4.port) == (
        "thing4 HCA-1", "0x248a07030017b128", 612, 1)
    assert thing4.far == iblinkinfo.FarEnd("SwitchIB Mellanox Technologies", 496, 20,
                                           "0xec0d9a030002b810")
    assert thing4.far.describe() == \
        "SwitchIB Mellanox Technologies port 20 (GUID 0xec0d9a030002b810)"
    down = links[3]
    assert (down.node_desc, down.state, down.phys_state, down.far) == (
        "SwitchIB Mellanox Technologies", "Down", "Polling", None)


def test_quirks_fdr10_hoq_not_available_and_front_panel_port() -> None:
    text = ('0x0002c903000e0b71 "          n7 mlx4_0"     15    1[  ] ==( 4X  10.0 Gbps (FDR10) '
            'Active/  LinkUp) (HOQ:14 VL_Stall:7)==>  0x0002c90200404ad8      4   17[12] '
            '"MF0;leaf-r3:MQM9700/U1" (Could be 12X Could be 10.0 Gbps)\n'
            '0x0002c903000e0b72 "          n7 mlx4_0"     16    2[  ] ==( 4X  10.0 Gbps '
            'Active/  LinkUp)==>      "Port not available"\n')
    up, lost = iblinkinfo.parse(text)
    assert (up.speed, up.state, up.phys_state) == ("10.0 Gbps (FDR10)", "Active", "LinkUp")
    assert up.far is not None and (up.far.port, up.far.ext_port) == (17, "12")
    assert "front panel 12" in up.far.describe()
    assert (lost.far, lost.not_available) == (None, True)


@pytest.mark.parametrize("text", ["", " \n\n", "ibwarn: [123] mad_rpc_open_port: can't open "
                                  "UMAD port (mlx5_9:1)\n"])
def test_empty_or_warning_only(text: str) -> None:
    with pytest.raises(ParseError) as exc:
        iblinkinfo.parse(text)
    assert exc.value.tool == "iblinkinfo"


def test_random_bytes_and_text() -> None:
    with pytest.raises(ParseError, match="binary"):
        iblinkinfo.parse(random.Random(0).randbytes(512).decode("latin-1") + "\x00")
    rng = random.Random(0)
    printable = "".join(rng.choice(string.printable) for _ in range(4096))
    with pytest.raises(ParseError):
        iblinkinfo.parse(printable)


def test_truncated_line() -> None:
    text = LINE.read_text()
    with pytest.raises(ParseError, match="line 1"):
        iblinkinfo.parse(text[:120])


@pytest.mark.parametrize("path", [*real_files("04-infiniband", "ibstat-*"),
                                  *real_files("04-infiniband", "perfquery-*")],
                         ids=lambda p: p.name)
def test_other_tools_output(path: Path) -> None:
    with pytest.raises(ParseError) as exc:
        iblinkinfo.parse(path.read_text())
    assert exc.value.tool == "iblinkinfo"


@pytest.mark.parametrize("path", FILES, ids=real_ids(FILES))
def test_mutations_parse_or_raise(path: Path) -> None:
    assert mutation_outcomes(iblinkinfo.parse, path.read_text(), "iblinkinfo") == {
        "parsed", "error"}
