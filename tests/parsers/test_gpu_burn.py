"""gpu-burn parser: every real output, per-GPU rates and errors, fail-closed verdicts, garbage."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from stetho.parsers import ParseError, gpu_burn
from tests.conftest import REAL, mutation_outcomes, real_files, real_ids

FILES = real_files("12-gpu-bench", "gpu_burn-*")
D = REAL / "12-gpu-bench"
A100 = D / "gpu_burn-8xA100-80GB-doubles-tensorcores-all-ok-EXCERPT.txt"
FAULTY = D / "gpu_burn-16gpu-warning-errors-all-faulty-EXCERPT.txt"
NO_RATE = D / "gpu_burn-1xA2000-no-progress-lines-ok.txt"


def test_fixture_folder_is_complete() -> None:
    assert set(FILES) == {A100, FAULTY, NO_RATE}


@pytest.mark.parametrize("path", FILES, ids=real_ids(FILES))
def test_every_real_file(path: Path) -> None:
    text = path.read_text()
    run = gpu_burn.parse(text)
    assert gpu_burn.parse(text.encode()) == run
    assert run.tested == len(run.gpus) and all(g.verdict in ("OK", "FAULTY") for g in run.gpus)
    assert [g.index for g in run.gpus] == list(range(len(run.gpus)))
    assert run.ok == (run.faulty_count == 0 and run.total_errors == 0
                      and run.min_gflops is not None and run.min_gflops > 0)


def test_a100_all_ok() -> None:
    run = gpu_burn.parse(A100.read_text())
    assert run.ok and run.tested == 8 and run.updates == 1 and run.last_percent == 100.0
    g0 = run.gpus[0]
    assert g0.name == "NVIDIA A100-SXM4-80GB"
    assert g0.uuid == "GPU-b876c63f-396c-f826-5cd0-6b8409990352"
    assert (g0.precision, g0.tensor_cores, g0.memory_mb) == ("DOUBLES", True, 81251)
    assert (g0.iterations, g0.gflops, g0.errors, g0.flag, g0.temp_c) == (6783, 16942.0, 0, None,
                                                                          62)
    assert run.gpu(4) is not None and run.gpu(4).gflops == 16890.0  # type: ignore[union-attr]
    assert run.min_gflops == 16890.0 and run.total_gflops == sum(g.gflops or 0 for g in run.gpus)
    assert run.total_errors == 0 and run.faulty_count == 0 and run.gpu(8) is None


def test_faulty_gpus_with_negative_error_counts() -> None:
    run = gpu_burn.parse(FAULTY.read_text())
    assert not run.ok and run.tested == 16 and run.faulty_count == 16
    flagged = [g.index for g in run.gpus if g.flag == "WARNING!"]
    assert flagged == [1, 2, 3, 4, 9, 11, 14]
    assert run.gpus[1].errors == -524288000 and run.gpus[0].errors == 0
    assert run.total_errors == 7 * 524288000  # a negative count is still errors
    assert run.gpus[0].gflops == 6311.0 and run.gpus[15].temp_c == 52
    assert run.gpus[0].name is None  # the excerpt starts at the last update


def test_ok_verdict_without_any_rate_is_not_ok() -> None:
    run = gpu_burn.parse(NO_RATE.read_text())
    (g,) = run.gpus
    assert g.verdict == "OK" and g.gflops is None and g.errors is None
    assert run.updates == 0 and run.min_gflops is None and run.total_errors is None
    assert not run.ok  # gpu_burn said OK, but nothing was measured


def test_updates_separated_by_carriage_returns_take_the_last_complete_one() -> None:
    head = "GPU 0: NVIDIA A10 (UUID: GPU-x)\n"
    up = "{p}%  proc'd: {n} ({g} Gflop/s)   errors: 0   temps: 50 C "
    text = (head + up.format(p="10.0", n=10, g=100) + "\r" + up.format(p="20.0", n=20, g=200)
            + "\r" + "30.0%  proc'd: 30 (300 Gflop/s)   errors: 0"  # cut short
            + "\nTested 1 GPUs:\n\tGPU 0: OK\n")
    run = gpu_burn.parse(text)
    assert run.updates == 2 and run.gpus[0].gflops == 200.0 and run.last_percent == 20.0
    assert run.ok


def test_died_worker_and_init_failure() -> None:
    text = ("GPU 0: Tesla K80 (UUID: GPU-a)\nGPU 1: Tesla K80 (UUID: GPU-b)\n"
            "Couldn't init a GPU test: Error in \"load module\": \n"
            "50.0%  proc'd: -1 (0 Gflop/s) - 0 (0 Gflop/s)   errors: 1641686072  (DIED!)- 0   "
            "temps: 33 C - 29 C \n")
    run = gpu_burn.parse(text)
    assert not run.ok and run.tested is None
    assert run.problems == ('Couldn\'t init a GPU test: Error in "load module":',)
    assert (run.gpus[0].flag, run.gpus[0].iterations, run.gpus[0].gflops) == ("DIED!", -1, 0.0)
    assert run.gpus[1].verdict is None and run.faulty_count == 2


def test_unknown_temperature() -> None:
    text = ("100.0%  proc'd: 5 (10 Gflop/s)   errors: 0   temps: -- C \n"
            "Tested 1 GPUs:\n\tGPU 0: OK\n")
    run = gpu_burn.parse(text)
    assert run.gpus[0].temp_c is None and run.ok


def test_not_gpu_burn_output() -> None:
    with pytest.raises(ParseError, match="not gpu-burn output"):
        gpu_burn.parse("GPU 0: NVIDIA GB300\n\t Link 0: Replay Errors: 0\n")


@pytest.mark.parametrize("text", ["", "\n\t\n"])
def test_empty(text: str) -> None:
    with pytest.raises(ParseError, match="empty"):
        gpu_burn.parse(text)


def test_random_bytes() -> None:
    blob = bytes(random.Random(0).randrange(256) for _ in range(4096))
    with pytest.raises(ParseError):
        gpu_burn.parse(blob)
    with pytest.raises(ParseError):
        gpu_burn.parse(blob.decode("latin-1"))


OTHER = (real_files("10-fio-perftest") + real_files("11-iperf3") + real_files("03-nccl")
         + real_files("06-nvlink-rowremap") + real_files("12-gpu-bench", "nvbandwidth*")
         + real_files("12-gpu-bench", "dcgmi*") + real_files("02-nvidia-smi-q"))


@pytest.mark.parametrize("path", OTHER, ids=real_ids(OTHER))
def test_other_tools_output(path: Path) -> None:
    with pytest.raises(ParseError) as exc:
        gpu_burn.parse(path.read_text())
    assert exc.value.tool == "gpu-burn"


@pytest.mark.parametrize("path", FILES, ids=real_ids(FILES))
def test_mutated_real_output_never_crashes_or_turns_ok(path: Path) -> None:
    """gpu-burn output is line noise-tolerant, so edits mostly still parse; none may crash,
    and no edit of a run that was not ok may make it ok."""
    text = path.read_text()
    outcomes = mutation_outcomes(gpu_burn.parse, text, gpu_burn.TOOL, rounds=300)
    assert "parsed" in outcomes and outcomes <= {"parsed", "error"}
    if not gpu_burn.parse(text).ok:
        rng = random.Random(1)
        for _ in range(200):
            chars = list(text)
            for _ in range(rng.randint(1, 4)):
                del chars[rng.randrange(len(chars))]
            try:
                assert not gpu_burn.parse("".join(chars)).ok
            except ParseError:
                pass
