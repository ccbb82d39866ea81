"""The kernel's IOMMU mode: /proc/cmdline and /sys/kernel/iommu_groups/*/type.

Each IOMMU group's `type` is the kernel's own word for how DMA of its devices is handled:
`identity` (passthrough: `iommu=pt`, DMA addresses are physical), `DMA` or `DMA-FQ`
(translated: every peer-to-peer and RDMA transfer goes through the IOMMU), `blocked`, or
`unmanaged` (a VFIO-owned device). No group at all: no IOMMU is active. Kernels before 5.0 have
no `type` file; then only the command line (`iommu=pt`, `intel_iommu=off`) tells.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from stetho.core.record import record
from stetho.parsers import ParseError
from stetho.parsers._text import require_text

TOOL = "iommu (/proc/cmdline, iommu_groups)"
CMDLINE = "/proc/cmdline"
_GROUP = re.compile(r"/sys/kernel/iommu_groups/(\d+)/type$")
_TYPES = {"identity", "DMA", "DMA-FQ", "blocked", "unmanaged"}


@record
class IommuState:
    """`args`: the IOMMU arguments of the kernel command line (`iommu`, `intel_iommu`,
    `amd_iommu` -> value); `groups`: group number -> type, as the kernel reports it."""

    cmdline: str
    args: dict[str, str]
    groups: dict[int, str]

    @property
    def translated(self) -> tuple[int, ...]:
        """Groups whose DMA the IOMMU translates."""
        return tuple(g for g, t in sorted(self.groups.items()) if t in ("DMA", "DMA-FQ"))

    @property
    def on_by_cmdline(self) -> bool:
        return self.args.get("intel_iommu", "").split(",")[0] == "on" or \
            self.args.get("amd_iommu") == "on"

    @property
    def passthrough_by_cmdline(self) -> bool:
        """The command line asks for passthrough or no IOMMU."""
        a = self.args
        return a.get("iommu") in ("pt", "off") or "off" in (a.get("intel_iommu"),
                                                             a.get("amd_iommu")) or \
            "pt" in a.get("intel_iommu", "").split(",")


def parse(files: Mapping[str, str]) -> IommuState:
    """The probe's files: /proc/cmdline (required) and the groups' type files."""
    if CMDLINE not in files:
        raise ParseError(TOOL, f"{CMDLINE} was not read")
    cmdline = require_text(TOOL, files[CMDLINE]).strip()
    if "\n" in cmdline or not all(ch.isprintable() for ch in cmdline):
        raise ParseError(TOOL, f"not a kernel command line: {cmdline[:60]!r}")
    args = {}
    for word in cmdline.split():
        key, eq, value = word.partition("=")
        if eq and key in ("iommu", "intel_iommu", "amd_iommu"):
            args[key] = value
    groups = {}
    for path, text in files.items():
        m = _GROUP.search(path)
        if m is None:
            continue
        kind = text.strip()
        if kind not in _TYPES:
            raise ParseError(TOOL, f"{path}: unknown IOMMU group type {kind[:30]!r}")
        groups[int(m.group(1))] = kind
    return IommuState(cmdline, args, groups)
