"""The simulated node's NVMe SMART logs: one copy of a real `nvme smart-log -o json`
recording per NVMe controller (stetho.sim.draft.NVME of them), edited by the nvme faults the
way the drive itself changes them, and the `nvme` shim that prints them."""

from __future__ import annotations

import re

#: nvme-cli JSON of a healthy drive (critical_warning 0, spare 100% over a 5% threshold).
RECORDING = "14-nvme/nvme-smart-log-json-nvmecli-int.json"

#: `nvme smart-log /dev/nvmeN -o json`: that controller's log (data/nvme-smart-nvmeN.json).
SHIM = ['case "$1" in',
        '  smart-log) f="$D/nvme-smart-${2##*/}.json"; [ -f "$f" ] && exec cat "$f"',
        '    echo "simulated nvme: $2: No such file or directory" >&2; exit 1 ;;',
        '  *) echo "simulated nvme: unsupported arguments: $*" >&2; exit 2 ;;',
        'esac']


def healthy(recording: str, controllers: int) -> dict[str, str]:
    """controller name ('nvme0') -> its SMART log: the recording, as is, on each."""
    return {f"nvme{n}": recording for n in range(controllers)}


def edit(text: str, fields: dict[str, int]) -> str:
    """The recording with the named top-level counts replaced, its layout kept."""
    for key, value in fields.items():
        text, n = re.subn(rf'^(\s*"{re.escape(key)}"\s*:\s*)[^,\n]+', rf"\g<1>{value}", text,
                          flags=re.M)
        if n != 1:
            raise ValueError(f"the nvme smart-log recording has {n} {key!r} fields, expected 1")
    return text


def read(text: str, key: str) -> int:
    m = re.search(rf'"{re.escape(key)}"\s*:\s*"?(\d+)', text)
    if m is None:
        raise ValueError(f"the nvme smart-log recording has no {key!r}")
    return int(m.group(1))


def files(logs: dict[str, str]) -> dict[str, str]:
    return {f"nvme-smart-{ctrl}.json": text for ctrl, text in logs.items()}
