"""The counter window's readings verified as every other read of history is: a check that
judges a counter by its growth believes only readings stetho wrote.

stetho.checking.counter_history reads the rows (it sits below the history stage and cannot
import it); it names this module, and this module says which of the rows it may believe. The
node's runs from its oldest reading to the window's end must be signed rows, chained from the
seal's head down (none deleted between), each run's metrics matching the digest its row holds
(stetho.history.chained.ChainedRows.metrics, drift's read): an edited reading, a run whose
readings were deleted (a counter clear in the middle hidden: less growth), or a deleted run is
a HistoryCorrupt that the window turns into "no window" (the counters are then judged on their
counts since boot, never less strictly than on their growth), naming the database and the fix.
Readings of runs from before the chain are left out, as drift leaves them out.
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


def verified(conn: sqlite3.Connection, db: Path, node: str, rows: list[Reading], until: int
             ) -> list[Reading]:
    """The rows of `node` whose run is signed, chained and whose metrics are intact, every
    run from the oldest row to `until` (the window's end) verified; a named HistoryCorrupt
    (or HistoryKeyError) where one cannot be believed."""
    if not rows:
        return []
    with chain.locked(db, shared=True):
        chained = ChainedRows(conn, RowCheck(conn, db), chain.SealReader(db))
        nid = chained.node_id(node)
        if nid is None:
            raise HistoryCorrupt(f"history {db} has readings of node {node} but no such node "
                                 "(the database was edited): restore it from its backup")
        runs, _ = chained.metrics(node, nid, min(r[3] for r in rows), until)
    return [r for r in rows if r[5] in runs]
