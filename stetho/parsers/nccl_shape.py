"""The shape of an nccl-tests run and nccl-tests' bus-bandwidth arithmetic, per collective.

A busbw figure only compares with a baseline of the same shape: collective, ranks, nodes and
GPUs per node. nccl-tests derives busbw from algbw with a factor per collective (its
doc/PERFORMANCE.md): all_reduce moves 2(n-1)/n of the data over the slowest link, all_gather,
reduce_scatter and alltoall (n-1)/n, broadcast, reduce and sendrecv all of it. That factor,
with the redop and root columns and the in-place `#wrong` column, tells collectives apart in a
table that does not name its binary (`infer`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from stetho.core.record import record
from stetho.parsers import ParseError

TOOL = "nccl-tests"

#: nccl-tests' binaries, by collective (the binary is `<name>_perf`, `<name>_perf_mpi` with MPI).
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "alltoall", "broadcast", "reduce",
               "sendrecv", "gather", "scatter", "hypercube")


class _Row(Protocol):
    """What `infer` reads of a table row (nccl_tests.NcclRow)."""

    @property
    def redop(self) -> str: ...
    @property
    def root(self) -> int | None: ...
    @property
    def oop_algbw_gbps(self) -> float | None: ...
    @property
    def oop_busbw_gbps(self) -> float | None: ...
    @property
    def oop_wrong(self) -> int | None: ...
    @property
    def ip_wrong(self) -> int | None: ...


@record
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


@record
class Inference:
    """What a table without a collective marker says of its collective: the one it can only
    be (`collective`, else None), the ones still possible (`candidates`), and each signal that
    narrowed them, in words (`signals`), so a verdict can say why it took all_reduce."""

    collective: str | None
    candidates: tuple[str, ...]
    signals: tuple[str, ...]


#: Collectives with a reduction op (a redop cell other than "none"), and with a root (>= 0).
_WITH_OP = ("all_reduce", "reduce_scatter", "reduce")
_WITH_ROOT = ("broadcast", "reduce", "gather", "scatter")


def infer(rows: Sequence[_Row], nranks: int) -> Inference:
    """Narrow the collective down from every signal a table carries:

    - the redop column: a reduction (all_reduce, reduce_scatter, reduce) or none;
    - the root column: a root >= 0 (broadcast, reduce, gather, scatter) or none (-1, absent);
    - the in-place `#wrong` column: N/A beside a checked out-of-place column only for
      alltoall (it has no in-place check); checked in place rules alltoall out;
    - busbw/algbw at the largest algbw, against each collective's factor for `nranks` ranks
      (nccl-tests' doc/PERFORMANCE.md), within 3%.
    One collective left is the answer; several (or a single rank, where the factors say
    nothing) leave it None with the candidates."""
    left = [c for c in COLLECTIVES if c != "hypercube"]
    signals: list[str] = []
    if not rows:
        return Inference(None, tuple(left), ())
    ops = {r.redop for r in rows}
    if ops == {"none"}:
        left = [c for c in left if c not in _WITH_OP]
        signals.append("redop column 'none': not a reduction")
    elif "none" not in ops:
        left = [c for c in left if c in _WITH_OP]
        signals.append(f"redop column {'/'.join(sorted(ops))!r}: a reduction "
                       f"({', '.join(_WITH_OP)})")
    roots = {r.root is not None and r.root >= 0 for r in rows}
    if roots == {True}:
        left = [c for c in left if c in _WITH_ROOT]
        signals.append(f"root column {rows[0].root}: a rooted collective")
    elif roots == {False}:
        left = [c for c in left if c not in _WITH_ROOT]
        shown = rows[0].root
        signals.append("no root column: no root" if shown is None
                       else f"root column {shown}: no root")
    checked = {(r.oop_wrong is not None, r.ip_wrong is not None) for r in rows}
    if checked == {(True, False)}:
        left = [c for c in left if c == "alltoall"]
        signals.append("in-place #wrong N/A beside a checked out-of-place #wrong: alltoall "
                       "(no in-place check)")
    elif checked == {(True, True)} and "alltoall" in left:
        left.remove("alltoall")
        signals.append("in-place #wrong checked: not alltoall")
    if len(left) > 1 and nranks >= 2:
        timed = [r for r in rows if r.oop_algbw_gbps and r.oop_algbw_gbps >= 1.0
                 and r.oop_busbw_gbps is not None]
        if timed:
            top = max(timed, key=lambda r: r.oop_algbw_gbps or 0.0)
            ratio = (top.oop_busbw_gbps or 0.0) / (top.oop_algbw_gbps or 1.0)
            fits = [c for c in left if abs(ratio - busbw_factor(c, nranks))
                    <= 0.03 * max(busbw_factor(c, nranks), 0.01)]
            names = {"all_reduce": "2(n-1)/n"}
            if fits:
                factor = busbw_factor(fits[0], nranks)
                what = names.get(fits[0], "1" if factor == 1.0 else "(n-1)/n")
                signals.append(f"busbw/algbw {ratio:.3f} = {what} for {nranks} ranks "
                               f"({', '.join(fits)})")
            else:
                signals.append(f"busbw/algbw {ratio:.3f} fits no collective's factor for "
                               f"{nranks} ranks")
            left = fits
    return Inference(left[0] if len(left) == 1 else None, tuple(left), tuple(signals))


def from_table(rows: Sequence[_Row], nranks: int) -> str | None:
    """The collective a table can only belong to (`infer`), or None when several fit."""
    return infer(rows, nranks).collective
