"""Parsed YAML kept between commands, so that a node's check need not import PyYAML.

Every command reads a profile, the gate a policy, the checks the Xid and SXid tables: files
that change rarely, read by a health check every hour on every node. Importing PyYAML and
parsing them was ~18 ms of a ~430 ms `stetho check`. The parse is kept as JSON in stetho's
cache folder (STETHO_CACHE, beside the run page's compiled templates), named by the SHA-256
of the text it was parsed from and of what parsed it and how (`kind`, `version`): an edited
file is a new entry, and a stale one is never read.

Only what JSON gives back exactly is kept (no dates, binary, NaN or non-string keys: those are
parsed every time). The cache holds configuration that decides verdicts, so a folder or entry
that is a symbolic link, not this user's, or writable by others is not used, and entries are
written whole (stetho.core.atomic). Anything wrong with the cache is a miss, never an error:
the file is parsed as if there were none.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path
from typing import Any

#: Bumped when what an entry holds changes shape.
FORMAT = "stetho-yaml-cache-1"
#: An entry larger than this is not read (a configuration file is at most 4 MiB of YAML).
MAX_ENTRY = 64 * 2**20
#: Entries kept (a profile, policy or table is one each, a few KiB): past it the oldest go.
MAX_ENTRIES = 256


def folder() -> Path:
    """`yaml` in stetho's cache folder (STETHO_CACHE, default ~/.cache/stetho)."""
    from stetho import config

    return config.active().cache / "yaml"


def _name(kind: str, version: str, text: str) -> str:
    h = hashlib.sha256(f"{FORMAT}\0{kind}\0{version}\0".encode())
    h.update(text.encode("utf-8", "surrogatepass"))
    return h.hexdigest() + ".json"


def _private(st: os.stat_result) -> bool:
    """Owned by this user (or root) and writable by no one else."""
    return st.st_uid in (os.geteuid(), 0) and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def get(kind: str, version: str, text: str) -> tuple[bool, Any]:
    """(True, value) kept for this text, or (False, None)."""
    where = folder()
    try:
        st = os.lstat(where)
        if not stat.S_ISDIR(st.st_mode) or not _private(st):
            return False, None
        fd = os.open(where / _name(kind, version, text), os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return False, None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or not _private(st) or st.st_size > MAX_ENTRY:
            return False, None
        with os.fdopen(fd, "rb", closefd=False) as fh:
            doc = json.loads(fh.read(MAX_ENTRY + 1))
    except (OSError, ValueError):
        return False, None
    finally:
        os.close(fd)
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or "value" not in doc:
        return False, None
    return True, doc["value"]


def put(kind: str, version: str, text: str, value: Any) -> None:
    """Keep `value` for this text where JSON gives it back exactly; silently not otherwise."""
    where = folder()
    try:
        raw = json.dumps({"format": FORMAT, "value": value}, allow_nan=False,
                         separators=(",", ":"))
        if json.loads(raw)["value"] != value:  # a tuple, a non-string key: not kept
            return
    except (TypeError, ValueError, RecursionError):  # a date, bytes, NaN; too deep
        return
    try:
        where.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = os.lstat(where)
        if not stat.S_ISDIR(st.st_mode) or not _private(st):
            return
        from stetho.core import atomic

        atomic.write(where / _name(kind, version, text), raw, mode=0o600)
        _trim(where)
    except OSError:
        return


def _trim(where: Path) -> None:
    """At most MAX_ENTRIES entries: past it, the least recently written go (an edited file
    leaves its old entry behind; a file still read is parsed and kept again)."""
    entries = [e for e in os.scandir(where) if e.name.endswith(".json")]
    if len(entries) <= MAX_ENTRIES:
        return
    entries.sort(key=lambda e: e.stat(follow_symlinks=False).st_mtime_ns)
    for old in entries[:len(entries) - MAX_ENTRIES * 3 // 4]:
        try:
            os.unlink(old.path)
        except OSError:
            pass


def source_version(module_file: str) -> str:
    """A parser module's identity for the cache key: its file's size and modification time
    (an edited or upgraded parser is a new key)."""
    try:
        st = os.stat(module_file)
    except OSError:
        return "unknown"
    return f"{st.st_size}:{st.st_mtime_ns}"
