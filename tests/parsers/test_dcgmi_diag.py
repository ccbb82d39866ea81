"""dcgmi diag parser: JSON (DCGM 3.x and 4.x) and the wrapped text tables, variants, garbage."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from stetho.parsers import ParseError, dcgmi_diag
from tests.conftest import REAL, mutation_outcomes, real_files, real_ids

TEXT = real_files("08-dcgm", "dcgmi-*")
JSON = real_files("12-gpu-bench", "dcgmi-*")
FILES = TEXT + JSON
H100 = REAL / "08-dcgm" / "dcgmi-diag-r3-8xH100-fail-cuinit-no-fabricmanager.txt"
V100 = REAL / "08-dcgm" / "dcgmi-diag-r3-v-1xV100-pcie-pass.txt"
GB10 = REAL / "12-gpu-bench" / "dcgmi-diag-r1-j-gb10-dcgm4.2.3-software-fail.json"
DCGM31 = (REAL / "12-gpu-bench"
          / "dcgmi-diag-r1-j-8gpu-dcgm3.1.0-pass-null-entries-warning-prefix.json")


def test_fixture_folders_are_complete() -> None:
    assert set(FILES) == {H100, V100, GB10, DCGM31}


@pytest.mark.parametrize("path", FILES, ids=real_ids(FILES))
def test_every_real_file(path: Path) -> None:
    text = path.read_text()
    run = dcgmi_diag.parse(text)
    assert dcgmi_diag.parse(text.encode()) == run
    assert run.source == ("json" if path.suffix == ".json" else "text")
    assert run.tests and run.version is not None and run.runtime_error is None
    assert run.ok == (run.fail_count == 0)
    assert run.fail_count + run.warn_count + run.skip_count + run.pass_count == len(run.tests)
    for t in run.tests:
        assert t.status in dcgmi_diag.KNOWN_STATUSES and t.results
        assert all(r.status in dcgmi_diag.KNOWN_STATUSES for r in t.results)
        for w in t.warnings + t.info:
            assert w == w.strip() and "  |" not in w  # no table borders or padding left


def test_h100_r3_text_fail_with_wrapped_warnings() -> None:
    run = dcgmi_diag.parse(H100.read_text())
    assert (run.version, run.driver_version) == ("3.3.8", "560.35.03")
    assert run.device_ids == ("2330",) * 8
    assert run.notes == ("Successfully ran diagnostic for group.",)
    assert not run.ok and run.failed_tests == ("GPU Memory",)
    assert (run.pass_count, run.skip_count, run.fail_count, run.warn_count) == (9, 3, 1, 0)
    mem = run.test("gpu memory")
    assert mem is not None and mem.category == "Hardware" and mem.status == "fail"
    assert mem.results == (dcgmi_diag.DiagResult((), "fail"),)  # "Fail - All"
    assert len(mem.warnings) == 8 and mem.gpu_status(5) == "fail"
    # wrapped at 45 characters mid-word and on a space: rebuilt exactly
    assert mem.warnings[0] == (
        "GPU 0 Error using CUDA API cuInit Check DCGM and system logs for errors. Reset GPU. "
        "Restart DCGM. Rerun diagnostics. Unable to initialize CUDA library: 'system not yet "
        "initialized'. . Please check if a CUDA sample program can be run successfully on this "
        "host. Refer to https://github.com/nvidia/cuda-samples")
    assert mem.warnings_for(3) == (mem.warnings[3],) and mem.warnings[3].startswith("GPU 3 ")
    persistence = run.test("Persistence Mode")
    assert persistence is not None and persistence.status == "pass"
    (info,) = persistence.info
    assert info.startswith("Persistence mode for GPU 0 is disabled. Enable persistence mode by "
                           'running "nvidia-smi -i <gpuId> -pm 1 " as root.,Persistence mode for '
                           "GPU 1 is disabled.")
    assert info.endswith("Persistence mode for GPU 4 is disabled. Enable pers")  # truncated by DCGM
    pcie = run.test("PCIe")
    assert pcie is not None and pcie.category == "Integration" and pcie.status == "skip"


def test_v100_r3_text_pass_with_info() -> None:
    run = dcgmi_diag.parse(V100.read_text())
    assert run.ok and run.version == "3.3.9" and run.device_ids == ("1db4",)
    assert [t.name for t in run.tests if t.category == "Stress"] == [
        "Targeted Stress", "Targeted Power", "Memory Bandwidth", "EUD Test"]
    diag = run.test("Diagnostic")
    assert diag is not None and diag.category == "Hardware" and diag.status == "pass"
    assert diag.info == (
        "GPU 0 Allocated space for 441 output matricies from 14943014092 bytes available., GPU 0 "
        "Running with precisions: FP64 1, FP32 1, FP16 1, GPU 0 GPU 0 calculated at "
        "approximately 21688.18 gigaflops during this test",)
    pcie = run.test("PCIe")
    assert pcie is not None and "bidirectional bandwidth: 22.42 GB/s" in pcie.info[0]


def test_gb10_dcgm4_json_fail() -> None:
    run = dcgmi_diag.parse(GB10.read_text())
    assert (run.source, run.version, run.driver_version) == ("json", "4.2.3", "580.82.09")
    assert run.device_ids == ("2e12",) and not run.ok and run.failed_tests == ("software",)
    (t,) = run.tests
    assert (t.category, t.status) == ("Deployment", "fail")
    assert t.results == (dcgmi_diag.DiagResult(
        (0,), "fail", warnings=(t.warnings[0],), info=()),)
    assert t.warnings[0].startswith("Persistence Mode: Persistence mode for GPU 0 is disabled")
    assert t.info[0].startswith("Error getting the SRAM Threshold Count for GPU 0")
    assert t.gpu_status(0) == "fail" and t.gpu_status(1) is None


def test_dcgm31_json_with_nulls_and_a_warning_line() -> None:
    run = dcgmi_diag.parse(DCGM31.read_text())
    assert run.ok and run.version == "3.1.0" and run.driver_version is None
    assert run.notes == ("WARNING: THIS SHOULD NOT HAPPEN",)
    assert len(run.tests) == 10 and run.pass_count == 10
    denylist = run.test("Denylist")
    assert denylist is not None and denylist.results[0].gpus == tuple(range(8))
    software = run.test("software")
    assert software is not None and software.category == "Custom"
    assert [r.gpus for r in software.results] == [(i,) for i in range(8)]
    assert software.gpu_status(7) == "pass" and software.gpu_status(8) is None


def _line(name: str, value: str) -> str:
    """A table row as dcgmi lays it out: 25 + 46 character cells."""
    return f"| {name:<25} | {value:<46} |"


def _swap(path: Path, old: str, new: str) -> str:
    text = path.read_text()
    assert old in text
    return text.replace(old, new, 1)


def test_per_gpu_results_on_continuation_lines_dcgm33() -> None:
    """go-dcgm#52: `Pass - GPU: 1` then `Fail - GPU: 0` under one test."""
    text = _swap(V100, _line("GPU Memory", "Pass - All"),
                 _line("GPU Memory", "Pass - GPU: 1") + "\n" + _line("", "Fail - GPU: 0"))
    mem = dcgmi_diag.parse(text).test("GPU Memory")
    assert mem is not None and mem.status == "fail"
    assert mem.gpu_status(0) == "fail" and mem.gpu_status(1) == "pass"


def test_overall_and_per_gpu_lines_dcgm4() -> None:
    """DCGM 4.2 (NVIDIA/DCGM#253): `Pass` then `GPU0: Pass` ... under the test name."""
    text = _swap(V100, _line("Memory Bandwidth", "Pass - All"),
                 "\n".join([_line("Memory Bandwidth", "Pass"), _line("", "GPU0: Pass"),
                            _line("", "GPU1: Warn")]))
    t = dcgmi_diag.parse(text).test("Memory Bandwidth")
    assert t is not None and t.status == "warn" and t.gpu_status(1) == "warn"
    assert [r.gpus for r in t.results] == [(), (0,), (1,)]


def test_unknown_status_word_counts_as_failed() -> None:
    text = _swap(V100, _line("Targeted Stress", "Pass - All"),
                 _line("Targeted Stress", "Inconclusive"))
    run = dcgmi_diag.parse(text)
    t = run.test("Targeted Stress")
    assert t is not None and t.status == "inconclusive" and t.failed and not run.ok


def test_runtime_error_json_and_text() -> None:
    doc = {"DCGM GPU Diagnostic": {"runtime_error": "Unable to create CUDA context",
                                   "version": "3.3.8"}}
    run = dcgmi_diag.parse(json.dumps(doc))
    assert run.runtime_error == "Unable to create CUDA context" and not run.ok
    text = "Error: Unable to complete diagnostic for group 2147483647. Return: (-30) Error.\n"
    run = dcgmi_diag.parse(text)
    assert run.runtime_error == text.strip() and run.tests == () and not run.ok


def test_test_summary_overrides_result_statuses() -> None:
    doc = json.loads(GB10.read_text())
    test = doc["DCGM Diagnostic"]["test_categories"][0]["tests"][0]
    test["results"][0]["status"] = "Pass"
    assert dcgmi_diag.parse(json.dumps(doc)).tests[0].status == "fail"  # the summary says Fail
    del test["test_summary"]
    assert dcgmi_diag.parse(json.dumps(doc)).tests[0].status == "pass"


@pytest.mark.parametrize(("edit", "match"), [
    (lambda d: d.update({"DCGM Diagnostic": []}), "no 'DCGM GPU Diagnostic'"),
    (lambda d: d["DCGM Diagnostic"].update(test_categories={}), "not a list"),
    (lambda d: d["DCGM Diagnostic"]["test_categories"][0]["tests"][0].pop("name"), "no name"),
    (lambda d: d["DCGM Diagnostic"]["test_categories"][0]["tests"][0]["results"][0]
     .update(status=3), "no status text"),
    (lambda d: d["DCGM Diagnostic"]["test_categories"][0]["tests"][0]["results"][0]
     .update(entity_id="x"), "unreadable GPU ids"),
    (lambda d: d["DCGM Diagnostic"]["test_categories"][0]["tests"][0]["results"][0]
     .update(warnings=[1]), "not text"),
    (lambda d: d.update(entity_groups={}), "not a list"),
    (lambda d: d.update(metadata=[]), "'metadata' is not an object"),
])
def test_broken_json_raises_parse_error(edit: object, match: str) -> None:
    doc = json.loads(GB10.read_text())
    edit(doc)  # type: ignore[operator]
    with pytest.raises(ParseError, match=match) as exc:
        dcgmi_diag.parse(json.dumps(doc))
    assert exc.value.tool == "dcgmi diag"


def test_broken_tables_raise_parse_error() -> None:
    header = H100.read_text().split("|-----  Metadata")[0]
    with pytest.raises(ParseError, match="continuation line before any row"):
        dcgmi_diag.parse(header + "|                           | Pass |\n")
    with pytest.raises(ParseError, match="before any test"):
        dcgmi_diag.parse(header + "+-----  Hardware  ----------+----+\n"
                                  "| Warning                   | GPU 0 broke |\n")


@pytest.mark.parametrize("text", ["", "\n \n"])
def test_empty(text: str) -> None:
    with pytest.raises(ParseError, match="empty"):
        dcgmi_diag.parse(text)


def test_random_bytes() -> None:
    blob = bytes(random.Random(0).randrange(256) for _ in range(4096))
    with pytest.raises(ParseError):
        dcgmi_diag.parse(blob)


OTHER = (real_files("10-fio-perftest") + real_files("11-iperf3") + real_files("09-lspci")
         + real_files("08-dcgm", "*.prom") + real_files("07-mlxlink-ethtool")
         + real_files("12-gpu-bench", "nvbandwidth*") + real_files("12-gpu-bench", "gpu_burn*"))


@pytest.mark.parametrize("path", OTHER, ids=real_ids(OTHER))
def test_other_tools_output(path: Path) -> None:
    with pytest.raises(ParseError) as exc:
        dcgmi_diag.parse(path.read_text())
    assert exc.value.tool == "dcgmi diag"


@pytest.mark.parametrize("path", FILES, ids=real_ids(FILES))
def test_mutated_real_output_raises_only_parse_error(path: Path) -> None:
    outcomes = mutation_outcomes(dcgmi_diag.parse, path.read_text(), dcgmi_diag.TOOL, rounds=300)
    assert outcomes == {"parsed", "error"}
