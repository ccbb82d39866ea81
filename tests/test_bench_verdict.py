"""Issue 23: a tool that says FAIL is a fail, with or without a baseline.

Benchmarks whose tools judge their own run (dcgmi diag, gpu-burn, nccl-tests) are run through
the checks in-process on bundles made of the real recorded outputs, with no bench baseline in
the profile: the metrics skip (`no baseline`), and `bench_verdict` fails with the tool's words.
"""

from __future__ import annotations

import json

import pytest

from stetho.benchmarks import verdict as tv
from stetho.evidence.bundle import Bundle, ProbeRecord
from tests.conftest import REAL

pytestmark = pytest.mark.xdist_group("benchverdict")

DCGM_R3_FAIL = REAL / "08-dcgm" / "dcgmi-diag-r3-8xH100-fail-cuinit-no-fabricmanager.txt"
DCGM_R3_PASS = REAL / "08-dcgm" / "dcgmi-diag-r3-v-1xV100-pcie-pass.txt"
DCGM_R1_PASS = (REAL / "12-gpu-bench"
                / "dcgmi-diag-r1-j-8gpu-dcgm3.1.0-pass-null-entries-warning-prefix.json")
DCGM_R1_FAIL = REAL / "12-gpu-bench" / "dcgmi-diag-r1-j-gb10-dcgm4.2.3-software-fail.json"
BURN_OK = REAL / "12-gpu-bench" / "gpu_burn-8xA100-80GB-doubles-tensorcores-all-ok-EXCERPT.txt"
BURN_FAULTY = REAL / "12-gpu-bench" / "gpu_burn-16gpu-warning-errors-all-faulty-EXCERPT.txt"
BURN_NO_RATE = REAL / "12-gpu-bench" / "gpu_burn-1xA2000-no-progress-lines-ok.txt"
NCCL_WRONG = REAL / "03-nccl" / "allreduce-2node-2xRTX3090-wrong-FAILED.txt"
NCCL_OK = REAL / "03-nccl" / "allreduce-2node-16xA100-40GB-roce-oke.txt"


def _text(path) -> str:
    return path.read_text(encoding="utf-8", errors="replace")


def _one_gpu_faulty() -> str:
    """The real all-OK 8x A100 gpu-burn run with GPU 5 gone bad, the way gpu-burn prints it
    (its compare kernel counts differing elements per GPU in the `errors:` list, and a GPU
    with errors ends as `GPU n: FAULTY`): the sixth error count 0 -> 5131, its verdict OK ->
    FAULTY. Everything else is as recorded."""
    text = _text(BURN_OK)
    head, sep, tail = text.rpartition("errors: ")
    counts = tail.split("temps:")[0]
    fields = counts.split(" - ")
    assert len(fields) == 8 and fields[5].strip() == "0"
    fields[5] = "5131"
    text = head + sep + " - ".join(fields) + "temps:" + tail.split("temps:", 1)[1]
    assert "GPU 5: OK" in text
    return text.replace("GPU 5: OK", "GPU 5: FAULTY")


def _bundle(node: str, name: str, outputs: list[tuple[str, int]]) -> Bundle:
    """A bundle holding one benchmark's plan and its repeats (text, exit code), as
    `stetho bench run` records them."""
    from stetho.facts.bench import definitions

    bench = definitions()[name]
    probes = {f"bench:{name}": ProbeRecord(
        f"bench:{name}", "command", "ok", argv=bench.command,
        stdout=json.dumps({"suite": "nightly", "repeats": len(outputs), "devices": [""],
                           "shape": " ".join(bench.command)}))}
    for i, (text, rc) in enumerate(outputs, 1):
        probes[f"bench:{name}#{i}"] = ProbeRecord(
            f"bench:{name}#{i}", "command", "ok" if rc == 0 else "failed", argv=bench.command,
            rc=rc, stdout=text, reason="" if rc == 0 else f"exited {rc}")
    return Bundle(node, "2026-01-01T00:00:00Z", "test", "generic", probes)


CASES: dict[str, tuple[str, list[tuple[str, int]]]] = {
    "dcgm-r3-fail": ("dcgmi-diag-r3", [(_text(DCGM_R3_FAIL), 226)]),
    "dcgm-r3-pass": ("dcgmi-diag-r3", [(_text(DCGM_R3_PASS), 0)]),
    "dcgm-r1-fail": ("dcgmi-diag-r1", [(_text(DCGM_R1_FAIL), 226)]),
    "dcgm-r1-pass": ("dcgmi-diag-r1", [(_text(DCGM_R1_PASS), 0)]),
    "burn-faulty": ("gpu-burn", [(_text(BURN_FAULTY), 0)]),
    "burn-one": ("gpu-burn", [(_one_gpu_faulty(), 0)]),
    "burn-ok": ("gpu-burn", [(_text(BURN_OK), 0)]),
    "burn-norate": ("gpu-burn", [(_text(BURN_NO_RATE), 0)]),
    # nccl-tests exits 1 when it reports FAILED: the repeat is 'failed', its output still read
    "nccl-wrong": ("nccl-all-reduce", [(_text(NCCL_OK), 0), (_text(NCCL_WRONG), 1),
                                       (_text(NCCL_OK), 0)]),
    "nccl-ok": ("nccl-all-reduce", [(_text(NCCL_OK), 0)] * 3),
    "nccl-exit1": ("nccl-all-reduce", [(_text(NCCL_OK), 1)]),
}


@pytest.fixture(scope="module")
def results() -> dict[str, list]:
    from stetho.checking.run import run

    bundles = [_bundle(node, name, outs) for node, (name, outs) in CASES.items()]
    out: dict[str, list] = {n: [] for n in CASES}
    for r in run(bundles, profile="generic", select="test_bench").results:
        out[r.node].append(r)
    return out


def _verdict(results, node):
    rows = [r for r in results[node] if r.check == "bench_verdict"]
    assert len(rows) == 1, rows
    return rows[0]


def _no_baseline_skips(results, node):
    metrics = [r for r in results[node] if r.check == "bench_metric"]
    return metrics and any(r.status == "skip" and "no baseline" in r.message for r in metrics)


def test_dcgmi_diag_fail_fails_without_a_baseline(results):
    r = _verdict(results, "dcgm-r3-fail")
    assert r.status == "fail" and r.subject == "dcgmi-diag-r3"
    assert "GPU Memory: Fail" in r.message and "cuInit" in r.message
    assert "drain" in r.remediation
    r1 = _verdict(results, "dcgm-r1-fail")
    assert r1.status == "fail" and "software: Fail (GPU 0)" in r1.message
    assert "Persistence mode for GPU 0 is disabled" in r1.message


def test_gpu_burn_faulty_gpus_fail_without_a_baseline(results):
    r = _verdict(results, "burn-faulty")
    assert r.status == "fail" and "16 of 16 GPUs FAULTY" in r.message
    assert "GPU 1: FAULTY, errors: -524288000 (WARNING!)" in r.message
    assert _no_baseline_skips(results, "burn-faulty")
    one = _verdict(results, "burn-one")
    assert one.status == "fail" and "1 of 8 GPUs" in one.message
    assert "GPU 5: FAULTY, errors: 5131" in one.message and "GPU 4" not in one.message


def test_nccl_wrong_fails_without_a_baseline_even_beside_clean_repeats(results):
    r = _verdict(results, "nccl-wrong")
    assert r.status == "fail" and "wrong elements" in r.message
    assert "Out of bounds values : 108 FAILED" in r.evidence
    assert "nccl-all-reduce#2" in r.message


def test_passing_runs_pass_their_verdict(results):
    for node in ("dcgm-r3-pass", "dcgm-r1-pass", "burn-ok", "nccl-ok"):
        r = _verdict(results, node)
        assert r.status == "pass", (node, r.message)
    assert "8 GPUs OK" in _verdict(results, "burn-ok").message


def test_an_unproven_ok_or_an_unexplained_exit_is_an_error(results):
    r = _verdict(results, "burn-norate")
    assert r.status == "error" and "never reported a rate" in r.message
    r = _verdict(results, "nccl-exit1")
    assert r.status == "error" and "exited 1 though its output reports no failure" in r.message


def test_dcgmi_warn_is_a_warn() -> None:
    """The real passing DCGM 3.1 JSON with one test's status changed to Warn, and a warning
    beside it (the shape DCGM prints: `"status": "Warn", "warnings": [{"warning": ...}]`)."""
    from stetho.parsers import dcgmi_diag

    text = _text(DCGM_R1_PASS)
    start = text.index("{")
    doc = json.loads(text[start:])
    cats = doc["DCGM GPU Diagnostic"]["test_categories"]
    test = next(t for c in cats if c for t in c["tests"] if t)
    test["results"][0]["status"] = "Warn"
    test["results"][0]["warnings"] = [{"warning": "GPU 0 is running at a lower PCIe width"}]
    said = tv.judge("dcgmi_diag", dcgmi_diag.parse(json.dumps(doc)))
    assert said is not None and said.status == "warn"
    assert "lower PCIe width" in said.words[0]


@pytest.mark.parametrize("garbage", ["", "hello\n", "\x00\x01\x02"])
def test_garbage_is_an_error_verdict(garbage: str) -> None:
    for parser in tv.JUDGES:
        said = tv.judge_text(parser, garbage)
        assert said is not None and said.status == "error", parser


def test_the_pre_job_gate_blocks_on_the_tools_verdict() -> None:
    from stetho.gate import catalogue
    from stetho.gate.policy import load

    assert "bench_verdict" in catalogue.load().node
    assert load("pre-job").counts("bench_verdict")
    assert load("nightly").counts("bench_verdict")
