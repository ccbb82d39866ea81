"""perfquery (-x and basic) parser on the real recorded outputs."""

from __future__ import annotations

import dataclasses
import random
import string
from pathlib import Path

import pytest

from stetho.parsers import ParseError, perfquery
from stetho.parsers.ib_common import ERROR_COUNTER_NAMES, RCV_ERROR_DETAILS
from tests.conftest import REAL, mutation_outcomes, real_files, real_ids

FILES = real_files("04-infiniband", "perfquery-*.txt")
IB = REAL / "04-infiniband"
FAULTY = IB / "perfquery-x-linkdowned-xmitdiscards.txt"
SWITCH = IB / "perfquery-x-switch-2ports-clean.txt"
RHEL = IB / "perfquery-x-hca-rhel75-clean-qp1dropped.txt"
RCV_DETAILS = IB / "perfquery-E-rcverrordetails-switch-port-clean.txt"
PLAIN = IB / "perfquery-plain-cx6-C-ca-lid1-port0-switchrelay.txt"
LEGACY = IB / "perfquery-plain-ofed1-legacy-short-names.txt"
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
    assert set(FILES) == {FAULTY, SWITCH, RHEL, RCV_DETAILS, PLAIN, LEGACY}


@pytest.mark.parametrize("path", FILES, ids=real_ids(FILES))
def test_every_real_file_parses(path: Path) -> None:
    ports = perfquery.parse(path.read_text())
    assert ports and perfquery.parse(path.read_bytes()) == ports
    for p in ports:
        assert p.counter_set in {"basic", "extended", "rcv_error_details"}
        assert p.extended == (p.counter_set == "extended")
        assert not {"PortSelect", "CounterSelect", "CounterSelect2"} & set(p.counters)
        if p.counter_set == "rcv_error_details":
            assert set(p.errors()) == set(RCV_ERROR_DETAILS) == set(p.counters)
            assert p.data_words == {} and p.packets == {}
            continue
        # Every error counter is there (PortXmitWait aside, which OFED 1.x did not print).
        assert set(ERROR_COUNTER_NAMES) - {"PortXmitWait"} <= set(p.errors())
        assert set(p.data_words) == {"PortXmitData", "PortRcvData"}
        assert p.xmit_bytes == 4 * p.data_words["PortXmitData"]
        if p.extended:
            assert p.cap_mask is not None and p.cap_mask.startswith("CapMask: 0x5300")
            assert p.counters["QP1Dropped"] == 0 and len(p.packets) == 6
    with pytest.raises(dataclasses.FrozenInstanceError):
        ports[0].lid = 0  # type: ignore[misc]


def test_rcv_error_details_block() -> None:
    (p,) = perfquery.parse(RCV_DETAILS.read_text())
    assert (p.id, p.counter_set, p.extended, p.cap_mask) == (
        "lid 1719 port 1", "rcv_error_details", False, None)
    assert p.errors() == {name: 0 for name in RCV_ERROR_DETAILS}
    assert "PortMalformedPktErrors" in p.errors()  # perfquery's spelling, not "...Packet..."


def test_plain_counters_of_a_connectx6_port() -> None:
    (p,) = perfquery.parse(PLAIN.read_text())
    assert (p.lid, p.port, p.counter_set, p.cap_mask, p.legacy_names) == (
        1, 0, "basic", "CapMask: 0x5300", False)
    assert {k: v for k, v in p.errors().items() if v} == {"PortRcvSwitchRelayErrors": 6}
    assert p.counters["QP1Dropped"] == 0  # in the basic set on this build
    assert (p.data_words["PortXmitData"], p.packets["PortRcvPkts"]) == (50334712, 698925)


def test_ofed1_short_names_are_renamed_not_lost() -> None:
    """Old names would otherwise land as unknown counters: a port with errors would look clean."""
    (p,) = perfquery.parse(LEGACY.read_text())
    assert p.legacy_names and p.counter_set == "basic" and p.cap_mask is None
    assert set(p.errors()) == set(ERROR_COUNTER_NAMES) - {"PortXmitWait"}
    assert not {"SymbolErrors", "XmtData", "LinkDowned"} & set(p.counters)
    assert p.data_words == {"PortXmitData": 905972985, "PortRcvData": 2411533950}
    assert p.packets == {"PortXmitPkts": 22945597, "PortRcvPkts": 26264095}
    faulty = LEGACY.read_text().replace("SymbolErrors:....................0",
                                        "SymbolErrors:....................17")
    assert perfquery.parse(faulty)[0].errors()["SymbolErrorCounter"] == 17


def test_several_ports_and_sets_in_one_output() -> None:
    text = SWITCH.read_text() + RCV_DETAILS.read_text() + PLAIN.read_text()
    ports = perfquery.parse(text)
    assert [(p.id, p.counter_set) for p in ports] == [
        ("lid 1719 port 1", "extended"), ("lid 1719 port 2", "extended"),
        ("lid 1719 port 1", "rcv_error_details"), ("lid 1 port 0", "basic")]


@pytest.mark.parametrize(
    ("header", "named"),
    [
        ("# PortXmitDiscardDetails counters: Lid 1719 port 1", "perfquery -D"),
        ("# Port extended speeds counters: Lid 1719 port 1", "perfquery -T"),
        ("# PortVLXmitWaitCounters counters: Lid 1719 port 1", "perfquery -w"),
        ("# PortSomethingNew counters: Lid 1719 port 1", "'PortSomethingNew counters'"),
    ],
)
def test_unsupported_format_is_an_error_naming_it(header: str, named: str) -> None:
    text = header + "\nPortSelect:......................1\nPortInactiveDiscards:............0\n"
    with pytest.raises(ParseError, match="unsupported perfquery format") as exc:
        perfquery.parse(text)
    assert named in exc.value.reason and exc.value.tool == "perfquery"
    with pytest.raises(ParseError, match="unsupported"):
        perfquery.parse(SWITCH.read_text() + text)  # never read as a clean port


def test_header_with_an_address_that_is_not_a_lid() -> None:
    with pytest.raises(ParseError, match="unreadable header"):
        perfquery.parse("# Port counters: DR path slid 0; dlid 0; 0,1 port 1\n"
                        "SymbolErrorCounter:..............0\n")


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
        assert exc.value.tool == "perfquery"


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
