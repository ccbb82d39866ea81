"""One list of drain intervals from the ledger and Slurm: the same drain seen by both (same
node, start within SAME_S) is one interval, told by every source that saw it.

Slurm is the authority on whether a node is still out: where a Slurm source saw the drain,
its end is the interval's end (sinfo -R listing it now: still open, whatever the ledger
says); the ledger's release is used only where Slurm did not see the drain.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from stetho.reliability.sources import Drain, Source

#: two sources' stamps of one drain differ by the seconds between scontrol and the ledger
SAME_S = 60
ORDER = ("ledger", "slurm-events", "slurm-current")


@dataclass
class Interval:
    node: str
    at: float
    released: float | None
    sources: list[str]
    reason: str


def merge(ledger: Source, slurm: Source) -> Source:
    """The drains both sources know, merged. An error in either is the merged source's
    error (repair times unknown); absent when neither was there."""
    out = Source("drains", " + ".join(s.where for s in (ledger, slurm) if s.where))
    errors = [s.error for s in (ledger, slurm) if s.error]
    if errors:
        out.error = "; ".join(e for e in errors if e)
        return out
    usable = [s for s in (ledger, slurm) if s.usable]
    if not usable:
        out.absent = "; ".join(s.absent or "" for s in (ledger, slurm))
        return out
    drains: list[Drain] = sorted((d for s in usable for d in s.items),
                                 key=lambda d: (d.node, d.at, ORDER.index(d.source)))
    merged: list[Interval] = []
    for d in drains:
        same = next((m for m in reversed(merged) if m.node == d.node
                     and abs(d.at - m.at) <= SAME_S), None)
        if same is None:
            merged.append(Interval(d.node, d.at, d.released, [d.source], d.reason))
            continue
        if d.source not in same.sources:
            same.sources.append(d.source)
        if d.source != "ledger":  # Slurm says when the node came back, or that it has not
            slurm_seen = [s for s in same.sources if s != "ledger"]
            if d.source == "slurm-current" or slurm_seen == [d.source]:
                same.released = d.released
            same.reason = same.reason or d.reason
    out.items = sorted(merged, key=lambda m: (m.at, m.node))
    out.note = _undated(slurm, merged) or None
    return out


def _undated(slurm: Source, merged: list[Interval]) -> str:
    """Drains Slurm lists as open now with no time: each confirms its node's open interval
    (Slurm seen, still out); one with no open interval to confirm is named, out of service
    with its start unknown, and is in no repair-time figure (an invented start would be)."""
    unknown = []
    for d in slurm.undated:
        open_ = [m for m in merged if m.node == d.node and m.released is None]
        if open_:
            if d.source not in open_[-1].sources:
                open_[-1].sources.append(d.source)
            continue
        unknown.append(f"{d.node} ({d.reason})" if d.reason else d.node)
    if not unknown:
        return ""
    return (f"out of service now with no time in Slurm (sinfo -R: Unknown), so in no "
            f"repair-time figure: {', '.join(unknown)}")


def to_json(m: Interval, fmt: Callable[[int], str]) -> dict[str, object]:
    return {"node": m.node, "start": m.at, "start_utc": fmt(int(m.at)),
            "end": m.released, "end_utc": None if m.released is None else fmt(int(m.released)),
            "open": m.released is None,
            "hours": None if m.released is None else round((m.released - m.at) / 3600, 6),
            "sources": m.sources, "reason": m.reason}
