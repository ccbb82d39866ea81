"""The shape of an nccl-tests run and nccl-tests' bus-bandwidth arithmetic, per collective.

A busbw figure only compares with a baseline of the same shape: collective, ranks, nodes and
GPUs per node. nccl-tests derives busbw from algbw with a factor per collective (its
doc/PERFORMANCE.md): all_reduce moves 2(n-1)/n of the data over the slowest link, all_gather,
reduce_scatter and alltoall (n-1)/n, broadcast, reduce and sendrecv all of it. The same factor
tells collectives apart in a table that does not name its binary.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from stetho.parsers import ParseError

TOOL = "nccl-tests"

#: nccl-tests' binaries, by collective (the binary is `<name>_perf`, `<name>_perf_mpi` with MPI).
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "alltoall", "broadcast", "reduce",
               "sendrecv", "gather", "scatter", "hypercube")


class _Row(Protocol):
    """What `from_table` reads of a table row (nccl_tests.NcclRow)."""

    @property
    def redop(self) -> str: ...
    @property
    def root(self) -> int | None: ...
    @property
    def oop_algbw_gbps(self) -> float | None: ...
    @property
    def oop_busbw_gbps(self) -> float | None: ...


@dataclass(frozen=True)
class RunShape:
    """What a run measured, which a busbw baseline must match: a 16-rank 2-node all_reduce is
    not comparable with an 8-GPU single-node one. `collective` is nccl-tests' name without
    `_perf` ("all_reduce"), None when the output does not tell; `ranks` counts the `#  Rank`
    device lines (one per GPU), `nodes` the distinct hosts among them, `gpus_per_process` is
    the header's nGpus (`-g`), `gpus_per_node` the device lines per host when every host has
    the same number (else None). All None when the output lists no devices."""

    collective: str | None
    ranks: int | None
    nodes: int | None
    gpus_per_process: int | None
    gpus_per_node: int | None

    def describe(self) -> str:
        """'all_reduce 16 ranks / 2 nodes' (unknown parts say so)."""
        name = self.collective or "unknown collective"
        ranks = "? ranks" if self.ranks is None else f"{self.ranks} ranks"
        nodes = "? nodes" if self.nodes is None else \
            f"{self.nodes} node{'' if self.nodes == 1 else 's'}"
        return f"{name} {ranks} / {nodes}"


def collective_name(binary: str | None) -> str | None:
    """'all_reduce_perf', './build/all_gather_perf_mpi', 'alltoall' -> 'all_reduce', 'all_gather',
    'alltoall'; None for anything that is not an nccl-tests collective."""
    if not binary:
        return None
    name = binary.strip().rsplit("/", 1)[-1]
    name = name.removesuffix("_mpi").removesuffix("_perf")
    return name if name in COLLECTIVES else None


def busbw_factor(collective: str, nranks: int) -> float:
    """busbw / algbw as nccl-tests defines it (doc/PERFORMANCE.md), for `nranks` ranks:
    all_reduce 2(n-1)/n; all_gather, reduce_scatter, alltoall, gather, scatter, hypercube
    (n-1)/n; broadcast, reduce and sendrecv 1. `collective` may carry the `_perf` suffix.
    Raises ParseError for another name or fewer than one rank."""
    name = collective_name(collective)
    if name is None:
        raise ParseError(TOOL, f"not an nccl-tests collective: {collective!r}")
    if nranks < 1:
        raise ParseError(TOOL, f"a run has at least one rank, not {nranks}")
    if name == "all_reduce":
        return 2 * (nranks - 1) / nranks
    if name in ("broadcast", "reduce", "sendrecv"):
        return 1.0
    return (nranks - 1) / nranks


def from_table(rows: Sequence[_Row], nranks: int) -> str | None:
    """The collective a table can only belong to, from its redop and root columns and its
    busbw/algbw ratio (nccl-tests' per-collective factor for `nranks`); None when two
    collectives fit (all_gather and alltoall, gather and scatter, or a single rank)."""
    if nranks < 2 or not rows:
        return None
    ops = {r.redop != "none" for r in rows}
    roots = {r.root is not None and r.root >= 0 for r in rows}
    if len(ops) != 1 or len(roots) != 1:
        return None
    has_op, has_root = ops.pop(), roots.pop()
    if has_op and has_root:
        return "reduce"  # the only collective with both a root and a reduction op
    timed = [r for r in rows if r.oop_algbw_gbps and r.oop_algbw_gbps >= 1.0
             and r.oop_busbw_gbps is not None]
    if not timed:
        return None
    top = max(timed, key=lambda r: r.oop_algbw_gbps or 0.0)
    ratio = (top.oop_busbw_gbps or 0.0) / (top.oop_algbw_gbps or 1.0)
    low = (nranks - 1) / nranks
    fits: dict[bool, dict[str, float]] = {  # keyed by has_root
        False: {"all_reduce": 2 * low, "reduce_scatter": low} if has_op
        else {"sendrecv": 1.0, "all_gather": low, "alltoall": low},
        True: {"broadcast": 1.0, "gather": low, "scatter": low},
    }
    close = [n for n, f in fits[has_root].items() if abs(ratio - f) <= 0.03 * max(f, 0.01)]
    return close[0] if len(close) == 1 else None
