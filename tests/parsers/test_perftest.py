"""perftest parser (ib_write_bw, ib_send_lat, ...): every real output, variants and garbage."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from stetho.parsers import ParseError, perftest
from tests.conftest import REAL, mutation_outcomes, real_files, real_ids

FILES = real_files("10-fio-perftest", "ib_*")
D = REAL / "10-fio-perftest"
ROCE_BW = D / "ib_write_bw-roce-100g-cx-4qp-oci.txt"
IB_BW = D / "ib_write_bw-a-ib-qdr-cx3-mlx4-mtu2048-EXCERPT.txt"
IB_LAT = D / "ib_send_lat-a-ib-qdr-cx3-mlx4-mtu2048-EXCERPT.txt"
ROCE_LAT = D / "ib_send_lat-roce-mlx5-mtu1024-rdmacm-tabs-cpufreq-warnings-EXCERPT.txt"
ATOMIC = D / "ib_atomic_lat-ib-qdr-cx3-cpufreq-warning-in-table-EXCERPT.txt"


def test_fixture_folder_is_complete() -> None:
    assert set(FILES) == {ROCE_BW, IB_BW, IB_LAT, ROCE_LAT, ATOMIC}


@pytest.mark.parametrize("path", FILES, ids=real_ids(FILES))
def test_every_real_file(path: Path) -> None:
    text = path.read_text()
    run = perftest.parse(text)
    assert perftest.parse(text.encode()) == run
    assert run.ok and run.rows and run.errors == () and run.device is not None
    assert run.link_type in ("IB", "Ethernet") and run.mtu_bytes in (1024, 2048, 4096)
    sizes = [r.size_bytes for r in run.rows]
    assert sizes == sorted(sizes)
    assert len([a for a in run.addresses if a.side == "local"]) == run.num_qps
    for r in run.rows:
        if run.kind == "bw":
            assert r.bw_average is not None and r.bw_average > 0 and r.bw_unit is not None
            assert r.bw_peak is None or r.bw_peak >= r.bw_average * 0.99
        else:
            assert r.t_min_us is not None and r.t_typical_us is not None
            assert r.t_min_us <= r.t_typical_us <= (r.t_max_us or 0)


def test_roce_write_bw_gbits_4qp() -> None:
    run = perftest.parse(ROCE_BW.read_text())
    assert run.title == "RDMA_Write BW Test" and run.kind == "bw"
    assert (run.device, run.link_type, run.transport, run.connection_type) == (
        "mlx5_5", "Ethernet", "IB", "RC")
    assert (run.num_qps, run.mtu_bytes, run.gid_index, run.rdma_cm) == (4, 4096, 3, True)
    assert run.setting("TOS") == "41" and run.setting("Data ex. method") == "rdma_cm"
    assert run.setting("CQ Moderation") == "100" and run.setting("nope") is None
    assert len(run.addresses) == 8
    assert run.addresses[0].gid == "00:00:00:00:00:00:00:00:00:00:255:255:192:00:02:01"
    assert run.addresses[-1].side == "remote" and run.addresses[-1].qpn == "0x0096"
    (row,) = run.rows
    assert (row.size_bytes, row.iterations, row.bw_unit) == (65536, 20000, "Gb/sec")
    assert (row.bw_peak, row.bw_average, row.msg_rate_mpps) == (98.01, 98.01, 0.186932)
    assert row.bw_average_gbps == pytest.approx(98.01)
    assert run.bw_average_bytes_per_s == pytest.approx(98.01e9 / 8)
    assert run.t_typical_us is None and row.t_typical_us is None


def test_ib_write_bw_in_megabytes() -> None:
    run = perftest.parse(IB_BW.read_text())
    assert (run.device, run.link_type, run.mtu_bytes, run.gid_index, run.rdma_cm) == (
        "mlx4_0", "IB", 2048, None, False)
    assert len(run.rows) == 23 and run.columns == (
        "#bytes", "#iterations", "BW peak[MB/sec]", "BW average[MB/sec]", "MsgRate[Mpps]")
    top = run.largest
    assert top is not None and top.size_bytes == 8388608
    assert (top.bw_peak, top.bw_average, top.bw_unit) == (3665.51, 3665.25, "MB/sec")
    assert top.bw_average_bytes_per_s == 3665.25 * 0x100000  # perftest's MB is 2^20 bytes
    assert top.bw_average_gbps == pytest.approx(30.75, abs=0.01)  # QDR 4x carries 32 Gbit/s
    assert run.row(2) is not None and run.row(3) is None
    assert run.addresses[0].lid == "0x03" and run.addresses[1].lid == "0x0a"


def test_ib_send_lat_all_sizes() -> None:
    run = perftest.parse(IB_LAT.read_text())
    assert run.title == "Send Latency Test" and run.kind == "lat"
    assert len(run.rows) == 23 and run.t_typical_us == 1.07
    small = run.smallest
    assert small is not None and small.size_bytes == 2
    assert (small.t_min_us, small.t_max_us, small.t_typical_us, small.t_avg_us,
            small.t_stdev_us, small.p99_us, small.p999_us) == (
        1.02, 11.76, 1.07, 1.11, 0.30, 1.68, 5.00)
    big = run.row(8388608)
    assert big is not None and big.p999_us == 3761.26 and big.bw_average is None
    assert run.bw_average_bytes_per_s is None


def test_roce_send_lat_with_tabs_and_cpu_frequency_warnings() -> None:
    run = perftest.parse(ROCE_LAT.read_text())
    assert (run.link_type, run.gid_index, run.rdma_cm, run.mtu_bytes) == ("Ethernet", 3, True,
                                                                          1024)
    assert len(run.warnings) == 2 and run.warnings[0].startswith("Conflicting CPU frequency")
    (row,) = run.rows
    assert (row.size_bytes, row.iterations, row.t_typical_us, row.p99_us) == (2, 1000, 0.88, 0.94)
    assert run.addresses[0].gid == run.addresses[1].gid  # both ends on one host


def test_atomic_latency_with_warning_inside_the_table() -> None:
    run = perftest.parse(ATOMIC.read_text())
    assert run.title == "Atomic FETCH_AND_ADD Latency Test"
    assert run.setting("Outstand reads") == "16"
    assert len(run.warnings) == 2 and run.rows[0].t_typical_us == 2.34


def _edit(path: Path, old: str, new: str) -> str:
    text = path.read_text()
    assert old in text
    return text.replace(old, new)


def test_zero_peak_beside_a_real_average_is_unknown() -> None:
    text = _edit(ROCE_BW, "98.01              98.01", "0.00               98.01")
    row = perftest.parse(text).rows[0]
    assert row.bw_peak is None and row.bw_peak_bytes_per_s is None and row.bw_average == 98.01


def test_zero_average_is_not_ok() -> None:
    text = _edit(ROCE_BW, "98.01              98.01", "0.00               0.00")
    run = perftest.parse(text)
    assert not run.ok and run.rows[0].bw_average == 0.0


def test_error_lines_fail_the_run() -> None:
    text = ROCE_BW.read_text().rstrip("\n") + "\n Completion with error at client\n"
    run = perftest.parse(text)
    assert not run.ok and run.errors == ("Completion with error at client",)


def test_banner_without_table_is_a_failed_run() -> None:
    text = ROCE_BW.read_text().split(" #bytes")[0] + " Couldn't connect to 192.0.2.2:18515\n"
    run = perftest.parse(text)
    assert not run.ok and run.rows == () and run.errors == ("Couldn't connect to 192.0.2.2:18515",)


def test_duration_mode_latency_columns() -> None:
    dashes = "-" * 87 + "\n"
    text = (dashes + "                    Send Latency Test\n"
            " Device         : mlx5_0\n" + dashes +
            " #bytes        #iterations       t_avg[usec]  \t\n"
            " 2             1612318          1.85\n")
    (row,) = perftest.parse(text).rows
    assert row.t_avg_us == 1.85 and row.t_typical_us is None and row.iterations == 1612318


@pytest.mark.parametrize(("old", "new", "match"), [
    ("0.186932", "0.186932 7", "cells for 5 columns"),
    ("MsgRate[Mpps]", "MsgRate[Mpps] extra[x]", "cells for 6 columns"),
    ("BW average[Gb/sec]", "BW average[MB/sec]", "two units"),
    ("BW peak[Gb/sec]    BW average[Gb/sec]", "BW peak[Kb/sec]    BW average[Kb/sec]",
     "unknown bandwidth unit"),
    (" 65536 ", " 65536.5 ", "not integers"),
    ("#iterations", "#iters", "no #bytes/#iterations"),
])
def test_broken_tables_raise_parse_error(old: str, new: str, match: str) -> None:
    with pytest.raises(ParseError, match=match) as exc:
        perftest.parse(_edit(ROCE_BW, old, new))
    assert exc.value.tool == "perftest"


def test_two_runs_in_one_text_raise() -> None:
    with pytest.raises(ParseError, match="more than one"):
        perftest.parse(ROCE_BW.read_text() + IB_BW.read_text())


@pytest.mark.parametrize("text", ["", "   \n"])
def test_empty(text: str) -> None:
    with pytest.raises(ParseError, match="empty"):
        perftest.parse(text)


def test_random_bytes() -> None:
    blob = bytes(random.Random(0).randrange(256) for _ in range(4096))
    with pytest.raises(ParseError):
        perftest.parse(blob)
    with pytest.raises(ParseError):
        perftest.parse(blob.decode("latin-1"))


OTHER = (real_files("10-fio-perftest", "fio-*") + real_files("11-iperf3")
         + real_files("12-gpu-bench") + real_files("03-nccl") + real_files("04-infiniband"))


@pytest.mark.parametrize("path", OTHER, ids=real_ids(OTHER))
def test_other_tools_output(path: Path) -> None:
    with pytest.raises(ParseError) as exc:
        perftest.parse(path.read_text())
    assert exc.value.tool == "perftest"


@pytest.mark.parametrize("path", FILES, ids=real_ids(FILES))
def test_mutated_real_output_raises_only_parse_error(path: Path) -> None:
    outcomes = mutation_outcomes(perftest.parse, path.read_text(), perftest.TOOL, rounds=300)
    assert outcomes == {"parsed", "error"}
