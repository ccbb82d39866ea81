"""Whole-or-nothing file writes, the one helper every stetho writer uses.

The temporary file gets an unpredictable name in the target's own folder, created with
O_EXCL|O_NOFOLLOW (tempfile.mkstemp): a symlink planted under a predictable `.tmp` name can
not redirect the write elsewhere, and the rename stays on one filesystem. Then it is renamed
over the target, which replaces a symlink there rather than writing through it.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable
from pathlib import Path


def umask() -> int:
    """The process's umask, read without changing it where Linux says it (setting it, even
    for a moment, would race with other threads creating files)."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write(path: str | os.PathLike[str], data: str | bytes | Iterable[str], *,
          mode: int | None = None, fsync: bool = False) -> Path:
    """Write `data` (text, bytes, or text in pieces) to `path` atomically and return it.
    `mode`: the file's permissions (default 0666 less the umask, as open() would make it;
    mkstemp alone would leave 0600 and hide a report from its readers). `fsync`: the data and
    the folder reach the disk before this returns (a crash never leaves half a file)."""
    target = Path(path)
    folder = target.parent
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name[:64]}.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as fh:
            if isinstance(data, bytes):
                fh.write(data)
            elif isinstance(data, str):
                fh.write(data.encode("utf-8"))
            else:
                for piece in data:
                    fh.write(piece.encode("utf-8"))
            fh.flush()
            if fsync:
                os.fsync(fh.fileno())
            os.fchmod(fh.fileno(), (0o666 & ~umask()) if mode is None else mode)
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    if fsync:
        _sync_folder(folder)
    return target


def _sync_folder(folder: Path) -> None:
    try:
        dfd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(dfd)
    except OSError:
        pass
    finally:
        os.close(dfd)
