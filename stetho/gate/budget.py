"""The drain budget: one atomic decision point for every drain stetho makes, whoever asks
(`gate --act` on the controller, a node's health check, its prolog, the watchdog).

Why a SQLite ledger and not Slurm: `scontrol` has no compare-and-set. Reading the drain
count and then draining is a race (16 health checks at one moment each read "0 drained" and
all drained), and a reservation or node feature written as a counter is last-writer-wins.
A SQLite file taken with `BEGIN IMMEDIATE` is one writer at a time on every host that
mounts it with working POSIX locks (a local disk for `gate --act` on the controller; a
shared filesystem for the nodes' own hooks), survives a crashed caller (its rollback
journal: a transaction is all or nothing), and costs a few
milliseconds (callers queue on a blocking POSIX lock on `<ledger>.lock` first: SQLite's
own busy handler starves early callers under a burst). Slurm's own view still counts:
drains stetho made that the ledger does not know (an older version, a lost ledger) are
passed in as `slurm_recent` and join the count.

Decisions, and why:

* All or nothing per request. A request is one observer's view of one event; if its drains
  together would pass the limit the event looks like a mass failure (a broken check, a
  driver push) and draining an arbitrary first few would pick nodes by order, not evidence.
  A node's own health check asks for one node, so concurrent checks get exactly the budget,
  first come first served.
* A grant counts for the whole window, even when its drain then failed (fail closed: a
  breaker that is unsure allows less). It stops counting when stetho itself resumes the
  node (`release`: the node passed its checks and is back in service, so it holds no
  capacity), or after a signed `reset` by a person. A node a person resumed by hand still
  counts in the ledger until the window ends or a reset: the ledger cannot see it.
* A node already drained by stetho in the window (`already`) costs nothing to drain again;
  the repeat is written to the ledger, and Slurm's reason (and its time stamp) are left as
  they are.
* No fsync (`synchronous = OFF`). A crashed caller loses nothing: its writes are in the
  kernel's cache, and the rollback journal keeps a transaction whole. What a power cut of the
  ledger's host can lose is the last grants, and the drains they allowed are in Slurm's own
  state, which the count takes in (`slurm_recent`); a file left corrupt by one is a
  LedgerError, and nothing is drained until a person replaces it (fail closed). On NFS the
  client writes its cache back when the lock is released. An fsync per decision made 64
  callers at once wait ~150 ms p95 on a 2-core machine instead of ~70 ms
  (bench/drain_budget.py).
* An open breaker alerts once per window and scope: the first refused request in a window
  gets `Ruling.alert`, recorded in the ledger in the same transaction.
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import field
from pathlib import Path

from stetho.core.record import record
from stetho.errors import StethoError
from stetho.gate.breaker import Circuit, Trip

#: How long a caller waits for the ledger's lock before giving up (a health check has 50 s).
BUSY_TIMEOUT_S = 20.0
#: The environment variable naming the ledger; it wins over the policy's `ledger:`.
ENV = "STETHO_DRAIN_LEDGER"

_VERSION = 1
_SCHEMA = """
CREATE TABLE IF NOT EXISTS grants (
    id INTEGER PRIMARY KEY, scope TEXT NOT NULL, node TEXT NOT NULL, at REAL NOT NULL,
    who TEXT NOT NULL, reason TEXT NOT NULL, released_at REAL, reset_at REAL,
    released_after INTEGER);
CREATE INDEX IF NOT EXISTS grants_scope_at ON grants(scope, at);
CREATE TABLE IF NOT EXISTS repeats (
    id INTEGER PRIMARY KEY, scope TEXT NOT NULL, node TEXT NOT NULL, at REAL NOT NULL,
    who TEXT NOT NULL, reason TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS refusals (
    id INTEGER PRIMARY KEY, scope TEXT NOT NULL, node TEXT NOT NULL, at REAL NOT NULL,
    who TEXT NOT NULL, reason TEXT NOT NULL, would INTEGER NOT NULL, lim INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS resets (
    id INTEGER PRIMARY KEY, scope TEXT NOT NULL, at REAL NOT NULL, who TEXT NOT NULL,
    proof TEXT NOT NULL, forgiven TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS alerts (scope TEXT PRIMARY KEY, at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS scopes (scope TEXT PRIMARY KEY, size INTEGER NOT NULL,
    seen REAL NOT NULL);
"""


class LedgerError(StethoError):
    """The ledger could not be opened or written (missing mount, no locks, corrupt file):
    nothing is drained (exit 3, could not evaluate)."""

    exit_code = 3


@record
class Ruling:
    """The budget's answer to one request.

    allowed: new drains granted (the caller drains them). refused: new drains not granted
    (the breaker is open: `trip` says why). already: nodes drained by stetho in the window
    already; draining them again costs nothing and changes nothing in Slurm. alert: this is
    the first refusal in the window for the scope (alert now; later ones stay quiet).
    room: drains the budget had left before this request."""

    allowed: tuple[str, ...]
    refused: tuple[str, ...]
    trip: Trip | None
    already: tuple[str, ...]
    alert: bool = False
    room: int = 0


@record
class Entry:
    """One row of `status`: a drain (grant), a repeat, a refusal or a reset."""

    kind: str  # grant | released | repeat | refused | reset
    node: str
    at: float
    who: str
    reason: str

    def to_json(self) -> dict[str, object]:
        return {"kind": self.kind, "node": self.node, "at": self.at, "who": self.who,
                "reason": self.reason}


@record
class Status:
    """The breaker of one scope now: what counts, the limit, and what was refused."""

    scope: str
    size: int | None  # nodes in scope, as the last request saw it (None: no request yet)
    limit: int | None
    window_s: float
    counted: tuple[str, ...]
    entries: tuple[Entry, ...] = field(default_factory=tuple)
    alerted_at: float | None = None

    @property
    def open(self) -> bool:
        return any(e.kind == "refused" for e in self.entries)

    def to_json(self) -> dict[str, object]:
        return {"scope": self.scope, "size": self.size, "limit": self.limit,
                "window_s": self.window_s, "counted": list(self.counted), "open": self.open,
                "alerted_at": self.alerted_at, "entries": [e.to_json() for e in self.entries]}


def ledger_path(circuit: Circuit, db: Path | None = None) -> Path:
    """STETHO_DRAIN_LEDGER, else the policy's `scheduler: {circuit: {ledger: PATH}}`, else
    `drain-ledger.db` beside the history database (`db`, default STETHO_DB): one
    controller's own ledger. Nodes that drain themselves need a shared path."""
    from stetho import config

    cfg = config.active()
    if cfg.drain_ledger is not None:
        return cfg.drain_ledger
    if circuit.ledger is not None:
        return circuit.ledger
    return (db or cfg.db).parent / "drain-ledger.db"


class DrainBudget:
    """The ledger at `path` under `circuit`'s limit and window. Each call is one short
    transaction; nothing is held open between calls, so many processes share the file."""

    def __init__(self, path: Path, circuit: Circuit, busy_timeout_s: float = BUSY_TIMEOUT_S
                 ) -> None:
        self.path = Path(path)
        self.circuit = circuit
        self.busy_timeout_s = busy_timeout_s

    # -- transactions -------------------------------------------------------------------

    def _connect(self, readonly: bool = False) -> sqlite3.Connection:
        try:
            if readonly:
                con = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True,
                                      timeout=self.busy_timeout_s, isolation_level=None)
            else:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                con = sqlite3.connect(self.path, timeout=self.busy_timeout_s,
                                      isolation_level=None)
            con.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout_s * 1000)}")
            # No fsync (the module's docstring says why): a caller's hold of the ledger falls
            # from ~1 ms to ~0.3 ms, and 64 callers at once queue behind those holds.
            con.execute("PRAGMA synchronous = OFF")
            return con
        except (OSError, sqlite3.Error) as exc:
            raise LedgerError(f"drain ledger {self.path}: {exc}") from exc

    def _queue(self) -> int:
        """Wait for the POSIX lock on `<ledger>.lock`: the line callers stand in before SQLite.
        SQLite's own busy handler polls, backing off to 100 ms sleeps, so under a burst a late
        caller often wins and an early one waits seconds, and polling callers take CPU from
        the one holding the lock. A blocking lock sleeps in the kernel until its turn.
        Returns the open lock file (closing it releases the lock)."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(f"{self.path}.lock", os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise LedgerError(f"drain ledger {self.path}: {exc}") from exc
        try:
            _lock(fd, self.busy_timeout_s)
        except TimeoutError:
            os.close(fd)
            raise LedgerError(f"drain ledger {self.path}: still locked after "
                              f"{self.busy_timeout_s:g} s") from None
        except OSError as exc:
            os.close(fd)
            raise LedgerError(f"drain ledger {self.path}: cannot lock {self.path}.lock ({exc}): "
                              "is it on a filesystem with working POSIX locks?") from exc
        return fd

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """BEGIN IMMEDIATE: the write lock is taken before anything is read, so the count a
        decision rests on cannot change until it commits."""
        con = self._connect()
        try:
            # the schema is read (and the statements below compiled) before queueing: the
            # time inside the lock is what every later caller in a burst waits for
            con.execute("SELECT count(*) FROM sqlite_master").fetchone()
            fd = self._queue()
        except sqlite3.Error as exc:
            con.close()
            raise LedgerError(f"drain ledger {self.path}: {exc}") from exc
        except BaseException:
            con.close()
            raise
        try:
            try:
                con.execute("BEGIN IMMEDIATE")
                if con.execute("PRAGMA user_version").fetchone()[0] != _VERSION:
                    for stmt in _SCHEMA.split(";"):
                        if stmt.strip():
                            con.execute(stmt)
                    con.execute(f"PRAGMA user_version = {_VERSION}")
            except sqlite3.Error as exc:
                raise LedgerError(f"drain ledger {self.path}: could not lock it ({exc}): is "
                                  "it on a filesystem with working POSIX locks?") from exc
            try:
                yield con
            except BaseException:
                con.execute("ROLLBACK")
                raise
            try:
                con.execute("COMMIT")
            except sqlite3.Error as exc:
                raise LedgerError(f"drain ledger {self.path}: could not commit: {exc}") from exc
        finally:
            con.close()
            os.close(fd)

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection | None]:
        """A read without writing: None when the ledger does not exist yet (empty)."""
        if not self.path.exists():
            yield None
            return
        con = self._connect(readonly=True)
        try:
            try:
                con.execute("SELECT 1 FROM grants LIMIT 1")
            except sqlite3.OperationalError:
                yield None
                return
            yield con
        except sqlite3.Error as exc:
            raise LedgerError(f"drain ledger {self.path}: {exc}") from exc
        finally:
            con.close()

    # -- counting -----------------------------------------------------------------------

    def _counted(self, con: sqlite3.Connection | None, scope: str, now: float,
                 slurm_recent: Iterable[str]) -> list[str]:
        """Nodes holding budget: live grants in the window, and Slurm's recent stetho drains
        except those a reset in the window forgave (unless granted again since)."""
        since = now - self.circuit.window_s
        recent = set(slurm_recent)
        if con is None:
            return sorted(recent)
        live = {r[0] for r in con.execute(
            "SELECT node FROM grants WHERE scope=? AND at>? AND released_at IS NULL "
            "AND reset_at IS NULL", (scope, since))}
        row = con.execute("SELECT forgiven FROM resets WHERE scope=? AND at>? ORDER BY at DESC "
                          "LIMIT 1", (scope, since)).fetchone()
        forgiven = set(json.loads(row[0])) if row else set()
        return sorted(live | (recent - forgiven))

    def _rule(self, con: sqlite3.Connection | None, nodes: Sequence[str], scope: str,
              scope_size: int, now: float, slurm_recent: Iterable[str]
              ) -> tuple[list[str], list[str], list[str], Trip | None, int]:
        """(counted, already, new, trip, room) for a request, writing nothing."""
        counted = self._counted(con, scope, now, slurm_recent)
        have = set(counted)
        wanted = list(dict.fromkeys(nodes))
        already = [n for n in wanted if n in have]
        new = [n for n in wanted if n not in have]
        limit = self.circuit.limit(scope_size)
        room = max(0, limit - len(counted))
        trip = None
        if new and len(counted) + len(new) > limit:
            trip = Trip(len(counted) + len(new), scope_size, limit, tuple(counted), tuple(new),
                        self.circuit.window_s)
        return counted, already, new, trip, room

    # -- the API ------------------------------------------------------------------------

    def request(self, nodes: Sequence[str], *, scope: str, scope_size: int, who: str,
                reasons: Mapping[str, str], now: float, slurm_recent: Iterable[str] = ()
                ) -> Ruling:
        """Ask to drain `nodes` of `scope` (a Slurm cluster or partition of `scope_size`
        nodes): all are granted and recorded, or (past the limit) none, in one transaction."""
        with self._write() as con:
            counted, already, new, trip, room = self._rule(con, nodes, scope, scope_size, now,
                                                           slurm_recent)
            con.execute("INSERT INTO scopes(scope, size, seen) VALUES(?,?,?) ON CONFLICT(scope) "
                        "DO UPDATE SET size=excluded.size, seen=excluded.seen",
                        (scope, scope_size, now))
            con.executemany("INSERT INTO repeats(scope, node, at, who, reason) VALUES(?,?,?,?,?)",
                            [(scope, n, now, who, reasons.get(n, "")) for n in already])
            if trip is None:
                con.executemany("INSERT INTO grants(scope, node, at, who, reason) "
                                "VALUES(?,?,?,?,?)",
                                [(scope, n, now, who, reasons.get(n, "")) for n in new])
                return Ruling(tuple(new), (), None, tuple(already), False, room)
            con.executemany("INSERT INTO refusals(scope, node, at, who, reason, would, lim) "
                            "VALUES(?,?,?,?,?,?,?)",
                            [(scope, n, now, who, reasons.get(n, ""), trip.would, trip.limit)
                             for n in new])
            last = con.execute("SELECT at FROM alerts WHERE scope=?", (scope,)).fetchone()
            alert = last is None or now - float(last[0]) > self.circuit.window_s
            if alert:
                con.execute("INSERT INTO alerts(scope, at) VALUES(?,?) ON CONFLICT(scope) "
                            "DO UPDATE SET at=excluded.at", (scope, now))
            return Ruling((), tuple(new), trip, tuple(already), alert, room)

    def preview(self, nodes: Sequence[str], *, scope: str, scope_size: int, now: float,
                slurm_recent: Iterable[str] = ()) -> Ruling:
        """What `request` would answer now, writing nothing (a dry run's "breaker allows 2")."""
        with self._read() as con:
            _, already, new, trip, room = self._rule(con, nodes, scope, scope_size, now,
                                                     slurm_recent)
        if trip is None:
            return Ruling(tuple(new), (), None, tuple(already), False, room)
        return Ruling((), tuple(new), trip, tuple(already), False, room)

    def note_repeat(self, node: str, *, scope: str, who: str, reason: str, now: float) -> None:
        """A node drained by stetho (before the window, or per Slurm only) failed again: the
        repeat is history; Slurm's reason and stamp stay as they are."""
        with self._write() as con:
            con.execute("INSERT INTO repeats(scope, node, at, who, reason) VALUES(?,?,?,?,?)",
                        (scope, node, now, who, reason))

    def release(self, node: str, now: float) -> int:
        """stetho resumed `node` (it passed): its live grants stop counting. Returns how many."""
        with self._write() as con:
            # released_after: the last grant before this release, so that the order of
            # grants and releases (not the callers' clocks) can be replayed
            cur = con.execute("UPDATE grants SET released_at=?, released_after=(SELECT max(id) "
                              "FROM grants) WHERE node=? AND released_at IS NULL AND reset_at "
                              "IS NULL AND at>?", (now, node, now - self.circuit.window_s))
            return int(cur.rowcount)

    def reset(self, scope: str, *, who: str, now: float, proof: str,
              slurm_recent: Iterable[str] = ()) -> tuple[str, ...]:
        """A person (`who`, a principal whose signature the caller verified; `proof` says
        how) closes the breaker of `scope`: every drain counted now stops counting. Returns
        the nodes forgiven."""
        with self._write() as con:
            forgiven = self._counted(con, scope, now, slurm_recent)
            con.execute("UPDATE grants SET reset_at=? WHERE scope=? AND released_at IS NULL AND "
                        "reset_at IS NULL", (now, scope))
            con.execute("INSERT INTO resets(scope, at, who, proof, forgiven) VALUES(?,?,?,?,?)",
                        (scope, now, who, proof, json.dumps(forgiven)))
            con.execute("DELETE FROM alerts WHERE scope=?", (scope,))
            return tuple(forgiven)

    def status(self, scope: str, now: float, slurm_recent: Iterable[str] = ()) -> Status:
        """The window of `scope`: counted nodes, the limit last seen, each row in time order."""
        since = now - self.circuit.window_s
        with self._read() as con:
            counted = self._counted(con, scope, now, slurm_recent)
            if con is None:
                return Status(scope, None, None, self.circuit.window_s, tuple(counted))
            row = con.execute("SELECT size FROM scopes WHERE scope=?", (scope,)).fetchone()
            size = int(row[0]) if row else None
            entries = [Entry("released" if rel is not None else "grant", n, at, w, r)
                       for n, at, w, r, rel in con.execute(
                           "SELECT node, at, who, reason, released_at FROM grants WHERE "
                           "scope=? AND at>? AND reset_at IS NULL", (scope, since))]
            entries += [Entry(kind, n, at, w, r) for kind, table in
                        (("repeat", "repeats"), ("refused", "refusals"))
                        for n, at, w, r in con.execute(
                            f"SELECT node, at, who, reason FROM {table} WHERE scope=? AND at>?",
                            (scope, since))]
            last_reset = con.execute("SELECT max(at) FROM resets WHERE scope=?",
                                     (scope,)).fetchone()[0]
            entries += [Entry("reset", "", at, w, p) for at, w, p in con.execute(
                "SELECT at, who, proof FROM resets WHERE scope=? AND at>?", (scope, since))]
            if last_reset is not None:  # a refusal before a reset is no longer waiting
                entries = [e for e in entries if e.kind != "refused" or e.at > last_reset]
            alert = con.execute("SELECT at FROM alerts WHERE scope=?", (scope,)).fetchone()
        entries.sort(key=lambda e: (e.at, e.kind, e.node))
        return Status(scope, size, self.circuit.limit(size) if size is not None else None,
                      self.circuit.window_s, tuple(counted), tuple(entries),
                      float(alert[0]) if alert else None)

    def scopes(self) -> list[str]:
        """Every scope the ledger has seen a request for."""
        with self._read() as con:
            if con is None:
                return []
            return [r[0] for r in con.execute("SELECT scope FROM scopes ORDER BY scope")]



def _lock(fd: int, timeout_s: float) -> None:
    """An exclusive POSIX lock on `fd` within `timeout_s` (TimeoutError after). Blocking, with
    SIGALRM as the clock, where this is the main thread and nothing else uses that signal;
    else polling, backing off to 2 ms."""
    free = (threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGALRM) in (signal.SIG_DFL, signal.SIG_IGN)
            and signal.getitimer(signal.ITIMER_REAL)[0] == 0)
    if free:
        def expire(signum: int, frame: object) -> None:
            raise TimeoutError

        old = signal.signal(signal.SIGALRM, expire)
        signal.setitimer(signal.ITIMER_REAL, timeout_s)
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)
        return
    deadline = time.monotonic() + timeout_s
    delay = 0.0002
    while True:
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except (BlockingIOError, PermissionError):
            if time.monotonic() > deadline:
                raise TimeoutError from None
            time.sleep(delay)
            delay = min(delay * 2, 0.002)
