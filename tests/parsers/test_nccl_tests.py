"""nccl-tests parser: every real recorded output, the values in each, variants, and garbage."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from stetho.parsers import ParseError
from stetho.parsers.nccl_tests import (
    NcclRow,
    NcclRun,
    RunShape,
    busbw_factor,
    collective_name,
    format_size,
    parse,
    parse_size,
)
from tests.conftest import REAL, real_files, real_ids

FILES = real_files("03-nccl") + real_files("13-nccl-collectives")
BCAST_OLD = "broadcast-1node-8xA100-40GB-oldformat-root-col.txt"
ALLGATHER_NEW = "all_gather-2node-2xGB10-roce-nccltests2.18.5.txt"
# The one 03-nccl file that holds no nccl-tests output: NCCL INFO lines only.
NOT_NCCL_TESTS = {"nccl-debug-info-net-ib-sharp-2node-h100-EXCERPT.log"}
NCCL = REAL / "03-nccl"


def _read(name: str) -> str:
    return (NCCL / name).read_text()


def _run(name: str) -> NcclRun:
    return parse(_read(name))


def _row(run: NcclRun, size: int) -> NcclRow:
    row = run.row(size)
    assert row is not None, f"no row of {size} B"
    return row


GB10 = "allgather-2node-2xGB10-nccl2.28.9-tests2.18.3.txt"
GB10_SLOW = "allgather-2node-2xGB10-fec-none-busbw-collapse.txt"
GB300 = "allgather-2node-8xGB300-gke-tests2.17.6-whitespace-collapsed.txt"
ALLTOALL = "alltoall-2node-16rank-cx8-spcx-nccl2.30.3-tests2.18.3-erratic.txt"
GB10_LOG = "nccl-debug-info-2node-gb10-roce-nccl2.28.9-allgather-header-EXCERPT.log"
ROCE = "allreduce-2node-16xA100-40GB-roce-oke.txt"
OLD = "allreduce-2node-16xA100-40GB-ib-abci-oldformat.txt"
RTX = "allreduce-2node-2xRTX3090-wrong-FAILED.txt"
CUDA_INIT = "nccl-tests-cuda-init-failure-8xH100.txt"
TAGGED = "nccl-tests-mpi-tagged-output-poor-bw-EXCERPT.txt"
SOCKET_LOG = "nccl-debug-info-net-socket-1node-2xA100-80GB.log"


def test_fixture_folder_is_complete() -> None:
    names = {p.name for p in FILES}
    assert {ROCE, OLD, RTX, CUDA_INIT, TAGGED, SOCKET_LOG, GB10, GB10_SLOW, GB300, ALLTOALL,
            GB10_LOG, BCAST_OLD, ALLGATHER_NEW} | NOT_NCCL_TESTS == names


@pytest.mark.parametrize("path", FILES, ids=real_ids(FILES))
def test_every_real_file(path: Path) -> None:
    text = path.read_text()
    if path.name in NOT_NCCL_TESTS:
        with pytest.raises(ParseError) as exc:
            parse(text)
        assert exc.value.tool == "nccl-tests"
        return
    run = parse(text)
    assert parse(text.encode()) == run
    sizes = [r.size_bytes for r in run.rows]
    assert sizes == sorted(sizes)
    assert run.failed == (run.failure is not None)
    assert not (run.failed and run.truncated)
    assert run.ok == (not run.failed and not run.truncated and bool(run.rows)
                      and run.total_wrong == 0)
    for row in run.rows:
        # a run from -b 0 has a zero-byte first row
        assert (row.count > 0) == (row.size_bytes > 0)
        assert row.oop_busbw_gbps is not None and row.oop_busbw_gbps >= 0
        assert run.busbw(row.size_bytes) == _row(run, row.size_bytes).oop_busbw_gbps
    if run.rows and run.avg_busbw_gbps is not None:
        # nccl-tests' Avg is the mean of the out-of-place and in-place busbw over every size.
        cells = [r.oop_busbw_gbps or 0.0 for r in run.rows] + [r.ip_busbw_gbps or 0.0
                                                                for r in run.rows]
        assert run.avg_busbw_gbps == pytest.approx(sum(cells) / len(cells), abs=0.01)
    if run.header is not None and run.devices:
        assert [d.rank for d in run.devices] == list(range(len(run.devices)))
    # The run's shape, and the NCCL version whenever the output prints one.
    shape = run.shape
    assert shape.ranks == (len(run.devices) or None)
    assert shape.nodes == (len({d.host for d in run.devices}) or None)
    assert shape.gpus_per_process == run.ngpus
    if shape.nodes and shape.gpus_per_node:
        assert shape.gpus_per_node * shape.nodes == shape.ranks
    if "NCCL version" in text or "nccl-library=" in text:
        assert run.nccl_version is not None and run.nccl_version_source is not None
    else:
        assert run.nccl_version is None and run.nccl_version_source is None
    # nccl-tests' busbw is algbw times the collective's factor, on every row it timed.
    if shape.collective and shape.ranks:
        factor = busbw_factor(shape.collective, shape.ranks)
        for row in run.rows:
            if row.oop_algbw_gbps and row.oop_algbw_gbps >= 1.0:
                assert row.oop_busbw_gbps == pytest.approx(row.oop_algbw_gbps * factor,
                                                           rel=0.02, abs=0.01)


def test_roce_16xa100_clean_run() -> None:
    run = _run(ROCE)
    assert run.ok and not run.failed and not run.truncated and run.failure is None
    assert (run.nthreads, run.ngpus, run.min_bytes, run.max_bytes, run.iters) == (
        1, 1, 8, 8589934592, 20)
    assert run.header is not None
    assert (run.header.step_factor, run.header.warmup_iters, run.header.validation) == (2, 5, 1)
    assert len(run.devices) == 16
    d8 = run.devices[8]
    assert (d8.rank, d8.group, d8.pid, d8.device) == (8, 0, 43, 0)
    assert (d8.bus_id, d8.pci_bus) == ("0x0f", 15)
    assert d8.host == "nccl-allreduce-job0-mpiworker-1" and d8.name == "NVIDIA A100-SXM4-40GB"
    assert len(run.rows) == 31
    top = run.largest
    assert top is not None and top.size_bytes == 8589934592 and top.count == 2147483648
    assert (top.dtype, top.redop, top.root) == ("float", "sum", -1)
    assert (top.oop_time_us, top.oop_algbw_gbps, top.oop_busbw_gbps) == (67689.0, 126.90, 237.94)
    assert (top.ip_time_us, top.ip_algbw_gbps, top.ip_busbw_gbps) == (67811.0, 126.68, 237.52)
    assert run.busbw(8589934592) == 237.94
    assert run.busbw(2097152) == 39.64 and _row(run, 2097152).ip_time_us == 100.1
    assert run.busbw(12345) is None and run.row(12345) is None
    assert run.avg_busbw_gbps == 66.4834 and run.out_of_bounds == 0 and run.total_wrong == 0
    assert run.validated and top.oop_error is None and top.oop_wrong == 0
    assert run.tests_version is None and run.nccl_version is None


def test_old_format_abci_error_column() -> None:
    run = _run(OLD)
    assert run.ok and run.avg_busbw_gbps == 7.41855 and run.out_of_bounds == 0
    assert run.header is not None and run.header.agg_iters is None and run.iters == 100
    assert (run.min_bytes, run.max_bytes) == (4, 33554432)
    assert len(run.rows) == 24 and len(run.devices) == 16
    first = run.rows[0]
    assert (first.size_bytes, first.count, first.root) == (4, 1, None)
    assert (first.oop_time_us, first.oop_error, first.ip_time_us, first.ip_error) == (
        33.50, 0.0, 32.56, 4e-07)
    assert first.oop_wrong is None and first.ip_wrong is None
    top = run.largest
    assert top is not None and top.size_bytes == 33554432
    assert (top.oop_busbw_gbps, top.ip_busbw_gbps, top.oop_error) == (33.34, 33.37, 5e-07)
    assert run.busbw(524288) == 9.08
    d = run.devices[15]
    assert (d.rank, d.group, d.pid, d.host, d.bus_id, d.name) == (
        15, None, 2273933, "node2", "0xca", "A100-SXM4-40GB")
    assert run.validated and run.total_wrong == 0


def test_rtx3090_wrong_and_failed() -> None:
    run = _run(RTX)
    assert run.failed and not run.ok and not run.truncated
    assert run.failure == "# Out of bounds values : 108 FAILED"
    assert run.out_of_bounds == 108 and run.avg_busbw_gbps == 3.02663
    assert len(run.devices) == 2 and {d.host for d in run.devices} == {"worker1", "worker2"}
    assert run.max_bytes == 1000000000 and run.largest is not None
    assert run.largest.size_bytes == 536870912
    row = run.row(2097152)
    assert row is not None and row.oop_wrong == 1048580 and row.ip_wrong == 1048580  # 1.04858e+06
    assert _row(run, 8).oop_wrong == 4
    assert _row(run, 8388608).ip_wrong == 4194300  # 4.1943e+06
    assert run.total_wrong > 0 and all(r.wrong > 0 for r in run.rows)
    assert run.busbw(536870912) == 7.41


def test_cuda_init_failure_before_table() -> None:
    run = _run(CUDA_INIT)
    assert run.failed and not run.ok and not run.truncated
    assert run.failure is not None and "system not yet initialized" in run.failure
    assert run.failure.splitlines() == [
        "test: Test CUDA failure common.cu:941 'system not yet initialized'",
        ".. test pid 54340: Test failure common.cu:891",
    ]
    assert run.rows == () and run.devices == () and run.largest is None
    assert run.avg_busbw_gbps is None and run.out_of_bounds is None
    assert run.ngpus == 8 and run.max_bytes == 134217728


def test_mpi_tagged_excerpt_rows_despite_tags() -> None:
    run = _run(TAGGED)
    assert run.header is None and run.devices == ()
    assert run.skipped_fragments == 1  # the excerpt starts with the tail of a row
    assert [r.size_bytes for r in run.rows] == [1048576 << i for i in range(10)]
    assert [r.oop_busbw_gbps for r in run.rows] == [
        1.24, 1.73, 12.91, 16.20, 24.09, 29.50, 5.27, 5.22, 4.09, 5.31]
    assert run.busbw(33554432) == 29.50 and run.busbw(67108864) == 5.27
    assert _row(run, 67108864).ip_busbw_gbps == 5.27
    assert _row(run, 268435456).oop_time_us == 125807.0
    assert run.total_wrong == 0 and not run.failed
    assert run.truncated and not run.ok  # no summary in an excerpt


def test_socket_log_holds_a_run_among_info_lines() -> None:
    run = _run(SOCKET_LOG)
    assert run.ok and run.nccl_version == "2.20.5"
    assert [r.size_bytes for r in run.rows] == [134217728, 268435456, 536870912]
    assert run.busbw(536870912) == 192.43 and run.avg_busbw_gbps == 179.465
    assert [(d.device, d.bus_id, d.pid) for d in run.devices] == [(0, "0xa4", 880),
                                                                  (1, "0xa9", 880)]
    assert run.ngpus == 2 and run.warnings == ()


def test_two_node_all_gather_on_gb10() -> None:
    run = _run(GB10)
    assert run.ok and run.collective == "all_gather_perf" and run.collective_source == "marker"
    assert run.shape == RunShape("all_gather", ranks=2, nodes=2, gpus_per_process=1,
                                 gpus_per_node=1)
    assert run.shape.describe() == "all_gather 2 ranks / 2 nodes"
    assert (run.tests_version, run.nccl_version, run.nccl_version_source) == (
        "2.18.3", "2.28.9", "nccl-library")
    assert (run.nccl_library_version, run.nccl_headers_version, run.nccl_cuda_version) == (
        "2.28.9", "2.28.9", None)
    assert [d.host for d in run.devices] == ["gb10-node1", "gb10-node2"]
    assert run.devices[1].bus_id == "000f:01:00" and run.devices[1].pci_bus == 1
    assert run.header is not None and run.header.unalign == 0
    assert [r.oop_busbw_gbps for r in run.rows] == [19.73, 21.23, 22.14]
    assert run.avg_busbw_gbps == 21.4033


def test_same_run_after_recabling_collapses_but_is_clean() -> None:
    """A perf fault, not a correctness one: only a baseline of this shape can catch it."""
    slow, good = _run(GB10_SLOW), _run(GB10)
    assert slow.ok and slow.shape == good.shape and slow.total_wrong == 0
    assert [r.oop_busbw_gbps for r in slow.rows] == [2.80, 2.82, 2.82]
    assert slow.busbw(4294967296) < 0.15 * (good.busbw(4294967296) or 0)


def test_whitespace_collapsed_gb300_run() -> None:
    run = _run(GB300)
    assert run.ok and run.shape == RunShape("all_gather", 8, 2, 1, 4)
    assert len(run.rows) == 23 and run.avg_busbw_gbps == 146.047
    assert run.devices[4].host == "gke-psch-ug-cluster-a4xmax-03878a77-d3lp"
    assert run.devices[3].bus_id == "0019:06:00" and run.devices[3].pci_bus == 6
    assert run.busbw(17179869184) == 357.13 and run.largest is not None
    assert (run.tests_version, run.nccl_version) == ("2.17.6", "2.28.9")


def test_two_node_alltoall_16_ranks_with_nccl_version_line() -> None:
    run = _run(ALLTOALL)
    assert run.ok and run.shape == RunShape("alltoall", 16, 2, 1, 8)
    assert run.shape.describe() == "alltoall 16 ranks / 2 nodes"
    # The library's own banner wins; its CUDA build is kept; the code says the same.
    assert (run.nccl_version, run.nccl_cuda_version, run.nccl_version_source) == (
        "2.30.3", "13.0", "NCCL version line")
    assert run.nccl_library_version == run.nccl_headers_version == "2.30.3"
    assert {d.name for d in run.devices} == {"NVIDIA Graphics Device"}
    assert len(run.rows) == 24 and run.validated is False  # in-place #wrong is N/A
    assert all(r.ip_wrong is None and r.oop_wrong == 0 for r in run.rows)
    assert (run.busbw(33554432), run.busbw(67108864)) == (38.86, 0.61)  # erratic, as recorded


def test_info_log_excerpt_has_the_shape_and_version_but_no_table() -> None:
    run = _run(GB10_LOG)
    assert run.failed and run.failure == "no results table after the '# nThread' header"
    assert run.shape == RunShape("all_gather", 2, 2, 1, 1)
    assert (run.nccl_version, run.nccl_cuda_version) == ("2.28.9", "13.0")
    assert run.warnings == ()


@pytest.mark.parametrize(("name", "expected"), [
    (ROCE, "all_reduce"), (OLD, "all_reduce"), (RTX, "all_reduce"), (SOCKET_LOG, "all_reduce"),
])
def test_collective_told_from_the_table(name: str, expected: str) -> None:
    """Older outputs name no binary: the redop/root columns and busbw/algbw ratio tell it."""
    run = _run(name)
    assert run.collective is None and run.table_collective == expected
    assert (run.collective_source, run.shape.collective) == ("table", expected)


def test_collective_from_an_echoed_command_line() -> None:
    text = "srun --nodes=2 all_reduce_perf_mpi -b 8 -e 8G -f 2 -g 1\n" + _read(ROCE)
    run = parse(text)
    assert (run.collective, run.collective_source) == ("all_reduce_perf_mpi", "command")
    assert run.shape.collective == "all_reduce" and run.table_collective is None


def _unnamed(name: str) -> str:
    """A real output as a wrapper script or an older nccl-tests prints it: no '# Collective
    test' marker lines and no binary named on any line."""
    text = "\n".join(line for line in _read(name).splitlines()
                     if "Collective test" not in line)
    return re.sub(r"\b\w+_perf(_mpi)?\b", "run-nccl.sh", text)


def test_in_place_wrong_tells_all_gather_from_alltoall() -> None:
    """Both have no redop, no root and busbw = (n-1)/n algbw; only alltoall leaves in-place
    unchecked (#wrong N/A), so the checked in-place column of all_gather rules it out."""
    gather = parse(_unnamed(GB10))
    assert gather.collective is None and gather.shape.collective == "all_gather"
    assert gather.collective_signals == (
        "redop column 'none': not a reduction", "root column -1: no root",
        "in-place #wrong checked: not alltoall",
        "busbw/algbw 0.500 = (n-1)/n for 2 ranks (all_gather)")
    a2a = parse(_unnamed(ALLTOALL))
    assert a2a.shape.collective == "alltoall", a2a.collective_signals
    assert any("in-place #wrong N/A" in s for s in a2a.collective_signals)
    assert parse(_unnamed(GB300)).shape.collective == "all_gather"


def test_table_cannot_tell_ambiguous_collectives() -> None:
    # With checking off (-c 0: every #wrong N/A) an all_gather table is also an alltoall
    # table; a single rank fits everything.
    rows = re.compile(r"^(\s*\d+\s+\d+\s+float\s+none\s+-1(?:\s+\S+){3})\s+0"
                      r"((?:\s+\S+){3})\s+0\s*$", re.MULTILINE)
    text, n = rows.subn(r"\1    N/A\2    N/A", _unnamed(GB10))
    assert n > 0
    run = parse(text)
    assert run.collective is None and run.shape.collective is None
    assert set(run.collective_candidates) == {"all_gather", "alltoall"}
    single = "\n".join(line for line in _read(SOCKET_LOG).splitlines() if "device  1" not in line)
    assert parse(single).table_collective is None


def test_the_all_reduce_samples_name_their_signals() -> None:
    for name, root in ((ROCE, "root column -1: no root"), (OLD, "no root column: no root")):
        run = parse(_unnamed(name))
        assert run.shape.collective == "all_reduce" and run.collective_source == "table"
        assert run.collective_signals == (
            "redop column 'sum': a reduction (all_reduce, reduce_scatter, reduce)", root,
            "busbw/algbw 1.875 = 2(n-1)/n for 16 ranks (all_reduce)")


@pytest.mark.parametrize(("collective", "n", "factor"), [
    ("all_reduce", 16, 1.875), ("all_reduce_perf", 2, 1.0), ("all_reduce", 1, 0.0),
    ("all_gather", 8, 0.875), ("reduce_scatter", 16, 0.9375), ("alltoall_perf_mpi", 16, 0.9375),
    ("broadcast", 8, 1.0), ("reduce", 16, 1.0), ("sendrecv", 2, 1.0), ("gather", 4, 0.75),
])
def test_busbw_factor(collective: str, n: int, factor: float) -> None:
    assert busbw_factor(collective, n) == pytest.approx(factor)


def test_busbw_factor_rejects() -> None:
    with pytest.raises(ParseError, match="not an nccl-tests collective"):
        busbw_factor("allreduce", 8)
    with pytest.raises(ParseError, match="at least one rank"):
        busbw_factor("all_reduce", 0)
    assert collective_name("/opt/nccl-tests/build/reduce_scatter_perf") == "reduce_scatter"
    assert collective_name("ib_write_bw") is None and collective_name(None) is None


def test_shape_of_uneven_nodes_and_of_no_devices() -> None:
    lines = [line for line in _read(ROCE).splitlines() if "Rank 15 " not in line]
    shape = parse("\n".join(lines)).shape
    assert (shape.ranks, shape.nodes, shape.gpus_per_node) == (15, 2, None)
    assert _run(TAGGED).shape == RunShape(None, None, None, None, None)
    assert _run(TAGGED).shape.describe() == "unknown collective ? ranks / ? nodes"


# Variants built from real files (copies in memory; the fixtures stay untouched).


def test_tag_output_prefix_on_every_line() -> None:
    text = "\n".join(f"[1,0]<stdout>:{line}" for line in _read(ROCE).splitlines())
    assert parse(text) == _run(ROCE)


def test_srun_label_prefix() -> None:
    text = "\n".join(f"0: {line}" for line in _read(OLD).splitlines())
    assert parse(text).rows == _run(OLD).rows


def test_rows_split_over_lines() -> None:
    out = []
    for line in _read(ROCE).splitlines():
        t = line.split()
        if len(t) == 13 and t[0].isdigit():
            out += ["  ".join(t[:5]), "[0]  " + "  ".join(t[5:9]), "  ".join(t[9:])]
        else:
            out.append(line)
    assert parse("\n".join(out)).rows == _run(ROCE).rows


def test_cut_output_is_truncated_not_failed() -> None:
    text = _read(ROCE)
    for cut in (text[: text.index("  1073741824")], text[: text.index("  1073741824") + 60]):
        run = parse(cut)
        assert run.truncated and not run.failed and not run.ok
        assert run.largest is not None and run.largest.size_bytes == 536870912


def test_avg_failed_and_missing() -> None:
    run = parse(_read(ROCE).replace("66.4834", "FAILED"))
    assert run.failed and run.failure == "# Avg bus bandwidth    : FAILED"
    assert run.avg_busbw_gbps is None
    run = parse(_read(ROCE).replace("66.4834", "66.4834 FAILED"))
    assert run.failed and run.avg_busbw_gbps == 66.4834


def test_header_then_nothing_is_a_failure() -> None:
    text = "\n".join(_read(ROCE).splitlines()[:25])
    run = parse(text)
    assert run.failed and run.failure == "no results table after the '# nThread' header"
    assert len(run.devices) == 16 and run.rows == ()


def test_modern_217_format() -> None:
    text = _read(ROCE).replace("[0x0f]", "[0000:0f:00]").replace(
        "# nThread", "# nccl-tests version 2.17.1 nccl-headers=22602 nccl-library=22703\n"
        "# Collective test starting: all_reduce_perf\n# nThread").replace(
        "graph: 0", "graph: 0 unalign: 0") + (
        "#\n# Collective test concluded: all_reduce_perf\n#\n")
    run = parse(text)
    assert run.ok and run.tests_version == "2.17.1" and run.nccl_version == "2.27.3"
    assert run.collective == "all_reduce_perf" and run.header is not None
    assert run.header.unalign == 0
    assert run.devices[0].bus_id == "0000:0f:00" and run.devices[0].pci_bus == 15
    assert run.devices[1].bus_id == "0x15" and run.devices[1].pci_bus == 21


def test_nccl_version_line_and_warn_lines_between_rows() -> None:
    lines = _read(ROCE).splitlines()
    lines.insert(30, "host:1:2 [0] NCCL WARN NET/IB : Got async event : port error")
    lines.insert(24, "NCCL version 2.18.5+cuda12.2")
    run = parse("\n".join(lines))
    assert run.ok and run.nccl_version == "2.18.5" and len(run.rows) == 31
    assert run.warnings == ("host:1:2 [0] NCCL WARN NET/IB : Got async event : port error",)


def test_validation_off_gives_none() -> None:
    text = _read(ROCE).replace("      0    ", "    N/A    ").replace("      0\n", "    N/A\n")
    run = parse(text)
    assert run.rows[0].oop_wrong is None and run.rows[-1].ip_wrong is None
    assert not run.validated and run.ok and run.total_wrong == 0


def test_per_iteration_and_timestamp_columns() -> None:
    text = (
        "# nThread 1 nGpus 8 minBytes 8 maxBytes 16 step: 2(factor) warmup iters: 5 iters: 20\n"
        "#       size         count      type   redop    root     time   algbw   busbw  #wrong"
        "    i_min    i_max    i_p99    i_cv%     time   algbw   busbw  #wrong    i_min    i_max"
        "    i_p99    i_cv% timestamp\n"
        "           8             2     float     sum      -1    10.00    0.00    0.00       0"
        "     9.00    11.00    11.00     2.00    12.00    0.00    0.01       0     9.50    13.00"
        "    13.00     3.00 2025-01-02 03:04:05\n"
        "          16             4     float     sum      -1    10.50    0.00    0.00       0"
        "     9.00    11.00    11.00     2.00    12.50    0.00    0.02       2     9.50    13.00"
        "    13.00     3.00 2025-01-02 03:04:06\n"
        "# Out of bounds values : 1 FAILED\n# Avg bus bandwidth    : 0.0075 \n"
    )
    run = parse(text)
    assert [r.ip_time_us for r in run.rows] == [12.0, 12.5]
    assert _row(run, 16).ip_wrong == 2 and _row(run, 16).ip_busbw_gbps == 0.02
    assert run.failed and run.total_wrong == 2


def test_reduced_max_bytes() -> None:
    text = _read(ROCE).replace("#\n# Using devices", "#\n# Reducing maxBytes to 4294967296 "
                               "due to memory limitation\n# Using devices")
    assert parse(text).max_bytes == 4294967296


def test_timeout_line_is_a_failure() -> None:
    text = _read(ROCE).split("  1073741824")[0] + "node1: Test timeout (30s) common.cu:123\n"
    run = parse(text)
    assert run.failed and not run.truncated and "Test timeout" in (run.failure or "")


def test_two_runs_in_one_text() -> None:
    with pytest.raises(ParseError, match="more than one"):
        parse(_read(ROCE) + _read(RTX))


def test_incomplete_row_followed_by_a_row() -> None:
    text = _read(ROCE).replace("    1.27    2.38      0    50.09    1.31    2.45      0", "")
    with pytest.raises(ParseError, match="incomplete"):
        parse(text)


def test_row_with_too_many_cells() -> None:
    text = _read(ROCE).replace("237.52      0", "237.52      0   7   7")
    with pytest.raises(ParseError, match="cells"):
        parse(text)


def test_cells_without_size_after_table_started() -> None:
    text = _read(ROCE).replace("# Out of bounds", "   1.0   2.0   3.0   0\n# Out of bounds")
    with pytest.raises(ParseError, match="without their size"):
        parse(text)


# Garbage.


@pytest.mark.parametrize("text", ["", "   \n\t\n", "\n\n"])
def test_empty(text: str) -> None:
    with pytest.raises(ParseError, match="empty"):
        parse(text)


def test_random_bytes() -> None:
    rng = random.Random(0)
    blob = bytes(rng.randrange(256) for _ in range(4096))
    with pytest.raises(ParseError):
        parse(blob)
    with pytest.raises(ParseError):
        parse(blob.decode("latin-1"))


@pytest.mark.parametrize(
    "path", real_files("09-lspci") + real_files("08-dcgm", "*.txt"),
    ids=real_ids(real_files("09-lspci") + real_files("08-dcgm", "*.txt")),
)
def test_other_tools_output(path: Path) -> None:
    with pytest.raises(ParseError) as exc:
        parse(path.read_text())
    assert exc.value.tool == "nccl-tests" and "not nccl-tests output" in exc.value.reason


# Sizes as the profile writes them.


@pytest.mark.parametrize(("n", "text"), [
    (0, "0 B"), (8, "8 B"), (1023, "1023 B"), (1024, "1 KiB"), (1536, "1.5 KiB"),
    (67108864, "64 MiB"), (1000000000, "953.67 MiB"), (8589934592, "8 GiB"),
    (1 << 40, "1 TiB"),
])
def test_format_size(n: int, text: str) -> None:
    assert format_size(n) == text


@pytest.mark.parametrize(("text", "n"), [
    ("8", 8), ("1K", 1024), ("1k", 1024), ("128M", 134217728), ("8G", 8589934592),
    ("16g", 17179869184), (" 64 M ", 67108864), ("8GB", 8589934592), ("1MiB", 1048576),
    ("1000000000", 1000000000), ("0.5G", 536870912),
])
def test_parse_size(text: str, n: int) -> None:
    assert parse_size(text) == n


@pytest.mark.parametrize("text", ["", "G", "8X", "-8", "1 2", "eight"])
def test_parse_size_rejects(text: str) -> None:
    with pytest.raises(ParseError):
        parse_size(text)


def test_format_size_round_trips_through_parse_size() -> None:
    for n in (8, 1024, 134217728, 8589934592):
        value, unit = format_size(n).split()
        assert parse_size(value + unit[0].replace("B", "")) == n
    with pytest.raises(ParseError):
        format_size(-1)


@pytest.mark.parametrize("path", FILES, ids=real_ids(FILES))
def test_mutated_real_output_raises_only_parse_error(path: Path) -> None:
    """Seeded random edits of a real file either still parse or raise ParseError, nothing else."""
    from tests.conftest import mutation_outcomes

    outcomes = mutation_outcomes(parse, path.read_text(), "nccl-tests", rounds=200)
    assert "parsed" in outcomes or path.name in NOT_NCCL_TESTS
