"""Each node's history rows as a hash chain, and a seal naming each chain's newest row, so that
deleting a node's newest rows, deleting a row in the middle, or restoring an older copy of the
whole database is detected instead of believed (a row's MAC alone proves only that stetho
wrote it, not that it is still the newest, nor that none between went missing).

From schema 4 a node_runs row has `seq` (1, 2, ... per node) and `prev` (the MAC of the node's
row before it), both covered by its MAC (stetho.history.integrity), and `metrics_digest`, a
SHA-256 of that node's metrics rows of the run, so the one MAC also covers the metrics that
drift and trends read. The seal `<db>.seal` is a 0600 file beside the key, opened like it
(O_NOFOLLOW, regular, ours, private), written atomically under a file lock in the same write
that adds rows (before the commit: a crash between leaves the seal ahead, which readers refuse
rather than believe), and HMAC'd under the key: someone who can write the database but not read
the key can neither edit it nor make a new one. Readers take the same lock shared, so a seal
and a database snapshot are always read as one.

What this cannot see: someone able to rename files in the database's folder can keep an old
seal and put it back with the old database. Keep that folder writable by the controller only.
"""

from __future__ import annotations

import fcntl
import hashlib
import hmac
import json
import os
import sqlite3
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import field
from pathlib import Path
from typing import Any

from stetho.core import fastjson
from stetho.core.record import record
from stetho.history.errors import HistoryKeyError

#: a seal larger than this is not one stetho wrote (a million nodes' heads fit well inside)
SEAL_LIMIT = 256 * 1024 * 1024
FORMAT = "stetho-history-seal-1"


def seal_path(db: Path) -> Path:
    return db.with_name(db.name + ".seal")


def lock_path(db: Path) -> Path:
    return db.with_name(db.name + ".seal.lock")


def digest(rows: Iterable[tuple[Any, ...]]) -> str:
    """SHA-256 over a node's metrics rows of one run, (check, subject, metric, value) as the
    database holds them, in a fixed order: each row's repr (unambiguous, a float's exact, and
    a sixth of json.dumps's cost over a sweep's hundred thousand rows)."""
    return digest_lines(map(repr, map(tuple, rows)))


def digest_lines(lines: Iterable[str]) -> str:
    """digest() over rows already written as their repr (stetho.history.store.samples builds
    each line from its series' text and the value, without a tuple per row)."""
    return hashlib.sha256("\n".join(sorted(lines)).encode("utf-8", "surrogatepass")).hexdigest()


#: a node's metrics of one run, as digest() reads them
METRICS = ("SELECT m.node_id, m.run_key, s.check_name, s.subject, s.metric, m.value "
           "FROM metrics m JOIN series s ON s.id = m.series_id ")


@record(frozen=False)
class Seal:
    """Each node's newest chained row: node -> (seq, mac); and the profile it was last
    recorded with, `generic` and none left out (what the gate pins it to, stetho.gate.pinning):
    node -> (profile, run). `present`: the file exists."""

    heads: dict[str, tuple[int, str]] = field(default_factory=dict)
    present: bool = False
    path: str = ""
    pins: dict[str, tuple[str, str]] = field(default_factory=dict)


def _signature(key: bytes, seal: Seal) -> str:
    """The seal's MAC: over json's compact text of its heads and pins, sorted (what `dump`
    signs, and what `_signed` checks)."""
    return _mac(key, json.dumps(_canonical(seal), separators=(",", ":")).encode())


def _canonical(seal: Seal) -> list[object]:
    return [FORMAT, sorted([n, s, m] for n, (s, m) in seal.heads.items()),
            sorted([n, p, r] for n, (p, r) in seal.pins.items())]


def _mac(key: bytes, body: bytes) -> str:
    return hmac.new(key, body, hashlib.sha256).hexdigest()


def _signed(key: bytes, seal: Seal, stored: str) -> bool:
    """Whether `stored` is the seal's MAC. A fleet's seal is 10,240 heads and pins, and json
    writing them again for the MAC was most of a gate's first read of it (8 of 27 ms); orjson
    writes the same text for what a seal holds (ASCII names, hex MACs, small integers) in a
    fraction of that. Where its text differs (anything else), json's is checked: both texts
    parse back to this seal, so either matching means the writer signed this seal."""
    canonical = _canonical(seal)
    try:
        import orjson

        fast: bytes | None = orjson.dumps(canonical)
    except (ImportError, TypeError):  # not installed, or an integer past 64 bits
        fast = None
    if fast is not None and hmac.compare_digest(_mac(key, fast), stored):
        return True
    return hmac.compare_digest(
        _mac(key, json.dumps(canonical, separators=(",", ":")).encode()), stored)


def parse(path: Path, data: bytes, key: bytes | None) -> Seal:
    """The seal's heads, verified under the key; a named error where it is not what stetho
    wrote."""
    bad = f"history seal {path}: "
    fix = ("; restore it from the backup taken with the database, or move the database, its "
           ".key and .seal aside and start a new history")
    if len(data) > SEAL_LIMIT:
        raise HistoryKeyError(bad + f"larger than {SEAL_LIMIT} bytes, not one stetho wrote" + fix)
    try:
        doc = fastjson.loads(data)
        assert isinstance(doc, dict) and doc.get("format") == FORMAT
        heads = {str(n): (int(s), str(m)) for n, (s, m) in doc["heads"].items()}
        pins = {str(n): (str(p), str(r)) for n, (p, r) in doc["pins"].items()}
        stored = str(doc["mac"])
    except (ValueError, TypeError, KeyError, AssertionError, AttributeError):
        raise HistoryKeyError(bad + "not a seal stetho wrote (unreadable)" + fix) from None
    if key is None:
        raise HistoryKeyError(bad + "the key that signed it is missing" + fix)
    seal = Seal(heads, True, str(path), pins)
    if not _signed(key, seal, stored):
        raise HistoryKeyError(bad + "its signature does not match (it was edited or made "
                              "without the key)" + fix)
    return seal


def dump(key: bytes, seal: Seal) -> bytes:
    return json.dumps({"format": FORMAT,
                       "heads": {n: list(h) for n, h in sorted(seal.heads.items())},
                       "pins": {n: list(p) for n, p in sorted(seal.pins.items())},
                       "mac": _signature(key, seal)}, separators=(",", ":")).encode()


@contextmanager
def locked(db: Path, shared: bool, timeout_s: float = 60.0) -> Iterator[None]:
    """The seal's lock: a writer holds it from reading the seal to the commit; a reader while
    it reads the seal and its rows, so it never sees one half of another's write. A reader
    opens the lock file read-only and never creates it (a gate may read a history it cannot
    write); where no write has made it yet there is nothing to wait for."""
    from stetho.core import locks
    from stetho.errors import StethoError
    from stetho.history.errors import HistoryError

    if str(db) == ":memory:":
        yield
        return
    path = lock_path(db)
    if not shared:
        held = locks.hold(path, f"the history seal of {db}", timeout_s)
        try:
            held.__enter__()
        except StethoError as exc:
            raise HistoryError(str(exc)) from None
        try:
            yield
        finally:
            held.__exit__(None, None, None)
        return
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        yield
        return
    except OSError as exc:
        raise HistoryError(f"history seal lock {path}: cannot open it ({exc.strerror or exc})"
                           ) from None
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise HistoryError(f"a history write has held {path} for {timeout_s:.0f}s"
                                       ) from None
                time.sleep(0.01)
        yield
    finally:
        os.close(fd)


def write(db: Path, key: bytes, seal: Seal) -> None:
    """Replace the seal atomically (unpredictable temp name in its folder, 0600, fsync)."""
    from stetho.core import atomic

    if str(db) == ":memory:":
        return
    try:
        atomic.write(seal_path(db), dump(key, seal), mode=0o600, fsync=True)
    except OSError as exc:
        raise HistoryKeyError(f"history seal {seal_path(db)}: cannot write it "
                              f"({exc.strerror or exc})") from None


Link = tuple[Any, Any, Any]  # (seq, prev, mac) as a row holds them


def rolled_back(node: str, seal: Seal, first: Link) -> str | None:
    """Why a node's newest row read is not its chain's head, or None."""
    seq, _prev, mac = first
    head = seal.heads.get(node)
    what = f"history of node {node} was rolled back or its newest rows deleted "
    fix = (" (restore the database from the backup taken with its seal, or record a fresh "
           f"result: stetho sweep --limit {node})")
    if seq is None:
        if head is None:
            return None  # a node with no chained row yet: the unsigned/unchained rules apply
        return what + f"(seal says seq {head[0]}, the database's newest row is from before " \
            "the chain)" + fix
    if not seal.present:
        return (f"history of node {node} cannot be verified: its seal {seal.path} is missing "
                "while the database holds chained rows (restore the .seal file from the "
                "backup taken with the database; `stetho history reseal --launder` makes a "
                "new one from the rows as they stand, believing whatever was done to them)")
    if head is None:
        return what + f"(the seal has no row of it, the database has seq {seq}: the " \
            "database is newer than its seal, or the seal was swapped for an older one)" + fix
    if head[0] != seq or not hmac.compare_digest(str(head[1]), str(mac)):
        return what + f"(seal says seq {head[0]}, db has {seq})" + fix
    return None


def broken(node: str, newer: Link, older: Link) -> str | None:
    """Why two of a node's rows read together, newest first, do not link, or None."""
    n_seq, n_prev, _ = newer
    o_seq, _, o_mac = older
    if n_seq is None and o_seq is None:
        return None
    what = f"history of node {node} has a row missing: "
    fix = " (a row between was deleted; restore the database from its backup)"
    if n_seq is None:
        return what + f"seq {o_seq} is followed by a row from before the chain" + fix
    if o_seq is None:
        return None if n_seq == 1 else what + f"seq {n_seq} follows a row from before the " \
            f"chain, not seq {n_seq - 1}" + fix
    if o_seq != n_seq - 1:
        return what + f"seq {n_seq} follows seq {o_seq}" + fix
    if not hmac.compare_digest(str(n_prev), str(o_mac)):
        return what + f"seq {n_seq} does not link to the seq {o_seq} the database holds" + fix
    return None


def has_chained_rows(conn: sqlite3.Connection) -> bool:
    return conn.execute("SELECT 1 FROM node_runs WHERE seq IS NOT NULL LIMIT 1"
                        ).fetchone() is not None


#: (seal path, key) -> (the file's stamp, its verified seal): a gate opens the history twice
#: (the profile pins, the results) and a fleet's seal costs tens of ms to verify
_VERIFIED: dict[tuple[str, bytes | None], tuple[tuple[int, ...], Seal]] = {}


class SealReader:
    """The seal of one database, read again only when the file changed (a sweep's drift asks
    once per node)."""

    def __init__(self, db: Path) -> None:
        self.db = db
        self._seen: tuple[int, ...] | None = None
        self._seal = Seal(path=str(seal_path(db)))

    def read(self, key: bytes | None) -> Seal:
        from stetho.history.integrity import read_private

        if str(self.db) == ":memory:":
            return self._seal
        path = seal_path(self.db)
        try:
            st = os.lstat(path)
            stamp = (st.st_ino, st.st_mtime_ns, st.st_ctime_ns, st.st_size, st.st_mode)
        except FileNotFoundError:
            self._seen, self._seal = None, Seal(path=str(path))
            return self._seal
        except OSError as exc:
            raise HistoryKeyError(f"history seal {path}: cannot read it ({exc.strerror or exc})"
                                  ) from None
        if stamp == self._seen:
            return self._seal
        cached = _VERIFIED.get((str(path), key))
        if cached is not None and cached[0] == stamp:  # verified by this process already
            self._seen, self._seal = cached
            return self._seal
        data = read_private(path, "history seal", SEAL_LIMIT)
        self._seal = Seal(path=str(path)) if data is None else parse(path, data, key)
        self._seen = stamp
        _VERIFIED[(str(path), key)] = (stamp, self._seal)
        return self._seal

    def remember(self, seal: Seal) -> None:
        """What this process just wrote (an in-memory database keeps its seal here)."""
        self._seal = Seal(seal.heads, True, str(seal_path(self.db)), seal.pins)
        self._seen = None
