"""What happened to a job's nodes in its window: every failing or warning result, drains,
diagnosis reports, drift warnings, history rows that cannot be believed, and failures on other
nodes under the same leaf switch.

Why a timeline and not a verdict per node: the question is "was it hardware, and which part,
since when", so each finding keeps its time, check, subject and the report that diagnosed it.
Absence is kept apart from health: a node with no history row in the window has *no evidence*,
and a row whose signature fails (stetho.history.integrity) is reported as such, never read as
clean. Drains come in as data (`Drain`), read by the caller from Slurm and the drain ledger,
because those belong to the gate, a layer above this one.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stetho.history.errors import HistoryCorrupt
from stetho.history.integrity import ROW, pruned
from stetho.history.store import History
from stetho.localize.topology import Topology
from stetho.results import Result

#: statuses that put a result on the timeline (error: could not evaluate, never clean)
NOTABLE = ("fail", "error", "warn")
_CHUNK = 500


@dataclass(frozen=True)
class Drain:
    """A drain of one node: from the drain ledger (stetho's own, with its time) or Slurm's
    current state (`time` from the reason's stamp; None where Slurm gives none)."""

    node: str
    time: float | None
    reason: str
    source: str  # "ledger" or "slurm"


@dataclass(frozen=True)
class Event:
    """One line of the timeline. kind: fail | error | warn (a result), drain, integrity (a
    row whose signature failed), unverified (a row from before signing), neighbour (a failure
    on another node under one of the job's leaves)."""

    time: float
    node: str
    kind: str
    check: str = ""
    subject: str = ""
    message: str = ""
    run: str = ""
    reports: tuple[str, ...] = ()
    leaf: str = ""

    @property
    def drift(self) -> bool:
        return self.check.startswith("drift_")

    def to_json(self) -> dict[str, Any]:
        return {"time": self.time, "node": self.node, "kind": self.kind, "check": self.check,
                "subject": self.subject, "message": self.message, "run": self.run,
                "reports": list(self.reports), "leaf": self.leaf, "drift": self.drift}


@dataclass
class Timeline:
    """The job's nodes over [since, until]: events oldest first, and which nodes had any
    trusted history row in the window."""

    nodes: tuple[str, ...]
    since: float
    until: float
    events: list[Event] = field(default_factory=list)
    had_history: set[str] = field(default_factory=set)
    #: each node's first row in the window, trusted or not: a fault already there at that
    #: time began before the window, and "since" must not claim otherwise
    first_row: dict[str, float] = field(default_factory=dict)
    leaves: dict[str, str] = field(default_factory=dict)  # job node -> leaf (with a topology)
    neighbours: list[Event] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what could not be read (Slurm, ledger)

    @property
    def missing(self) -> list[str]:
        """Job nodes with no trusted row in the window: no evidence either way."""
        return [n for n in self.nodes if n not in self.had_history]

    @property
    def distrusted(self) -> list[str]:
        return sorted({e.node for e in self.events if e.kind == "integrity"})

    def of(self, *kinds: str) -> list[Event]:
        return [e for e in self.events if e.kind in kinds]

    def to_json(self) -> dict[str, Any]:
        return {"nodes": list(self.nodes), "since": self.since, "until": self.until,
                "had_history": sorted(self.had_history), "missing": self.missing,
                "distrusted": self.distrusted, "leaves": self.leaves,
                "events": [e.to_json() for e in self.events],
                "neighbours": [e.to_json() for e in self.neighbours], "notes": self.notes}


def _chunks(items: Sequence[str], size: int = _CHUNK) -> Iterator[Sequence[str]]:
    for i in range(0, len(items), size):
        yield items[i:i + size]


def rows(h: History, nodes: Sequence[str], since: float, until: float
         ) -> Iterator[tuple[Any, ...]]:
    """(node, time, run id, run_dir, run_key, *ROW) of these nodes' rows in the window, oldest
    first per chunk: one range scan per node (node_runs is clustered by node, then time)."""
    for chunk in _chunks(list(nodes)):
        q = ",".join("?" * len(chunk))
        yield from h.conn.execute(
            f"SELECT n.name, nr.time, r.id, r.run_dir, nr.run_key, {ROW} FROM nodes n "
            "JOIN node_runs nr ON nr.node_id = n.id JOIN runs r ON r.key = nr.run_key "
            f"WHERE n.name IN ({q}) AND nr.time >= ? AND nr.time <= ? ORDER BY nr.time",
            [*chunk, int(since), int(until)])


def _decode(blob: bytes) -> list[Result] | None:
    """A row's results, or None where the blob cannot be read (reported, never skipped)."""
    try:
        return [Result.from_json(d) for d in json.loads(zlib.decompress(blob))]
    except (zlib.error, ValueError, TypeError, KeyError, AttributeError):
        return None


class _Reports:
    """Diagnosis reports a run wrote for a node: `<run_dir>/reports/<node>-*.md` (sweep,
    gate, `stetho report`) and `<run_dir>/<node>/diagnosis-report.md`. Each folder is listed
    once however many rows point at it."""

    def __init__(self) -> None:
        self._listed: dict[str, list[Path]] = {}

    def of(self, run_dir: str | None, node: str) -> tuple[str, ...]:
        if not run_dir:
            return ()
        if run_dir not in self._listed:
            folder = Path(run_dir) / "reports"
            try:
                self._listed[run_dir] = sorted(folder.glob("*.md")) if folder.is_dir() else []
            except OSError:
                self._listed[run_dir] = []
        found = [str(p) for p in self._listed[run_dir] if p.name.startswith(f"{node}-")]
        own = Path(run_dir) / node / "diagnosis-report.md"
        if own.is_file():
            found.append(str(own))
        return tuple(found)


def _scan(h: History, nodes: Sequence[str], since: float, until: float, statuses: Iterable[str],
          reports: _Reports, first: dict[str, float] | None = None
          ) -> tuple[list[Event], set[str]]:
    """Events of these nodes' rows in the window, and the nodes with a trusted row; `first`
    gets each node's first row time."""
    wanted = frozenset(statuses)
    events: list[Event] = []
    seen: set[str] = set()
    first = first if first is not None else {}
    links: dict[str, tuple[Any, Any]] = {}  # node -> its previous chained row's seq, MAC
    gaps: set[str] = set()
    for name, t, run, run_dir, run_key, *row in rows(h, nodes, since, until):
        first[name] = min(first.get(name, t), t)
        seq, prv, mac = row[7], row[8], row[11]
        before = links.get(name)
        if seq is not None and before is not None and before[0] is not None and (
                seq != before[0] + 1 or prv != before[1]):
            gaps.add(name)  # the chain's own walk decides below
        links[name] = (seq, mac)
        why = h.rows.untrusted(name, str(run), int(run_key), int(t), tuple(row))
        if why == "":
            events.append(Event(float(t), name, "unverified", run=str(run),
                                message="row written before history rows were signed: "
                                "not believed"))
            continue
        if why:
            events.append(Event(float(t), name, "integrity", run=str(run), message=why))
            continue
        fail, error, warn = (int(x or 0) for x in row[2:5])
        if not (fail or error or warn):
            seen.add(name)
            continue
        if pruned(row[-2]):  # its counts are verified, its results gone (history prune)
            seen.add(name)
            events.append(Event(float(t), name, "unverified", run=str(run), message=(
                f"results pruned (stetho history prune): {fail} fail, {error} error, {warn} "
                "warn recorded, which checks is no longer kept")))
            continue
        results = _decode(row[-2])
        if results is None:
            events.append(Event(float(t), name, "integrity", run=str(run),
                                message=f"the results of {name} in run {run} are unreadable"))
            continue
        seen.add(name)
        found = reports.of(run_dir, name)
        for r in results:
            if r.status in wanted:
                events.append(Event(float(t), name, r.status, r.check, r.subject, r.message,
                                    str(run), found))
    flagged = {e.node for e in events if e.kind == "integrity"}  # said once a node
    for name in links.keys() - flagged:
        why = _chain_broken(h, name, since, until, name in gaps)
        if why:
            events.append(Event(until, name, "integrity", message=why))
            seen.discard(name)
    return events, seen


def _chain_broken(h: History, node: str, since: float, until: float, gap: bool) -> str | None:
    """Why a node's rows cannot be read as complete (stetho.history.chained): its newest row
    is not the seal's head (newest rows deleted, an older database put back), or, where the
    scan saw a gap in time order, the window's chain is broken (rows deleted in it)."""
    nid = h.chained.node_id(node)
    if nid is None:
        return None
    try:
        if gap:
            h.chained.window(node, nid, int(since), int(until))
        h.chained.walk(node, nid, None)
    except HistoryCorrupt as exc:
        return str(exc)
    return None


def _same_reason(a: str, b: str) -> bool:
    """Slurm caps and flattens a reason (stetho.gate.slurm): the same drain if one starts
    with the other's first 60 characters."""
    a, b = " ".join(a.split()), " ".join(b.split())
    return a[:60] == b[:60]


def _drain_events(drains: Sequence[Drain], since: float, until: float) -> list[Event]:
    """The ledger's drains in the window, and Slurm's current ones whatever their age; a
    ledger drain Slurm still shows is one event saying both."""
    ledger = [d for d in drains if d.source == "ledger" and d.time is not None
              and since <= d.time <= until]
    slurm = [d for d in drains if d.source == "slurm"]
    out = []
    for d in ledger:
        still = any(s.node == d.node and _same_reason(s.reason, d.reason) for s in slurm)
        out.append(Event(float(d.time or until), d.node, "drain", message=f"{d.reason} "
                         f"({'ledger; still drained in Slurm' if still else 'ledger'})"))
    for s in slurm:
        if not any(d.node == s.node and _same_reason(s.reason, d.reason) for d in ledger):
            out.append(Event(s.time if s.time is not None else until, s.node, "drain",
                             message=f"{s.reason} (drained in Slurm now)"))
    return out


def build(h: History, nodes: Sequence[str], since: float, until: float, *,
          drains: Iterable[Drain] = (), topology: Topology | None = None) -> Timeline:
    """The timeline of `nodes` over [since, until] from the history `h`, with the drains the
    caller read and, given a topology, the job's leaves and failures elsewhere under them."""
    tl = Timeline(tuple(nodes), since, until)
    reports = _Reports()
    events, tl.had_history = _scan(h, tl.nodes, since, until, NOTABLE, reports,
                                   tl.first_row)
    job = set(tl.nodes)
    events += _drain_events([d for d in drains if d.node in job], since, until)
    if topology is not None:
        tl.leaves = {n: topology.leaf(n) for n in tl.nodes}
        others = sorted({m for leaf in set(tl.leaves.values())
                         for m in topology.leaf_members(leaf)} - job)
        found, _ = _scan(h, others, since, until, ("fail",), reports)
        tl.neighbours = sorted(
            (Event(e.time, e.node, "neighbour", e.check, e.subject, e.message, e.run,
                   e.reports, topology.leaf(e.node)) for e in found if e.kind == "fail"),
            key=lambda e: (e.time, e.node, e.check, e.subject))
    tl.events = sorted(events, key=lambda e: (e.time, e.node, e.kind, e.check, e.subject))
    return tl
