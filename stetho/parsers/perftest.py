"""Parse perftest's text (`ib_write_bw`, `ib_send_lat`, and the other ib_*_bw / ib_*_lat tools).

perftest prints a settings block between dashed lines (`Device : mlx5_0`, `Link type : IB` or
`Ethernet` for RoCE, `Mtu : 4096[B]`, `GID index : 3`, ...), the local and remote queue-pair
addresses (`GID:` lines on RoCE), then one table whose header names the columns and the unit:

- bandwidth tests: `#bytes #iterations BW peak[Gb/sec] BW average[Gb/sec] MsgRate[Mpps]`,
  `[MB/sec]` without `--report_gbits` (perftest divides by 0x100000 for MB/sec, by 125000000
  for Gb/sec); per-port and `#sl` columns in some modes;
- latency tests: `t_min[usec] t_max[usec] t_typical[usec] t_avg[usec] t_stdev[usec]
  99% percentile[usec] 99.9% percentile[usec]`, fewer columns in older or `-D` runs.

Quirks seen in real output and handled here: two settings per line separated by TABs or by
runs of spaces (`rdma_cm QPs\\t : ON`, `Data ex. method : rdma_cm \\tTOS    : 41`), TABs inside
table rows, "Conflicting CPU frequency values detected" lines between the header and the rows
(kept as `warnings`), and a peak of 0.00 beside a real average when perftest did not compute the
peak (duration mode, server side): that peak is None, not 0. Values stay in the unit printed;
`*_bytes_per_s` properties convert. A run with error lines or no rows parses with `ok` False;
text without a perftest banner or table is a ParseError.
"""

from __future__ import annotations

import re

from stetho.core.record import record
from stetho.parsers import ParseError
from stetho.parsers._text import require_text

TOOL = "perftest"

_DASHES = re.compile(r"^\s*-{20,}\s*$")
_TITLE = re.compile(r"^\s*(\S.*?(?:BW|Bandwidth|Latency) Test)\s*$")
_ADDRESS = re.compile(r"^\s*(local|remote) address:\s*LID\s+(\S+)\s+QPN\s+(\S+)\s+PSN\s+(\S+)")
_GID = re.compile(r"^\s*GID:\s*(\S+)\s*$")
_SETTING = re.compile(r"([A-Za-z][\w .#*/()-]*?)\s*:\s*(\S+)")
_COLUMN = re.compile(r"BW\s+\w+\[[^\]]*\]|MsgRate(?:\s+\w+)?\[[^\]]*\]"
                     r"|\d+(?:\.\d+)?%\s+percentile\[[^\]]*\]|\S+")
_NUMBER = re.compile(r"^[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?$")
_CPU_FREQ = re.compile(r"Conflicting CPU frequency values detected")
_ERROR = re.compile(r"(?i)\b(error|errors|failed|fail|couldn't|could not|unable|"
                    r"invalid|timeout|timed out|not supported)\b")
_BRACKET = re.compile(r"^(\d+)\[B\]$")
# bytes per second for one unit of each bandwidth column unit perftest prints
_BW_SCALE = {"Gb/sec": 125_000_000.0, "MB/sec": float(0x100000), "MiB/sec": float(0x100000),
             "Gbps": 125_000_000.0}
_LAT_COLUMNS = {
    "t_min[usec]": "t_min_us", "t_max[usec]": "t_max_us", "t_typical[usec]": "t_typical_us",
    "t_avg[usec]": "t_avg_us", "t_stdev[usec]": "t_stdev_us",
    "99% percentile[usec]": "p99_us", "99.9% percentile[usec]": "p999_us",
}


@record
class PerftestAddress:
    side: str  # "local" or "remote"
    lid: str
    qpn: str
    psn: str
    gid: str | None  # RoCE and global routing only


@record
class PerftestRow:
    """One message size. Bandwidth columns are in `bw_unit` as printed; latencies in µs."""

    size_bytes: int
    iterations: int
    bw_unit: str | None = None
    bw_peak: float | None = None
    bw_average: float | None = None
    msg_rate_mpps: float | None = None
    t_min_us: float | None = None
    t_max_us: float | None = None
    t_typical_us: float | None = None
    t_avg_us: float | None = None
    t_stdev_us: float | None = None
    p99_us: float | None = None
    p999_us: float | None = None

    @property
    def bw_average_bytes_per_s(self) -> float | None:
        return _to_bytes(self.bw_average, self.bw_unit)

    @property
    def bw_peak_bytes_per_s(self) -> float | None:
        return _to_bytes(self.bw_peak, self.bw_unit)

    @property
    def bw_average_gbps(self) -> float | None:
        """Average bandwidth in Gbit/s whatever unit was printed (link rates are quoted so)."""
        b = self.bw_average_bytes_per_s
        return None if b is None else b * 8 / 1e9


@record
class PerftestRun:
    """One perftest run as printed by the side that ran it (client or server)."""

    title: str  # "RDMA_Write BW Test", "Send Latency Test", ...
    settings: tuple[tuple[str, str], ...]  # every `key : value` of the banner, as printed
    addresses: tuple[PerftestAddress, ...]
    columns: tuple[str, ...]
    rows: tuple[PerftestRow, ...]
    warnings: tuple[str, ...]  # CPU frequency notices
    errors: tuple[str, ...]  # lines that report a failure
    other: tuple[str, ...] = ()  # any other line outside the tables, verbatim

    @property
    def kind(self) -> str:
        """"bw" or "lat"."""
        return "lat" if "Latency" in self.title else "bw"

    def setting(self, key: str) -> str | None:
        wanted = key.lower()
        return next((v for k, v in self.settings if k.lower() == wanted), None)

    @property
    def device(self) -> str | None:
        return self.setting("Device")

    @property
    def link_type(self) -> str | None:
        """"IB" for InfiniBand, "Ethernet" for RoCE."""
        return self.setting("Link type")

    @property
    def transport(self) -> str | None:
        return self.setting("Transport type")

    @property
    def connection_type(self) -> str | None:
        return self.setting("Connection type")

    @property
    def mtu_bytes(self) -> int | None:
        return _bracket_int(self.setting("Mtu"))

    @property
    def num_qps(self) -> int | None:
        return _int_or_none(self.setting("Number of qps"))

    @property
    def gid_index(self) -> int | None:
        return _int_or_none(self.setting("GID index"))

    @property
    def rdma_cm(self) -> bool | None:
        value = self.setting("rdma_cm QPs")
        return None if value is None else value.upper() == "ON"

    @property
    def ok(self) -> bool:
        if not self.rows or self.errors:
            return False
        if self.kind == "bw":
            return all(r.bw_average is not None and r.bw_average > 0 for r in self.rows)
        return all(r.t_typical_us is not None or r.t_avg_us is not None for r in self.rows)

    @property
    def largest(self) -> PerftestRow | None:
        return max(self.rows, key=lambda r: r.size_bytes) if self.rows else None

    @property
    def smallest(self) -> PerftestRow | None:
        return min(self.rows, key=lambda r: r.size_bytes) if self.rows else None

    def row(self, size_bytes: int) -> PerftestRow | None:
        return next((r for r in self.rows if r.size_bytes == size_bytes), None)

    @property
    def bw_average_bytes_per_s(self) -> float | None:
        """Average bandwidth at the largest message size (the one a link is judged by)."""
        return self.largest.bw_average_bytes_per_s if self.largest else None

    @property
    def bw_peak_bytes_per_s(self) -> float | None:
        return self.largest.bw_peak_bytes_per_s if self.largest else None

    @property
    def t_typical_us(self) -> float | None:
        """Typical latency at the smallest message size (the one latency is judged by)."""
        return self.smallest.t_typical_us if self.smallest else None


def parse(text: str | bytes) -> PerftestRun:
    """Parse one perftest run's output (client or server side)."""
    data = require_text(TOOL, text)
    try:
        return _parse(data)
    except ParseError:
        raise
    except (ValueError, KeyError, IndexError, AttributeError, TypeError, OverflowError) as exc:
        raise ParseError(TOOL, f"unexpected content: {exc}") from None


def _parse(data: str) -> PerftestRun:
    title: str | None = None
    settings: list[tuple[str, str]] = []
    addresses: list[PerftestAddress] = []
    columns: tuple[str, ...] = ()
    rows: list[PerftestRow] = []
    warnings: list[str] = []
    errors: list[str] = []
    other: list[str] = []
    in_banner = False
    in_table = False
    for raw in data.splitlines():
        line = raw.strip()
        if not line or line.strip("*") == "" or "Waiting for client" in line:
            continue
        if _DASHES.match(raw):
            in_banner = title is not None and not settings and not columns
            in_table = False
            continue
        if line.endswith("Test") and (m := _TITLE.match(raw)):
            if title is not None:
                raise ParseError(TOOL, f"more than one perftest run in one text: {line!r}")
            title = m.group(1)
            in_banner = True
            continue
        if _CPU_FREQ.search(line):
            warnings.append(line)
            continue
        if line.startswith("#bytes"):
            if columns:
                raise ParseError(TOOL, "more than one results table")
            columns = tuple(c for c in _COLUMN.findall(line))
            in_table = in_banner = False
            continue
        if in_table or (columns and not rows and _is_row(line)):
            if not _is_row(line):
                (errors if _ERROR.search(line) else other).append(line)
                continue
            rows.append(_row(line.split(), columns))
            in_table = True
            continue
        if m := _ADDRESS.match(raw):
            addresses.append(PerftestAddress(m.group(1), m.group(2), m.group(3), m.group(4), None))
            continue
        if (m := _GID.match(raw)) and addresses:
            last = addresses[-1]
            addresses[-1] = PerftestAddress(last.side, last.lid, last.qpn, last.psn, m.group(1))
            continue
        if in_banner and ":" in line:
            settings.extend((k.strip(), v) for k, v in _SETTING.findall(raw))
            continue
        (errors if _ERROR.search(line) else other).append(line)
    if title is None and not columns:
        raise ParseError(TOOL, "not perftest output: no '... BW Test'/'... Latency Test' banner "
                               "and no '#bytes' table")
    return PerftestRun(
        title=title or "", settings=tuple(settings), addresses=tuple(addresses),
        columns=columns, rows=tuple(rows), warnings=tuple(warnings), errors=tuple(errors),
        other=tuple(other),
    )


def _is_row(line: str) -> bool:
    toks = line.split()
    return len(toks) >= 3 and all(_NUMBER.match(t) for t in toks)


def _row(toks: list[str], columns: tuple[str, ...]) -> PerftestRow:
    if len(toks) != len(columns):
        raise ParseError(TOOL, f"row has {len(toks)} cells for {len(columns)} columns: "
                               f"{' '.join(toks)}")
    values = dict(zip(columns, toks, strict=True))
    if "#bytes" not in values or "#iterations" not in values:
        raise ParseError(TOOL, f"table has no #bytes/#iterations columns: {columns}")
    size, iters = values["#bytes"], values["#iterations"]
    if not size.isdigit() or not iters.isdigit():
        raise ParseError(TOOL, f"#bytes/#iterations not integers: {size!r} {iters!r}")
    units = {c[c.index("[") + 1:-1] for c in columns if c.startswith(("BW peak[", "BW average["))}
    if len(units) > 1:
        raise ParseError(TOOL, f"bandwidth columns in two units: {columns}")
    unit = units.pop() if units else None
    if unit is not None and unit not in _BW_SCALE:
        raise ParseError(TOOL, f"unknown bandwidth unit {unit!r}")
    lat = {_LAT_COLUMNS[c]: float(v) for c, v in values.items() if c in _LAT_COLUMNS}
    peak = _cell(values, f"BW peak[{unit}]")
    avg = _cell(values, f"BW average[{unit}]")
    if peak == 0.0 and avg is not None and avg > 0.0:
        peak = None  # not computed (duration mode, server side), not a zero peak
    return PerftestRow(
        size_bytes=int(size), iterations=int(iters), bw_unit=unit, bw_peak=peak, bw_average=avg,
        msg_rate_mpps=_cell(values, "MsgRate[Mpps]"),
        t_min_us=lat.get("t_min_us"), t_max_us=lat.get("t_max_us"),
        t_typical_us=lat.get("t_typical_us"), t_avg_us=lat.get("t_avg_us"),
        t_stdev_us=lat.get("t_stdev_us"), p99_us=lat.get("p99_us"), p999_us=lat.get("p999_us"),
    )


def _cell(values: dict[str, str], column: str) -> float | None:
    return float(values[column]) if column in values else None


def _to_bytes(value: float | None, unit: str | None) -> float | None:
    if value is None or unit is None or unit not in _BW_SCALE:
        return None
    return value * _BW_SCALE[unit]


def _bracket_int(value: str | None) -> int | None:
    if value is None:
        return None
    m = _BRACKET.match(value)
    return int(m.group(1)) if m else _int_or_none(value)


def _int_or_none(value: str | None) -> int | None:
    return int(value) if value is not None and value.isdigit() else None
