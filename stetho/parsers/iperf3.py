"""Parse `iperf3 -J` (client side): throughput as sent and as received, retransmits, errors.

What real runs print, and this parser reads:

- The document has `start`, `intervals` and `end`; `end.sum_sent` is what the sender pushed and
  `end.sum_received` what the receiver counted. The receiver's figure is the one to judge (data
  the sender queued but the far side never got is not throughput).
- `retransmits` exists only for TCP on Linux senders (None elsewhere, never 0 by default).
- `-O N` omits the first N seconds: those intervals carry `"omitted": true` and are not in the
  summary; they are kept here and flagged.
- A failed run is still JSON, with an `"error"` string: "unable to connect to server:
  Connection refused", or "interrupt - the client has terminated" after SIGINT (then the
  intervals that ran are there and `sum_received` is all zeros). iperf 3.12 exits 0 in that
  case, so the `error` field, not the exit code, decides.
- Some builds print warnings before the `{`, and some an `iperf3: error - ...` line after the
  closing brace; both are kept, and a trailing error line counts as the run's error.

`ok` is True only for a run without error whose receiver counted a non-zero rate. Text that is not
an iperf3 JSON document is a ParseError.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from stetho.core.record import record
from stetho.parsers import ParseError
from stetho.parsers._text import require_text

TOOL = "iperf3"

_TRAILING_ERROR = re.compile(r"^iperf3:\s*(error - .*|interrupt - .*)$")


@record
class Iperf3Interval:
    """One reporting interval (summed over streams)."""

    start_s: float
    end_s: float
    bytes: int
    bits_per_second: float
    retransmits: int | None
    omitted: bool


@record
class Iperf3Summary:
    """`end.sum_sent` or `end.sum_received`."""

    seconds: float
    bytes: int
    bits_per_second: float
    retransmits: int | None


@record
class Iperf3Run:
    """One client run. `error` is iperf3's own error text, None when it reported none."""

    version: str | None
    system_info: str | None
    protocol: str | None  # "TCP", "UDP", "SCTP"
    num_streams: int | None
    duration_s: float | None
    omit_s: float | None
    reverse: bool
    target_bitrate: float | None  # -b, bits/s; None when not limited (iperf3 prints 0)
    local_host: str | None
    remote_host: str | None
    remote_port: int | None
    intervals: tuple[Iperf3Interval, ...]
    sent: Iperf3Summary | None
    received: Iperf3Summary | None
    error: str | None
    sender_congestion: str | None
    receiver_congestion: str | None
    host_cpu_percent: float | None
    remote_cpu_percent: float | None
    prelude: tuple[str, ...] = ()
    trailing: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return (self.error is None and self.received is not None
                and self.received.bits_per_second > 0)

    @property
    def receiver_bits_per_second(self) -> float | None:
        return self.received.bits_per_second if self.received else None

    @property
    def sender_bits_per_second(self) -> float | None:
        return self.sent.bits_per_second if self.sent else None

    @property
    def retransmits(self) -> int | None:
        return self.sent.retransmits if self.sent else None

    @property
    def measured_intervals(self) -> tuple[Iperf3Interval, ...]:
        """The intervals the summary covers (omitted warm-up seconds left out)."""
        return tuple(i for i in self.intervals if not i.omitted)


def parse(text: str | bytes) -> Iperf3Run:
    """Parse the JSON iperf3 -J printed, with any stray lines around it."""
    data = require_text(TOOL, text)
    try:
        return _parse(data)
    except ParseError:
        raise
    except (ValueError, KeyError, IndexError, AttributeError, TypeError, RecursionError,
            OverflowError) as exc:
        raise ParseError(TOOL, f"unexpected content: {exc}") from None


def _parse(data: str) -> Iperf3Run:
    doc, prelude, trailing = _document(data)
    if not ({"start", "end"} <= doc.keys() or "error" in doc):
        raise ParseError(TOOL, "not iperf3 JSON output: no 'start'/'end' and no 'error'")
    start = _obj(doc, "start")
    end = _obj(doc, "end")
    test = _obj(start, "test_start")
    connected = start.get("connected") or []
    if not isinstance(connected, list):
        raise ParseError(TOOL, "'start.connected' is not a list")
    first = connected[0] if connected else {}
    if not isinstance(first, dict):
        raise ParseError(TOOL, "'start.connected[0]' is not an object")
    error = doc.get("error")
    if error is not None and not isinstance(error, str):
        raise ParseError(TOOL, f"'error' is not a string: {error!r}")
    for line in trailing:
        if error is None and (m := _TRAILING_ERROR.match(line)):
            error = m.group(1)
    cpu = _obj(end, "cpu_utilization_percent")
    target = _opt_num(test, "target_bitrate")
    return Iperf3Run(
        version=_opt_str(start, "version"), system_info=_opt_str(start, "system_info"),
        protocol=_opt_str(test, "protocol"), num_streams=_opt_int(test, "num_streams"),
        duration_s=_opt_num(test, "duration"), omit_s=_opt_num(test, "omit"),
        reverse=bool(_opt_int(test, "reverse")), target_bitrate=target or None,
        local_host=_opt_str(first, "local_host"), remote_host=_opt_str(first, "remote_host"),
        remote_port=_opt_int(first, "remote_port"),
        intervals=tuple(_interval(i) for i in _list(doc, "intervals")),
        sent=_summary(end, "sum_sent"), received=_summary(end, "sum_received"),
        error=error, sender_congestion=_opt_str(end, "sender_tcp_congestion"),
        receiver_congestion=_opt_str(end, "receiver_tcp_congestion"),
        host_cpu_percent=_opt_num(cpu, "host_total"),
        remote_cpu_percent=_opt_num(cpu, "remote_total"),
        prelude=prelude, trailing=trailing,
    )


def _document(data: str) -> tuple[dict[str, Any], tuple[str, ...], tuple[str, ...]]:
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
            return doc, prelude, tuple(x for x in data[end:].splitlines() if x.strip())
        offset += len(line)
    raise ParseError(TOOL, "not iperf3 JSON output: no JSON document")


def _interval(raw: Any) -> Iperf3Interval:
    if not isinstance(raw, dict):
        raise ParseError(TOOL, "an interval is not an object")
    s = _obj(raw, "sum")
    if not s:
        raise ParseError(TOOL, "an interval has no 'sum'")
    return Iperf3Interval(
        start_s=_num(s, "start"), end_s=_num(s, "end"), bytes=_int(s, "bytes"),
        bits_per_second=_num(s, "bits_per_second"), retransmits=_opt_int(s, "retransmits"),
        omitted=bool(s.get("omitted", False)),
    )


def _summary(end: Mapping[str, Any], key: str) -> Iperf3Summary | None:
    raw = _obj(end, key)
    if not raw:
        return None
    return Iperf3Summary(seconds=_num(raw, "seconds"), bytes=_int(raw, "bytes"),
                         bits_per_second=_num(raw, "bits_per_second"),
                         retransmits=_opt_int(raw, "retransmits"))


def _obj(raw: Mapping[str, Any], key: str) -> dict[str, Any]:
    value = raw.get(key, {})
    if not isinstance(value, dict):
        raise ParseError(TOOL, f"{key!r} is not an object")
    return value


def _list(raw: Mapping[str, Any], key: str) -> list[Any]:
    value = raw.get(key, [])
    if not isinstance(value, list):
        raise ParseError(TOOL, f"{key!r} is not a list")
    return value


def _num(raw: Mapping[str, Any], key: str) -> float:
    value = raw.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ParseError(TOOL, f"{key!r} is missing or not a number: {value!r}")
    return float(value)


def _opt_num(raw: Mapping[str, Any], key: str) -> float | None:
    return _num(raw, key) if key in raw else None


def _int(raw: Mapping[str, Any], key: str) -> int:
    value = _num(raw, key)
    if value != int(value):
        raise ParseError(TOOL, f"{key!r} is not an integer: {value!r}")
    return int(value)


def _opt_int(raw: Mapping[str, Any], key: str) -> int | None:
    return _int(raw, key) if key in raw else None


def _opt_str(raw: Mapping[str, Any], key: str) -> str | None:
    value = raw.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise ParseError(TOOL, f"{key!r} is not a string: {value!r}")
    return value
