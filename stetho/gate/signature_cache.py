"""The on-disk cache of ssh-keygen's answers (stetho.gate.signatures), kept so that it can only
repeat what OpenSSH said on this machine, never what someone else wrote.

An entry is keyed by the hash of everything ssh-keygen read (signers file, signature, message,
principal) and carries an HMAC under a secret only this user can read
(`override-signatures.key`, made on first use, mode 0600). Both files are opened without
following symlinks and used only as this user's own regular files with one link, in a folder
no one else may write, outside the override repository and stetho's clones of it: a cache
someone could write, or point at a file they control, would otherwise let them mint
approvals. Anything that does not hold is simply not used (answers are asked again).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import stat
from pathlib import Path

KEY_NAME = "override-signatures.key"
MAX_BYTES = 64 * 1024 * 1024


def problem(path: Path | None, refuse_under: tuple[Path, ...]) -> str | None:
    """Why the on-disk cache at `path` must not be used: inside one of `refuse_under` (the
    override repository's clone, the folder of stetho's clones) or in another clone of that
    repository (whoever can push could commit the cache and its secret there), or in a folder
    anyone but this user may write. None: usable (or none)."""
    from stetho.publish import gitstore

    if path is None:
        return None
    try:
        folder = path.parent.resolve()
        real = folder / path.name
        for root in refuse_under:
            r = root.resolve()
            if real == r or r in real.parents or (folder.is_dir() and r.is_dir()
                                                   and gitstore.same_history(folder, r)):
                return f"signature cache {path} is inside {root} or a clone of it: not used"
        st = folder.stat()
    except OSError:
        return None  # no folder yet: made on save, by this user
    if st.st_uid != os.getuid() or st.st_mode & 0o022:
        return f"signature cache folder {folder} is not this user's own: not used"
    return None


def _read_own(path: Path, limit: int) -> bytes | None:
    """The bytes of `path` if it is this user's own regular file with one link that no one
    else may write, opened without following a symlink; else None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        with os.fdopen(fd, "rb") as fh:
            st = os.fstat(fh.fileno())
            if (not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid()
                    or st.st_mode & 0o022 or st.st_nlink != 1):
                return None
            return fh.read(limit + 1)
    except OSError:
        return None


def _secret(folder: Path, create: bool) -> bytes | None:
    path = folder / KEY_NAME
    got = _read_own(path, 64)
    if got is None and create:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                         | os.O_CLOEXEC, 0o600)
        except OSError:
            return None  # another process made it meanwhile: its answers are kept next time
        with os.fdopen(fd, "wb") as fh:
            fh.write(secrets.token_bytes(32))
        got = _read_own(path, 64)
    return got if got is not None and len(got) == 32 else None


def _mac(secret: bytes, key: str, answer: list[str]) -> str:
    body = json.dumps([key, answer], separators=(",", ":")).encode()
    return "mac:" + hmac.new(secret, body, hashlib.sha256).hexdigest()


def load(path: Path | None) -> dict[str, list[str]]:
    """The answers whose HMAC holds; nothing when the files cannot be trusted."""
    if path is None:
        return {}
    secret = _secret(path.parent, create=False)
    raw = _read_own(path, MAX_BYTES) if secret else None
    if secret is None or raw is None or len(raw) > MAX_BYTES:
        return {}
    try:
        data = json.loads(raw.decode("utf-8"))
    except ValueError:
        return {}
    if not isinstance(data, dict):
        return {}
    out = {}
    for k, v in data.items():
        if not (isinstance(k, str) and isinstance(v, list) and len(v) >= 3
                and all(isinstance(x, str) for x in v) and v[0] in ("ok", "no")):
            continue
        answer, mac = v[:-1], v[-1]
        if hmac.compare_digest(mac, _mac(secret, k, answer)):
            out[k] = answer
    return out


def save(path: Path, data: dict[str, list[str]], keep: int) -> None:
    """Atomically, mode 0600, each answer with its HMAC; a lost race with another gate only
    costs a re-verification, a read-only cache folder only that answers are asked again."""
    from stetho.core import atomic

    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        secret = _secret(path.parent, create=True)
        if secret is None:
            return
        kept = {k: [*v, _mac(secret, k, v)] for k, v in list(data.items())[-keep:]}
        atomic.write(path, json.dumps(kept, separators=(",", ":")), mode=0o600)
    except OSError:
        return
