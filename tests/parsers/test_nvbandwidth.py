"""nvbandwidth parser: every real output, the matrices and SUM lines, variants and garbage."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from stetho.parsers import ParseError, nvbandwidth
from tests.conftest import REAL, mutation_outcomes, real_files, real_ids

FILES = real_files("12-gpu-bench", "nvbandwidth-*")
H800 = REAL / "12-gpu-bench" / "nvbandwidth-v0.2-8xH800-drv525-all-testcases.txt"
A10 = REAL / "12-gpu-bench" / "nvbandwidth-v0.5-1xA10-drv550-h2d-ce.txt"


def test_fixture_folder_is_complete() -> None:
    assert set(FILES) == {H800, A10}


@pytest.mark.parametrize("path", FILES, ids=real_ids(FILES))
def test_every_real_file(path: Path) -> None:
    text = path.read_text()
    run = nvbandwidth.parse(text)
    assert nvbandwidth.parse(text.encode()) == run
    assert run.ok and run.errors == () and run.devices and run.version is not None
    for t in run.testcases:
        assert t.unit == "GB/s" and t.sum is not None
        assert all(len(values) == len(t.columns) for _, values in t.rows)
        # nvbandwidth sums before rounding each printed cell to 0.01
        assert t.sum == pytest.approx(sum(t.cells), abs=0.005 * len(t.cells) + 1e-9)
        assert t.min_cell is not None and t.max_cell is not None
        assert 0 < t.min_cell <= t.max_cell


def test_h800_all_testcases() -> None:
    run = nvbandwidth.parse(H800.read_text())
    assert (run.version, run.git_version, run.cuda_runtime_version, run.cuda_driver_version,
            run.driver_version) == ("v0.2", "42e94d2", "11080", "12000", "525.105.17")
    assert run.devices == tuple((i, "NVIDIA H800") for i in range(8))
    assert len(run.testcases) == 30 and run.waived == 0
    assert run.other == (
        "NOTE: This tool reports current measured bandwidth on your system.",
        "Additional system-specific tuning may be required to achieve maximal peak bandwidth.")
    h2d = run.testcase("host_to_device_memcpy_ce")
    assert h2d is not None and h2d.columns == tuple(range(8)) and len(h2d.rows) == 1
    assert h2d.description == "memcpy CE CPU(row) -> GPU(column) bandwidth (GB/s)"
    assert h2d.sum == 442.52 and h2d.cell(0, 1) == 55.30 and h2d.cell(1, 0) is None
    d2d = run.testcase("device_to_device_memcpy_read_ce")
    assert d2d is not None and len(d2d.rows) == 8 and len(d2d.cells) == 56
    assert d2d.cell(3, 3) is None and d2d.cell(3, 5) == 172.41  # N/A diagonal stays None
    assert run.sum("device_to_device_memcpy_read_ce") == 9643.22
    assert run.min_cell("device_to_device_memcpy_read_ce") == 171.88
    assert run.sum("no_such_testcase") is None and run.min_cell("no_such_testcase") is None
    sm = run.testcase("device_to_device_bidirectional_memcpy_write_sm")
    assert sm is not None and sm.max_cell == 328.04 and sm.stat("sum") == 18341.61


def test_a10_single_testcase_v05_indent() -> None:
    run = nvbandwidth.parse(A10.read_text())
    (t,) = run.testcases
    assert run.version == "v0.5" and run.git_version == "v0.5-1-g4da7d7e"
    assert t.rows == ((0, (25.17,)),) and t.sum == 25.17 and run.devices == ((0, "NVIDIA A10"),)


def test_latency_testcase_waived_and_more_statistics() -> None:
    text = (A10.read_text()
            + "Waived: \n"
            + "Running host_device_latency_sm.\n"
            + "memory latency SM CPU(row) <-> GPU(column) (ns)\n"
            + "           0\n"
            + " 0    772.58\n\n"
            + "SUM host_device_latency_sm 772.58\n"
            + "COEFFICIENT_OF_VARIATION host_device_latency_sm 0.01\n")
    run = nvbandwidth.parse(text)
    lat = run.testcase("host_device_latency_sm")
    assert run.waived == 1 and lat is not None and lat.unit == "ns"
    assert lat.stat("COEFFICIENT_OF_VARIATION") == 0.01 and lat.sum == 772.58


def test_testcase_cut_before_its_matrix_is_an_error_not_a_zero() -> None:
    text = A10.read_text() + "Running device_to_host_memcpy_ce.\n"
    run = nvbandwidth.parse(text)
    assert not run.ok and run.testcase("device_to_host_memcpy_ce") is None
    assert run.errors == ("testcase device_to_host_memcpy_ce printed no matrix (failed or output "
                          "cut)",)


def test_cuda_error_lines_fail_the_run() -> None:
    text = A10.read_text().replace("Device 0: NVIDIA A10\n",
                                   "Device 0: NVIDIA A10\nCUDA_ERROR_OUT_OF_MEMORY in memcpy\n")
    run = nvbandwidth.parse(text)
    assert not run.ok and run.errors == ("CUDA_ERROR_OUT_OF_MEMORY in memcpy",)


@pytest.mark.parametrize(("old", "new", "match"), [
    (" 0     25.17\n", " 0     25.17     1.00\n", "2 cells for 1 columns"),
    ("SUM host_to_device_memcpy_ce 25.17", "SUM host_to_device_memcpy_ce N/A", "not a number"),
])
def test_broken_matrices_raise_parse_error(old: str, new: str, match: str) -> None:
    text = A10.read_text()
    assert old in text
    with pytest.raises(ParseError, match=match) as exc:
        nvbandwidth.parse(text.replace(old, new))
    assert exc.value.tool == "nvbandwidth"


@pytest.mark.parametrize("text", ["", "\n"])
def test_empty(text: str) -> None:
    with pytest.raises(ParseError, match="empty"):
        nvbandwidth.parse(text)


def test_random_bytes() -> None:
    blob = bytes(random.Random(0).randrange(256) for _ in range(4096))
    with pytest.raises(ParseError):
        nvbandwidth.parse(blob)
    with pytest.raises(ParseError):
        nvbandwidth.parse(blob.decode("latin-1"))


OTHER = (real_files("10-fio-perftest") + real_files("11-iperf3") + real_files("03-nccl")
         + real_files("12-gpu-bench", "gpu_burn*") + real_files("12-gpu-bench", "dcgmi*")
         + real_files("02-nvidia-smi-q"))


@pytest.mark.parametrize("path", OTHER, ids=real_ids(OTHER))
def test_other_tools_output(path: Path) -> None:
    with pytest.raises(ParseError) as exc:
        nvbandwidth.parse(path.read_text())
    assert exc.value.tool == "nvbandwidth"


@pytest.mark.parametrize("path", FILES, ids=real_ids(FILES))
def test_mutated_real_output_raises_only_parse_error(path: Path) -> None:
    outcomes = mutation_outcomes(nvbandwidth.parse, path.read_text(), nvbandwidth.TOOL,
                                 rounds=300)
    assert outcomes == {"parsed", "error"}
