"""The small version probes: kernel release, `ofed_info -s`, and NCCL library file names."""

from __future__ import annotations

import pytest

from stetho.core.resources import shipped
from stetho.parsers import ParseError
from stetho.parsers.versions import kernel_release, nccl_from_library, ofed_version
from tests.conftest import mutation_outcomes

RECORDED = shipped("fixtures/recorded") / "versions-debian12-vm"


def test_kernel_release_of_this_machine() -> None:
    text = (RECORDED / "osrelease").read_text()
    assert kernel_release(text) == text.strip() and kernel_release(text).startswith("6.18.")


@pytest.mark.parametrize("text", ["5.15.0-105-generic\n", "4.18.0-513.24.1.el8_9.x86_64",
                                  "6.8.0-1015-nvidia-64k", "5.14.21-150500.55.65-default"])
def test_kernel_release_forms(text: str) -> None:
    assert kernel_release(text) == text.strip()


@pytest.mark.parametrize("text,want", [
    ("MLNX_OFED_LINUX-23.10-1.1.9.0:\n", "23.10-1.1.9.0"),
    ("MLNX_OFED_LINUX-5.8-1.1.2.1:", "5.8-1.1.2.1"),
    ("OFED-internal-24.04-0.6.6:\n", "24.04-0.6.6"),
])
def test_ofed_forms(text: str, want: str) -> None:
    assert ofed_version(text) == want


def test_nccl_newest_library_file_wins_and_the_bare_symlink_is_ignored() -> None:
    paths = ["/usr/lib/x86_64-linux-gnu/libnccl.so.2",
             "/usr/lib/x86_64-linux-gnu/libnccl.so.2.18.3", "/usr/local/lib/libnccl.so.2.21.5"]
    assert nccl_from_library(paths) == "2.21.5"
    assert nccl_from_library(["/usr/lib/libnccl.so.2"]) is None
    assert nccl_from_library([]) is None


@pytest.mark.parametrize("parse,tool", [(kernel_release, "kernel release"),
                                        (ofed_version, "ofed_info -s")])
@pytest.mark.parametrize("garbage", ["", "   \n", "\x00\x01\xff", "Linux version 5.15",
                                     "command not found: ofed_info"])
def test_garbage_is_a_parse_error(parse: object, tool: str, garbage: str) -> None:
    with pytest.raises(ParseError) as err:
        parse(garbage)  # type: ignore[operator]
    assert err.value.tool == tool


def test_mutations_never_crash() -> None:
    text = (RECORDED / "osrelease").read_text()
    assert "error" in mutation_outcomes(kernel_release, text, "kernel release")
    assert mutation_outcomes(ofed_version, "MLNX_OFED_LINUX-23.10-1.1.9.0:\n", "ofed_info -s")
