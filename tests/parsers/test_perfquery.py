"""perfquery (-x and basic) parser on the real recorded outputs."""

from __future__ import annotations

import dataclasses
import random
import string
from pathlib import Path

import pytest

from stetho.parsers import ParseError, perfquery
from stetho.parsers.ib_common import ERROR_COUNTER_NAMES
from tests.conftest import REAL, mutation_outcomes, real_files, real_ids

FILES = real_files("04-infiniband", "perfquery-*.txt")
FAULTY = REAL / "04-infiniband" / "perfquery-x-linkdowned-xmitdiscards.txt"
SWITCH = REAL / "04-infiniband" / "perfquery-x-switch-2ports-clean.txt"

BASIC = """\
# Port counters: Lid 5 port 1 (CapMask: 0x1600)
PortSelect:......................1
CounterSelect:...................0x0000
SymbolErrorCounter:..............12
LinkErrorRecoveryCounter:........0
LinkDownedCounter:...............3
PortRcvErrors:...................0
PortRcvRemotePhysicalErrors:.....0
PortRcvSwitchRelayErrors:........0
PortXmitDiscards:................0
PortXmitConstraintErrors:........0
PortRcvConstraintErrors:.........0
CounterSelect2:..................0x00
LocalLinkIntegrityErrors:........0
ExcessiveBufferOverrunErrors:....0
VL15Dropped:.....................0
PortXmitData:....................4294967295
PortRcvData:.....................100
PortXmitPkts:....................7
PortRcvPkts:.....................8
PortXmitWait:....................0
"""


def test_every_perfquery_file_is_covered() -> None:
    assert FILES == [FAULTY, SWITCH]


@pytest.mark.parametrize("path", FILES, ids=real_ids(FILES))
def test_every_real_file_parses(path: Path) -> None:
    ports = perfquery.parse(path.read_text())
    assert ports
    for p in ports:
        assert p.extended
        assert p.cap_mask == "CapMask: 0x5300 CapMask2: 0x0000002"
        assert set(ERROR_COUNTER_NAMES) <= set(p.counters)
        assert set(p.errors()) == set(ERROR_COUNTER_NAMES)
        assert p.counters["QP1Dropped"] == 0
        assert set(p.data_words) == {"PortXmitData", "PortRcvData"}
        assert len(p.packets) == 6
        assert p.xmit_bytes == 4 * p.data_words["PortXmitData"]
        assert not {"PortSelect", "CounterSelect", "CounterSelect2"} & set(p.counters)
    with pytest.raises(dataclasses.FrozenInstanceError):
        ports[0].lid = 0  # type: ignore[misc]


def test_linkdowned_xmitdiscards_values() -> None:
    (p,) = perfquery.parse(FAULTY.read_text())
    assert (p.lid, p.port, p.id) == (2052, 1, "lid 2052 port 1")
    assert p.counters["LinkDownedCounter"] == 1
    assert p.counters["PortXmitDiscards"] == 20046
    assert p.counters["PortXmitWait"] == 41864608
    assert p.counters["PortRcvSwitchRelayErrors"] == 7
    assert {k: v for k, v in p.errors().items() if v} == {
        "LinkDownedCounter": 1, "PortRcvSwitchRelayErrors": 7, "PortXmitDiscards": 20046,
        "PortXmitWait": 41864608,
    }
    assert p.data_words["PortXmitData"] == 178791657177235
    assert p.xmit_bytes == 178791657177235 * 4
    assert p.rcv_bytes == 178762341961629 * 4
    assert p.packets["PortMulticastRcvPkts"] == 6694940


def test_switch_two_clean_ports() -> None:
    ports = perfquery.parse(SWITCH.read_text())
    assert [(p.lid, p.port) for p in ports] == [(1719, 1), (1719, 2)]
    for p in ports:
        errors = p.errors()
        del errors["PortXmitWait"]  # congestion, not an error: non-zero on a healthy switch
        assert set(errors.values()) == {0}
    assert [p.counters["PortXmitWait"] for p in ports] == [22730501, 36510964]
    assert ports[1].packets["PortMulticastXmitPkts"] == 0
    assert ports[0].data_words["PortRcvData"] == 12279028775751


def test_basic_counters_block() -> None:
    (p,) = perfquery.parse(BASIC)
    assert (p.lid, p.port, p.extended, p.cap_mask) == (5, 1, False, "CapMask: 0x1600")
    assert p.counters["SymbolErrorCounter"] == 12
    assert p.counters["LinkDownedCounter"] == 3
    assert p.data_words == {"PortXmitData": 4294967295, "PortRcvData": 100}
    assert p.packets == {"PortXmitPkts": 7, "PortRcvPkts": 8}


def test_header_without_capmask_and_ibwarn_skipped() -> None:
    text = "ibwarn: [9] something benign\n# Port extended counters: Lid 3 port 2\n" \
           "SymbolErrorCounter:..............4\n"
    (p,) = perfquery.parse(text)
    assert (p.lid, p.port, p.cap_mask, p.counters) == (3, 2, None, {"SymbolErrorCounter": 4})


def test_empty_input() -> None:
    for text in ("", "\n  \n"):
        with pytest.raises(ParseError, match="empty") as exc:
            perfquery.parse(text)
        assert exc.value.tool == "perfquery -x"


def test_random_bytes() -> None:
    data = random.Random(0).randbytes(4096)
    with pytest.raises(ParseError, match="binary"):
        perfquery.parse(data)
    with pytest.raises(ParseError, match="NUL"):
        perfquery.parse(data.decode("latin-1"))
    rng = random.Random(0)
    printable = "".join(rng.choice(string.printable) for _ in range(4096))
    with pytest.raises(ParseError) as exc:
        perfquery.parse(printable)
    assert exc.value.tool == perfquery.TOOL


@pytest.mark.parametrize(
    "path",
    [*real_files("09-lspci"), *real_files("04-infiniband", "ibstat*")],
    ids=lambda p: p.name,
)
def test_other_tools_output(path: Path) -> None:
    with pytest.raises(ParseError, match="# Port counters"):
        perfquery.parse(path.read_text())


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        (("ibwarn: [1] mad_rpc_open_port: can't open UMAD port ((null):0)\n"
          "perfquery: iberror: failed: Failed to open '(null)' port '0'\n"), "perfquery failed"),
        ("iberror: dump_perfcounters: perfquery failed\n", "perfquery failed"),
        ("# Port counters: Lid 1 port 1\nSymbolErrorCounter:.....lots\n", "not a count"),
        ("# Port counters: Lid 1 port 1\nSymbolErrorCounter:.....-1\n", "not a count"),
        ("# Port counters: Lid 1 port 1\nPortSelect:.....one\n", "PortSelect"),
        ("# Port counters: Lid 1 port 1\nSymbolErrorCounter:...1\nSymbolErrorCounter:...2\n",
         "repeated"),
        ("# Port counters: Lid 1 port 1\nPortSelect:....1\n", "no counters"),
        ("# Port counters: Lid 1 port 1\nthis is not a counter\n", "Name:....value"),
        ("ibwarn: [1] only a warning\n", "no '# Port counters' block"),
    ],
)
def test_malformed_content(text: str, needle: str) -> None:
    with pytest.raises(ParseError, match=needle):
        perfquery.parse(text)


@pytest.mark.parametrize("path", FILES, ids=real_ids(FILES))
def test_mutated_real_output_raises_only_parse_error(path: Path) -> None:
    """Seeded random edits of a real file either still parse or raise ParseError, nothing else."""
    outcomes = mutation_outcomes(perfquery.parse, path.read_text(), perfquery.TOOL, rounds=300)
    assert outcomes == {"parsed", "error"}
