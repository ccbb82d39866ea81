"""The alert rate limit: at most `limit` (3) messages per (node, cause) in a sliding window
(24 h), counted across every stetho process on the host.

The count lives in a small SQLite file (default $STETHO_NOTIFY_STATE; keep it on a local disk,
SQLite locking over NFS is unreliable). Sending takes a slot in one BEGIN IMMEDIATE
transaction (the write lock is held while the count is read, so two processes cannot both take
the 4th slot) and records it as `pending`; after the POST the slot becomes `sent`, or is given
back when the delivery failed: a webhook that is down does not use the budget, and the alert
after it recovers is delivered. A process that dies mid-POST leaves its slot pending, which
counts (a crash never frees budget). Alerts beyond the limit are recorded as `suppressed` and
summarised (count, first, last) in the next message that is sent for that node and cause.

Fail closed when the state is lost. A corrupt file is set aside (`<state>.corrupt-<time>`)
and recreated by one process under a file lock, the others wait and use the new one; since
what was sent before is unknown, every node and cause gets only the first alert until one
window has passed since the loss. A state that cannot be used at all (unwritable, locked past
the timeout) falls back to a small shared file under a flock (FallbackLimit) with the same
rule, across processes: one process sends the first alert, the others hold theirs. Both say
so in a warning.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import shutil
import sqlite3
import stat
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from stetho.core import atomic, locks
from stetho.errors import StethoError
from stetho.publish.alerts import Suppressed, iso

log = logging.getLogger(__name__)

LIMIT = 3
WINDOW_S = 24 * 3600.0
#: Suppressed alerts not yet summarised are kept this long (a node silent for a month).
KEEP_SUPPRESSED_S = 30 * 24 * 3600.0
#: The schema this module writes (PRAGMA user_version); anything else is set aside.
SCHEMA_VERSION = 2
#: SQLITE_CORRUPT and SQLITE_NOTADB (primary codes; extended ones carry them in the low byte).
_CORRUPT = {11, 26}
_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS alerts (
         id INTEGER PRIMARY KEY AUTOINCREMENT, node TEXT NOT NULL, cause TEXT NOT NULL,
         time REAL NOT NULL,
         kind TEXT NOT NULL CHECK (kind IN ('pending', 'sent', 'suppressed')))""",
    "CREATE INDEX IF NOT EXISTS alerts_key ON alerts(node, cause, time)",
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value REAL NOT NULL)",
)
T = TypeVar("T")


@dataclass(frozen=True)
class Slot:
    """The limit's answer for one alert. send: POST it (`ticket` is the reservation to settle).
    held_until: set when this message takes the last slot (or, suppressed, when one frees).
    suppressed: what to summarise in this message. warning: the state could not be trusted.
    fallback: decided by FallbackLimit on this file (settled there too)."""

    send: bool
    ticket: int | None = None
    held_until: float | None = None
    suppressed: Suppressed | None = None
    warning: str | None = None
    fallback: Path | None = None


def decide(rows: Sequence[tuple[int, float, str]], now: float, budget: int,
           window_s: float) -> Slot:
    """The rule, on one (node, cause)'s rows (id, time, kind): send while fewer than `budget`
    pending or sent messages fall in (now - window, now], else suppress."""
    used = sorted(t for _, t, kind in rows if kind in ("pending", "sent") and t > now - window_s)
    held = [(i, t) for i, t, kind in rows if kind == "suppressed"]
    if len(used) < budget:
        last = len(used) + 1 >= budget
        summary = (Suppressed(len(held), min(t for _, t in held), max(t for _, t in held),
                              max(i for i, _ in held)) if held else None)
        return Slot(True, held_until=(used[0] if used else now) + window_s if last else None,
                    suppressed=summary)
    return Slot(False, held_until=used[len(used) - budget] + window_s)


class StateError(StethoError):
    """The state file cannot be used (unwritable, locked past the timeout, unrecoverable)."""


class SharedLimit:
    """The limit in the SQLite state file, shared by every process on the host."""

    def __init__(self, path: Path, limit: int = LIMIT, window_s: float = WINDOW_S) -> None:
        self.path, self.limit, self.window_s = path, limit, window_s

    def reserve(self, node: str, cause: str, now: float, lock_timeout_s: float) -> Slot:
        def take(conn: sqlite3.Connection) -> Slot:
            conn.execute("DELETE FROM alerts WHERE kind != 'suppressed' AND time <= ?",
                         (now - self.window_s,))
            conn.execute("DELETE FROM alerts WHERE kind = 'suppressed' AND time <= ?",
                         (now - KEEP_SUPPRESSED_S,))
            reset = conn.execute("SELECT value FROM meta WHERE key = 'reset_at'").fetchone()
            lost = reset is not None and now - float(reset[0]) < self.window_s
            rows = conn.execute("SELECT id, time, kind FROM alerts WHERE node = ? AND cause = ?",
                                (node, cause)).fetchall()
            slot = decide(rows, now, 1 if lost else self.limit, self.window_s)
            cur = conn.execute("INSERT INTO alerts (node, cause, time, kind) VALUES (?,?,?,?)",
                               (node, cause, now, "pending" if slot.send else "suppressed"))
            warning = (f"the alert state {self.path} was lost at {float(reset[0]):.0f}; until "
                       "a day has passed only the first alert per node and cause is sent"
                       if lost else None)
            return Slot(slot.send, cur.lastrowid if slot.send else None, slot.held_until,
                        slot.suppressed, warning)

        return self._run(take, now, lock_timeout_s)

    def settle(self, node: str, cause: str, slot: Slot, delivered: bool, now: float,
               lock_timeout_s: float) -> None:
        """A delivered message's slot is spent and what it summarised is forgotten; a failed
        one's slot is given back."""
        def apply(conn: sqlite3.Connection) -> None:
            if not delivered:
                conn.execute("DELETE FROM alerts WHERE id = ? AND kind = 'pending'",
                             (slot.ticket,))
                return
            conn.execute("UPDATE alerts SET kind = 'sent' WHERE id = ?", (slot.ticket,))
            if slot.suppressed is not None:
                conn.execute("DELETE FROM alerts WHERE node = ? AND cause = ? AND "
                             "kind = 'suppressed' AND id <= ?",
                             (node, cause, slot.suppressed.upto))

        self._run(apply, now, lock_timeout_s)

    # -- the file --------------------------------------------------------------------------

    def _run(self, fn: Callable[[sqlite3.Connection], T], now: float,
             lock_timeout_s: float) -> T:
        """`fn` in one IMMEDIATE transaction; a corrupt file is recovered once, then retried."""
        try:
            return self._transaction(fn, lock_timeout_s)
        except sqlite3.DatabaseError as exc:
            if not _corrupt(exc):
                raise StateError(f"{type(exc).__name__}: {exc}") from None
            self._recover(str(exc), now, lock_timeout_s)
        try:
            return self._transaction(fn, lock_timeout_s)
        except sqlite3.DatabaseError as exc:
            raise StateError(f"{type(exc).__name__}: {exc}") from None

    def _transaction(self, fn: Callable[[sqlite3.Connection], T], lock_timeout_s: float) -> T:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StateError(f"cannot create {self.path.parent}: {exc}") from None
        conn = sqlite3.connect(str(self.path), timeout=lock_timeout_s, isolation_level=None)
        try:
            conn.execute(f"PRAGMA busy_timeout = {max(1, int(lock_timeout_s * 1000))}")
            conn.execute("BEGIN IMMEDIATE")
            try:
                _ensure_schema(conn)
                result = fn(conn)
            except BaseException:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
            return result
        finally:
            conn.close()

    def _recover(self, reason: str, now: float, lock_timeout_s: float) -> None:
        """Set the corrupt file aside and put a fresh one, marked as lost at `now`, in its
        place; under a file lock, and only if no other process has done so meanwhile."""
        lock = self.path.with_name(self.path.name + ".lock")
        try:
            with locks.hold(lock, f"the alert state {self.path}", max(lock_timeout_s, 1.0)):
                try:
                    self._transaction(lambda _conn: None, lock_timeout_s)
                    return  # another process recovered it while we waited
                except sqlite3.DatabaseError as exc:
                    if not _corrupt(exc):
                        raise StateError(f"{type(exc).__name__}: {exc}") from None
                # Unpredictable names made with O_EXCL: a link planted under a name this
                # process could be expected to use never redirects the copy or the new file.
                fd, name = tempfile.mkstemp(prefix=f"{self.path.name}.corrupt-{now:.0f}-",
                                            dir=self.path.parent)
                os.close(fd)
                aside = Path(name)
                fd, name = tempfile.mkstemp(prefix=f".{self.path.name}.new-",
                                            dir=self.path.parent)
                os.close(fd)
                fresh = Path(name)
                os.chmod(fresh, 0o666 & ~atomic.umask())  # as SQLite would have made it
                conn = sqlite3.connect(str(fresh), isolation_level=None)
                try:
                    conn.execute("BEGIN IMMEDIATE")
                    _ensure_schema(conn)
                    conn.execute("INSERT OR REPLACE INTO meta VALUES ('reset_at', ?)", (now,))
                    conn.execute("COMMIT")
                finally:
                    conn.close()
                # Copied aside, then replaced in one rename: the path never stops existing,
                # or a process opening it in between would create an empty state of its own.
                shutil.copyfile(self.path, aside)
                for suffix in ("-journal", "-wal", "-shm"):  # the broken file's, not the new's
                    old = self.path.with_name(self.path.name + suffix)
                    if old.exists():
                        os.replace(old, aside.with_name(aside.name + suffix))
                os.replace(fresh, self.path)
        except OSError as exc:
            raise StateError(f"cannot recover: {exc}") from None
        log.warning("alert state %s was corrupt (%s): set aside as %s and started afresh; until "
                    "a day has passed only the first alert per node and cause is sent",
                    self.path, reason, aside.name)


def _corrupt(exc: sqlite3.DatabaseError) -> bool:
    """Whether the file itself is broken (not a database, malformed, an unknown schema), as
    opposed to busy or unreachable."""
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(code, int) and code & 0xFF in _CORRUPT:
        return True
    return isinstance(exc, _SchemaMismatch) or (
        type(exc) is sqlite3.DatabaseError)  # the module's own word for "not a database"


class _SchemaMismatch(sqlite3.DatabaseError):
    """The file is a database, but not one this version wrote."""


def _ensure_schema(conn: sqlite3.Connection) -> None:
    """Create the tables in a new file; take over the alerts of the previous layout (an
    `events` table with 'alert' rows); refuse any other version as corrupt."""
    version = int(conn.execute("PRAGMA user_version").fetchone()[0])
    if version == SCHEMA_VERSION:
        return
    if version != 0:
        raise _SchemaMismatch(f"schema version {version}, expected {SCHEMA_VERSION}")
    for stmt in _SCHEMA:
        conn.execute(stmt)
    old = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'events'")
    if old.fetchone():
        conn.execute("INSERT INTO alerts (node, cause, time, kind) SELECT node, cause, time, "
                     "'sent' FROM events WHERE kind = 'alert'")
        conn.execute("DROP TABLE events")
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")


class FallbackLimit:
    """When the state file cannot be used (unwritable, locked past the timeout): every
    process on the host still takes turns, on a small file beside the state (else in the
    temporary folder, named for the state and this user) under an exclusive flock, where the
    one alert per node and cause in a window is written down. One process sends it; the others
    hold theirs and say so. Where no such file can be used either, nothing is sent: a process
    that cannot see the others must not add its own alert to theirs."""

    def __init__(self, state: Path, window_s: float = WINDOW_S) -> None:
        self.state, self.window_s = state, window_s

    def places(self) -> list[Path]:
        digest = hashlib.sha256(str(self.state.absolute()).encode()).hexdigest()[:16]
        return [self.state.with_name(f".{self.state.name}.fallback"),
                Path(tempfile.gettempdir()) / f"stetho-{os.getuid()}-alerts-{digest}.fallback"]

    def reserve(self, node: str, cause: str, now: float, warning: str,
                lock_timeout_s: float) -> Slot:
        problems = []
        for place in self.places():
            try:
                with _locked(place, lock_timeout_s) as fd:
                    rows = _rows(fd)
                    sent = [t for n, c, t, kind in rows if (n, c) == (node, cause)
                            and kind == "sent" and t > now - self.window_s
                            and not any((n2, c2, t2, k2) == (n, c, t, "released")
                                        for n2, c2, t2, k2 in rows)]
                    if sent:
                        return Slot(False, held_until=max(sent) + self.window_s,
                                    warning=f"{warning}; held: another stetho process sent the "
                                            f"alert for {node}/{cause} at {iso(max(sent))}",
                                    fallback=place)
                    _add(fd, node, cause, now, "sent")
                    return Slot(True, ticket=0, held_until=now + self.window_s,
                                warning=f"{warning}; this process sends the first alert per "
                                        f"node and cause (shared through {place})",
                                fallback=place)
            except (OSError, StethoError) as exc:
                problems.append(f"{place}: {exc}")
        return Slot(False, warning=f"{warning}; held: no file to share the limit with other "
                                   f"processes either ({'; '.join(problems)}), so none sends",
                    fallback=self.state)

    def settle(self, node: str, cause: str, slot: Slot, delivered: bool, now: float,
               lock_timeout_s: float) -> None:
        """A failed delivery gives its turn back, so the next process may send."""
        if delivered or slot.fallback is None or not slot.send:
            return
        with contextlib.suppress(OSError, StethoError), \
                _locked(slot.fallback, lock_timeout_s) as fd:
            for n, c, t, kind in _rows(fd):
                if (n, c, kind) == (node, cause, "sent") and t <= now:
                    _add(fd, n, c, t, "released")


@contextlib.contextmanager
def _locked(path: Path, timeout_s: float) -> Iterator[int]:
    """`path` opened without following a symlink, this user's own regular file, under an
    exclusive flock (waited for up to `timeout_s`)."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid() or st.st_nlink != 1:
            raise StethoError("not a regular file of this user's own")
        deadline = time.monotonic() + max(timeout_s, 1.0)
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise StethoError(f"locked for {timeout_s:.0f}s") from None
                time.sleep(0.01)
        yield fd
    finally:
        os.close(fd)


def _rows(fd: int) -> list[tuple[str, str, float, str]]:
    os.lseek(fd, 0, os.SEEK_SET)
    out = []
    for line in os.read(fd, 16 * 1024 * 1024).splitlines():
        try:
            n, c, t, kind = json.loads(line)
            out.append((str(n), str(c), float(t), str(kind)))
        except (ValueError, TypeError):
            continue
    return out


def _add(fd: int, node: str, cause: str, t: float, kind: str) -> None:
    os.lseek(fd, 0, os.SEEK_END)
    os.write(fd, json.dumps([node, cause, t, kind]).encode() + b"\n")
    os.fsync(fd)
