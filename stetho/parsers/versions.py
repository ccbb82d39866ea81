"""Version strings from the small probes: kernel release, OFED, and the NCCL library file name.

GPU driver, CUDA and VBIOS versions come from nvidia-smi; HCA firmware from sysfs fw_ver.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from stetho.parsers import ParseError
from stetho.parsers._text import require_text

_KERNEL = re.compile(r"^\d+\.\d+[\w.\-+~]*$")
_OFED = re.compile(r"(?:MLNX_OFED_LINUX|OFED-internal|DOCA[\w-]*OFED[\w-]*|OFED)-([\w.\-]+?):?\s*$",
                   re.M)
_LIBNCCL = re.compile(r"libnccl\.so\.(\d+\.\d+\.\d+)$")


def kernel_release(text: str) -> str:
    """/proc/sys/kernel/osrelease or `uname -r`: '5.15.0-105-generic'."""
    value = require_text("kernel release", text).strip()
    if not _KERNEL.match(value):
        raise ParseError("kernel release", f"not a kernel release: {value[:60]!r}")
    return value


def ofed_version(text: str) -> str:
    """`ofed_info -s`: 'MLNX_OFED_LINUX-23.10-1.1.9.0:' -> '23.10-1.1.9.0'."""
    m = _OFED.search(require_text("ofed_info -s", text))
    if not m:
        raise ParseError("ofed_info -s", f"no OFED version in {text.strip()[:60]!r}")
    return m.group(1)


def nccl_from_library(paths: Iterable[str]) -> str | None:
    """The newest NCCL among library files such as '/usr/lib/x86_64-linux-gnu/libnccl.so.2.21.5'
    (the bare 'libnccl.so.2' symlink names no full version and is ignored)."""
    from stetho.core.versioning import Version

    found = [m.group(1) for p in paths if (m := _LIBNCCL.search(p))]
    return max(found, key=Version) if found else None
