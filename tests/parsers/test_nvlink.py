"""nvidia-smi nvlink -s / -e parsers on every real sample."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

import pytest

from stetho.parsers import ParseError
from stetho.parsers.nvlink import NvlinkLink, parse_errors, parse_status
from tests.conftest import REAL, real_files, real_ids

FOLDER = "06-nvlink-rowremap"
STATUS = real_files(FOLDER, "nvidia-smi-nvlink-s-*.txt")
ERRORS = real_files(FOLDER, "nvidia-smi-nvlink-e-*.txt")
OTHER_TOOLS = [
    p
    for d in sorted(REAL.iterdir())
    if d.is_dir()
    for p in real_files(d.name)
    if p not in STATUS and p not in ERRORS
]
ZERO = {"Replay Errors": 0, "Recovery Errors": 0, "CRC Errors": 0}


def test_there_are_real_samples() -> None:
    assert len(STATUS) == 1 and len(ERRORS) == 2


@pytest.mark.parametrize("path", STATUS, ids=real_ids(STATUS))
def test_every_real_status_file_parses(path: Path) -> None:
    gpus = parse_status(path.read_text())
    assert gpus
    for gpu in gpus:
        assert gpu.name.startswith("NVIDIA")
        assert gpu.links
        assert all(link.active and link.speed_gbps for link in gpu.links)
    assert parse_status(path.read_bytes()) == gpus


@pytest.mark.parametrize("path", ERRORS, ids=real_ids(ERRORS))
def test_every_real_errors_file_parses(path: Path) -> None:
    gpus = parse_errors(path.read_text())
    assert len(gpus) == 1
    for gpu in gpus:
        assert gpu.links
        assert all(link.counters == ZERO for link in gpu.links)
    assert parse_errors(path.read_bytes()) == gpus


def test_status_8x_a100() -> None:
    gpus = parse_status((REAL / FOLDER / "nvidia-smi-nvlink-s-8xA100-80GB.txt").read_text())
    assert [g.index for g in gpus] == list(range(8))
    assert {g.name for g in gpus} == {"NVIDIA A100-SXM4-80GB"}
    assert gpus[0].uuid == "GPU-5269b708-678a-b1a8-60f0-c90406537486"
    assert gpus[7].uuid == "GPU-754035b4-4708-efcd-b261-623aea38bcad"
    for gpu in gpus:
        assert [link.link for link in gpu.links] == list(range(12))
        assert {link.speed_gbps for link in gpu.links} == {25.0}
        assert {link.raw for link in gpu.links} == {"25 GB/s"}
        assert gpu.inactive_links == ()
    assert sum(len(g.links) for g in gpus) == 96


def test_errors_h100_elided() -> None:
    (gpu,) = parse_errors(
        (REAL / FOLDER / "nvidia-smi-nvlink-e-h100-EXCERPT-elided.txt").read_text()
    )
    assert (gpu.index, gpu.name) == (0, "NVIDIA H100 80GB HBM3")
    assert gpu.uuid == "GPU-abcdefab-cdef-abdc-abcd-abababababab"
    assert [link.link for link in gpu.links] == [0, 1, 17]  # links 2-16 elided with [...]
    assert all(link.counters == ZERO for link in gpu.links)


def test_errors_gb300_tab_indent_no_uuid() -> None:
    (gpu,) = parse_errors(
        (REAL / FOLDER / "nvidia-smi-nvlink-e-gb300-tab-indent-EXCERPT.txt").read_text()
    )
    assert (gpu.index, gpu.name, gpu.uuid) == (0, "NVIDIA GB300", None)
    assert [(link.link, link.counters) for link in gpu.links] == [(0, ZERO)]


# --- shapes with no real sample: hand-written, marked as such --------------------------------

def test_status_inactive_and_no_nvlink_hand_written() -> None:
    # HAND-WRITTEN: an inactive link, a GPU without NVLink and a GPU that prints nothing.
    text = (
        "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-00000000-0000-0000-0000-000000000000)\n"
        "\t Link 0: 26.562 GB/s\n"
        "\t Link 1: <inactive>\n"
        "GPU 1: Tesla T4 (UUID: GPU-11111111-1111-1111-1111-111111111111)\n"
        "\tNVLink is not supported\n"
        "GPU 2: NVIDIA A10 (UUID: GPU-22222222-2222-2222-2222-222222222222)\n"
    )
    h100, t4, a10 = parse_status(text)
    assert h100.links == (
        NvlinkLink(0, 26.562, True, "26.562 GB/s"),
        NvlinkLink(1, None, False, "<inactive>"),
    )
    assert h100.inactive_links == (1,)
    assert (t4.name, t4.links) == ("Tesla T4", ())
    assert (a10.index, a10.links) == (2, ())


def test_errors_nonzero_and_na_hand_written() -> None:
    # HAND-WRITTEN: counters that moved, an N/A counter and an inactive link.
    text = (
        "GPU 3: NVIDIA H100 80GB HBM3 (UUID: GPU-33333333-3333-3333-3333-333333333333)\n"
        "\t Link 0: Replay Errors: 12\n"
        "\t Link 0: Recovery Errors: 1\n"
        "\t Link 0: CRC Errors: N/A\n"
        "\t Link 1: <inactive>\n"
    )
    (gpu,) = parse_errors(text)
    assert gpu.index == 3
    assert [(link.link, link.counters) for link in gpu.links] == [
        (0, {"Replay Errors": 12, "Recovery Errors": 1}),
        (1, {}),
    ]


# --- garbage -----------------------------------------------------------------------------------

PARSERS: list[Callable[[str | bytes], object]] = [parse_status, parse_errors]
TOOLS: dict[Callable[[str | bytes], object], str] = {
    parse_status: "nvidia-smi nvlink -s", parse_errors: "nvidia-smi nvlink -e"}


@pytest.mark.parametrize("parser", PARSERS, ids=["status", "errors"])
@pytest.mark.parametrize("data", ["", " \n\t\n", b"", b"GPU 0: x\x00"], ids=repr)
def test_empty_and_binary_raise(parser: Callable[[str | bytes], object], data: str | bytes) -> None:
    with pytest.raises(ParseError) as info:
        parser(data)
    assert info.value.tool == TOOLS[parser]


@pytest.mark.parametrize("parser", PARSERS, ids=["status", "errors"])
def test_random_bytes_raise(parser: Callable[[str | bytes], object]) -> None:
    rng = random.Random(0)
    for _ in range(20):
        with pytest.raises(ParseError):
            parser(rng.randbytes(rng.randint(1, 4096)))


def test_status_and_errors_reject_each_other() -> None:
    status = STATUS[0].read_text()
    errors = ERRORS[0].read_text()
    with pytest.raises(ParseError, match="nvlink -s"):
        parse_status(errors)
    with pytest.raises(ParseError, match="nvlink -e"):
        parse_errors(status)


@pytest.mark.parametrize(
    "text",
    [
        "\t Link 0: 25 GB/s\n",  # no GPU header
        "GPU 0: NVIDIA A100 (UUID: GPU-x)\nLink 0: 25 GB/s\n",  # link not indented
        "GPU 0: NVIDIA A100 (UUID: GPU-x)\n\t Link 0: fast\n",  # unknown state
        "GPU 0: NVIDIA A100 (UUID: GPU-x)\n\t Something else\n",
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n",
    ],
    ids=["no-header", "unindented", "unknown-state", "stray-line", "smi-failure"],
)
def test_status_malformed_raise(text: str) -> None:
    with pytest.raises(ParseError):
        parse_status(text)


def test_errors_non_numeric_counter_raises() -> None:
    with pytest.raises(ParseError):
        parse_errors("GPU 0: NVIDIA A100\n\t Link 0: Replay Errors: many\n")


@pytest.mark.parametrize("path", OTHER_TOOLS, ids=real_ids(OTHER_TOOLS))
@pytest.mark.parametrize("parser", PARSERS, ids=["status", "errors"])
def test_other_tools_output_raises(parser: Callable[[str | bytes], object], path: Path) -> None:
    with pytest.raises(ParseError) as info:
        parser(path.read_bytes())
    assert info.value.tool == TOOLS[parser]
