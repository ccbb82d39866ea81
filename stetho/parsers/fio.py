"""Parse `fio --output-format=json`: per job, read/write/trim IOPS, bandwidth and latency.

What real runs print, and this parser reads:

- fio writes its own complaints to stderr, and when the streams are merged they come *before* the
  JSON ("fio: time_based requires a runtime/timeout setting", "fio: pid=0, err=22/file:...").
  A run stopped by Ctrl-C starts with "fio: terminating on signal 2" and still prints the
  numbers of the part that ran. Those lines are kept (`prelude`) and set `interrupted`.
- A job that failed has a non-zero `"error"` (errno: 22 is EINVAL) and zeros everywhere else.
- Latencies are in nanoseconds (`clat_ns`) since fio 3.0, in microseconds (`clat`) before.
  Percentiles are keyed by strings such as "99.000000"; fio 3.1 pads the list with unused
  `"0.00" : 0` slots (dropped here: they are not percentiles). The keys are kept as printed.
- Bandwidth is `bw_bytes` (bytes/s) in newer fio and only `bw` (KiB/s) in older ones.

A failed or interrupted run parses (the check reports it); only text that holds no fio JSON
document is a ParseError.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from stetho.core.record import record
from stetho.parsers import ParseError
from stetho.parsers._text import require_text

TOOL = "fio"

_DIRECTIONS = ("read", "write", "trim")


@record
class FioLatency:
    """One latency kind (submission, completion or total) in nanoseconds."""

    min_ns: float
    max_ns: float
    mean_ns: float
    stddev_ns: float
    percentiles: tuple[tuple[str, float], ...] = ()  # ("99.000000", 138240.0), as printed

    def percentile_ns(self, p: float) -> float | None:
        """The value at percentile `p` (99.0 for "99.000000"); None if fio did not report it."""
        for key, value in self.percentiles:
            if abs(float(key) - p) < 1e-6:
                return value
        return None


@record
class FioDirection:
    """Read, write or trim results of one job. `active` says whether this direction did any I/O."""

    io_bytes: int
    bw_bytes_per_s: float
    iops: float
    runtime_ms: int
    total_ios: int
    short_ios: int
    drop_ios: int
    slat: FioLatency | None
    clat: FioLatency | None
    lat: FioLatency | None

    @property
    def active(self) -> bool:
        return self.total_ios > 0 or self.io_bytes > 0

    def clat_percentile_ns(self, p: float) -> float | None:
        return self.clat.percentile_ns(p) if self.clat else None


@record
class FioJob:
    """One job (or one group with group_reporting). `error` is fio's errno for it, 0 when fine."""

    name: str
    groupid: int
    error: int
    elapsed_s: int
    options: tuple[tuple[str, str], ...]
    read: FioDirection
    write: FioDirection
    trim: FioDirection
    job_runtime_ms: int | None
    usr_cpu: float | None
    sys_cpu: float | None

    def option(self, key: str) -> str | None:
        return next((v for k, v in self.options if k == key), None)


@record
class FioDiskUtil:
    name: str
    read_ios: int
    write_ios: int
    util_percent: float


@record
class FioRun:
    """A whole fio run. `ok`: at least one job, no job error, not interrupted.

    The top-level figures add up all jobs (fio without group_reporting prints one entry per
    job); latency percentiles take the worst job, since a baseline is about the slowest I/O.
    """

    version: str
    timestamp: int | None
    jobs: tuple[FioJob, ...]
    global_options: tuple[tuple[str, str], ...]
    disk_util: tuple[FioDiskUtil, ...]
    prelude: tuple[str, ...]  # non-JSON lines before the document (merged stderr), verbatim
    trailing: tuple[str, ...]  # non-JSON lines after it

    @property
    def interrupted(self) -> bool:
        return any("terminating on signal" in line for line in self.prelude + self.trailing)

    @property
    def errors(self) -> tuple[int, ...]:
        return tuple(j.error for j in self.jobs if j.error)

    @property
    def ok(self) -> bool:
        return bool(self.jobs) and not self.errors and not self.interrupted

    @property
    def messages(self) -> tuple[str, ...]:
        """fio's own "fio: ..." lines, the reason a job failed or stopped."""
        return tuple(line for line in self.prelude + self.trailing if line.startswith("fio:"))

    @property
    def read_iops(self) -> float:
        return sum(j.read.iops for j in self.jobs)

    @property
    def write_iops(self) -> float:
        return sum(j.write.iops for j in self.jobs)

    @property
    def read_bw_bytes_per_s(self) -> float:
        return sum(j.read.bw_bytes_per_s for j in self.jobs)

    @property
    def write_bw_bytes_per_s(self) -> float:
        return sum(j.write.bw_bytes_per_s for j in self.jobs)

    def read_clat_percentile_ns(self, p: float) -> float | None:
        return _worst(j.read.clat_percentile_ns(p) for j in self.jobs if j.read.active)

    def write_clat_percentile_ns(self, p: float) -> float | None:
        return _worst(j.write.clat_percentile_ns(p) for j in self.jobs if j.write.active)

    @property
    def read_clat_mean_ns(self) -> float | None:
        return _worst(j.read.clat.mean_ns if j.read.clat else None
                      for j in self.jobs if j.read.active)

    @property
    def write_clat_mean_ns(self) -> float | None:
        return _worst(j.write.clat.mean_ns if j.write.clat else None
                      for j in self.jobs if j.write.active)


def parse(text: str | bytes) -> FioRun:
    """Parse fio's JSON output, with or without stderr lines around it."""
    data = require_text(TOOL, text)
    try:
        return _parse(data)
    except ParseError:
        raise
    except (ValueError, KeyError, IndexError, AttributeError, TypeError, RecursionError,
            OverflowError) as exc:
        raise ParseError(TOOL, f"unexpected content: {exc}") from None


def _parse(data: str) -> FioRun:
    doc, prelude, trailing = _document(data)
    if "fio version" not in doc or "jobs" not in doc:
        raise ParseError(TOOL, "not fio JSON output: no 'fio version' or 'jobs'")
    version = _str(doc, "fio version")
    jobs = tuple(_job(j, i) for i, j in enumerate(_list(doc, "jobs")))
    disks = tuple(_disk(d) for d in _list(doc, "disk_util", required=False))
    stamp = doc.get("timestamp")
    return FioRun(
        version=version, timestamp=stamp if isinstance(stamp, int) else None, jobs=jobs,
        global_options=_options(doc.get("global options")), disk_util=disks,
        prelude=prelude, trailing=trailing,
    )


def _document(data: str) -> tuple[dict[str, Any], tuple[str, ...], tuple[str, ...]]:
    """The JSON object that starts on its own line, and the lines before and after it."""
    lines = data.splitlines(keepends=True)
    offset = 0
    for i, line in enumerate(lines):
        if line.lstrip().startswith("{"):
            start = offset + (len(line) - len(line.lstrip()))
            try:
                doc, end = json.JSONDecoder().raw_decode(data, start)
            except json.JSONDecodeError as exc:
                raise ParseError(TOOL, f"invalid JSON: {exc.msg} at line "
                                       f"{data.count(chr(10), 0, exc.pos) + 1}") from None
            if not isinstance(doc, dict):
                raise ParseError(TOOL, "the JSON document is not an object")
            prelude = tuple(x.rstrip("\r\n") for x in lines[:i] if x.strip())
            trailing = tuple(x for x in data[end:].splitlines() if x.strip())
            return doc, prelude, trailing
        offset += len(line)
    raise ParseError(TOOL, "not fio JSON output: no JSON document")


def _job(raw: Any, index: int) -> FioJob:
    if not isinstance(raw, dict):
        raise ParseError(TOOL, f"jobs[{index}] is not an object")
    return FioJob(
        name=_str(raw, "jobname"), groupid=_int(raw, "groupid"), error=_int(raw, "error"),
        elapsed_s=_int(raw, "elapsed", default=0), options=_options(raw.get("job options")),
        read=_direction(raw, "read"), write=_direction(raw, "write"),
        trim=_direction(raw, "trim"),
        job_runtime_ms=_opt_int(raw, "job_runtime"),
        usr_cpu=_opt_num(raw, "usr_cpu"), sys_cpu=_opt_num(raw, "sys_cpu"),
    )


def _direction(job: Mapping[str, Any], name: str) -> FioDirection:
    raw = job.get(name)
    if not isinstance(raw, dict):
        raise ParseError(TOOL, f"job {job.get('jobname')!r} has no {name!r} object")
    if "bw_bytes" in raw:
        bw = _num(raw, "bw_bytes")
    else:
        bw = _num(raw, "bw") * 1024.0  # KiB/s before fio 3.x added bw_bytes
    return FioDirection(
        io_bytes=_int(raw, "io_bytes"), bw_bytes_per_s=bw, iops=_num(raw, "iops"),
        runtime_ms=_int(raw, "runtime"), total_ios=_int(raw, "total_ios"),
        short_ios=_int(raw, "short_ios", default=0), drop_ios=_int(raw, "drop_ios", default=0),
        slat=_latency(raw, "slat"), clat=_latency(raw, "clat"), lat=_latency(raw, "lat"),
    )


def _latency(raw: Mapping[str, Any], kind: str) -> FioLatency | None:
    if f"{kind}_ns" in raw:
        lat, scale = raw[f"{kind}_ns"], 1.0
    elif kind in raw:
        lat, scale = raw[kind], 1000.0  # microseconds before fio 3.0
    else:
        return None
    if not isinstance(lat, dict):
        raise ParseError(TOOL, f"{kind} latency is not an object")
    pct = lat.get("percentile", {})
    if not isinstance(pct, dict):
        raise ParseError(TOOL, f"{kind} percentiles are not an object")
    percentiles: list[tuple[str, float]] = []
    for key, value in pct.items():
        try:
            p = float(key)
        except ValueError:
            raise ParseError(TOOL, f"{kind} percentile key {key!r} is not a number") from None
        if p <= 0.0:
            continue  # fio 3.1 pads the list with unused "0.00" : 0 slots
        percentiles.append((key, _as_num(value, f"{kind} percentile {key}") * scale))
    return FioLatency(
        min_ns=_num(lat, "min") * scale, max_ns=_num(lat, "max") * scale,
        mean_ns=_num(lat, "mean") * scale, stddev_ns=_num(lat, "stddev") * scale,
        percentiles=tuple(percentiles),
    )


def _disk(raw: Any) -> FioDiskUtil:
    if not isinstance(raw, dict):
        raise ParseError(TOOL, "disk_util entry is not an object")
    return FioDiskUtil(name=_str(raw, "name"), read_ios=_int(raw, "read_ios"),
                       write_ios=_int(raw, "write_ios"), util_percent=_num(raw, "util"))


def _options(raw: Any) -> tuple[tuple[str, str], ...]:
    if raw is None:
        return ()
    if not isinstance(raw, dict):
        raise ParseError(TOOL, "job options are not an object")
    return tuple((str(k), str(v)) for k, v in raw.items())


def _worst(values: Any) -> float | None:
    present = [v for v in values if v is not None]
    return max(present) if present else None


def _list(raw: Mapping[str, Any], key: str, required: bool = True) -> list[Any]:
    value = raw.get(key)
    if value is None and not required:
        return []
    if not isinstance(value, list):
        raise ParseError(TOOL, f"{key!r} is not a list")
    return value


def _str(raw: Mapping[str, Any], key: str) -> str:
    value = raw.get(key)
    if not isinstance(value, str):
        raise ParseError(TOOL, f"{key!r} is missing or not a string")
    return value


def _as_num(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ParseError(TOOL, f"{what} is not a number: {value!r}")
    return float(value)


def _num(raw: Mapping[str, Any], key: str) -> float:
    if key not in raw:
        raise ParseError(TOOL, f"{key!r} is missing")
    return _as_num(raw[key], repr(key))


def _opt_num(raw: Mapping[str, Any], key: str) -> float | None:
    return _num(raw, key) if key in raw else None


def _int(raw: Mapping[str, Any], key: str, default: int | None = None) -> int:
    if key not in raw and default is not None:
        return default
    value = _num(raw, key)
    if value != int(value):
        raise ParseError(TOOL, f"{key!r} is not an integer: {value!r}")
    return int(value)


def _opt_int(raw: Mapping[str, Any], key: str) -> int | None:
    return _int(raw, key) if key in raw else None
