"""The ingest ledger: which spool files the history already holds, keyed by (node, key).

`key` is the node's run id for a file that could be read, else the file's digest. Rows are
written by the recording's own transaction (History.record's `then`), so a file counts as
ingested exactly when its results are in the history: a crash before the commit leaves
neither, after it both, and a file seen again whose key is here is moved, never recorded
twice. The table belongs to the ingest and is made on first use (no schema version of its
own: every history version can hold it, and older stethos ignore it).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

TABLE = """CREATE TABLE IF NOT EXISTS spool_ledger (
    node TEXT NOT NULL, key TEXT NOT NULL, digest TEXT NOT NULL, run TEXT NOT NULL,
    verdict TEXT NOT NULL, time REAL NOT NULL, PRIMARY KEY (node, key)) WITHOUT ROWID"""
#: What became of a file: its results recorded, or its node's error recorded (moved to bad/).
VERDICTS = ("ingested", "bad")


@dataclass(frozen=True)
class Row:
    node: str
    key: str
    digest: str
    verdict: str


def ensure(conn: sqlite3.Connection) -> None:
    conn.execute(TABLE)


def add(conn: sqlite3.Connection, rows: Sequence[Row], run: str, when: float) -> None:
    """Add `rows` (inside the caller's transaction); a key already there keeps its row."""
    ensure(conn)
    conn.executemany("INSERT OR IGNORE INTO spool_ledger VALUES (?,?,?,?,?,?)",
                     [(r.node, r.key, r.digest, run, r.verdict, when) for r in rows])


def known(conn: sqlite3.Connection, keys: Iterable[tuple[str, str]]
          ) -> dict[tuple[str, str], tuple[str, str]]:
    """(node, key) -> (verdict, digest) for those of `keys` the ledger holds."""
    if not conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'spool_ledger'").fetchone():
        return {}
    wanted = list(dict.fromkeys(keys))
    out: dict[tuple[str, str], tuple[str, str]] = {}
    for i in range(0, len(wanted), 400):
        chunk = wanted[i:i + 400]
        where = " OR ".join(["(node = ? AND key = ?)"] * len(chunk))
        for node, key, verdict, digest in conn.execute(
                f"SELECT node, key, verdict, digest FROM spool_ledger WHERE {where}",
                [v for pair in chunk for v in pair]):
            out[(node, key)] = (verdict, digest)
    return out
