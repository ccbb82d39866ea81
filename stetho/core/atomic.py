"""Whole-or-nothing file writes, the one helper every stetho writer uses.

The temporary file gets an unpredictable name in the target's own folder, created with
O_EXCL|O_NOFOLLOW, mode 0600 (what tempfile.mkstemp does, without importing tempfile and
random on a gate's path): a symlink planted under a predictable `.tmp` name can not redirect
the write elsewhere, and the rename stays on one filesystem. Then it is renamed
over the target, which replaces a symlink there rather than writing through it.
"""

from __future__ import annotations

import os
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


def write(path: str | os.PathLike[str], data: str | bytes | Iterable[str | bytes], *,
          mode: int | None = None, fsync: bool = False) -> Path:
    """Write `data` (text, bytes, or pieces of either) to `path` atomically and return it.
    `mode`: the file's permissions (default 0666 less the umask, as open() would make it;
    mkstemp alone would leave 0600 and hide a report from its readers). `fsync`: the data and
    the folder reach the disk before this returns (a crash never leaves half a file)."""
    target = Path(path)
    folder = target.parent
    fd, tmp = _create(folder, f".{target.name[:64]}.")
    try:
        with os.fdopen(fd, "wb") as fh:
            if isinstance(data, bytes):
                fh.write(data)
            elif isinstance(data, str):
                fh.write(data.encode("utf-8"))
            else:
                for piece in data:
                    fh.write(piece if isinstance(piece, bytes) else piece.encode("utf-8"))
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


#: as tempfile.mkstemp opens its file
_FLAGS = (os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
          | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0))


def _create(folder: Path, prefix: str) -> tuple[int, str]:
    """A new file `folder/<prefix><12 random hex>.tmp`, 0600, never an existing one."""
    for _ in range(100):
        path = os.path.join(folder, f"{prefix}{os.urandom(6).hex()}.tmp")
        try:
            return os.open(path, _FLAGS, 0o600), path
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name in {folder}")


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
