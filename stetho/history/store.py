"""The history database: every check and sweep run, per-node results, and every measured
metric over time, in SQLite through sqlite-utils.

Default location: the user's data directory (~/.local/share/stetho/history.db), or `--db`,
or STETHO_DB. The schema version is recorded and migrations applied on open; a database
written by a newer stetho is refused rather than misread. Each run is written in one
transaction, so a process killed mid-write leaves the database as it was before; WAL and a
busy timeout let several writers (nightly sweep, pre-job gates) share it.

Storage is laid out for a year of nightly sweeps of a thousand nodes: metric values are
(node, time, run, series, value) rows in a WITHOUT ROWID table clustered node first, then
time, so one sweep appends one contiguous run of rows per node (a few MB per sweep, not a page
per series), and a node's last 30 days is one range scan. `series` names check, subject,
metric and unit once per node; the view `metrics_long` gives the long form (run, time, node,
check, subject, metric, value, unit). Per-node results are kept as one compressed JSON list per
node and run, one result a line (stetho.history.blob), with their status counts beside it,
signed (stetho.history.integrity) and chained per node under a seal (stetho.history.chain),
read back verified (stetho.history.chained).

Long because the schema, its migrations and the statements that write and read it must change
together: one file, so that a column is never written in one shape and read in another.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
import zlib
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple

from stetho.core.profile_name import DEFAULT_PROFILE
from stetho.core.record import record
from stetho.errors import ConfigError
from stetho.history import blob, chain, integrity
from stetho.history.blob import encode as results_blob
from stetho.history.chained import ChainedRows
from stetho.history.errors import HistoryCorrupt as HistoryCorrupt
from stetho.history.errors import HistoryError as HistoryError
from stetho.history.errors import HistoryKeyError as HistoryKeyError
from stetho.history.integrity import ROW, RowCheck
from stetho.history.latest import PSEUDO, NodeLatest
from stetho.results import Result

SCHEMA_VERSION = 7

#: version -> statements bringing the previous version to it. Append, never edit.
MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: (
        "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT)",
        """CREATE TABLE runs (key INTEGER PRIMARY KEY, id TEXT UNIQUE NOT NULL, kind TEXT,
           time INTEGER NOT NULL, started TEXT, host TEXT, stetho_version TEXT,
           command TEXT, exit_code INTEGER, nodes INTEGER, run_dir TEXT)""",
        "CREATE INDEX runs_time ON runs(time)",
        "CREATE TABLE nodes (id INTEGER PRIMARY KEY, name TEXT UNIQUE NOT NULL)",
        """CREATE TABLE series (id INTEGER PRIMARY KEY, node_id INTEGER NOT NULL,
           check_name TEXT NOT NULL, subject TEXT NOT NULL, metric TEXT NOT NULL,
           unit TEXT NOT NULL DEFAULT '',
           UNIQUE (node_id, check_name, subject, metric))""",
        """CREATE TABLE metrics (node_id INTEGER NOT NULL, time INTEGER NOT NULL,
           run_key INTEGER NOT NULL, series_id INTEGER NOT NULL, value REAL,
           PRIMARY KEY (node_id, time, run_key, series_id)) WITHOUT ROWID""",
        """CREATE TABLE node_runs (run_key INTEGER NOT NULL, node_id INTEGER NOT NULL,
           time INTEGER NOT NULL, profile TEXT, exit_code INTEGER, fail INTEGER,
           error INTEGER, warn INTEGER, skip INTEGER, pass INTEGER, results BLOB,
           PRIMARY KEY (node_id, time, run_key)) WITHOUT ROWID""",
        "CREATE INDEX node_runs_run ON node_runs(run_key)",
        """CREATE VIEW metrics_long AS
           SELECT r.id AS run, m.time AS time, n.name AS node, s.check_name AS "check",
                  s.subject AS subject, s.metric AS metric, m.value AS value, s.unit AS unit
           FROM metrics m JOIN series s ON s.id = m.series_id
           JOIN nodes n ON n.id = m.node_id JOIN runs r ON r.key = m.run_key""",
    ),
    2: (  # what stetho did about a fault by itself (stetho.history.remedies)
        """CREATE TABLE remedies (id INTEGER PRIMARY KEY, time REAL NOT NULL,
           node TEXT NOT NULL, part TEXT NOT NULL, cause TEXT NOT NULL, action TEXT NOT NULL,
           outcome TEXT NOT NULL, detail TEXT NOT NULL DEFAULT '', run TEXT NOT NULL DEFAULT '')""",
        "CREATE INDEX remedies_fault ON remedies(node, cause, part, time)",
    ),
    3: (  # each node's row signed (stetho.history.integrity); older rows stay unsigned
        "ALTER TABLE node_runs ADD COLUMN mac TEXT",
        "INSERT OR REPLACE INTO meta VALUES ('signed_after_run_key', "
        "(SELECT coalesce(max(key), 0) FROM runs))",
    ),
    4: (  # each node's rows a hash chain, sealed, covering its metrics (stetho.history.chain)
        "ALTER TABLE node_runs ADD COLUMN seq INTEGER",
        "ALTER TABLE node_runs ADD COLUMN prev TEXT",
        "ALTER TABLE node_runs ADD COLUMN metrics_digest TEXT",
        "CREATE INDEX node_runs_seq ON node_runs(node_id, seq)",
        "INSERT OR REPLACE INTO meta VALUES ('chained_after_run_key', "
        "(SELECT coalesce(max(key), 0) FROM runs))",
    ),
    5: (  # each new row's MAC over its blob's digest, so old blobs can be pruned (prune.py)
        "INSERT OR REPLACE INTO meta VALUES ('digest_signed_after_run_key', "
        "(SELECT coalesce(max(key), 0) FROM runs))",
    ),
    6: (  # each gate's verdict per node and policy (stetho.history.decisions); IF NOT EXISTS:
        # stetho before this schema made the table on its first shadow record
        """CREATE TABLE IF NOT EXISTS gate_decisions (run_key INTEGER NOT NULL,
           time INTEGER NOT NULL, policy TEXT NOT NULL, mode TEXT NOT NULL, node TEXT NOT NULL,
           verdict TEXT NOT NULL, checks TEXT NOT NULL, PRIMARY KEY (run_key, policy, node))""",
    ),
    7: (  # why a decision was made, in words (the release gate's promote/hold row)
        "ALTER TABLE gate_decisions ADD COLUMN reason TEXT NOT NULL DEFAULT ''",
    ),
}


def new_run_id() -> str:
    """A run's id: its UTC start time and a random suffix (sortable, unique across hosts).
    os.urandom is what secrets.token_hex reads, without importing secrets (random, base64)
    on every gate."""
    from datetime import datetime, timezone

    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ") + "-" + os.urandom(3).hex()


#: A bundle (or a clock) at most this far ahead of the controller is still believed.
FUTURE_TOLERANCE_S = 300

#: Nodes record() writes at a time: their blobs and metric rows are all it holds at once.
RECORD_CHUNK = 256


def default_path() -> Path:
    """The configured history database (STETHO_DB, the config file's `db`)."""
    from stetho import config

    return config.active().db


@record
class NodeRun:
    """One node's part of a run: its results and the metrics its checks measured."""

    node: str
    profile: str
    results: list[Result]
    metrics: list[list[Any]]  # [check, subject, metric, value, unit]


_new_sample = tuple.__new__


class Sample(NamedTuple):
    """One reading of a series and the run it came from. A tuple: drift's two-week read of a
    node checked hourly makes 45,000, and a frozen dataclass's __init__ was a fifth of it."""

    time: int
    value: float
    run: str


class History:
    def __init__(self, path: Path | str, timeout_s: float = 60.0) -> None:
        self.path = Path(path)
        if str(path) != ":memory:":
            self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self.conn = sqlite3.connect(str(path), timeout=timeout_s, isolation_level=None)
            self.conn.execute(f"PRAGMA busy_timeout = {int(timeout_s * 1000)}")
            self.conn.execute("PRAGMA journal_mode = WAL")
            self.conn.execute("PRAGMA synchronous = NORMAL")
            self.conn.execute("PRAGMA cache_size = -65536")  # 64 MiB: a sweep's pages
        except sqlite3.DatabaseError as exc:
            raise HistoryError(f"{path}: not a usable SQLite database: {exc}") from None
        self._db: Any = None
        self._node_ids: dict[str, int] = {}
        self.rows = RowCheck(self.conn, self.path)  # signs and verifies node_runs rows
        self.seals = chain.SealReader(self.path)  # each node's newest row (stetho.history.chain)
        self.chained = ChainedRows(self.conn, self.rows, self.seals)  # and reads them verified
        try:
            self._migrate()
        except HistoryError:
            self.conn.close()
            raise
        except sqlite3.Error as exc:
            self.conn.close()
            raise HistoryError(f"{path}: {describe(exc)}") from None

    @property
    def db(self) -> Any:
        """The connection as a sqlite_utils.Database, for queries and tables by name.

        Imported on first use: sqlite-utils pulls in numpy where it is installed (~0.25 s),
        which a pre-job gate or a node's check must not pay for on its hot path; those write
        and read through the same connection with prepared statements."""
        if self._db is None:
            import sqlite_utils

            self._db = sqlite_utils.Database(self.conn)
        return self._db

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> History:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- schema -----------------------------------------------------------------------------
    def schema_version(self) -> int:
        try:
            row = self.conn.execute("SELECT value FROM meta WHERE key = 'schema_version'"
                                    ).fetchone()
        except sqlite3.OperationalError as exc:
            if "no such table" not in str(exc):
                raise
            return 0
        if not row:
            return 0
        try:
            return int(row[0])
        except (TypeError, ValueError):
            raise HistoryError(f"{self.path}: history schema version {row[0]!r} is not a "
                               "number; the database was not written by stetho, or was "
                               "damaged: restore it from a backup, or point --db elsewhere"
                               ) from None

    def _migrate(self) -> None:
        try:
            current = self.schema_version()
        except sqlite3.DatabaseError as exc:
            raise HistoryError(f"{self.path}: not a usable stetho history database: {exc}"
                               ) from None
        if current > SCHEMA_VERSION:
            raise HistoryError(
                f"{self.path}: history schema version {current} is newer than this stetho "
                f"understands ({SCHEMA_VERSION}); upgrade stetho, or point --db elsewhere")
        if current == 0 and self.conn.execute(
                "SELECT count(*) FROM sqlite_master WHERE name = 'runs'").fetchone()[0]:
            raise HistoryError(f"{self.path}: has a 'runs' table but no stetho schema version")
        for version in range(current + 1, SCHEMA_VERSION + 1):
            with self.transaction():
                for stmt in MIGRATIONS[version]:
                    self.conn.execute(stmt)
                self.conn.execute("INSERT OR REPLACE INTO meta VALUES ('schema_version', ?)",
                                  (str(version),))

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """BEGIN IMMEDIATE: take the write lock up front, so concurrent writers queue on the
        busy timeout instead of failing half way."""
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        else:
            self.conn.execute("COMMIT")

    # -- writing ----------------------------------------------------------------------------
    def record(self, run_id: str, kind: str, nodes: Iterable[NodeRun], *,
               when: float | None = None, exit_code: int | None = None,
               command: str = "", run_dir: str = "",
               then: Callable[[sqlite3.Connection], None] | None = None) -> int:
        """Write one run, all of it or nothing. Returns the run's key. `then` runs last in
        the same transaction (a caller's own rows that must land with the run's, or not).

        `nodes` is written RECORD_CHUNK nodes at a time in the one transaction, so an
        iterator that makes each NodeRun as it is asked (the ingest's) is never held whole:
        memory stays flat in the fleet's size. A list or tuple keeps one row per node, the
        last wins; an iterator must name each node once."""
        t = int(when if when is not None else time.time())
        if isinstance(nodes, (list, tuple)):
            nodes = list({n.node: n for n in nodes}.values())  # one row per node: last wins
        key = self.rows.key(create=True)
        assert key is not None
        with chain.locked(self.path, shared=False), self.transaction():
            cur = self.conn.execute(
                "INSERT INTO runs (id, kind, time, started, host, stetho_version, command, "
                "exit_code, nodes, run_dir) VALUES (?,?,?,?,?,?,?,?,?,?)",
                (run_id, kind, t, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t)),
                 os.uname().nodename, _version(), command, 0, 0, run_dir))
            run_key = int(cur.lastrowid or 0)
            sealed = self.chained.to_extend(key)
            new = chain.Seal(dict(sealed.heads), True, sealed.path, dict(sealed.pins))
            seen: set[str] = set()
            tally = {"fail": 0, "error": 0}
            for chunk in _batches(nodes, RECORD_CHUNK):
                for n in chunk:
                    if n.node in seen:
                        raise HistoryError(f"run {run_id}: node {n.node} given twice to "
                                           "record (a list keeps the last, an iterator may "
                                           "not repeat one)")
                    seen.add(n.node)
                self._record_chunk(key, run_key, run_id, t, chunk, new, tally)
            code = exit_code if exit_code is not None else (
                1 if tally["fail"] else 3 if tally["error"] else 0)
            self.conn.execute("UPDATE runs SET exit_code = ?, nodes = ? WHERE key = ?",
                              (code, len(seen), run_key))
            if then is not None:
                then(self.conn)
            chain.write(self.path, key, new)  # before the commit: a crash leaves it ahead
            self.seals.remember(new)
        return run_key

    def _record_chunk(self, key: bytes, run_key: int, run_id: str, t: int,
                      nodes: list[NodeRun], new: chain.Seal, tally: dict[str, int]) -> None:
        """One chunk of a run's nodes: their metrics, then their signed, chained rows (the
        chain's heads advance in `new`; `tally` counts failing and erroring results)."""
        from stetho.results import counts
        from stetho.results import exit_code as code_of

        ids = self._ensure_nodes([n.node for n in nodes])
        series = self._ensure_series(ids, nodes)
        self.conn.executemany("INSERT OR REPLACE INTO metrics VALUES (?,?,?,?,?)", [
            (ids[n.node], t, run_key, series[(ids[n.node], m[0], m[1], m[2])], m[3])
            for n in nodes for m in n.metrics])
        digests = self.chained.digests(run_key, t, sorted(ids.values()))
        node_rows = []
        for n in nodes:
            nid = ids[n.node]
            c = counts(n.results)
            tally["fail"] += c["fail"]
            tally["error"] += c["error"]
            blob = results_blob(n.results)  # stetho.history.blob: one result per line
            code = code_of(n.results)
            five = (c["fail"], c["error"], c["warn"], c["skip"], c["pass"])
            seq, prev = new.heads.get(n.node, (0, ""))
            link = (seq + 1, prev, digests.get(nid) or chain.digest([]))
            sig = integrity.mac(key, n.node, run_id, t, n.profile, code, five, blob, link,
                                by_digest=True)
            node_rows.append((run_key, nid, t, n.profile, code, *five, blob, sig, *link))
            new.heads[n.node] = (seq + 1, sig)
            if n.profile and n.profile != DEFAULT_PROFILE:
                new.pins[n.node] = (n.profile, run_id)
        self.conn.executemany(
            "INSERT OR REPLACE INTO node_runs (run_key, node_id, time, profile, exit_code, "
            "fail, error, warn, skip, pass, results, mac, seq, prev, metrics_digest) VALUES "
            "(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", node_rows)

    def _ensure_nodes(self, names: list[str]) -> dict[str, int]:
        missing = [n for n in names if n not in self._node_ids]
        if missing:
            self.conn.executemany("INSERT OR IGNORE INTO nodes (name) VALUES (?)",
                                  [(n,) for n in missing])
            for chunk in _chunks(missing, 500):
                q = ",".join("?" * len(chunk))
                for nid, name in self.conn.execute(
                        f"SELECT id, name FROM nodes WHERE name IN ({q})", chunk):
                    self._node_ids[name] = nid
        return {n: self._node_ids[n] for n in names}

    def _ensure_series(self, ids: dict[str, int], nodes: list[NodeRun]
                       ) -> dict[tuple[int, str, str, str], int]:
        wanted = {(ids[n.node], m[0], m[1], m[2]): (m[4] or "") for n in nodes
                  for m in n.metrics}
        known: dict[tuple[int, str, str, str], int] = {}
        node_ids = sorted({k[0] for k in wanted})
        for chunk in _chunks(node_ids, 500):
            q = ",".join("?" * len(chunk))
            for sid, nid, c, s, m in self.conn.execute(
                    "SELECT id, node_id, check_name, subject, metric FROM series "
                    f"WHERE node_id IN ({q})", chunk):
                known[(nid, c, s, m)] = sid
        new = [(k[0], k[1], k[2], k[3], u) for k, u in wanted.items() if k not in known]
        if new:
            self.conn.executemany("INSERT OR IGNORE INTO series (node_id, check_name, "
                                  "subject, metric, unit) VALUES (?,?,?,?,?)", new)
            for chunk in _chunks(sorted({k[0] for k in new}), 500):
                q = ",".join("?" * len(chunk))
                for sid, nid, c, s, m in self.conn.execute(
                        "SELECT id, node_id, check_name, subject, metric FROM series "
                        f"WHERE node_id IN ({q})", chunk):
                    known[(nid, c, s, m)] = sid
        return known

    # -- reading ----------------------------------------------------------------------------
    def has_run(self, run_id: str) -> bool:
        return self.conn.execute("SELECT 1 FROM runs WHERE id = ?", (run_id,)
                                 ).fetchone() is not None

    def ledger_known(self, keys: Iterable[tuple[str, str]]
                     ) -> dict[tuple[str, str], tuple[str, str]]:
        from stetho.history import ledger

        return ledger.known(self.conn, keys)

    def node_id(self, node: str) -> int | None:
        row = self.conn.execute("SELECT id FROM nodes WHERE name = ?", (node,)).fetchone()
        return int(row[0]) if row else None

    def series_of(self, node: str, check: str | None = None, metric: str | None = None
                  ) -> list[tuple[int, str, str, str, str]]:
        """(series id, check, subject, metric, unit) of a node, optionally filtered."""
        q = ("SELECT s.id, s.check_name, s.subject, s.metric, s.unit FROM series s "
             "JOIN nodes n ON n.id = s.node_id WHERE n.name = ?")
        args: list[Any] = [node]
        if check:
            q += " AND s.check_name = ?"
            args.append(check)
        if metric:
            q += " AND s.metric = ?"
            args.append(metric)
        return [tuple(r) for r in self.conn.execute(q + " ORDER BY 2, 3, 4", args)]

    def recent_window(self, node: str, runs: int, before: str = ""
                      ) -> tuple[int, int] | None:
        """(first, last): the times of the `runs`-th newest (fewer: the oldest) and the
        newest time at which another run than `before`, and none after it, recorded
        readings of the node; None where no such run did. A trend that compares a node
        with its last runs reads between them: not a year of nights, nor the run being
        judged itself. A few index probes, whatever the history's length (the read itself
        is verified)."""
        nid = self.node_id(node)
        if nid is None or runs < 1:
            return None
        row = self.conn.execute("SELECT key FROM runs WHERE id = ?", (before,)).fetchone()
        skip = int(row[0]) if row else -1
        # a run in the history looks back from its own time: what came after it is not its
        # past (`stetho report` over an older run folder)
        at = self.conn.execute("SELECT time FROM node_runs WHERE node_id = ? AND run_key = ?",
                               (nid, skip)).fetchone()
        found: list[int] = []
        cursor = int(at[0]) + 1 if at else 2**62
        while len(found) < runs:
            (t,) = self.conn.execute("SELECT max(time) FROM metrics WHERE node_id = ? AND "
                                     "time < ?", (nid, cursor)).fetchone()
            if t is None:
                break
            cursor = int(t)
            if self.conn.execute("SELECT 1 FROM metrics WHERE node_id = ? AND time = ? AND "
                                 "run_key != ? LIMIT 1", (nid, cursor, skip)).fetchone():
                found.append(cursor)
        return (found[-1], found[0]) if found else None

    def samples(self, node: str, series_ids: list[int], since: float,
                until: float | None = None) -> dict[int, list[Sample]]:
        """A node's values of these series between since and until, oldest first: one range
        scan of the node's rows (the table is clustered by node, then time)."""
        out: dict[int, list[Sample]] = {s: [] for s in series_ids}
        nid = self.node_id(node)
        if nid is None or not series_ids:
            return out
        until_t = int(until) if until is not None else 2**62
        with chain.locked(self.path, shared=True):
            runs, rows = self.chained.metrics(node, nid, int(since), until_t)
        append = {sid: got.append for sid, got in out.items()}
        for sid, t, value, run_key in rows:
            add = append.get(sid)
            if add is not None:  # a tuple made as a tuple: Sample(...) is a Python call
                add(_new_sample(Sample, (t, value, runs[run_key])))
        return out

    def reseal(self) -> int:
        """A new seal from the rows as they stand (stetho.history.chained.ChainedRows.reseal:
        it launders). Returns the number of nodes sealed."""
        return self.chained.reseal()

    def prune(self, keep_s: float, now: float | None = None) -> Any:
        """Drop results blobs older than keep_s, keeping each row verified
        (stetho.history.prune). Returns its Pruned counts."""
        from stetho.history.prune import prune

        return prune(self, keep_s, now)

    def pinned_profiles(self, nodes: list[str], unpinned: frozenset[str] = frozenset()
                        ) -> dict[str, tuple[str, str, str | None]]:
        """Each node's profile pin, the seal's where it has one (ChainedRows.pins)."""
        return self.chained.pins(nodes, unpinned)

    def clean_runs(self, node: str) -> list[int]:
        """The times of a node's runs with passing checks and none failing or in error, each
        verified (stetho.history.chain); rows from before the chain are unverified, left out."""
        nid = self.node_id(node)
        if nid is None:
            return []
        with chain.locked(self.path, shared=True):
            rows = self.chained.window(node, nid, 0, 2**62)
        return sorted(t for _run, _k, t, row in rows if row[2] == 0 and row[3] == 0
                      and (row[6] or 0) > 0)

    def latest_results(self, nodes: list[str], max_age_s: float, now: float | None = None
                       ) -> dict[str, tuple[int, str, list[Result]]]:
        """Each node's newest results no older than max_age_s: node -> (time, run, results)."""
        now = now if now is not None else time.time()
        out: dict[str, tuple[int, str, list[Result]]] = {}
        with chain.locked(self.path, shared=True):
            for chunk in _chunks(nodes, 500):
                self._newest_chunk(out, chunk, max_age_s, now)
        return out

    def _newest_chunk(self, out: dict[str, tuple[int, str, list[Result]]], chunk: list[str],
                      max_age_s: float, now: float) -> None:
        q = ",".join("?" * len(chunk))
        rows = self.conn.execute(
            f"SELECT n.name, nr.time, r.id, nr.run_key, {ROW} FROM nodes n "
            "JOIN node_runs nr ON nr.node_id = n.id "
            "JOIN runs r ON r.key = nr.run_key "
            f"WHERE n.name IN ({q}) AND nr.time >= ? "
            "AND nr.time = (SELECT max(time) FROM node_runs WHERE node_id = n.id) ",
            [*chunk, int(now - max_age_s)])
        for name, t, run, run_key, *row in rows:
            why = self.rows.untrusted(name, str(run), int(run_key), int(t), tuple(row))
            if why == "":
                continue
            if why:
                raise HistoryCorrupt(why)
            self.chained.walk(name, self.node_id(name) or 0, row[7])
            blob = row[-2]
            if integrity.pruned(blob):  # its results were pruned: no evidence left
                continue
            results = [Result.from_json(d) for d in json.loads(zlib.decompress(blob))]
            out[name] = (int(t), str(run), results)

    def latest_per_check(self, nodes: list[str], max_age_s: float, now: float | None = None,
                         checks: frozenset[str] | None = None,
                         keep: frozenset[str] | None = None) -> dict[str, NodeLatest]:
        """Per node and check, the results of the newest run no older than max_age_s that ran
        that check: a narrow run (`-k cpu_governor`, a prolog's quick checks) replaces only
        what it ran. Reads each node's runs inside the window, newest first (one range scan
        of node_runs, clustered by node then time), and stops once every wanted check is
        found. The pseudo-checks `gate` and `sweep` (could not check the node at all) are
        taken only from the node's newest run: a later run that checked it clears them.
        `keep`: decode only these checks' results (and the pseudo-checks): a 64-node gate
        on real-size runs (227 results a node) spent most of its read building results of
        checks its policy never counts."""
        now = now if now is not None else time.time()
        out: dict[str, NodeLatest] = {}
        with chain.locked(self.path, shared=True):
            for chunk in _chunks(nodes, 500):
                self._latest_chunk(out, chunk, max_age_s, now, checks,
                                   None if keep is None else keep | PSEUDO)
        return out

    def _latest_chunk(self, out: dict[str, NodeLatest], chunk: list[str], max_age_s: float,
                      now: float, checks: frozenset[str] | None,
                      keep: frozenset[str] | None = None) -> None:
        """latest_per_check for up to 500 nodes: each row's signature, then the node's chain
        from the seal's head down to the oldest row read (a node whose rows fail is distrusted:
        could not evaluate, every other node judged)."""
        used: dict[str, int] = {}  # node -> the lowest seq read (1 where a pre-chain row was)
        known: dict[str, set[tuple[int, int]]] = {}  # node -> rows verified here
        q = ",".join("?" * len(chunk))
        rows = self.conn.execute(
            f"SELECT n.name, nr.time, r.id, nr.run_key, {ROW} FROM nodes n "
            "JOIN node_runs nr ON nr.node_id = n.id "
            "JOIN runs r ON r.key = nr.run_key "
            f"WHERE n.name IN ({q}) AND nr.time >= ? AND nr.time <= ? "
            "ORDER BY n.name, nr.time DESC, nr.run_key DESC",
            [*chunk, int(now - max_age_s), int(now) + FUTURE_TOLERANCE_S])
        for name, t, run, run_key, *row in rows:
            latest = out.setdefault(name, NodeLatest(name))
            if latest.distrusted or (checks is not None and checks <= latest.checks.keys()):
                continue
            why = self.rows.untrusted(name, str(run), int(run_key), int(t), tuple(row))
            if why == "":  # written before rows were signed: unverified, as if stale
                continue
            if why:
                latest.distrusted = why
                continue
            if integrity.pruned(row[-2]):  # verified, but its results were pruned: not evidence
                continue
            used[name] = min(used.get(name, 2**62), int(row[7]) if row[7] is not None else 1)
            known.setdefault(name, set()).add((run_key, t))
            got = blob.decode(name, str(run), row[-2], latest.checks, keep)
            latest.add(int(t), str(run), got.results, str(row[0] or ""), got.lines)
        for name, low in used.items():  # the rows used, and every row between, still there
            if out[name].distrusted:
                continue
            try:
                self.chained.walk(name, self._node_ids.get(name) or self.node_id(name) or 0, low,
                           known=frozenset(known[name]))
            except HistoryCorrupt as exc:
                out[name].distrusted = str(exc)

    def runs(self, limit: int = 20) -> list[dict[str, Any]]:
        return list(self.db["runs"].rows_where(select="id, kind, started, exit_code, nodes, host",
                                               order_by="time desc", limit=limit))


def describe(exc: BaseException) -> str:
    """A database failure in words a person can act on."""
    text = str(exc) or type(exc).__name__
    if isinstance(exc, OSError) and exc.errno == 27 or "disk is full" in text:
        return f"{text} (the disk or the file size limit is full: free space, then rerun)"
    if "disk I/O error" in text:
        return f"{text} (a write or read failed: is the disk full, or failing?)"
    if "malformed" in text or "not a database" in text or "truncated" in text:
        return f"{text} (the file is damaged or truncated: restore it from a backup, or " \
               "point --db elsewhere)"
    return text


def _version() -> str:
    from stetho import __version__

    return __version__


def _batches(items: Iterable[Any], size: int) -> Iterator[list[Any]]:
    """`items` in lists of `size` (the last shorter), taken as they come."""
    batch: list[Any] = []
    for item in items:
        batch.append(item)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


def _chunks(items: list[Any], size: int) -> Iterator[list[Any]]:
    for i in range(0, len(items), size):
        yield items[i:i + size]


def parse_since(text: str) -> float:
    """'30d', '12h', '90m', '2w' -> seconds."""
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
    t = text.strip().lower()
    if not t or t[-1] not in units or not t[:-1].replace(".", "", 1).isdigit():
        raise ConfigError(f"--since {text!r}: expected a duration like 30d, 12h, 90m, 2w")
    return float(t[:-1]) * units[t[-1]]
