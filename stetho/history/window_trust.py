"""The counter window's readings verified as every other read of history is: a check that
judges a counter by its growth believes only readings stetho wrote.

stetho.checking.counter_history reads the rows (it sits below the history stage and cannot
import it); it names this module, and this module says which of the rows it may believe. Each
run a reading comes from must have a signed node_runs row, chained from the seal's head down
(none deleted between), whose metrics digest matches all of that run's metrics rows as they
stand: an edited or deleted reading, or a deleted run, is a HistoryCorrupt that the window
turns into "no window" (the counters are then judged on their counts since boot, never less
strictly than on their growth), naming the database and the fix. Readings of runs from before
the chain are left out, as drift leaves them out (stetho.history.store.samples).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from stetho.history import chain
from stetho.history.chained import ChainedRows
from stetho.history.errors import HistoryCorrupt
from stetho.history.integrity import RowCheck

#: (check, subject, metric, time, value, run key), as counter_history reads a reading
Reading = tuple[str, str, str, int, float, int]


def verified(conn: sqlite3.Connection, db: Path, node: str, rows: list[Reading]
             ) -> list[Reading]:
    """The rows of `node` whose run is signed, chained and whose metrics are intact; a named
    HistoryCorrupt (or HistoryKeyError) where one cannot be believed."""
    if not rows:
        return []
    with chain.locked(db, shared=True):
        checks = RowCheck(conn, db)
        chained = ChainedRows(conn, checks, chain.SealReader(db))
        nid = chained.node_id(node)
        if nid is None:
            raise HistoryCorrupt(f"history {db} has readings of node {node} but no such node "
                                 "(the database was edited): restore it from its backup")
        times = [r[3] for r in rows]
        signed = {k: (run, t, row[9]) for run, k, t, row in
                  chained.window(node, nid, min(times), max(times))}
        used = {r[5] for r in rows}
        after = checks.chained_after()
        for run_key in sorted(used):
            if run_key not in signed:
                if run_key > after:
                    raise HistoryCorrupt(
                        f"readings of node {node} in run key {run_key} have no signed row of "
                        f"that run in history {db} (the row was deleted, or the readings "
                        "moved): restore the database from its backup")
                continue  # from before the chain: unverified, read as absent
            run, t, stored = signed[run_key]
            got = chained.digests(run_key, t, [nid]).get(nid)
            if not isinstance(stored, str) or got != stored:
                raise HistoryCorrupt(
                    f"metrics of node {node} in run {run} failed their integrity check in "
                    f"history {db}: they are not what stetho wrote (the database was "
                    "edited): restore it from its backup")
    return [r for r in rows if r[5] in signed]
