"""The Xid catalog as data, so a check can turn a kernel Xid into a verdict and a next step.

Facts follow NVIDIA's Xid catalog (docs.nvidia.com/deploy/xid-errors): the immediate resolution
bucket decides the severity (restart the app / ignore -> not critical; reset the GPU, reboot,
drain -> critical), the action is written for the technician who has to act on it. Codes that are
not listed resolve to an "unknown Xid" entry that points back to the catalog.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

Severity = Literal["info", "warning", "critical"]
Cause = Literal["application", "driver", "hardware", "thermal", "nvlink", "memory", "bus"]

CATALOG_URL = "https://docs.nvidia.com/deploy/xid-errors/"


@dataclass(frozen=True)
class XidInfo:
    """What an Xid code means and what to do about it."""

    code: int
    name: str
    severity: Severity
    action: str
    cause: Cause
    known: bool = True


_APP = "check the application (its own bug or bad memory access); restart it"
_RESET = "drain the node and reset the GPU; contact NVIDIA support if it recurs"
_RMA = "drain the node and RMA the GPU"
_NVLINK5 = (
    "read Fatal/Nonfatal in the message: Fatal -> drain the node and reset the GPU; "
    "Nonfatal -> watch for repeats and check the NVLink counters"
)


def _x(code: int, name: str, severity: Severity, cause: Cause, action: str) -> XidInfo:
    return XidInfo(code=code, name=name, severity=severity, action=action, cause=cause)


_ENTRIES: tuple[XidInfo, ...] = (
    _x(8, "GPU stopped processing (FIFO idle timeout)", "warning", "application",
       "restart the application; contact NVIDIA support if it recurs"),
    _x(13, "Graphics engine exception", "warning", "application",
       _APP + "; on several GPUs or with other Xids, run GPU diagnostics"),
    _x(31, "GPU memory page fault", "warning", "application",
       _APP + "; if it recurs across applications, run GPU diagnostics"),
    _x(32, "Invalid or corrupted push buffer stream", "warning", "driver",
       "restart the application; check the driver/CUDA versions and PCIe errors if it recurs"),
    _x(38, "Driver firmware error", "warning", "driver",
       "no immediate action; update the driver and contact NVIDIA support if it recurs"),
    _x(43, "GPU stopped processing (channel reset)", "info", "application",
       "check the application: the driver stopped one of its channels; the GPU stays usable"),
    _x(45, "Preemptive cleanup after a previous error", "info", "application",
       "look at the Xid logged before it; on its own it means a process was stopped"),
    _x(46, "GPU stopped processing (GPU timeout)", "critical", "driver", _RESET),
    _x(48, "Double bit ECC error (DBE)", "critical", "memory",
       "drain the node and reset the GPU to remap the row; RMA the GPU if it recurs"),
    _x(61, "Internal micro-controller breakpoint", "warning", "hardware",
       "reset the GPU; contact NVIDIA support if it recurs"),
    _x(62, "Internal micro-controller halt", "critical", "hardware", _RESET),
    _x(63, "Row remap / page retirement recorded", "warning", "memory",
       "reset the GPU when it is idle to apply the pending row remap"),
    _x(64, "Row remap / page retirement failure", "critical", "memory", _RMA),
    _x(68, "Video decoder (NVDEC0) exception", "warning", "driver",
       "restart the application; contact NVIDIA support if it recurs"),
    _x(69, "Graphics engine class error", "warning", "application", _APP),
    _x(74, "NVLink error", "critical", "nvlink",
       "drain the node, reset the GPU and read the NVLink error counters; RMA if it recurs"),
    _x(79, "GPU has fallen off the bus", "critical", "bus",
       "drain the node and reboot it; reseat the GPU or RMA it if it recurs, and check "
       "PCIe AER errors, power and cooling"),
    _x(92, "High single-bit ECC error rate", "warning", "memory",
       "watch the ECC counters; contact NVIDIA support if the rate keeps rising"),
    _x(94, "Contained ECC error", "warning", "memory",
       "restart the application; reset the GPU when idle so the row gets remapped"),
    _x(95, "Uncontained ECC error", "critical", "memory",
       "drain the node and reset the GPU; RMA the GPU if it recurs"),
    _x(109, "Context switch timeout", "critical", "driver", _RESET),
    _x(119, "GSP RPC timeout", "critical", "driver",
       "drain the node and reset the GPU; update the driver/firmware if it recurs"),
    _x(120, "GSP error", "critical", "driver",
       "drain the node and reset the GPU; update the driver/firmware if it recurs"),
    _x(121, "C2C (chip-to-chip) link error", "warning", "nvlink",
       "watch for repeats; contact NVIDIA support if it recurs"),
    _x(136, "NVLink link training failed", "critical", "nvlink",
       "drain the node and reset the GPU; check the NVLink cabling/trays"),
    _x(140, "Unrecovered ECC error", "critical", "memory", _RESET),
    _x(143, "GPU initialization failure", "critical", "hardware",
       "reset the GPU; drain the node and RMA the GPU if it fails again"),
    _x(144, "NVLink SAW error", "warning", "nvlink", _NVLINK5),
    _x(145, "NVLink RLW error", "warning", "nvlink", _NVLINK5),
    _x(146, "NVLink TLW error", "warning", "nvlink", _NVLINK5),
    _x(147, "NVLink TREX error", "warning", "nvlink", _NVLINK5),
    _x(148, "NVLink NVLPW_CTRL error", "warning", "nvlink", _NVLINK5),
    _x(149, "NVLink NETIR error", "warning", "nvlink", _NVLINK5),
    _x(150, "NVLink MSE error", "warning", "nvlink", _NVLINK5),
    _x(154, "GPU recovery action changed", "warning", "driver",
       "carry out the recovery action named in the message (GPU reset, node reboot, drain)"),
)

CATALOG: dict[int, XidInfo] = {e.code: e for e in _ENTRIES}

_NVLINK5_CODES = frozenset(range(144, 151))
_FATAL = re.compile(r"(?<![-\w])fatal\b", re.IGNORECASE)  # "Fatal", not "Nonfatal"/"Non-fatal"
_RECOVERY_TO = re.compile(r"\bto\s+0x([0-9a-fA-F]+)")


def lookup(code: int) -> XidInfo:
    """The catalog entry for `code`, or an 'unknown Xid' entry pointing to NVIDIA's catalog."""
    info = CATALOG.get(code)
    if info is not None:
        return info
    return XidInfo(
        code=code,
        name=f"Unknown Xid {code}",
        severity="warning",
        action=f"look up Xid {code} in NVIDIA's Xid catalog ({CATALOG_URL})",
        cause="driver",
        known=False,
    )


def severity_of(code: int, message: str = "") -> Severity:
    """The catalog severity, refined by what the message itself says.

    NVLink5 Xids 144-150 print Fatal or Nonfatal: Fatal is critical. Xid 154 names the new
    recovery action: anything but 0x0 (None) means the GPU needs a reset or the node a reboot.
    """
    base = lookup(code).severity
    if code in _NVLINK5_CODES and _FATAL.search(message):
        return "critical"
    if code == 154:
        m = _RECOVERY_TO.search(message)
        if m is not None:
            return "info" if int(m.group(1), 16) == 0 else "critical"
    return base
