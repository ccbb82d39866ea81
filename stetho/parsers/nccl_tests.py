"""nccl-tests output (all_reduce_perf and friends) -> a typed run.

The bus-bandwidth table is the one end-to-end measure of GPUs, NVLink and NICs working together, so
the parser must read what real runs print: ssh/kubectl noise before the header, mpirun tags
(`[1,0]<stdout>:`, `[0]`) even mid-line, NCCL INFO lines between rows, the old format (no root
column, a float `error` column), `#wrong` in %g form, and runs that fail or are cut short. A failed
or cut run parses (the check reports it); only text that is not nccl-tests output is a ParseError.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields, replace

from stetho.parsers import ParseError
from stetho.parsers._text import guarded, integer, quantity
from stetho.parsers.nccl_shape import (
    COLLECTIVES,
    RunShape,
    busbw_factor,
    collective_name,
    from_table,
)

__all__ = ["COLLECTIVES", "NcclDevice", "NcclHeader", "NcclRow", "NcclRun", "RunShape",
           "busbw_factor", "collective_name", "format_size", "parse", "parse_size"]

TOOL = "nccl-tests"

# mpirun --tag-output / --timestamp-output prefixes and bare rank tags; never a bus id ([0x0f]).
_TAG = re.compile(r"\[\d+(?:,\d+)*\](?:<std(?:out|err)>:?)?")
_LEADING_TAGS = re.compile(r"^(?:\s*\[\d+(?:,\d+)*\](?:<std(?:out|err)>:?)?)+")
_SRUN_LABEL = re.compile(r"^\s*\d+:\s")  # srun --label
_NCCL_LOG = re.compile(r"\bNCCL (INFO|WARN|TRACE)\b")
_NCCL_VERSION = re.compile(r"\bNCCL version (\d+\.\d+\.\d+)(?:\+cuda(\d+\.\d+))?")
_FAILURE = re.compile(r"\bTest (?:CUDA |NCCL )?(?:failure|timeout)\b|\bInvalid number of GPUs\b")
_SETTING = re.compile(
    r"\b(warmup iters|agg iters|iters|validation|graph|unalign|nThread|nGpus|minBytes|maxBytes)"
    r":?\s+(-?\d+)"
)
_STEP = re.compile(r"\bstep:\s*(\d+)\((factor|bytes)\)")
_DEVICE = re.compile(
    r"^Rank\s+(\d+)\s+(?:Group\s+(\d+)\s+)?(?:Pid\s+(\d+)\s+)?on\s+(\S+)\s+device\s+(\d+)\s+"
    r"\[([^\]]*)\]\s*(.*)$"
)
_TESTS_VERSION = re.compile(
    r"^nccl-tests version (\S+)(?:.*?\bnccl-headers=(\d+))?(?:.*?\bnccl-library=(\d+))?")
_OOB = re.compile(r"^Out of bounds values\s*:\s*(\d+)\s*(OK|FAILED)?")
_AVG = re.compile(r"^Avg bus bandwidth\s*:\s*(\S+)?\s*(OK|FAILED)?")
_REDUCED_MAX = re.compile(r"^Reducing maxBytes to (\d+)")
_COLLECTIVE = re.compile(r"^Collective test (starting|concluded):\s*(\S+)")
_CELL = re.compile(
    r"^(?:[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|[-+]?inf|nan|N/A)$", re.IGNORECASE
)
_INT = re.compile(r"^-?\d+$")
_WORD = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_STAMP = re.compile(r"^\d{4}-\d\d-\d\d$|^\d\d:\d\d:\d\d$")
_SETTING_FIELDS = {
    "nThread": "nthreads", "nGpus": "ngpus", "minBytes": "min_bytes", "maxBytes": "max_bytes",
    "warmup iters": "warmup_iters", "iters": "iters", "agg iters": "agg_iters",
    "validation": "validation", "graph": "graph", "unalign": "unalign",
}
_BINARY = re.compile(r"(?:^|[\s/=])((?:" + "|".join(COLLECTIVES) + r")_perf(?:_mpi)?)(?=\s|$)")
_UNITS = (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10))
_SIZE = re.compile(r"^\s*(\d+(?:\.\d*)?)\s*([kmgt]?)(?:i?b)?\s*$", re.IGNORECASE)


@dataclass(frozen=True)
class NcclHeader:
    """The `# nThread ... nGpus ... minBytes ... maxBytes ...` settings line."""

    nthreads: int | None = None
    ngpus: int | None = None
    min_bytes: int | None = None
    max_bytes: int | None = None
    step_factor: int | None = None
    step_bytes: int | None = None
    warmup_iters: int | None = None
    iters: int | None = None
    agg_iters: int | None = None
    validation: int | None = None
    graph: int | None = None
    unalign: int | None = None

    def as_dict(self) -> dict[str, int | None]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class NcclDevice:
    """One `#  Rank N Group G Pid P on HOST device D [BUS] NAME` line (old format: no Group)."""

    rank: int
    group: int | None
    pid: int | None
    host: str
    device: int
    bus_id: str  # as printed: "0x0f" (before 2.17) or "0000:0f:00"
    name: str

    @property
    def pci_bus(self) -> int | None:
        """The PCI bus number, whichever form bus_id has ("0x0f" and "0000:0f:00" -> 15)."""
        parts = self.bus_id.split(":")
        try:
            return int(parts[1] if len(parts) == 3 else parts[0], 16)
        except ValueError:
            return None


@dataclass(frozen=True)
class NcclRow:
    """One size of the table: out-of-place (oop_*) and in-place (ip_*) results.

    Modern output fills *_wrong (the `#wrong` count) and leaves *_error None; the old format fills
    *_error (max relative error) and leaves *_wrong None. `N/A` cells (`-c 0`) are None.
    """

    size_bytes: int
    count: int
    dtype: str
    redop: str
    root: int | None
    oop_time_us: float | None
    oop_algbw_gbps: float | None
    oop_busbw_gbps: float | None
    oop_wrong: int | None
    oop_error: float | None
    ip_time_us: float | None
    ip_algbw_gbps: float | None
    ip_busbw_gbps: float | None
    ip_wrong: int | None
    ip_error: float | None

    @property
    def wrong(self) -> int:
        return (self.oop_wrong or 0) + (self.ip_wrong or 0)


@dataclass(frozen=True)
class NcclRun:
    """One nccl-tests run. `failed`/`truncated` say whether the numbers can be trusted.

    `failed`: the output records a failure (`Out of bounds values : N FAILED`, `Avg bus bandwidth`
    FAILED, `Test [CUDA |NCCL ]failure|timeout` lines, or a header and then no table); `failure`
    holds those lines. `truncated` (only when not failed): the table has rows but the summary never
    came (no `# Avg bus bandwidth` line, or the text ends inside a row): the output was cut, so
    sizes up to max_bytes may be missing. `avg_busbw_gbps` is nccl-tests' own figure, the mean of
    the out-of-place and in-place busbw over all sizes. `out_of_bounds` counts failed checks
    (per rank, size and placement), not elements.
    """

    header: NcclHeader | None
    devices: tuple[NcclDevice, ...]
    rows: tuple[NcclRow, ...]
    avg_busbw_gbps: float | None
    out_of_bounds: int | None
    failed: bool
    failure: str | None  # the reason line(s), verbatim, newline-joined
    truncated: bool
    tests_version: str | None
    nccl_version: str | None
    collective: str | None = None  # as printed, "all_reduce_perf": 2.17+ marker, else command
    warnings: tuple[str, ...] = ()  # NCCL WARN lines seen among the output
    skipped_fragments: int = 0  # leading row pieces of an excerpt that starts mid-row
    # The collective the table alone shows (redop/root columns and busbw/algbw ratio), without
    # the `_perf` suffix: "all_reduce"; None when two collectives fit the table, or when the
    # output names its binary (then `collective` says it).
    table_collective: str | None = None
    # Where `shape.collective` comes from: "marker" (`# Collective test starting`), "command"
    # (the binary named in an echoed command line), "table" (table_collective), or None.
    collective_source: str | None = None
    nccl_cuda_version: str | None = None  # "13.0" from "NCCL version 2.30.3+cuda13.0"
    nccl_library_version: str | None = None  # from `nccl-library=23003` (the runtime library)
    nccl_headers_version: str | None = None  # from `nccl-headers=22809` (what it was built on)
    # Where `nccl_version` came from: "NCCL version line" or "nccl-library", or None.
    nccl_version_source: str | None = None

    @property
    def shape(self) -> RunShape:
        """The run's shape (collective, ranks, nodes, GPUs per process and per node)."""
        name = collective_name(self.collective) or self.table_collective
        if not self.devices:
            return RunShape(name, None, None, self.ngpus, None)
        per_host: dict[str, int] = {}
        for d in self.devices:
            per_host[d.host] = per_host.get(d.host, 0) + 1
        counts = set(per_host.values())
        return RunShape(
            collective=name, ranks=len(self.devices),
            nodes=len(per_host), gpus_per_process=self.ngpus,
            gpus_per_node=counts.pop() if len(counts) == 1 else None,
        )

    @property
    def nthreads(self) -> int | None:
        return self.header.nthreads if self.header else None

    @property
    def ngpus(self) -> int | None:
        return self.header.ngpus if self.header else None

    @property
    def min_bytes(self) -> int | None:
        return self.header.min_bytes if self.header else None

    @property
    def max_bytes(self) -> int | None:
        return self.header.max_bytes if self.header else None

    @property
    def iters(self) -> int | None:
        return self.header.iters if self.header else None

    @property
    def total_wrong(self) -> int:
        return sum(r.wrong for r in self.rows)

    @property
    def validated(self) -> bool:
        """Every row carries a correctness cell (`-c 0` prints N/A and nothing was checked)."""
        return bool(self.rows) and all(
            (r.oop_wrong is not None or r.oop_error is not None)
            and (r.ip_wrong is not None or r.ip_error is not None) for r in self.rows)

    @property
    def ok(self) -> bool:
        """A whole, clean run: not failed, not cut, has rows, and no wrong elements.

        A run with validation off (`#wrong` N/A) can be ok; see `validated`.
        """
        return not self.failed and not self.truncated and bool(self.rows) and self.total_wrong == 0

    @property
    def largest(self) -> NcclRow | None:
        """The row of the largest message size (the first, if several dtypes/ops share it)."""
        if not self.rows:
            return None
        top = max(r.size_bytes for r in self.rows)
        return next(r for r in self.rows if r.size_bytes == top)

    def row(self, size_bytes: int, dtype: str | None = None, redop: str | None = None,
            ) -> NcclRow | None:
        """The row of a size (first match; dtype/redop narrow it when `-d all`/`-o all` ran)."""
        for r in self.rows:
            if r.size_bytes == size_bytes and dtype in (None, r.dtype) and redop in (None, r.redop):
                return r
        return None

    def busbw(self, size_bytes: int) -> float | None:
        """Out-of-place bus bandwidth (GB/s) at a size; None if the size was not run.

        Out-of-place is the column people usually quote and published baselines use, so comparing
        against a baseline compares like with like; in-place usually agrees within noise and stays
        available as `row(size).ip_busbw_gbps`.
        """
        r = self.row(size_bytes)
        return r.oop_busbw_gbps if r else None


def format_size(n: int) -> str:
    """Bytes in nccl-tests' binary units: 8 -> "8 B", 1536 -> "1.5 KiB", 67108864 -> "64 MiB".

    For display: sizes that are not a whole number of units are rounded to two decimals.
    """
    if n < 0:
        raise ParseError(TOOL, f"negative size: {n}")
    for unit, scale in _UNITS:
        if n >= scale:
            return f"{f'{n / scale:.2f}'.rstrip('0').rstrip('.')} {unit}"
    return f"{n} B"


def parse_size(text: str) -> int:
    """An nccl-tests -b/-e size argument ("8", "1K", "128M", "8G"; binary multiples) in bytes."""
    m = _SIZE.match(text)
    if not m:
        raise ParseError(TOOL, f"not a size: {text!r}")
    scale = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}[m.group(2).lower()]
    return int(float(m.group(1)) * scale)


@dataclass(frozen=True)
class _Layout:
    root: bool  # a root column after redop
    width: int  # cells per result group: 4, or 8 with per-iteration stats
    error_col: bool  # old format: float `error` instead of `#wrong`

    @property
    def size(self) -> int:
        return 4 + int(self.root) + 2 * self.width


_BY_COUNT = {
    12: _Layout(False, 4, True), 13: _Layout(True, 4, False),
    20: _Layout(False, 8, True), 21: _Layout(True, 8, False),
}


class _State:
    """What the line loop has gathered so far."""

    def __init__(self) -> None:
        self.header: NcclHeader | None = None
        self.devices: list[NcclDevice] = []
        self.rows: list[NcclRow] = []
        self.layout: _Layout | None = None  # from the column header line
        self.pending: list[str] | None = None  # a row split over lines
        self.pending_layout: _Layout | None = None
        self.avg: float | None = None
        self.avg_seen = False
        self.oob: int | None = None
        self.reasons: list[str] = []
        self.tests_version: str | None = None
        self.library_code: int | None = None
        self.nccl_version: str | None = None
        self.collective: str | None = None
        self.binary: str | None = None  # named in an echoed command line
        self.nccl_cuda: str | None = None
        self.headers_code: int | None = None
        self.warnings: list[str] = []
        self.fragments = 0
        self.cut_row = False


def parse(text: str | bytes) -> NcclRun:
    """Parse the stdout of an nccl-tests binary (any collective, any version)."""
    return guarded(TOOL, text, _parse)


def _parse(data: str) -> NcclRun:
    st = _State()
    for raw in data.splitlines():
        _line(st, raw)
    if st.pending is not None:
        st.cut_row = True  # the output ends inside a row
    if st.header is None and not st.rows and not st.reasons:
        raise ParseError(TOOL, "not nccl-tests output: no '# nThread' header and no results table")
    if st.header is not None and not st.rows and not st.reasons:
        st.reasons.append("no results table after the '# nThread' header")
    failed = bool(st.reasons)
    library = _version_from_code(st.library_code)
    nccl_version = st.nccl_version or library
    version_source = ("NCCL version line" if st.nccl_version
                      else "nccl-library" if library else None)
    collective = st.collective or st.binary
    table = None if collective else from_table(st.rows, len(st.devices))
    source = ("marker" if st.collective else "command" if st.binary
              else "table" if table else None)
    return NcclRun(
        header=st.header, devices=tuple(st.devices), rows=tuple(st.rows), avg_busbw_gbps=st.avg,
        out_of_bounds=st.oob, failed=failed, failure="\n".join(st.reasons) if failed else None,
        truncated=not failed and bool(st.rows) and (not st.avg_seen or st.cut_row),
        tests_version=st.tests_version, nccl_version=nccl_version, collective=collective,
        warnings=tuple(st.warnings), skipped_fragments=st.fragments, table_collective=table,
        collective_source=source,
        nccl_cuda_version=st.nccl_cuda, nccl_library_version=library,
        nccl_headers_version=_version_from_code(st.headers_code),
        nccl_version_source=version_source,
    )


def _line(st: _State, raw: str) -> None:
    line = _SRUN_LABEL.sub("", _LEADING_TAGS.sub("", raw)).strip()
    if not line:
        return
    log = _NCCL_LOG.search(line)
    version = _NCCL_VERSION.search(line)
    if version and st.nccl_version is None:
        st.nccl_version, st.nccl_cuda = version.group(1), version.group(2)
    if log:
        if log.group(1) == "WARN":
            st.warnings.append(line)
        return
    if version:
        return
    if _FAILURE.search(line):
        st.reasons.append(line)
        return
    line = _TAG.sub(" ", line).strip()
    if line.startswith("#"):
        _comment(st, line)
        return
    if st.binary is None and "_perf" in line and (b := _BINARY.search(line)):
        st.binary = b.group(1)
    _cells(st, line.split())


def _comment(st: _State, line: str) -> None:
    body = line.lstrip("#").strip()
    if body.startswith(("nThread", "nGpus")):
        if st.header is not None:
            raise ParseError(TOOL, "more than one '# nThread' header: several runs in one text "
                             "(or a non-MPI build started by mpirun)")
        st.header = _header(body)
        return
    toks = body.split()
    if "size" in toks and "count" in toks and "busbw" in toks:
        st.layout = _Layout("root" in toks, 8 if "i_min" in toks else 4,
                            "error" in toks and "#wrong" not in toks)
        return
    if st.pending is not None and body.startswith(("Out of", "Avg")):
        raise ParseError(TOOL, f"row for size {st.pending[0]} is incomplete: {st.pending}")
    if m := _DEVICE.match(body):
        st.devices.append(NcclDevice(
            rank=int(m.group(1)), group=None if m.group(2) is None else int(m.group(2)),
            pid=None if m.group(3) is None else int(m.group(3)), host=m.group(4),
            device=int(m.group(5)), bus_id=m.group(6), name=m.group(7).strip()))
    elif m := _OOB.match(body):
        st.oob = int(m.group(1))
        if m.group(2) == "FAILED":
            st.reasons.append(line)
    elif m := _AVG.match(body):
        st.avg_seen = True
        value = m.group(1)
        if value is None or value.upper() == "FAILED" or m.group(2) == "FAILED":
            st.reasons.append(line)
        if value is not None and _CELL.match(value):
            st.avg = _float(value)
    elif m := _TESTS_VERSION.match(body):
        st.tests_version = m.group(1)
        st.headers_code = int(m.group(2)) if m.group(2) else None
        st.library_code = int(m.group(3)) if m.group(3) else None
    elif m := _COLLECTIVE.match(body):
        st.collective = m.group(2)
    elif (m := _REDUCED_MAX.match(body)) and st.header is not None:
        st.header = replace(st.header, max_bytes=int(m.group(1)))


def _header(body: str) -> NcclHeader:
    values: dict[str, int | None] = {}
    for m in _SETTING.finditer(body):
        values[_SETTING_FIELDS[m.group(1)]] = int(m.group(2))
    if step := _STEP.search(body):
        values["step_factor" if step.group(2) == "factor" else "step_bytes"] = int(step.group(1))
    if "nthreads" not in values and "ngpus" not in values:
        raise ParseError(TOOL, f"unreadable settings header: {body!r}")
    return NcclHeader(**values)


def _cells(st: _State, toks: list[str]) -> None:
    while toks and _STAMP.match(toks[-1]):  # -T timestamps after the in-place group
        toks = toks[:-1]
    preamble = (len(toks) >= 4 and toks[0].isdigit() and toks[1].isdigit()
                and bool(_WORD.match(toks[2])) and bool(_WORD.match(toks[3])))
    numeric = bool(toks) and all(_CELL.match(t) for t in toks)
    if preamble:
        if st.pending is not None:
            raise ParseError(TOOL, f"row for size {st.pending[0]} is incomplete: {st.pending}")
        st.pending = toks
        st.pending_layout = st.layout or _BY_COUNT.get(len(toks))
        if st.pending_layout is None and len(toks) in (4, 5):  # preamble alone on its line
            st.pending_layout = _Layout(len(toks) == 5, 4, len(toks) == 4)
    elif numeric and st.pending is not None:
        st.pending = st.pending + toks
        if st.pending_layout is None:
            st.pending_layout = _BY_COUNT.get(len(st.pending))
    elif numeric and len(toks) >= 4:
        if st.rows or st.layout is not None:
            raise ParseError(TOOL, f"table cells without their size and count: {' '.join(toks)}")
        st.fragments += 1  # an excerpt that starts in the middle of a row
        return
    else:
        return  # shell, ssh, kubectl or mpirun noise
    layout = st.pending_layout
    if layout is None or st.pending is None or len(st.pending) < layout.size:
        return
    if len(st.pending) > layout.size:
        raise ParseError(TOOL, f"row has {len(st.pending)} cells, expected {layout.size}: "
                         f"{' '.join(st.pending)}")
    st.rows.append(_row(st.pending, layout))
    st.pending = None
    st.pending_layout = None


def _row(t: list[str], layout: _Layout) -> NcclRow:
    root: int | None = None
    i = 4
    if layout.root:
        root = int(t[4]) if _INT.match(t[4]) else None
        i = 5
    oop, ip = t[i:i + 4], t[i + layout.width:i + layout.width + 4]
    wrong_o = None if layout.error_col else integer(oop[3])
    wrong_i = None if layout.error_col else integer(ip[3])
    return NcclRow(
        size_bytes=int(t[0]), count=int(t[1]), dtype=t[2], redop=t[3], root=root,
        oop_time_us=_float(oop[0]), oop_algbw_gbps=_float(oop[1]), oop_busbw_gbps=_float(oop[2]),
        oop_wrong=wrong_o, oop_error=_float(oop[3]) if layout.error_col else None,
        ip_time_us=_float(ip[0]), ip_algbw_gbps=_float(ip[1]), ip_busbw_gbps=_float(ip[2]),
        ip_wrong=wrong_i, ip_error=_float(ip[3]) if layout.error_col else None,
    )


def _float(tok: str) -> float | None:
    if tok.lower().lstrip("+-") in ("inf", "nan"):
        return float(tok)
    return quantity(tok)


def _version_from_code(code: int | None) -> str | None:
    """NCCL_VERSION_CODE -> "2.27.3" (22703; codes before 2.9 were 2804 for 2.8.4)."""
    if code is None or code <= 0:
        return None
    if code >= 10000:
        return f"{code // 10000}.{code % 10000 // 100}.{code % 100}"
    return f"{code // 1000}.{code % 1000 // 100}.{code % 100}"
