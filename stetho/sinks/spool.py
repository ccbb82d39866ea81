"""Results on disk instead of in memory: a replay of ten thousand nodes makes over a million.

`Results` is a list of Result records that moves itself into a SQLite file once it holds more
than SPILL_AT of them; after that it keeps only counts and node names in memory, and each
result as its JSON document. It is still a Sequence (iterate it, index it, len() it), and the
sinks that matter at scale read it as a stream: the JSON document copies the stored documents
through, JUnit reads them ordered by node from SQLite's own sort. Memory per node stays
constant, so the size of a fleet is bounded by disk, not RAM.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import tempfile
import weakref
from collections.abc import Iterable, Iterator, Sequence
from json.encoder import c_make_encoder as _C_MAKE_ENCODER  # type: ignore[attr-defined]
from json.encoder import encode_basestring_ascii
from pathlib import Path
from typing import Any, overload

from stetho.results import STATUSES, Result
from stetho.sinks import safe

#: Held in memory up to this many results (a node check, a gate); spilled to disk beyond.
SPILL_AT = 20_000

#: One row a worker sends per result: node, check, subject, status and the result's JSON.
Row = tuple[str, str, str, str, str]


def row(r: Result) -> Row:
    """A result's row; its document strict JSON (no NaN, no lone surrogate), made so by
    stetho.sinks.safe where the result holds what JSON cannot."""
    try:
        doc = _encode(r.to_json())
        if "\\ud" not in doc or safe.json_text_ok(doc):
            return (r.node, r.check, r.subject, r.status, doc)
    except safe.WRITE_ERRORS:
        pass
    r = safe.clean(r)
    return (r.node, r.check, r.subject, r.status, _encode(r.to_json()))


#: json.dumps with options builds a new encoder per call; one built once encodes the same.
#: ensure_ascii (the default) also makes every document one line: `pack` relies on it.
_ENCODE = json.JSONEncoder(default=str, separators=(",", ":"), allow_nan=False).encode


def _encode(doc: dict[str, Any]) -> str:
    """`_ENCODE(doc)` without its per-call setup in Python (two closures and an encoder object,
    0.4 us of 3 for each of ~200 results a node): the same C encoder with the same options
    (check_circular's markers, default=str, ensure_ascii, ',' ':', no sort, no NaN)."""
    if _C_MAKE_ENCODER is None:
        return _ENCODE(doc)
    encoder = _C_MAKE_ENCODER({}, str, encode_basestring_ascii, None, ":", ",", False, False,
                              False)
    return "".join(encoder(doc, 0))


def pack(rows: Sequence[Row]) -> str:
    """Rows as one string for a report: a JSON line of their (node, check, subject, status),
    then each result's document on a line of its own. The documents are not JSON-encoded a
    second time as strings: escaping and unescaping them cost both the worker and the
    controller (which reads every result of a fleet) more than anything else in transit."""
    return "\n".join([json.dumps([r[:4] for r in rows]), *(r[4] for r in rows)])


def unpack(text: str) -> list[Row]:
    head, _, body = text.partition("\n")
    heads = json.loads(head)
    docs = body.split("\n") if heads else []
    if len(docs) != len(heads):
        raise ValueError(f"{len(heads)} results announced, {len(docs)} documents sent")
    return [(n, c, s, st, d) for (n, c, s, st), d in zip(heads, docs, strict=True)]


class Results(Sequence[Result]):
    def __init__(self, results: Iterable[Result] = (), spill_at: int = SPILL_AT) -> None:
        self._list: list[Result] | None = []
        self._db: sqlite3.Connection | None = None
        self._n = 0
        self._counts = dict.fromkeys(STATUSES, 0)
        self._nodes: set[str] = set()
        self._spill_at = spill_at
        self.extend(results)

    # -- adding ----------------------------------------------------------------------------
    def extend(self, results: Iterable[Result]) -> None:
        if self._db is None:
            self._add_list(list(results))
        else:
            self.add_rows(row(r) for r in results)

    def append(self, result: Result) -> None:
        self.extend((result,))

    def add_rows(self, rows: Iterable[Row]) -> None:
        """Add results as they travel (see `row`): no Result is built when spilled."""
        rows = list(rows)
        if self._db is None:
            self._add_list([Result.from_json(json.loads(r[4])) for r in rows])
            return
        self._db.executemany("INSERT INTO results VALUES (?, ?, ?, ?, ?)", rows)
        for node, _, _, status, _ in rows:
            self._counts[status] = self._counts.get(status, 0) + 1
            if node != "*":
                self._nodes.add(node)
        self._n += len(rows)

    def _add_list(self, results: list[Result]) -> None:
        assert self._list is not None
        self._list.extend(results)
        for r in results:
            self._counts[r.status] = self._counts.get(r.status, 0) + 1
            if r.node != "*":
                self._nodes.add(r.node)
        self._n += len(results)
        if self._n > self._spill_at:
            self._spill()

    def _spill(self) -> None:
        folder = tempfile.mkdtemp(prefix="stetho-results-")
        db = sqlite3.connect(Path(folder) / "results.db", check_same_thread=False)
        weakref.finalize(self, _remove, db, folder)
        db.execute("PRAGMA journal_mode=OFF")
        db.execute("PRAGMA synchronous=OFF")
        db.execute("CREATE TABLE results (node TEXT, check_ TEXT, subject TEXT, status TEXT, "
                   "doc TEXT)")
        kept, self._list = self._list or [], None
        db.executemany("INSERT INTO results VALUES (?, ?, ?, ?, ?)", (row(r) for r in kept))
        self._db = db

    # -- reading ---------------------------------------------------------------------------
    @property
    def spilled(self) -> bool:
        return self._db is not None

    def __len__(self) -> int:
        return self._n

    @overload
    def __getitem__(self, index: int) -> Result: ...
    @overload
    def __getitem__(self, index: slice) -> list[Result]: ...

    def __getitem__(self, index: int | slice) -> Result | list[Result]:
        if self._list is not None:
            return self._list[index]
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self._n))]
        i = index + self._n if index < 0 else index
        if not 0 <= i < self._n:
            raise IndexError(index)
        assert self._db is not None
        (doc,) = self._db.execute("SELECT doc FROM results WHERE rowid = ?", (i + 1,)).fetchone()
        return Result.from_json(json.loads(doc))

    def __iter__(self) -> Iterator[Result]:
        if self._list is not None:
            return iter(list(self._list))
        return (Result.from_json(json.loads(doc)) for doc in self.documents())

    def documents(self, by_node: bool = False) -> Iterator[str]:
        """Each result's JSON text, in the order added or by (node, check, subject)."""
        if self._db is None:
            ordered = sorted(self, key=_key) if by_node else self
            return (row(r)[4] for r in ordered)
        order = "node, check_, subject, rowid" if by_node else "rowid"
        return (doc for (doc,) in self._db.execute(f"SELECT doc FROM results ORDER BY {order}"))

    def by_node(self) -> Iterator[Result]:
        if self._db is None:
            return iter(sorted(self, key=_key))
        return (Result.from_json(json.loads(doc)) for doc in self.documents(by_node=True))

    def total_duration(self) -> float:
        if self._db is None:
            return sum(r.duration_s for r in self)
        (total,) = self._db.execute(
            "SELECT total(json_extract(doc, '$.duration_s')) FROM results").fetchone()
        return float(total)

    def counts(self) -> dict[str, int]:
        return dict(self._counts)

    def node_count(self) -> int:
        return len(self._nodes)

    def where(self, statuses: tuple[str, ...]) -> list[Result]:
        """The results with these statuses (the problems a table shows), read from disk."""
        if self._db is None:
            return [r for r in self if r.status in statuses]
        marks = ", ".join("?" * len(statuses))
        rows = self._db.execute(f"SELECT doc FROM results WHERE status IN ({marks}) "
                                f"ORDER BY rowid", statuses)
        return [Result.from_json(json.loads(doc)) for (doc,) in rows]


def _key(r: Result) -> tuple[str, str, str]:
    return (r.node, r.check, r.subject)


def _remove(db: sqlite3.Connection, folder: str) -> None:
    db.close()
    shutil.rmtree(folder, ignore_errors=True)
