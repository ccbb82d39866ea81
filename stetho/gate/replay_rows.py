"""The recorded decision points a replay walks: every node's `node_runs` row in the window,
oldest first per node, verified and decoded once for all the policies replayed.

A row that fails its integrity check (stetho.history.integrity) is left out and counted per
node, never judged; one written before rows were signed is unverified and left out too (the
live gate reads it as absent). Only the checks some replayed policy counts are kept from a
row's results, as plain dicts: building a Result per stored result is most of a replay's cost
and the decision needs four of its fields (stetho.gate.replay).
"""

from __future__ import annotations

import json
import sqlite3
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from stetho.history.decisions import KIND as SHADOW_KIND
from stetho.history.integrity import ROW, pruned
from stetho.history.store import History, HistoryError, describe

#: a node's row: (time, run id, run kind, its results as stored dicts)
Row = tuple[int, str, str, list[dict[str, object]]]


@dataclass
class Excluded:
    """Rows left out of the replay, and why: node -> count."""

    distrusted: dict[str, int] = field(default_factory=dict)
    unsigned: dict[str, int] = field(default_factory=dict)
    unreadable: dict[str, int] = field(default_factory=dict)
    #: rows whose results were pruned (stetho.history.prune): verified, but nothing to judge
    pruned: dict[str, int] = field(default_factory=dict)
    #: node -> the first reason a row of it failed its integrity check
    why: dict[str, str] = field(default_factory=dict)

    def total(self) -> int:
        return sum(self.distrusted.values()) + sum(self.unsigned.values()) \
            + sum(self.unreadable.values()) + sum(self.pruned.values())


def _open(db: Path) -> History:
    if not db.exists():
        raise HistoryError(f"{db}: no history database there (give --db, or run a sweep "
                           "first)")
    return History(db)


def extent(db: Path, since: int, until: int) -> tuple[int, int, int]:
    """(lowest node id, highest node id, rows) in the window: how to split a replay."""
    try:
        with _open(db) as h:
            lo, hi, n = h.conn.execute(
                "SELECT min(node_id), max(node_id), count(*) FROM node_runs "
                "WHERE time >= ? AND time <= ?", (since, until)).fetchone()
    except sqlite3.Error as exc:
        raise HistoryError(f"{db}: {describe(exc)}") from None
    return int(lo or 0), int(hi or 0), int(n)


def node_rows(db: Path, since: int, until: int, wanted: Callable[[str], bool],
              excluded: Excluded, ids: tuple[int, int] | None = None
              ) -> Iterator[tuple[str, list[Row]]]:
    """(node, its rows oldest first) for every node with a row in [since, until] (and a node
    id in `ids`, both ends included), skipping the gate's own shadow records. Raises
    HistoryError when the database cannot be read."""
    try:
        with _open(db) as h:
            yield from _rows(h, since, until, wanted, excluded, ids or (0, 2**62))
    except sqlite3.Error as exc:
        raise HistoryError(f"{db}: {describe(exc)}") from None


def _rows(h: History, since: int, until: int, wanted: Callable[[str], bool],
          excluded: Excluded, ids: tuple[int, int]) -> Iterator[tuple[str, list[Row]]]:
    cur = h.conn.execute(
        f"SELECT n.name, nr.time, r.id, r.kind, nr.run_key, {ROW} FROM node_runs nr "
        "JOIN nodes n ON n.id = nr.node_id JOIN runs r ON r.key = nr.run_key "
        "WHERE nr.node_id >= ? AND nr.node_id <= ? AND nr.time >= ? AND nr.time <= ? "
        "AND coalesce(r.kind, '') != ? ORDER BY nr.node_id, nr.time, nr.run_key",
        (*ids, since, until, SHADOW_KIND))
    node: str | None = None
    rows: list[Row] = []
    keep: dict[object, bool] = {}
    link: tuple[object, object] = (None, None)  # the node's previous chained row: seq, MAC
    gap = False
    read: set[tuple[int, int]] = set()  # (run key, time) of the node's rows judged here
    decompress, loads, untrusted = zlib.decompress, json.loads, h.rows.untrusted
    for name, t, run, kind, run_key, *row in cur:
        if name != node:
            if node is not None and _chain_holds(h, node, rows, since, until, gap, excluded,
                                                 frozenset(read)):
                yield node, rows
            node, rows, link, gap, read = name, [], (None, None), False, set()
        read.add((run_key, t))
        seq, prv = row[7], row[8]
        if seq is not None and link[0] is not None and (seq != link[0] + 1  # type: ignore[operator]
                                                        or prv != link[1]):
            gap = True  # the chain's own walk decides at the node's end
        link = (seq, row[-1]) if seq is not None else (None, None)
        why = untrusted(name, run, run_key, t, tuple(row))
        if why is not None:
            into = excluded.distrusted if why else excluded.unsigned
            into[name] = into.get(name, 0) + 1
            if why:
                excluded.why.setdefault(name, why)
            continue
        if pruned(row[-2]):
            excluded.pruned[name] = excluded.pruned.get(name, 0) + 1
            continue
        try:
            stored = loads(decompress(row[-2]))
            try:
                results = [d for d in stored if keep[d["check"]]]
            except KeyError:  # a check not seen before: ask once, then filter again
                for d in stored:
                    if d["check"] not in keep:
                        keep[d["check"]] = wanted(str(d["check"]))
                results = [d for d in stored if keep[d["check"]]]
        except (zlib.error, ValueError, TypeError, KeyError) as exc:
            excluded.unreadable[name] = excluded.unreadable.get(name, 0) + 1
            excluded.why.setdefault(name, f"results of {name} in run {run} are unreadable "
                                          f"({type(exc).__name__})")
            continue
        rows.append((int(t), str(run), str(kind or ""), results))
    if node is not None and _chain_holds(h, node, rows, since, until, gap, excluded,
                                         frozenset(read)):
        yield node, rows


def _chain_holds(h: History, node: str, rows: list[Row], since: int, until: int, gap: bool,
                 excluded: Excluded, read: frozenset[tuple[int, int]]) -> bool:
    """Whether the node's rows are all there (stetho.history.chained): its newest row the
    seal's head, and where the scan saw a gap in time order, the window's chain unbroken.
    A node whose rows were deleted (or whose database was put back) is left out, named: its
    remaining rows would replay as a healthier node than it was. `read`: rows whose signature
    the scan judged already (an edited one is left out there, alone)."""
    from stetho.history.errors import HistoryCorrupt

    nid = h.chained.node_id(node)
    try:
        if nid is not None:
            if gap:
                h.chained.window(node, nid, since, until)
            h.chained.walk(node, nid, None, known=read)
    except HistoryCorrupt as exc:
        excluded.distrusted[node] = excluded.distrusted.get(node, 0) + len(rows)
        excluded.why.setdefault(node, str(exc))
        return False
    return True
