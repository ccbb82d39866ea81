"""IOMMU state: the kernel command line and the iommu_groups' types (the simulated node's
files, written as the kernel shows them), and garbage."""

from __future__ import annotations

import pytest

from stetho.parsers import ParseError, iommu

CMD = "BOOT_IMAGE=/vmlinuz-5.15.0-105-generic root=UUID=0 ro iommu=pt"


def _files(cmdline: str = CMD, **groups: str) -> dict[str, str]:
    out = {"/proc/cmdline": cmdline + "\n"}
    out.update({f"/sys/kernel/iommu_groups/{g.removeprefix('g')}/type": t + "\n"
                for g, t in groups.items()})
    return out


def test_passthrough():
    s = iommu.parse(_files(g0="identity", g1="identity", g12="unmanaged"))
    assert s.args == {"iommu": "pt"} and s.passthrough_by_cmdline
    assert s.groups == {0: "identity", 1: "identity", 12: "unmanaged"} and s.translated == ()


def test_translated():
    s = iommu.parse(_files(CMD.replace("iommu=pt", "intel_iommu=on"), g0="DMA-FQ", g3="DMA"))
    assert s.translated == (0, 3) and s.on_by_cmdline and not s.passthrough_by_cmdline


@pytest.mark.parametrize("cmdline, passthrough", [
    ("ro intel_iommu=off", True), ("ro amd_iommu=off", True), ("ro iommu=off", True),
    ("ro intel_iommu=on,pt", True), ("ro intel_iommu=on", False), ("ro quiet", False),
])
def test_cmdline_alone(cmdline, passthrough):
    s = iommu.parse(_files(cmdline))
    assert s.groups == {} and s.passthrough_by_cmdline is passthrough


@pytest.mark.parametrize("files", [
    {}, {"/proc/cmdline": ""}, {"/proc/cmdline": "\x00\x01"},
    {"/proc/cmdline": "ro\n\x1b[1m%%%\n"},
    _files(g0="weird"), _files(g0=""),
])
def test_garbage(files):
    with pytest.raises(ParseError) as exc:
        iommu.parse(files)
    assert exc.value.tool == iommu.TOOL
