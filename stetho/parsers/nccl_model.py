"""What a run of nccl-tests says, typed: the settings line, the devices, one row per message
size (out-of-place and in-place groups), the summary and failure lines, the run's shape and the
NCCL version it reports. `stetho.parsers.nccl_tests` reads the text into these."""

from __future__ import annotations

import re
from dataclasses import fields

from stetho.core.record import record
from stetho.parsers import ParseError
from stetho.parsers.nccl_shape import RunShape, collective_name

TOOL = "nccl-tests"
_UNITS = (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10))
_SIZE = re.compile(r"^\s*(\d+(?:\.\d*)?)\s*([kmgt]?)(?:i?b)?\s*$", re.IGNORECASE)


@record
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


@record
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


@record
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


@record
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
    # What decided the collective, in words: the marker, the binary named, or each table
    # signal that narrowed it (redop, root, in-place #wrong, busbw/algbw for n ranks).
    collective_signals: tuple[str, ...] = ()
    # When the table alone leaves several collectives possible: those (a declaration must be
    # one of them); () when the collective is known.
    collective_candidates: tuple[str, ...] = ()
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
