"""Retention: keep each node-run's full results for a while, its verdict for good.

A healthy 8x H100 node's results blob is ~10 KB compressed (227 results); a year of nightly
sweeps of 10,240 nodes is 37 GB of blobs, where the gate reads the last hours, a job the last
day and drift the metrics. `prune` replaces the blob of every row older than `keep_s` with
`integrity.PRUNED` + the blob's SHA-256 (what a schema-5 row's MAC covers), so the row keeps
its counts, exit code, profile, chain place and metrics, all still verified, and only its
per-check results are gone. A pruned row is never evidence: the gate, replay and the job view
skip it as they skip a row they cannot verify, so a node whose only rows are pruned is `could
not evaluate`, never GO.

Each row is verified before its blob goes (an edited row is refused, named, not laundered
into a digest), and rows signed before schema 5 (whose MAC covers the blob's bytes) are kept
whole: pruning them would make them unverifiable.
"""

from __future__ import annotations

import sqlite3
import time
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from stetho.history import chain, integrity
from stetho.history.errors import HistoryCorrupt
from stetho.history.integrity import ROW, RowCheck


class Store(Protocol):
    """What prune needs of stetho.history.store.History (which calls it: no import back)."""

    path: Path
    conn: sqlite3.Connection
    rows: RowCheck

    def transaction(self) -> AbstractContextManager[None]: ...


@dataclass
class Pruned:
    """What one prune did."""

    rows: int = 0  # blobs replaced by their digest now
    already: int = 0  # pruned before
    kept_old_format: int = 0  # signed over the blob's bytes (before schema 5): kept whole
    kept_unsigned: int = 0  # written before signing: unverifiable either way, kept
    bytes_freed: int = 0


def prune(h: Store, keep_s: float, now: float | None = None) -> Pruned:
    """Drop the results blobs older than `keep_s` from the history `h`, in one transaction
    under the seal's lock. A HistoryCorrupt naming the row where one fails its integrity
    check (nothing is pruned then)."""
    if keep_s <= 0:
        raise ValueError("keep_s must be positive")
    cutoff = int((now if now is not None else time.time()) - keep_s)
    out = Pruned()
    key = h.rows.key(create=False)
    with chain.locked(h.path, shared=False), h.transaction():
        nodes = h.conn.execute(
            "SELECT DISTINCT nr.node_id, n.name FROM node_runs nr JOIN nodes n ON "
            "n.id = nr.node_id WHERE nr.time < ?", (cutoff,)).fetchall()
        for nid, name in nodes:
            updates = []
            for run, run_key, t, *row in h.conn.execute(
                    f"SELECT r.id, nr.run_key, nr.time, {ROW} FROM node_runs nr JOIN runs r "
                    "ON r.key = nr.run_key WHERE nr.node_id = ? AND nr.time < ?",
                    (nid, cutoff)).fetchall():
                blob = row[-2]
                if integrity.pruned(blob):
                    out.already += 1
                    continue
                why = h.rows.untrusted(str(name), str(run), int(run_key), int(t), tuple(row))
                if why == "":
                    out.kept_unsigned += 1
                    continue
                if why:
                    raise HistoryCorrupt(f"prune refused: {why}")
                profile, code, *counts, seq, prev, digest, _blob, stored = row
                if key is None or seq is None or integrity.mac(
                        key, str(name), str(run), int(t), profile, code, tuple(counts), blob,
                        (seq, prev, digest), by_digest=True) != stored:
                    out.kept_old_format += 1
                    continue
                stub = integrity.PRUNED + integrity.results_digest(blob).encode()
                updates.append((stub, nid, t, run_key))
                out.bytes_freed += len(blob) - len(stub)
            h.conn.executemany("UPDATE node_runs SET results = ? WHERE node_id = ? AND "
                               "time = ? AND run_key = ?", updates)
            out.rows += len(updates)
    return out
