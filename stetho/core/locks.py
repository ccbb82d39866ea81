"""File locks: the one helper every stetho process uses to take turns on shared files.

`hold` waits (polling, bounded) for an exclusive flock: clones of git stores, the report
spool. `SweepLock` does not wait: one sweep at a time per runs folder, and the lock file says
who holds it (pid, host, user, start, run id) so the next sweep can tell whom it is blocked
by. The kernel drops an flock when its holder dies, so a crash never leaves a stale lock.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from types import TracebackType

from stetho.errors import EvaluationError, StethoError


@contextmanager
def hold(path: Path, what: str, timeout_s: float) -> Iterator[None]:
    """An exclusive advisory lock on `path` for the block; waits up to `timeout_s`, then a
    StethoError naming `what` and the lock file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise StethoError(f"another stetho process has held {what} for "
                                      f"{timeout_s:.0f}s (lock {path})") from None
                import random  # only when contended: a gate's lock is free

                time.sleep(0.02 + random.random() * 0.08)
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


class SweepLocked(EvaluationError):
    """Another sweep holds the lock: exit 3, naming the holder."""


class SweepLock:
    def __init__(self, path: Path, run_id: str) -> None:
        self.path = path
        self.run_id = run_id
        self._fd: int | None = None

    def __enter__(self) -> SweepLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read(fd)
            os.close(fd)
            raise SweepLocked(
                f"another sweep is running: pid {holder.get('pid', '?')} on "
                f"{holder.get('host', '?')} (user {holder.get('user', '?')}), run "
                f"{holder.get('run_id', '?')} since {holder.get('started', '?')}; lock "
                f"{self.path}") from None
        info = {"pid": os.getpid(), "host": os.uname().nodename, "user": _user(),
                "run_id": self.run_id,
                "started": datetime.now(timezone.utc).isoformat(timespec="seconds")}
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(info).encode(), 0)
        self._fd = fd
        return self

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._fd is not None:
            os.ftruncate(self._fd, 0)
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None


def _read(fd: int) -> dict[str, str]:
    try:
        data = json.loads(os.pread(fd, 4096, 0) or b"{}")
        return data if isinstance(data, dict) else {}
    except ValueError:
        return {}


def _user() -> str:
    import getpass  # only a contended lock names its holder

    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return str(os.getuid())
