"""/proc/driver/nvidia/version: which NVIDIA kernel module is loaded, and its version.

The open GPU kernel module prints `NVRM version: NVIDIA UNIX Open Kernel Module for x86_64
<version>  Release Build ...`, the proprietary one `NVRM version: NVIDIA UNIX x86_64 Kernel
Module  <version>  <date>` (aarch64 likewise). The flavour matters for GPUDirect RDMA: NCCL
can register GPU memory through DMA-BUF instead of nvidia_peermem only with the open module
(and a kernel of 5.12 or later).
"""

from __future__ import annotations

import re

from stetho.core.record import record
from stetho.parsers import ParseError

_VERSION = r"(\d+\.\d+(?:\.\d+)?)"
_OPEN = re.compile(r"^NVRM version: NVIDIA UNIX Open Kernel Module for (\S+)\s+" + _VERSION)
_PROPRIETARY = re.compile(r"^NVRM version: NVIDIA UNIX (\S+) Kernel Module\s+" + _VERSION)


@record
class KernelModule:
    open: bool  # the open GPU kernel module (MIT/GPL), not the proprietary one
    version: str
    arch: str


def parse(text: str) -> KernelModule:
    first = text.lstrip("\ufeff").splitlines()[0] if text.strip() else ""
    m = _OPEN.match(first)
    if m:
        return KernelModule(True, m.group(2), m.group(1))
    m = _PROPRIETARY.match(first)
    if m:
        return KernelModule(False, m.group(2), m.group(1))
    raise ParseError("/proc/driver/nvidia/version", f"not an NVRM version line: {first[:80]!r}")
