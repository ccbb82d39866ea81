"""stetho's own record of every override revocation it has seen, so that rewriting the
override repository's history (a reset, a force-push) cannot bring a revoked override back.

An append-only file of JSON lines beside the history database (`override-revocations.jsonl`),
one line per revoked override id, with the revocation as it was read and the commit it was in.
It is opened without following symlinks and trusted only as this user's own regular file that
no one else may write: whoever could edit it could un-revoke. A record that cannot be read or
written is a RecordError, and the gate then honours no override (fail closed).
"""

from __future__ import annotations

import errno
import json
import os
import stat
import time
from collections.abc import Iterable
from pathlib import Path

from stetho.errors import ConfigError
from stetho.gate.override_check import RevocationVersion
from stetho.gate.overrides import ID_RE, OverrideFileError, Revocation

NAME = "override-revocations.jsonl"
MAX_BYTES = 64 * 1024 * 1024


class RecordError(ConfigError):
    """The revocation record cannot be trusted, read or written."""


def default_path() -> Path:
    from stetho import config

    return config.active().db.parent / NAME


def _open(path: Path, flags: int) -> int:
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, 0o600)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise RecordError(f"revocation record {path} is a symbolic link: refused (whoever "
                              "can point it elsewhere could un-revoke an override)") from None
        raise
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o022 \
            or st.st_nlink != 1:
        os.close(fd)
        raise RecordError(f"revocation record {path} is not a regular file of this user's own "
                          "that only they may write: refused (whoever can edit it could "
                          "un-revoke an override)")
    return fd


def read(path: Path) -> dict[str, dict[str, object]]:
    """override id -> its first recorded line. A missing file is an empty record."""
    try:
        fd = _open(path, os.O_RDONLY)
    except FileNotFoundError:
        return {}
    except RecordError:
        raise
    except OSError as exc:
        raise RecordError(f"revocation record {path}: cannot read it: "
                          f"{exc.strerror or exc}") from None
    with os.fdopen(fd, "rb") as fh:
        data = fh.read(MAX_BYTES + 1)
    if len(data) > MAX_BYTES:
        raise RecordError(f"revocation record {path} is larger than {MAX_BYTES} bytes")
    out: dict[str, dict[str, object]] = {}
    for line in data.splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue  # a torn last line of a crashed writer: the rest stands
        if isinstance(row, dict) and isinstance(row.get("override"), str) \
                and ID_RE.match(row["override"]):
            out.setdefault(row["override"], row)
    return out


def _append(path: Path, rows: list[dict[str, object]]) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = _open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    except RecordError:
        raise
    except OSError as exc:
        raise RecordError(f"revocation record {path}: cannot write it: "
                          f"{exc.strerror or exc}") from None
    try:
        # One write of whole lines: concurrent gates appending never interleave inside one.
        os.write(fd, b"".join(json.dumps(r, sort_keys=True).encode() + b"\n" for r in rows))
        os.fsync(fd)
    except OSError as exc:
        raise RecordError(f"revocation record {path}: cannot write it: "
                          f"{exc.strerror or exc}") from None
    finally:
        os.close(fd)


def merge(path: Path, seen: Iterable[RevocationVersion], repo: str
          ) -> list[RevocationVersion]:
    """Record every revocation in `seen` whose override the record lacks, and return the
    recorded ones the history no longer holds (they still revoke)."""
    record = read(path)
    seen = list(seen)
    new: list[dict[str, object]] = []
    for v in seen:
        if v.override in record or any(r["override"] == v.override for r in new):
            continue
        new.append({"override": v.override, "commit": v.commit, "repo": repo,
                    "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                    "revocation": v.revocation.to_json() if v.revocation else None,
                    "problem": v.problem})
    if new:
        _append(path, new)
    present = {v.override for v in seen}
    kept = []
    for oid, row in sorted(record.items()):
        if oid in present:
            continue
        note = (f"kept in stetho's revocation record {path} since {row.get('recorded_at')}; "
                f"commit {str(row.get('commit'))[:12]} is no longer in the repository's "
                "history")
        text = row.get("revocation")
        got: Revocation | None = None
        if isinstance(text, str):
            try:
                got = Revocation.from_json(text, f"{path} ({oid})")
            except OverrideFileError:
                got = None
        problem = None if got is not None and got.override == oid else \
            f"{row.get('problem') or 'not a valid revocation'}"
        kept.append(RevocationVersion(oid, str(row.get("commit") or "?"),
                                      got if problem is None else None, problem,
                                      recorded=note))
    return kept
