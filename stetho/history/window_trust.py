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

#: (series id, time, value, run key), as the metrics table holds a reading
Row = tuple[int, int, float | None, int]


def verified(conn: sqlite3.Connection, db: Path, node: str, since: int, until: int
             ) -> list[Row]:
    """The node's readings between since and until, oldest first, of the runs that are
    signed, chained and whose metrics are intact, every run in between verified; a named
    HistoryCorrupt (or HistoryKeyError) where one cannot be believed."""
    with chain.locked(db, shared=True):
        chained = ChainedRows(conn, RowCheck(conn, db), chain.SealReader(db))
        nid = chained.node_id(node)
        if nid is None:
            raise HistoryCorrupt(f"history {db} has readings of node {node} but no such node "
                                 "(the database was edited): restore it from its backup")
        return chained.metrics(node, nid, since, until)[1]
