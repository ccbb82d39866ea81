"""History rows signed with a key only the controller can read, so that editing the database
(a results blob changed from fail to pass, a row moved to another node or run) is detected
instead of believed.

Each node_runs row carries an HMAC-SHA256 over what it says: node name, run id, time, profile,
exit code, status counts and the results blob; from schema 4 also its place in the node's
chain (sequence number, the previous row's MAC) and a digest of the node's metrics of that run
(stetho.history.chain, which also keeps the seal naming each node's newest row, so deleting a
node's newest rows or restoring an older copy of the database is detected too, not merely
"stale"). The key is 32 random bytes in a 0600 file beside the database (`<db>.key`), created
on the first write with O_EXCL|O_NOFOLLOW and refused when it is a link, not a regular file,
not owned by this user or readable by others. Anyone who can write the database but not read
the key cannot forge a row.

Databases from before signing (schema 2) keep their rows unsigned: signing them on upgrade would
launder whatever was edited before. `meta.signed_after_run_key` marks where signing began: an
unsigned row of a later run was stripped (a failure); one of an earlier run is unverified and
read as if it were not there, so the gate checks the node live or cannot evaluate it. Likewise
`meta.chained_after_run_key` marks where chaining began: a later row with no chain position
was stripped of it.

From schema 5 a chained row's MAC covers the SHA-256 of its results blob instead of the blob's
bytes ("stetho-node-run-3"), so that `stetho history prune` can drop an old blob and keep the
row verifiable: a pruned row's blob is `PRUNED` + that digest, its summary columns, chain place
and metrics still signed, its results gone (never evidence: readers skip it as they skip a row
they cannot verify). Rows signed the older way (v1, v2) still verify; they cannot be pruned.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import sqlite3
import stat
from pathlib import Path
from typing import Any

from stetho.history.errors import HistoryKeyError

KEY_BYTES = 32

#: the node_runs columns RowCheck.untrusted verifies, in its order (profile first, the results
#: blob and the MAC last: readers index them so)
ROW = ("nr.profile, nr.exit_code, nr.fail, nr.error, nr.warn, nr.skip, nr.pass, nr.seq, "
       "nr.prev, nr.metrics_digest, nr.results, nr.mac")

#: a chained row's place: (sequence number in its node's chain, previous row's MAC, digest of
#: the node's metrics of the run)
Chain = tuple[int, str, str]


def new_key() -> bytes:
    import secrets  # only where a key is made: every reader of history imports this module

    return secrets.token_bytes(KEY_BYTES)


def key_path(db: Path) -> Path:
    """The key file of a database: `<db>.key` beside it."""
    return db.with_name(db.name + ".key")


def read_private(path: Path, what: str, limit: int) -> bytes | None:
    """A controller-only file's bytes (at most `limit` + 1), or None where it does not exist.
    Opened without following a link and checked on the open descriptor (regular, ours, 0600),
    so a file swapped in between cannot be read instead."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise HistoryKeyError(f"{what} {path}: cannot open it ({exc.strerror or exc}; a "
                        "symbolic link is refused)") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise HistoryKeyError(f"{what} {path}: not a regular file")
        if st.st_uid != os.geteuid():
            raise HistoryKeyError(f"{what} {path}: owned by uid {st.st_uid}, not by this user "
                            f"(uid {os.geteuid()}); the {what.split()[-1]} must be the "
                            "controller's own")
        if st.st_mode & 0o077:
            raise HistoryKeyError(f"{what} {path}: mode {stat.S_IMODE(st.st_mode):04o} lets "
                            "others read or change it; it must be 0600 (chmod 600, and treat "
                            "the history as unverified if others could write it)")
        data = b""
        while len(data) <= limit:
            piece = os.read(fd, limit + 1 - len(data))
            if not piece:
                break
            data += piece
    finally:
        os.close(fd)
    return data


def load(path: Path) -> bytes | None:
    """The key, or None where the file does not exist (read_private's checks)."""
    key = read_private(path, "history key", KEY_BYTES)
    if key is None:
        return None
    if len(key) != KEY_BYTES:
        raise HistoryKeyError(f"history key {path}: {len(key)} bytes, expected {KEY_BYTES}; it was "
                        "damaged or replaced")
    return key


def load_or_create(path: Path) -> bytes:
    """The key, made on first use: written whole to a private file beside it, then linked in
    place (link refuses an existing name), so two first writers agree on one key and no reader
    ever sees it half written (an O_EXCL create then write let a concurrent first writer read
    it empty: "0 bytes, damaged"); O_NOFOLLOW so a planted link cannot redirect it, mode 0600
    from the start."""
    key = load(path)
    if key is not None:
        return key
    import secrets

    key = new_key()
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{secrets.token_hex(4)}.new")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600)
        try:
            os.write(fd, key)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.link(tmp, path, follow_symlinks=False)
    except FileExistsError:  # another writer made it first (or a link was planted: refused)
        found = load(path)
        if found is None:
            raise HistoryKeyError(f"history key {path}: appeared and vanished while creating it"
                            ) from None
        return found
    except OSError as exc:
        raise HistoryKeyError(f"history key {path}: cannot create it ({exc.strerror or exc})"
                        ) from None
    finally:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
    return key


#: a pruned row's results column: this, then the hex SHA-256 of the blob it replaced
PRUNED = b"stetho-pruned:"


def pruned(blob: object) -> bool:
    """Whether a results column holds a pruned row's digest instead of results (no zlib
    stream starts with these bytes)."""
    return isinstance(blob, bytes) and blob.startswith(PRUNED)


def results_digest(blob: bytes) -> str:
    """The SHA-256 a v3 MAC covers: of the blob, or the one a pruned row kept."""
    if pruned(blob):
        return blob[len(PRUNED):].decode("ascii", "replace")
    return hashlib.sha256(blob).hexdigest()


def mac(key: bytes, node: str, run: str, t: int, profile: str | None, exit_code: int | None,
        counts: tuple[int, ...], blob: bytes, chain: Chain | None = None,
        by_digest: bool = False) -> str:
    """The row's HMAC-SHA256, hex: over every column that says something about the node, and
    for a chained row (schema 4) its place in the node's chain and its metrics' digest;
    `by_digest` (schema 5, chained rows): over the blob's SHA-256, so it survives pruning."""
    fields: list[Any] = ["stetho-node-run-1", node, run, int(t), profile, exit_code,
                         list(counts)]
    if chain is not None:
        fields = ["stetho-node-run-3" if by_digest else "stetho-node-run-2", *fields[1:],
                  int(chain[0]), str(chain[1]), str(chain[2])]
        if by_digest:
            fields.append(results_digest(blob))
    head = json.dumps(fields, separators=(",", ":")).encode()
    h = hmac.new(key, head, hashlib.sha256)
    h.update(b"\0")
    if not (by_digest and chain is not None):
        h.update(blob)
    return h.hexdigest()


def verify(key: bytes, expected: str, node: str, run: str, t: int, profile: str | None,
           exit_code: int | None, counts: tuple[int, ...], blob: bytes,
           chain: Chain | None = None) -> bool:
    """Whether the row's stored MAC is the one its content gives (constant-time compare): a
    chained row signed over its blob's digest (v3) or, written before schema 5, over the blob
    (v2); a pruned row only as v3 (its blob is gone)."""
    if chain is not None and hmac.compare_digest(
            mac(key, node, run, t, profile, exit_code, counts, blob, chain, by_digest=True),
            str(expected)):
        return True
    if pruned(blob):
        return False
    return hmac.compare_digest(mac(key, node, run, t, profile, exit_code, counts, blob, chain),
                               str(expected))


class RowCheck:
    """Signs a database's node_runs rows and says why one cannot be believed."""

    def __init__(self, conn: sqlite3.Connection, path: Path) -> None:
        self.conn = conn
        self.path = path
        self._key: bytes | None = None
        self._signed_after: int | None = None
        self._chained_after: int | None = None

    def key(self, create: bool) -> bytes | None:
        """The key rows are signed with; made on the first write. An in-memory database
        signs with a key of its own lifetime."""
        if self._key is None:
            if str(self.path) == ":memory:":
                self._key = new_key()
            else:
                path = key_path(self.path)
                self._key = load_or_create(path) if create else load(path)
        return self._key

    def signed_after(self) -> int:
        """Rows of runs with a key above this were written signed: one without a MAC there
        was stripped. At or below it they predate signing: unverified, never believed."""
        if self._signed_after is None:
            self._signed_after = self._meta_int("signed_after_run_key")
        return self._signed_after

    def chained_after(self) -> int:
        """Rows of runs with a key above this were written chained (schema 4)."""
        if self._chained_after is None:
            self._chained_after = self._meta_int("chained_after_run_key")
        return self._chained_after

    def _meta_int(self, name: str) -> int:
        row = self.conn.execute("SELECT value FROM meta WHERE key = ?", (name,)).fetchone()
        try:
            return int(row[0]) if row else 0
        except (TypeError, ValueError):
            return 0

    def untrusted(self, node: str, run: str, run_key: int, t: int, row: tuple[Any, ...]
                  ) -> str | None:
        """Why a node_runs row (the ROW columns) cannot be believed, or None; "" where it
        predates signing (unverified: read as absent)."""
        profile, code, *counts, seq, prev, digest, blob, stored = row
        failed = f"history row for node {node} (run {run}) failed its integrity check: "
        if stored is None:
            if run_key <= self.signed_after():
                return ""
            return failed + "it has no signature where the database signs every row"
        chain: Chain | None = None
        if seq is not None:
            chain = (seq, prev, digest)
        elif run_key > self.chained_after():
            return failed + "it has no place in its node's chain where the database chains " \
                "every row (its sequence number was removed)"
        key = self.key(create=False)
        if key is None:
            return failed + f"the key {key_path(self.path)} that signed it is missing"
        if not isinstance(blob, bytes) or not isinstance(seq, (int, type(None))) or not verify(
                key, str(stored), node, run, t, profile, code, tuple(counts), blob, chain):
            return failed + "its content is not what stetho wrote (the database was edited)"
        return None
