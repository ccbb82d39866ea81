"""/proc/driver/nvidia/version: open vs proprietary kernel module, on the real recordings."""

from __future__ import annotations

import pytest

from stetho.parsers import ParseError, nvidia_version
from tests.conftest import REAL

SAMPLES = sorted((REAL / "14-fabric").glob("proc-driver-nvidia-version-*"))


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.name)
def test_every_sample(path):
    m = nvidia_version.parse(path.read_text())
    assert m.open == ("-open-" in path.name) and m.arch == "x86_64"
    assert m.version in path.name


def test_aarch64_open_module():
    m = nvidia_version.parse("NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  "
                             "570.86.15  Release Build  (dvs-builder@x)  Thu Jan 23 2025\n")
    assert m == nvidia_version.KernelModule(True, "570.86.15", "aarch64")


@pytest.mark.parametrize("text", ["", "\x00\xff", "GCC version:  gcc version 9.4.0\n",
                                  "NVRM version: NVIDIA UNIX x86_64 Kernel Module\n"])
def test_garbage(text):
    with pytest.raises(ParseError):
        nvidia_version.parse(text)
