"""The Xid table, so a check can turn a kernel Xid into a verdict and a next step.

The rows live in `xid_catalog.yml` next to this module (inside the package, so the wheel carries
it): one row per code with NVIDIA's own resolution buckets as the catalog words them
(docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html), the severity stetho derives from
the immediate one, and a source for every row. A code without a row is unknown: `lookup` says so
(`known=False`) and the check reports `error` rather than guessing.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Literal

from stetho.core import yamlconf
from stetho.core.record import record

Severity = Literal["info", "warning", "critical"]
Cause = Literal["application", "driver", "hardware", "thermal", "nvlink", "memory", "bus"]

CATALOG_URL = "https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html"
TABLE_PATH = Path(__file__).with_name("xid_catalog.yml")

SEVERITIES: tuple[Severity, ...] = ("info", "warning", "critical")
CAUSES: tuple[Cause, ...] = ("application", "driver", "hardware", "thermal", "nvlink", "memory",
                             "bus")
GENERATIONS = ("A100", "H100", "B100", "GB200")  # the catalog's "Applies to" columns
#: Immediate resolution bucket -> the severities stetho may derive from it. Anything that needs a
#: GPU reset, a reboot or NVIDIA support keeps the GPU out of service (critical); an application
#: restart leaves the GPU usable (warning); IGNORE is info, or warning where the investigatory
#: action asks for follow-up. NVLink5 and Xid 154 rows are refined by their message.
SEVERITY_FOR: dict[str, tuple[Severity, ...]] = {
    "RESET_GPU": ("critical",), "RESTART_BM": ("critical",), "RESTART_VM": ("critical",),
    "CONTACT_SUPPORT": ("critical",), "CHECK_MECHANICALS": ("critical",),
    "WORKFLOW_XID_48": ("critical",), "WORKFLOW_NVLINK_ERR": ("critical",),
    "RESTART_APP": ("warning",), "UPDATE_SWFW": ("warning",), "CHECK_UVM": ("warning",),
    "WORKFLOW_NVLINK5_ERR": ("warning",), "XID_154": ("warning",),
    "WORKFLOW_XID_45": ("info",), "IGNORE": ("info", "warning"),
    "NOT_GIVEN": ("critical",),  # 171/172: no bucket, they accompany an Xid 48
}
INVESTIGATORY = frozenset({
    "CONTACT_SUPPORT", "CHECK_APP/CUDA", "WORKFLOW_XID_13", "WORKFLOW_XID_31", "WORKFLOW_XID_48",
    "Solo: RESTART_FM Not Solo: IGNORE (follow other Xid)", "IGNORE", "IGNORE (sympathetic)",
    "INVESTIGATE_SW", "INVESTIGATE_SW_USER", "INVESTIGATE_LINK_SI", "XID_137_FLOW",
    "SYMPATHETIC_REPORT_SOLO", "N/A; Unused", "N/A Informational only regarding another Xid",
    "UPDATE_SWFW", "WORKFLOW_NVLINK5_ERR", "NOT_GIVEN",
})
FIELDS = ("code", "mnemonic", "name", "applies_to", "immediate", "investigatory", "severity",
          "cause", "action", "source")


class XidTableError(ValueError):
    """The Xid table file is malformed: names the file, the row and what is wrong."""


@record
class XidInfo:
    """What an Xid code means and what to do about it."""

    code: int
    name: str
    severity: Severity
    action: str
    cause: Cause
    known: bool = True
    mnemonic: str = ""
    immediate: str = ""
    investigatory: str = ""
    applies_to: tuple[str, ...] = ()
    source: str = ""


def load_table(path: Path = TABLE_PATH) -> dict[int, XidInfo]:
    """Read and validate an Xid table file; raises XidTableError naming the bad row."""
    try:  # every check process reads the table: parsed once, then from the parse cache
        doc = yamlconf.load_plain(path.read_text(encoding="utf-8"), "xid")
    except (OSError, ValueError) as exc:
        raise XidTableError(f"{path}: cannot read the Xid table: {exc}") from None
    rows = doc.get("xids") if isinstance(doc, dict) else None
    if not isinstance(rows, list) or not rows:
        raise XidTableError(f"{path}: expected a non-empty list under `xids:`")
    table: dict[int, XidInfo] = {}
    for i, row in enumerate(rows):
        info = _row(path, i, row)
        if info.code in table:
            raise XidTableError(f"{path}: row {i}: Xid {info.code} is listed twice")
        table[info.code] = info
    return table


def _row(path: Path, i: int, row: object) -> XidInfo:
    where = f"{path}: row {i}"
    if not isinstance(row, dict):
        raise XidTableError(f"{where}: expected a mapping")
    missing = [f for f in FIELDS if f not in row]
    extra = sorted(set(row) - set(FIELDS))
    if missing or extra:
        raise XidTableError(f"{where}: missing {missing}, unknown {extra}")
    code = row["code"]
    if not isinstance(code, int) or isinstance(code, bool) or code <= 0:
        raise XidTableError(f"{where}: code must be a positive integer, got {code!r}")
    where = f"{path}: Xid {code}"
    texts = ("mnemonic", "name", "immediate", "investigatory", "action", "source")
    for f in texts:
        if not isinstance(row[f], str) or not row[f].strip():
            raise XidTableError(f"{where}: {f} must be a non-empty string")
    gens = row["applies_to"]
    if not isinstance(gens, list) or any(g not in GENERATIONS for g in gens):
        raise XidTableError(f"{where}: applies_to must list some of {GENERATIONS}, got {gens!r}")
    immediate, severity = row["immediate"], row["severity"]
    allowed = SEVERITY_FOR.get(immediate)
    if allowed is None:
        raise XidTableError(f"{where}: immediate {immediate!r} is not one of "
                            f"{sorted(SEVERITY_FOR)}")
    if severity not in allowed:
        raise XidTableError(f"{where}: severity {severity!r} does not follow from {immediate} "
                            f"(allowed: {', '.join(allowed)})")
    if row["investigatory"] not in INVESTIGATORY:
        raise XidTableError(f"{where}: investigatory {row['investigatory']!r} is not a bucket "
                            "the catalog uses")
    if row["cause"] not in CAUSES:
        raise XidTableError(f"{where}: cause {row['cause']!r} is not one of {CAUSES}")
    if "http" not in row["source"] and "docs." not in row["source"]:
        raise XidTableError(f"{where}: source must cite the catalog URL or a document")
    return XidInfo(code=code, name=row["name"], severity=severity, action=row["action"],
                   cause=row["cause"], mnemonic=row["mnemonic"], immediate=immediate,
                   investigatory=row["investigatory"], applies_to=tuple(gens),
                   source=row["source"])


#: The shipped table, read once at import (50 rows: a few milliseconds).
@functools.cache
def catalog() -> dict[int, XidInfo]:
    """The shipped table, read on first use: a node whose kernel log has no Xid never reads
    it (`stetho check` used to parse it and build every row at import)."""
    return load_table()


def __getattr__(name: str) -> dict[int, XidInfo]:
    """`CATALOG`, the shipped table (catalog()), for callers that name it."""
    if name == "CATALOG":
        return catalog()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

_NVLINK5_CODES = frozenset(range(144, 151))
_FATAL = re.compile(r"(?<![-\w])fatal\b", re.IGNORECASE)  # "Fatal", not "Nonfatal"/"Non-fatal"
_RECOVERY_TO = re.compile(r"\bto\s+0x([0-9a-fA-F]+)")


def unknown(code: int, table: str = str(TABLE_PATH.name)) -> XidInfo:
    """The entry for a code the table has no row for: it cannot be judged."""
    return XidInfo(
        code=code,
        name=f"Unknown Xid {code}",
        severity="critical",
        action=(f"Xid {code} is not in stetho's Xid table ({table}): cannot judge it; look it "
                f"up in NVIDIA's catalog ({CATALOG_URL}) and add a row with its source"),
        cause="driver",
        known=False,
    )


def lookup(code: int, table: dict[int, XidInfo] | None = None) -> XidInfo:
    """The table's row for `code`, or an 'unknown Xid' entry (known=False) that says where to
    look it up. `table` defaults to the shipped one."""
    info = (catalog() if table is None else table).get(code)
    return info if info is not None else unknown(code)


def severity_of(code: int, message: str = "", table: dict[int, XidInfo] | None = None
                ) -> Severity:
    """The row's severity, refined by what the message itself says.

    NVLink5 Xids 144-150 print Fatal or Nonfatal: Fatal is critical. Xid 154 names the new
    recovery action: anything but 0x0 (None) means the GPU needs a reset or the node a reboot.
    An unknown code is critical here; callers check `lookup(code).known` first and say `error`.
    """
    base = lookup(code, table).severity
    if code in _NVLINK5_CODES and _FATAL.search(message):
        return "critical"
    if code == 154:
        m = _RECOVERY_TO.search(message)
        if m is not None:
            return "info" if int(m.group(1), 16) == 0 else "critical"
    return base
