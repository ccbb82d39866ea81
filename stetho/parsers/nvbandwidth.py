"""Parse NVIDIA nvbandwidth's text output: every testcase's matrix and its summary lines.

nvbandwidth prints a preamble (`nvbandwidth Version: v0.5`, `Built from Git version: ...`,
`CUDA Runtime Version: 12040` or `13.0` in newer builds, `Driver Version: 550.54.15`,
`Device 0: NVIDIA H800 [(PCI ...)]`), then per testcase:

    Running host_to_device_memcpy_ce.
    memcpy CE CPU(row) -> GPU(column) bandwidth (GB/s)
              0         1
    0     55.28     55.30
    SUM host_to_device_memcpy_ce 110.58

Rows and columns are numbered (v0.5+ indents the row label by one space); a pair the testcase
does not measure is `N/A` (None here, never 0). The unit comes from the description line:
"(GB/s)" for bandwidth, "(ns)" for the latency testcases. After the matrix come `SUM name value`
and, in newer builds, further upper-case statistics (`MIN`, `MAX`, `COEFFICIENT_OF_VARIATION`),
all kept by name. `Waived:` marks a testcase that could not run on this system (one GPU, no
peer access) and is counted, not invented. nvbandwidth's own SUM is computed before rounding, so
it can differ from the sum of the printed cells by up to 0.005 per cell.
"""

from __future__ import annotations

import re

from stetho.core.record import record
from stetho.parsers import ParseError
from stetho.parsers._text import require_text

TOOL = "nvbandwidth"

_VERSION = re.compile(r"^nvbandwidth Version:\s*(\S+)")
_GIT = re.compile(r"^Built from Git version:\s*(\S+)")
_RUNTIME = re.compile(r"^CUDA Runtime Version:\s*(\S+)")
_CUDA_DRIVER = re.compile(r"^CUDA Driver Version:\s*(\S+)")
_DRIVER = re.compile(r"^Driver Version:\s*(\S+)")
_DEVICE = re.compile(r"^Device (\d+):\s*(.+?)\s*$")
_RUNNING = re.compile(r"^Running (\S+?)\.?\s*$")
_UNIT = re.compile(r"\(([^()]*)\)\s*$")
_STAT = re.compile(r"^([A-Z][A-Z_]*)\s+(\S+)\s+(\S+)\s*$")
_INT = re.compile(r"^\d+$")
_ERROR = re.compile(r"(?i)\berror\b|\bfailed\b|CUDA_ERROR")
_CELL = re.compile(r"^(?:[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|N/A)$")


@record
class NvbwTestcase:
    """One testcase: its matrix (rows x columns) in `unit`, and its summary statistics."""

    name: str
    description: str
    unit: str  # "GB/s", "ns"
    columns: tuple[int, ...]
    rows: tuple[tuple[int, tuple[float | None, ...]], ...]
    stats: tuple[tuple[str, float], ...]  # ("SUM", 442.52), ...

    def stat(self, name: str) -> float | None:
        return next((v for k, v in self.stats if k == name.upper()), None)

    @property
    def sum(self) -> float | None:
        return self.stat("SUM")

    @property
    def cells(self) -> tuple[float, ...]:
        return tuple(v for _, values in self.rows for v in values if v is not None)

    @property
    def min_cell(self) -> float | None:
        return min(self.cells) if self.cells else None

    @property
    def max_cell(self) -> float | None:
        return max(self.cells) if self.cells else None

    def cell(self, row: int, column: int) -> float | None:
        for label, values in self.rows:
            if label == row and column in self.columns:
                return values[self.columns.index(column)]
        return None


@record
class NvbwRun:
    """A whole nvbandwidth run. `ok`: at least one testcase ran, each with a full matrix."""

    version: str | None
    git_version: str | None
    cuda_runtime_version: str | None
    cuda_driver_version: str | None
    driver_version: str | None
    devices: tuple[tuple[int, str], ...]
    testcases: tuple[NvbwTestcase, ...]
    waived: int
    errors: tuple[str, ...]  # error lines, and testcases that started but printed no matrix
    other: tuple[str, ...] = ()  # NOTE lines and anything else, verbatim

    def testcase(self, name: str) -> NvbwTestcase | None:
        return next((t for t in self.testcases if t.name == name), None)

    def sum(self, name: str) -> float | None:
        """The SUM line of a testcase; None if it did not run."""
        t = self.testcase(name)
        return t.sum if t else None

    def min_cell(self, name: str) -> float | None:
        """The slowest measured pair of a testcase (the link a job would wait on)."""
        t = self.testcase(name)
        return t.min_cell if t else None

    @property
    def ok(self) -> bool:
        return bool(self.testcases) and not self.errors and all(t.cells for t in self.testcases)


class _Open:
    """The testcase being read."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.description: str | None = None
        self.columns: tuple[int, ...] | None = None
        self.rows: list[tuple[int, tuple[float | None, ...]]] = []
        self.stats: list[tuple[str, float]] = []


def parse(text: str | bytes) -> NvbwRun:
    """Parse nvbandwidth's stdout (any set of testcases)."""
    data = require_text(TOOL, text)
    try:
        return _parse(data)
    except ParseError:
        raise
    except (ValueError, KeyError, IndexError, AttributeError, TypeError, OverflowError) as exc:
        raise ParseError(TOOL, f"unexpected content: {exc}") from None


def _parse(data: str) -> NvbwRun:
    head: dict[str, str] = {}
    devices: list[tuple[int, str]] = []
    done: list[NvbwTestcase | str] = []  # a str: why a testcase has no results
    errors: list[str] = []
    other: list[str] = []
    waived = 0
    cur: _Open | None = None
    for raw in data.splitlines():
        line = raw.strip()
        if not line:
            continue
        if line.startswith("Waived"):
            waived += 1
            continue
        if m := _RUNNING.match(line):
            if cur is not None:
                done.append(_close(cur))
            cur = _Open(m.group(1))
            continue
        if cur is None:
            if not _preamble(line, head, devices):
                (errors if _ERROR.search(line) else other).append(line)
            continue
        if not _testcase_line(cur, line):
            if cur.columns is None and cur.description is None:
                cur.description = line
            elif _ERROR.search(line):
                errors.append(line)
            else:
                other.append(line)
    if cur is not None:
        done.append(_close(cur))
    for t in [t for t in done if isinstance(t, str)]:
        errors.append(t)
    if "version" not in head and not done:
        raise ParseError(TOOL, "not nvbandwidth output: no 'nvbandwidth Version' and no "
                               "'Running <testcase>.' lines")
    return NvbwRun(
        version=head.get("version"), git_version=head.get("git"),
        cuda_runtime_version=head.get("runtime"), cuda_driver_version=head.get("cuda_driver"),
        driver_version=head.get("driver"), devices=tuple(devices),
        testcases=tuple(t for t in done if isinstance(t, NvbwTestcase)),
        waived=waived, errors=tuple(errors), other=tuple(other),
    )


def _preamble(line: str, head: dict[str, str], devices: list[tuple[int, str]]) -> bool:
    for key, pattern in (("version", _VERSION), ("git", _GIT), ("runtime", _RUNTIME),
                         ("cuda_driver", _CUDA_DRIVER), ("driver", _DRIVER)):
        if m := pattern.match(line):
            head.setdefault(key, m.group(1))
            return True
    if m := _DEVICE.match(line):
        devices.append((int(m.group(1)), m.group(2)))
        return True
    return False


def _testcase_line(cur: _Open, line: str) -> bool:
    toks = line.split()
    if cur.description is not None and cur.columns is None and all(_INT.match(t) for t in toks):
        cur.columns = tuple(int(t) for t in toks)
        return True
    if cur.columns is not None and len(toks) >= 2 and _INT.match(toks[0]) \
            and all(_CELL.match(t) for t in toks[1:]):
        if len(toks) - 1 != len(cur.columns):
            raise ParseError(TOOL, f"{cur.name}: row {toks[0]} has {len(toks) - 1} cells for "
                                   f"{len(cur.columns)} columns")
        cells = tuple(None if t == "N/A" else float(t) for t in toks[1:])
        cur.rows.append((int(toks[0]), cells))
        return True
    if (m := _STAT.match(line)) and m.group(2) == cur.name:
        if not _CELL.match(m.group(3)) or m.group(3) == "N/A":
            raise ParseError(TOOL, f"{cur.name}: {m.group(1)} is not a number: {m.group(3)!r}")
        cur.stats.append((m.group(1), float(m.group(3))))
        return True
    return False


def _close(cur: _Open) -> NvbwTestcase | str:
    if cur.description is None or cur.columns is None or not cur.rows:
        return f"testcase {cur.name} printed no matrix (failed or output cut)"
    m = _UNIT.search(cur.description)
    return NvbwTestcase(
        name=cur.name, description=cur.description, unit=m.group(1) if m else "",
        columns=cur.columns, rows=tuple(cur.rows), stats=tuple(cur.stats),
    )
