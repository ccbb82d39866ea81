"""nccl-tests output (all_reduce_perf and friends) -> a typed run.

The bus-bandwidth table is the one end-to-end measure of GPUs, NVLink and NICs working together, so
the parser must read what real runs print: ssh/kubectl noise before the header, mpirun tags
(`[1,0]<stdout>:`, `[0]`) even mid-line, NCCL INFO lines between rows, the old format (no root
column, a float `error` column), `#wrong` in %g form, and runs that fail or are cut short. A failed
or cut run parses (the check reports it); only text that is not nccl-tests output is a ParseError.
"""

from __future__ import annotations

import re
from dataclasses import replace

from stetho.core.record import record
from stetho.parsers import ParseError
from stetho.parsers._text import guarded, integer, quantity
from stetho.parsers.nccl_model import (
    TOOL,
    NcclDevice,
    NcclHeader,
    NcclRow,
    NcclRun,
    format_size,
    parse_size,
)
from stetho.parsers.nccl_shape import (
    COLLECTIVES,
    RunShape,
    busbw_factor,
    collective_name,
    infer,
)

__all__ = ["COLLECTIVES", "NcclDevice", "NcclHeader", "NcclRow", "NcclRun", "RunShape",
           "busbw_factor", "collective_name", "format_size", "parse", "parse_size"]


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


@record
class _Layout:
    root: bool  # a root column after redop
    width: int  # cells per result group: 4, or 8 with per-iteration stats
    error_col: bool  # old format: float `error` instead of `#wrong`
    redop: bool = True  # old format: no redop column for all_gather/alltoall/broadcast

    @property
    def size(self) -> int:
        return 3 + int(self.redop) + int(self.root) + 2 * self.width


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
    inferred = None if collective else infer(st.rows, len(st.devices))
    table = inferred.collective if inferred else None
    source = ("marker" if st.collective else "command" if st.binary
              else "table" if table else None)
    if st.collective:
        signals: tuple[str, ...] = (f"marker '# Collective test starting: {st.collective}'",)
    elif st.binary:
        signals = (f"binary {st.binary} named in the output",)
    else:
        signals = inferred.signals if inferred else ()
    return NcclRun(
        header=st.header, devices=tuple(st.devices), rows=tuple(st.rows), avg_busbw_gbps=st.avg,
        out_of_bounds=st.oob, failed=failed, failure="\n".join(st.reasons) if failed else None,
        truncated=not failed and bool(st.rows) and (not st.avg_seen or st.cut_row),
        tests_version=st.tests_version, nccl_version=nccl_version, collective=collective,
        warnings=tuple(st.warnings), skipped_fragments=st.fragments, table_collective=table,
        collective_source=source, collective_signals=signals,
        collective_candidates=inferred.candidates if inferred and not table else (),
        nccl_cuda_version=st.nccl_cuda, nccl_library_version=library,
        nccl_headers_version=_version_from_code(st.headers_code),
        nccl_version_source=version_source,
    )


def _line(st: _State, raw: str) -> None:
    # Each regex is tried only where the text it needs is there (a '[' for tags, 'NCCL ' for
    # NCCL's own lines, ...): most lines are table rows that need none of them.
    line = _SRUN_LABEL.sub("", _LEADING_TAGS.sub("", raw) if "[" in raw else raw).strip()
    if not line:
        return
    nccl = "NCCL " in line
    log = _NCCL_LOG.search(line) if nccl else None
    version = _NCCL_VERSION.search(line) if nccl else None
    if version and st.nccl_version is None:
        st.nccl_version, st.nccl_cuda = version.group(1), version.group(2)
    if log:
        if log.group(1) == "WARN":
            st.warnings.append(line)
        return
    if version:
        return
    if ("Test " in line or "Invalid" in line) and _FAILURE.search(line):
        st.reasons.append(line)
        return
    if "[" in line:
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
                            "error" in toks and "#wrong" not in toks, "redop" in toks)
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
    layout = st.layout
    if (layout is not None and layout.redop and layout.error_col and len(toks) >= 4
            and _WORD.match(toks[2]) and not _WORD.match(toks[3])):
        layout = replace(layout, redop=False)  # old alltoall: a redop header, blank cells
    if layout is not None and not layout.redop:
        preamble = (len(toks) >= 3 and toks[0].isdigit() and toks[1].isdigit()
                    and bool(_WORD.match(toks[2])))
    else:
        preamble = (len(toks) >= 4 and toks[0].isdigit() and toks[1].isdigit()
                    and bool(_WORD.match(toks[2])) and bool(_WORD.match(toks[3])))
    numeric = bool(toks) and all(_CELL.match(t) for t in toks)
    if preamble:
        if st.pending is not None:
            raise ParseError(TOOL, f"row for size {st.pending[0]} is incomplete: {st.pending}")
        st.pending = toks
        st.pending_layout = layout or _BY_COUNT.get(len(toks))
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
    i = 3 + int(layout.redop)
    if layout.root:
        root = int(t[i]) if _INT.match(t[i]) else None
        i += 1
    oop, ip = t[i:i + 4], t[i + layout.width:i + layout.width + 4]
    wrong_o = None if layout.error_col else integer(oop[3])
    wrong_i = None if layout.error_col else integer(ip[3])
    return NcclRow(
        size_bytes=int(t[0]), count=int(t[1]), dtype=t[2],
        redop=t[3] if layout.redop else "none", root=root,
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
