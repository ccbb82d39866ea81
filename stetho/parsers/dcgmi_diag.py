"""Parse `dcgmi diag -r N` in both forms: the JSON of `-j` and the text table.

JSON comes in two shapes. DCGM 3.x: `{"DCGM GPU Diagnostic": {"test_categories": [{"category",
"tests": [{"name", "results": [{"gpu_ids" | "gpu_id", "status", "warnings", "info"}]}]}],
"version"}}`, where `gpu_ids` is a string ("0,1,2") or a number, statuses are "Pass" or "PASS",
warnings are strings or `{"warning": ...}` objects, and a test list can hold `null` entries.
DCGM 4.x: `{"DCGM Diagnostic": {...}, "metadata": {"version", "Driver Version Detected"},
"entity_groups": [...]}`, results keyed by `entity_id`, and a per-test `test_summary` whose
status is the test's verdict. Lines before the `{` (warnings, banners) are kept as `notes`.

The text table has a name column and a 46-character value column. Long values wrap at exactly
45 characters, even mid-word and even where the break falls on a space ("Enabl" / "e
persistence", "Check DCGM " / "and system"): a wrapped `Warning` or `Info` value is rebuilt by
padding each full line back to 45 characters, so no space is lost or invented. Continuation
lines under a *test* row are not wraps but per-GPU results (`Pass - GPU: 1` then `Fail - GPU: 0`
in DCGM 3.3, `Pass` then `GPU0: Pass` ... in DCGM 4). `Fail - All` applies to every GPU.

Statuses are normalised to "pass", "fail", "skip", "warn", "not run"; anything else is kept
lowercased and counts as a failure (an unknown word is not evidence of health). `dcgmi` lines
such as "Error: Unable to ..." with no results become `runtime_error`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from stetho.core.record import record
from stetho.parsers import ParseError
from stetho.parsers._text import require_text

TOOL = "dcgmi diag"

KNOWN_STATUSES = ("pass", "fail", "skip", "warn", "not run")
_STATUS_WORDS = {"pass": "pass", "passed": "pass", "fail": "fail", "failed": "fail",
                 "skip": "skip", "skipped": "skip", "warn": "warn", "warning": "warn",
                 "not run": "not run", "notrun": "not run"}
_STATUS = re.compile(r"^(Pass|Fail|Skip|Warn|Warning|Not Run)\b"
                     r"(?:\s*-\s*(?:(All)|GPUs?:\s*([\d,\s]+)))?\s*$", re.IGNORECASE)
_GPU_STATUS = re.compile(r"^GPU\s*(\d+):\s*(Pass|Fail|Skip|Warn|Warning|Not Run)\s*$",
                         re.IGNORECASE)
_SECTION = re.compile(r"^[|+]-+\s+(\S.*?)\s+-+\+")
_BORDER = re.compile(r"^\+[-=]+\+[-=]+\+\s*$")
_LEADING_GPU = re.compile(r"^GPU\s+(\d+)\b")
_TEXT_ROWS = {"warning", "info"}
_DCGM_WORDS = re.compile(r"(?i)diagnostic|dcgm|host ?engine|nvvs")


@record
class DiagResult:
    """One result of a test: for the listed GPUs (empty: all GPUs / not said)."""

    gpus: tuple[int, ...]
    status: str
    warnings: tuple[str, ...] = ()
    info: tuple[str, ...] = ()


@record
class DiagTest:
    """One test ("GPU Memory", "memory", "Targeted Power", ...) and its verdict."""

    name: str
    category: str
    status: str
    results: tuple[DiagResult, ...]
    warnings: tuple[str, ...]
    info: tuple[str, ...]

    @property
    def failed(self) -> bool:
        return self.status not in ("pass", "skip", "warn")

    def gpu_status(self, gpu: int) -> str | None:
        """The status for one GPU: its own result, else the all-GPU one, else None."""
        own = [r.status for r in self.results if gpu in r.gpus]
        if own:
            return _worst(own)
        shared = [r.status for r in self.results if not r.gpus]
        return _worst(shared) if shared else None

    def warnings_for(self, gpu: int) -> tuple[str, ...]:
        """Warnings attributed to a GPU (by result, or by a leading "GPU n" in the text)."""
        out = [w for r in self.results if gpu in r.gpus for w in r.warnings]
        out += [w for w in self.warnings if (m := _LEADING_GPU.match(w)) and int(m.group(1)) == gpu]
        return tuple(dict.fromkeys(out))


@record
class DcgmDiag:
    """One `dcgmi diag` run. `ok`: tests ran, none failed (warn and skip allowed), no error."""

    source: str  # "json" or "text"
    version: str | None
    driver_version: str | None
    device_ids: tuple[str, ...]
    tests: tuple[DiagTest, ...]
    runtime_error: str | None
    notes: tuple[str, ...]

    def test(self, name: str) -> DiagTest | None:
        wanted = name.lower()
        return next((t for t in self.tests if t.name.lower() == wanted), None)

    @property
    def fail_count(self) -> int:
        return sum(1 for t in self.tests if t.failed)

    @property
    def warn_count(self) -> int:
        return sum(1 for t in self.tests if t.status == "warn")

    @property
    def skip_count(self) -> int:
        return sum(1 for t in self.tests if t.status == "skip")

    @property
    def pass_count(self) -> int:
        return sum(1 for t in self.tests if t.status == "pass")

    @property
    def failed_tests(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.tests if t.failed)

    @property
    def ok(self) -> bool:
        return bool(self.tests) and self.runtime_error is None and self.fail_count == 0


def parse(text: str | bytes) -> DcgmDiag:
    """Parse `dcgmi diag` output, JSON (`-j`) or the text table."""
    data = require_text(TOOL, text)
    try:
        return _parse(data)
    except ParseError:
        raise
    except (ValueError, KeyError, IndexError, AttributeError, TypeError, RecursionError,
            OverflowError) as exc:
        raise ParseError(TOOL, f"unexpected content: {exc}") from None


def _parse(data: str) -> DcgmDiag:
    lines = data.splitlines()
    if any(_BORDER.match(line) for line in lines):
        return _parse_text(lines)
    offset = 0
    for i, line in enumerate(data.splitlines(keepends=True)):
        if line.lstrip().startswith("{"):
            return _parse_json(data, lines, i, offset + len(line) - len(line.lstrip()))
        offset += len(line)
    errors = [line.strip() for line in lines if line.strip().startswith("Error:")]
    if errors and _DCGM_WORDS.search(data):
        return DcgmDiag("text", None, None, (), (), "\n".join(errors),
                        tuple(x.strip() for x in lines if x.strip()))
    raise ParseError(TOOL, "not dcgmi diag output: no results table, no JSON, no 'Error:' line")


# -- JSON ---------------------------------------------------------------------------------------


def _parse_json(data: str, lines: list[str], first: int, start: int) -> DcgmDiag:
    try:
        doc, _ = json.JSONDecoder().raw_decode(data, start)
    except json.JSONDecodeError as exc:
        raise ParseError(TOOL, f"invalid JSON: {exc.msg}") from None
    if not isinstance(doc, dict):
        raise ParseError(TOOL, "the JSON document is not an object")
    root = doc.get("DCGM GPU Diagnostic", doc.get("DCGM Diagnostic"))
    if not isinstance(root, dict):
        raise ParseError(TOOL, "not dcgmi diag JSON: no 'DCGM GPU Diagnostic' or "
                               "'DCGM Diagnostic' object")
    meta = doc.get("metadata", {})
    if not isinstance(meta, dict):
        raise ParseError(TOOL, "'metadata' is not an object")
    tests: list[DiagTest] = []
    for ci, cat in enumerate(_list(root, "test_categories")):
        if cat is None:
            continue
        if not isinstance(cat, dict):
            raise ParseError(TOOL, f"test_categories[{ci}] is not an object")
        category = _opt_str(cat, "category") or ""
        for test in _list(cat, "tests"):
            if test is None:
                continue  # DCGM 3.1 leaves null entries between tests
            tests.append(_json_test(test, category))
    runtime = root.get("runtime_error", doc.get("runtime_error"))
    version = _opt_str(root, "version") or _opt_str(meta, "version")
    driver = (_opt_str(root, "Driver Version Detected") or _opt_str(root, "driver_version")
              or _opt_str(meta, "Driver Version Detected") or _opt_str(meta, "driver_version"))
    return DcgmDiag(
        source="json", version=version, driver_version=driver,
        device_ids=_device_ids(root, doc), tests=tuple(tests),
        runtime_error=str(runtime) if runtime else None,
        notes=tuple(x.strip() for x in lines[:first] if x.strip()),
    )


def _json_test(raw: Any, category: str) -> DiagTest:
    if not isinstance(raw, dict):
        raise ParseError(TOOL, f"a test in {category!r} is not an object")
    name = _opt_str(raw, "name")
    if not name:
        raise ParseError(TOOL, f"a test in {category!r} has no name")
    results = tuple(_json_result(r, name) for r in _list(raw, "results") if r is not None)
    summary = raw.get("test_summary", {})
    if not isinstance(summary, dict):
        raise ParseError(TOOL, f"test {name!r}: test_summary is not an object")
    warnings = [w for r in results for w in r.warnings] + _messages(summary.get("warnings"))
    info = [i for r in results for i in r.info] + _messages(summary.get("info"))
    if "status" in summary:
        status = _status(summary["status"], name)
    elif results:
        status = _worst([r.status for r in results])
    else:
        raise ParseError(TOOL, f"test {name!r} has neither results nor a summary status")
    return DiagTest(name, category, status, results, tuple(dict.fromkeys(warnings)),
                    tuple(dict.fromkeys(info)))


def _json_result(raw: Any, test: str) -> DiagResult:
    if not isinstance(raw, dict):
        raise ParseError(TOOL, f"a result of {test!r} is not an object")
    ids = raw.get("gpu_ids", raw.get("gpu_id", raw.get("entity_id")))
    return DiagResult(gpus=_gpu_ids(ids, test), status=_status(raw.get("status"), test),
                      warnings=tuple(_messages(raw.get("warnings"))),
                      info=tuple(_messages(raw.get("info"))))


def _gpu_ids(raw: Any, test: str) -> tuple[int, ...]:
    if raw is None:
        return ()
    if isinstance(raw, bool):
        raise ParseError(TOOL, f"{test!r}: GPU id is not a number: {raw!r}")
    if isinstance(raw, int):
        return (raw,)
    if isinstance(raw, str):
        parts = [p.strip() for p in raw.split(",") if p.strip()]
        if all(p.isdigit() for p in parts):
            return tuple(int(p) for p in parts)
    raise ParseError(TOOL, f"{test!r}: unreadable GPU ids {raw!r}")


def _messages(raw: Any) -> list[str]:
    if raw is None:
        return []
    items = raw if isinstance(raw, list) else [raw]
    out = []
    for item in items:
        if isinstance(item, dict):
            item = item.get("warning", item.get("message", item.get("info")))
        if not isinstance(item, str):
            raise ParseError(TOOL, f"a warning/info entry is not text: {item!r}")
        out.append(item)
    return out


def _device_ids(root: Mapping[str, Any], doc: Mapping[str, Any]) -> tuple[str, ...]:
    ids = root.get("GPU Device IDs")
    if isinstance(ids, list):
        return tuple(str(i) for i in ids)
    out: list[str] = []
    groups = doc.get("entity_groups", [])
    if not isinstance(groups, list):
        raise ParseError(TOOL, "'entity_groups' is not a list")
    for group in groups:
        if not isinstance(group, dict):
            raise ParseError(TOOL, "an entity group is not an object")
        if group.get("entity_group") not in (None, "GPU"):
            continue
        for entity in _list(group, "entities"):
            if isinstance(entity, dict) and isinstance(entity.get("device_id"), str):
                out.append(entity["device_id"])
    return tuple(out)


# -- text ---------------------------------------------------------------------------------------


class _Row:
    """A table row being assembled: its name, value chunks, section."""

    def __init__(self, name: str, chunk: str, section: str) -> None:
        self.name = name
        self.chunks = [chunk]
        self.section = section


def _parse_text(lines: list[str]) -> DcgmDiag:
    bars: list[int] | None = None
    section = ""
    rows: list[_Row] = []
    notes: list[str] = []
    for line in lines:
        stripped = line.rstrip()
        if _BORDER.match(stripped):
            if bars is None:
                bars = [i for i, c in enumerate(stripped) if c == "+"]
            continue
        if m := _SECTION.match(stripped):
            section = m.group(1).strip()
            continue
        if stripped.startswith("|"):
            name, chunk = _cells(stripped, bars)
            if name == "Diagnostic" and chunk.strip() == "Result" and not section:
                continue  # the column header
            if name:
                rows.append(_Row(name, chunk, section))
            elif rows:
                rows[-1].chunks.append(chunk)
            else:
                raise ParseError(TOOL, f"continuation line before any row: {stripped!r}")
            continue
        if stripped.strip():
            notes.append(stripped.strip())
    # the value cell is " " + 45 characters of text + "  ": a wrapped line holds exactly 45
    width = (bars[2] - bars[1] - 4) if bars and len(bars) >= 3 else None
    return _assemble(rows, notes, width)


def _cells(line: str, bars: list[int] | None) -> tuple[str, str]:
    """(name, value chunk) of a `| name | value |` line; the chunk keeps its inner spaces."""
    if bars and len(bars) >= 3 and len(line) > bars[2] and line[bars[1]] == "|":
        return line[bars[0] + 1:bars[1]].strip(), line[bars[1] + 2:bars[2]].rstrip()
    parts = line.split("|")
    if len(parts) < 4:
        raise ParseError(TOOL, f"table line without two cells: {line!r}")
    return parts[1].strip(), "|".join(parts[2:-1]).removeprefix(" ").rstrip()


def _join(chunks: list[str], width: int | None) -> str:
    if width is None:
        return " ".join(c.strip() for c in chunks)
    return "".join(c.ljust(width) for c in chunks[:-1]) + chunks[-1]


def _assemble(rows: list[_Row], notes: list[str], width: int | None) -> DcgmDiag:
    meta: dict[str, str] = {}
    tests: list[DiagTest] = []
    for row in rows:
        key = row.name.lower()
        if row.section.lower() == "metadata":
            meta[key] = _join(row.chunks, width).strip()
        elif key in _TEXT_ROWS:
            if not tests:
                raise ParseError(TOOL, f"{row.name} row before any test")
            last = tests[-1]
            text = _join(row.chunks, width).strip()
            if key == "warning":
                tests[-1] = _with(last, warnings=last.warnings + (text,))
            else:
                tests[-1] = _with(last, info=last.info + (text,))
        else:
            tests.append(_text_test(row))
    ids = meta.get("gpu device ids detected")
    runtime = "\n".join(n for n in notes if n.startswith("Error")) or None
    return DcgmDiag(
        source="text", version=meta.get("dcgm version"),
        driver_version=meta.get("driver version detected"),
        device_ids=tuple(i.strip() for i in ids.split(",") if i.strip()) if ids else (),
        tests=tuple(tests), runtime_error=runtime, notes=tuple(notes),
    )


def _text_test(row: _Row) -> DiagTest:
    results: list[DiagResult] = []
    overall: str | None = None
    for chunk in (c.strip() for c in row.chunks):
        if m := _STATUS.match(chunk):
            status = _status(m.group(1), row.name)
            gpus = tuple(int(g) for g in re.findall(r"\d+", m.group(3) or ""))
            if not gpus and overall is None:
                overall = status
            results.append(DiagResult(gpus, status))
        elif m := _GPU_STATUS.match(chunk):
            results.append(DiagResult((int(m.group(1)),), _status(m.group(2), row.name)))
        else:
            results.append(DiagResult((), _status(chunk, row.name)))
    status = overall or _worst([r.status for r in results])
    if overall is not None:
        status = _worst([overall] + [r.status for r in results if r.gpus])
    return DiagTest(row.name, row.section, status, tuple(results), (), ())


def _with(test: DiagTest, warnings: tuple[str, ...] | None = None,
          info: tuple[str, ...] | None = None) -> DiagTest:
    return DiagTest(test.name, test.category, test.status, test.results,
                    test.warnings if warnings is None else warnings,
                    test.info if info is None else info)


# -- shared -------------------------------------------------------------------------------------


_RANK = {"fail": 5, "warn": 3, "not run": 2, "pass": 1, "skip": 0}


def _worst(statuses: list[str]) -> str:
    """fail > unknown > warn > not run > pass > skip (all-skip stays skip)."""
    if not statuses:
        raise ParseError(TOOL, "a test without any status")
    return max(statuses, key=lambda s: _RANK.get(s, 4))


def _status(raw: Any, test: str) -> str:
    if not isinstance(raw, str) or not raw.strip():
        raise ParseError(TOOL, f"test {test!r} has no status text: {raw!r}")
    word = " ".join(raw.strip().lower().split())
    return _STATUS_WORDS.get(word, word)


def _list(raw: Mapping[str, Any], key: str) -> list[Any]:
    value = raw.get(key, [])
    if not isinstance(value, list):
        raise ParseError(TOOL, f"{key!r} is not a list")
    return value


def _opt_str(raw: Mapping[str, Any], key: str) -> str | None:
    value = raw.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise ParseError(TOOL, f"{key!r} is not a string: {value!r}")
    return value
