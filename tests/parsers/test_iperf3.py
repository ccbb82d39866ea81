"""iperf3 -J parser: the public and the recorded runs, failures, variants and garbage."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from stetho.parsers import ParseError, iperf3
from tests.conftest import REAL, REPO, mutation_outcomes, real_files, real_ids

PUBLIC = real_files("11-iperf3")
REC = REPO / "fixtures" / "recorded" / "iperf3-debian12-vm"
RECORDED = sorted(REC.glob("*.json"))
FILES = PUBLIC + RECORDED
CLOUD = REAL / "11-iperf3" / "iperf3-3.9-tcp-gcp-to-ibm-retransmits-omit3.json"
LOOPBACK = REC / "iperf3-3.12-tcp-loopback-5s.json"
LIMITED = REC / "iperf3-3.12-tcp-loopback-b10M-5s.json"
SIGINT = REC / "iperf3-3.12-tcp-loopback-sigint-after-2.5s.json"
REFUSED = REC / "iperf3-3.12-connection-refused.json"


def test_fixture_folders_are_complete() -> None:
    assert set(FILES) == {CLOUD, LOOPBACK, LIMITED, SIGINT, REFUSED}


@pytest.mark.parametrize("path", FILES, ids=real_ids(FILES))
def test_every_file(path: Path) -> None:
    text = path.read_text()
    run = iperf3.parse(text)
    assert iperf3.parse(text.encode()) == run
    assert run.version is not None and run.version.startswith("iperf 3.")
    assert run.ok == (run.error is None and (run.receiver_bits_per_second or 0) > 0)
    for i in run.intervals:
        assert i.end_s >= i.start_s and i.bits_per_second >= 0
    if run.sent is not None and run.protocol == "TCP":
        measured = [i.retransmits or 0 for i in run.measured_intervals]
        assert run.retransmits == sum(measured)  # the summary covers the measured intervals


def test_cloud_run_with_retransmits_and_omitted_intervals() -> None:
    run = iperf3.parse(CLOUD.read_text())
    assert run.ok and run.error is None and run.version == "iperf 3.9"
    assert (run.protocol, run.num_streams, run.duration_s, run.omit_s) == ("TCP", 1, 10.0, 3.0)
    assert (run.local_host, run.remote_host, run.remote_port) == ("10.0.0.12", "203.0.113.10",
                                                                  5500)
    assert run.receiver_bits_per_second == 1674679677.0243485
    assert run.sender_bits_per_second == 1674584244.9212246
    assert run.retransmits == 1664 and run.received is not None
    assert run.received.retransmits is None  # the receiver does not count retransmits
    assert len(run.intervals) == 13 and len(run.measured_intervals) == 10
    assert [i.omitted for i in run.intervals[:4]] == [True, True, True, False]
    assert run.intervals[1].retransmits == 1731  # in an omitted interval: not in the total
    assert run.target_bitrate is None and not run.reverse
    assert (run.sender_congestion, run.receiver_congestion) == ("cubic", "cubic")
    assert run.host_cpu_percent == 5.92963188151532


def test_recorded_loopback_and_rate_limited() -> None:
    full = iperf3.parse(LOOPBACK.read_text())
    limited = iperf3.parse(LIMITED.read_text())
    assert full.ok and limited.ok and full.version == "iperf 3.12"
    assert full.retransmits == 46 and limited.retransmits == 0
    assert limited.target_bitrate == 10_000_000 and full.target_bitrate is None
    assert limited.receiver_bits_per_second == pytest.approx(10.07e6, rel=0.01)
    # the -b 10M run is the one a full-speed baseline must reject
    assert (full.receiver_bits_per_second or 0) / (limited.receiver_bits_per_second or 1) > 100


def test_connection_refused_is_an_error_not_a_zero() -> None:
    run = iperf3.parse(REFUSED.read_text())
    assert not run.ok and run.error == "unable to connect to server: Connection refused"
    assert run.sent is None and run.received is None and run.intervals == ()
    assert run.receiver_bits_per_second is None and run.retransmits is None
    assert run.protocol is None and run.remote_host is None


def test_sigint_keeps_intervals_and_fails() -> None:
    run = iperf3.parse(SIGINT.read_text())
    assert not run.ok and run.error == "interrupt - the client has terminated"
    assert len(run.intervals) == 3 and run.receiver_bits_per_second == 0
    assert (run.sender_bits_per_second or 0) > 1e9 and run.retransmits == 37


def test_error_line_after_the_json_counts() -> None:
    """esnet/iperf#1143: the client printed its error after the closing brace."""
    text = LOOPBACK.read_text() + "iperf3: error - unable to send control message: Broken pipe\n"
    run = iperf3.parse(text)
    assert run.error == "error - unable to send control message: Broken pipe" and not run.ok
    assert run.trailing == ("iperf3: error - unable to send control message: Broken pipe",)


def test_warning_before_the_json_is_kept() -> None:
    text = "Warning: --bidir option is in use\n" + LOOPBACK.read_text()
    run = iperf3.parse(text)
    assert run.ok and run.prelude == ("Warning: --bidir option is in use",)


def test_zero_rate_at_the_receiver_is_not_ok() -> None:
    doc = json.loads(LOOPBACK.read_text())
    doc["end"]["sum_received"]["bits_per_second"] = 0
    doc["end"]["sum_received"]["bytes"] = 0
    assert not iperf3.parse(json.dumps(doc)).ok


@pytest.mark.parametrize(("edit", "match"), [
    (lambda d: d.update(error=3), "'error' is not a string"),
    (lambda d: d["end"]["sum_sent"].update(bytes=1.5), "not an integer"),
    (lambda d: d["end"]["sum_sent"].pop("bits_per_second"), "not a number"),
    (lambda d: d.update(intervals={}), "not a list"),
    (lambda d: d["intervals"][0].pop("sum"), "no 'sum'"),
    (lambda d: d["start"].update(connected=[1]), "not an object"),
    (lambda d: d["start"].update(version=3.12), "not a string"),
    (lambda d: d.update(end=[]), "'end' is not an object"),
])
def test_broken_documents_raise_parse_error(edit: object, match: str) -> None:
    doc = json.loads(LOOPBACK.read_text())
    edit(doc)  # type: ignore[operator]
    with pytest.raises(ParseError, match=match) as exc:
        iperf3.parse(json.dumps(doc))
    assert exc.value.tool == "iperf3"


@pytest.mark.parametrize("text", ["{}\n", '{"intervals": []}\n', "[1]\n", "iperf3: error\n"])
def test_not_iperf3(text: str) -> None:
    with pytest.raises(ParseError, match="not iperf3"):
        iperf3.parse(text)


def test_truncated_json() -> None:
    text = LOOPBACK.read_text()
    with pytest.raises(ParseError, match="invalid JSON"):
        iperf3.parse(text[: len(text) * 2 // 3])


@pytest.mark.parametrize("text", ["", "\n\n"])
def test_empty(text: str) -> None:
    with pytest.raises(ParseError, match="empty"):
        iperf3.parse(text)


def test_random_bytes() -> None:
    blob = bytes(random.Random(0).randrange(256) for _ in range(4096))
    with pytest.raises(ParseError):
        iperf3.parse(blob)


OTHER = (real_files("10-fio-perftest") + real_files("12-gpu-bench", "dcgmi*")
         + real_files("07-mlxlink-ethtool") + real_files("09-lspci"))


@pytest.mark.parametrize("path", OTHER, ids=real_ids(OTHER))
def test_other_tools_output(path: Path) -> None:
    with pytest.raises(ParseError) as exc:
        iperf3.parse(path.read_text())
    assert exc.value.tool == "iperf3"


@pytest.mark.parametrize("path", FILES, ids=real_ids(FILES))
def test_mutated_real_output_raises_only_parse_error(path: Path) -> None:
    outcomes = mutation_outcomes(iperf3.parse, path.read_text(), iperf3.TOOL, rounds=300)
    assert outcomes == {"parsed", "error"}
