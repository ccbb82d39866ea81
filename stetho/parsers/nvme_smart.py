"""NVMe SMART / Health Information log (log page 02h) as JSON: `nvme smart-log -o json
/dev/nvmeN` (nvme-cli) or `smartctl -j -a /dev/nvmeN` (smartmontools).

The two tools name the same fields differently, and nvme-cli's own JSON has drifted:
- nvme-cli: `avail_spare`, `spare_thresh`, `percent_used`, temperature in kelvin;
  `critical_warning` an integer (1.x, early 2.x) or, in newer 2.x, an object whose `value`
  is the byte and whose other keys break it into bits; numbers as integers, as floats
  (`9898518.0`) or as strings (`"9898518"`; the 128-bit counters can exceed 2**64).
- smartctl: the log under `nvme_smart_health_information_log`, named `available_spare`,
  `available_spare_threshold`, `percentage_used`, temperature in Celsius.
"""

from __future__ import annotations

import json

from stetho.core.record import record
from stetho.parsers import ParseError

TOOL = "nvme smart-log"

#: Critical Warning bits (NVMe Base Specification, SMART / Health Information log, byte 0).
WARNING_BITS: tuple[tuple[int, str], ...] = (
    (0x01, "available spare below its threshold"),
    (0x02, "temperature outside its thresholds"),
    (0x04, "NVM subsystem reliability degraded (media or internal errors)"),
    (0x08, "media placed in read-only mode"),
    (0x10, "volatile memory backup device failed"),
    (0x20, "persistent memory region read-only"),
)
#: nvme-cli 2.x's object form: key -> bit.
_OBJECT_BITS = {"available_spare": 0x01, "temp_threshold": 0x02, "reliability_degraded": 0x04,
                "ro": 0x08, "vmbu_failed": 0x10, "pmr_ro": 0x20}


@record
class SmartLog:
    """The fields a health check judges; counters since the drive was made (they never
    reset, short of a firmware wipe)."""

    source: str  # "nvme-cli" or "smartctl"
    critical_warning: int
    temperature_c: int | None
    available_spare: int  # percent of the spare capacity left
    spare_threshold: int  # percent below which the drive raises critical warning bit 0
    percentage_used: int  # of the rated endurance; may exceed 100
    media_errors: int  # unrecovered data integrity errors
    err_log_entries: int  # entries the controller added to its error information log

    def warnings(self) -> tuple[str, ...]:
        """The set critical-warning bits, by meaning ('bit 0x40' for a reserved one)."""
        known = [text for bit, text in WARNING_BITS if self.critical_warning & bit]
        rest = self.critical_warning & ~sum(b for b, _ in WARNING_BITS)
        return tuple(known + [f"reserved bit(s) 0x{rest:02x}"] * bool(rest))


def parse(text: str) -> SmartLog:
    if not text.strip():
        raise ParseError(TOOL, "empty output")
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ParseError(TOOL, f"not JSON ({exc.msg} at line {exc.lineno})") from None
    except ValueError as exc:  # a number too long for int()
        raise ParseError(TOOL, f"not JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise ParseError(TOOL, f"expected a JSON object, got {type(doc).__name__}")
    if "nvme_smart_health_information_log" in doc:
        return _smartctl(doc)
    if "critical_warning" in doc and "avail_spare" in doc:
        return _nvme_cli(doc)
    if "smartctl" in doc:
        msgs = doc["smartctl"].get("messages") if isinstance(doc["smartctl"], dict) else None
        said = "; ".join(str(m.get("string", "")) for m in msgs or () if isinstance(m, dict))
        raise ParseError("smartctl", "no NVMe SMART/Health log in its JSON"
                         + (f": {said[:200]}" if said else ""))
    raise ParseError(TOOL, f"no SMART log fields (keys: {', '.join(list(doc)[:6]) or 'none'})")


def _nvme_cli(doc: dict[str, object]) -> SmartLog:
    cw = doc["critical_warning"]
    if isinstance(cw, dict):  # nvme-cli 2.x: {"value": 0, "available_spare": 0, ...}
        value = _int(cw, "value", TOOL) if "value" in cw else 0
        for key, bit in _OBJECT_BITS.items():
            if key in cw and _int(cw, key, TOOL):
                value |= bit
        warning = value
    else:
        warning = _int(doc, "critical_warning", TOOL)
    kelvin = _int(doc, "temperature", TOOL) if "temperature" in doc else None
    return SmartLog(
        "nvme-cli", warning, kelvin - 273 if kelvin else None,
        _int(doc, "avail_spare", TOOL), _int(doc, "spare_thresh", TOOL),
        _int(doc, _either(doc, "percent_used", "percentage_used"), TOOL),
        _int(doc, "media_errors", TOOL), _int(doc, "num_err_log_entries", TOOL))


def _smartctl(doc: dict[str, object]) -> SmartLog:
    log = doc["nvme_smart_health_information_log"]
    if not isinstance(log, dict):
        raise ParseError("smartctl", "nvme_smart_health_information_log is not an object")
    tool = "smartctl"
    return SmartLog(
        "smartctl", _int(log, "critical_warning", tool),
        _int(log, "temperature", tool) if "temperature" in log else None,
        _int(log, "available_spare", tool), _int(log, "available_spare_threshold", tool),
        _int(log, "percentage_used", tool), _int(log, "media_errors", tool),
        _int(log, "num_err_log_entries", tool))


def _either(doc: dict[str, object], *keys: str) -> str:
    return next((k for k in keys if k in doc), keys[0])


def _int(doc: dict[str, object], key: str, tool: str) -> int:
    """A count as either tool prints it: int, integral float or a decimal string."""
    if key not in doc:
        raise ParseError(tool, f"no {key!r} field")
    v = doc[key]
    if isinstance(v, bool):
        raise ParseError(tool, f"{key}: expected a number, got {v!r}")
    if isinstance(v, int):
        n = v
    elif isinstance(v, float) and v.is_integer():
        n = int(v)
    elif isinstance(v, str) and v.strip().isdigit():
        n = int(v.strip())
    else:
        raise ParseError(tool, f"{key}: expected a count, got {str(v)[:40]!r}")
    if n < 0:
        raise ParseError(tool, f"{key}: negative count {n}")
    return n
