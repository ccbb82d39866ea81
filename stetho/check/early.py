"""The node's probes collected in a forked child while this process imports the checks.

A local check spends its first ~0.2 s importing pytest, the parsers and history, and ~0.1 s
(on a real node, seconds: nvidia-smi alone) waiting for probes: neither needs the other until
the checks are collected. Threads could not overlap them (the imports hold the GIL the probe
threads need between their children); a child process can. It runs the same collection
(stetho.evidence.collect: deadline, partial evidence file, busy detection) and sends the bundle
back through a pipe, pickled; an exception comes back as itself and is raised here.

The child is killed with the probes (stetho.evidence.runner.kill_running_probes: a gate's
watchdog) and kills its own probes on SIGTERM/SIGINT. Where a fork is not safe (another thread
could hold a lock the child needs) or something watches the probes one by one (a progress
display, benchmarks), the collection runs in this process instead, as before.
"""

from __future__ import annotations

import os
import pickle
import signal
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from stetho.errors import EvaluationError

if TYPE_CHECKING:
    from stetho.evidence.bundle import Bundle


def forkable() -> bool:
    """A fork copies only the calling thread: safe while no other thread can hold a lock the
    child takes (an output buffer, an import). stetho's own watchdog timers only sleep."""
    return hasattr(os, "fork") and all(
        t is threading.main_thread() or isinstance(t, threading.Timer)
        for t in threading.enumerate())


class Collection:
    """A collection running in a child process; `bundle()` waits for it."""

    def __init__(self, collect: Callable[[], Bundle]) -> None:
        from stetho.evidence import runner

        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: collect, send, leave (no atexit, no parent buffers flushed)
            code = 1
            try:
                os.close(read)
                _child_signals()
                code = _send(write, collect)
            finally:
                os._exit(code)
        os.close(write)
        self.pid, self._read = pid, read
        runner.COLLECTORS.add(pid)

    def bundle(self) -> Bundle:
        """The child's bundle, or its exception raised here. Interrupted while waiting (Ctrl-C,
        an exception), the child and its probes are stopped first."""
        if self._read < 0:
            raise EvaluationError("the probe collection was cancelled")
        try:
            chunks = []
            while chunk := os.read(self._read, 1 << 20):
                chunks.append(chunk)
            _pid, status = os.waitpid(self.pid, 0)
        except BaseException:
            self.cancel()
            raise
        finally:
            self._close()
        data = b"".join(chunks)
        if not data:
            raise EvaluationError(
                f"the probe collection (process {self.pid}) ended without a bundle "
                f"({_exit_text(status)}): run `stetho check --local` on the node to see why")
        ok, value = pickle.loads(data)
        if not ok:
            raise value
        return value  # type: ignore[no-any-return]

    def cancel(self) -> None:
        """Stop the child and its probes (this process gave up before reading the bundle:
        the child would otherwise wait forever to write it)."""
        if self._read >= 0:
            _stop(self.pid)
            self._close()

    def _close(self) -> None:
        from stetho.evidence import runner

        if self._read >= 0:
            os.close(self._read)
            self._read = -1
        runner.COLLECTORS.discard(self.pid)


def _send(fd: int, collect: Callable[[], Bundle]) -> int:
    try:
        payload = pickle.dumps((True, collect()), pickle.HIGHEST_PROTOCOL)
    except BaseException as exc:  # noqa: BLE001 - every outcome goes back to the parent
        exc.__traceback__ = None
        try:
            payload = pickle.dumps((False, exc), pickle.HIGHEST_PROTOCOL)
            pickle.loads(payload)  # an exception class whose arguments do not rebuild it
        except Exception:  # an exception that does not travel: its type and words do
            payload = pickle.dumps((False, EvaluationError(f"{type(exc).__name__}: {exc}")))
    with os.fdopen(fd, "wb") as out:
        out.write(payload)
    return 0


def _child_signals() -> None:
    """SIGTERM/SIGINT end the child's probes with it (they run in sessions of their own)."""

    def stop(signum: int, _frame: object) -> None:
        from stetho.evidence.runner import kill_running_probes

        kill_running_probes()
        os._exit(128 + signum)

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, stop)


def _stop(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGTERM)
        os.waitpid(pid, 0)
    except (ProcessLookupError, ChildProcessError):
        pass


def _exit_text(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"killed by signal {os.WTERMSIG(status)}"
    return f"exit status {os.waitstatus_to_exitcode(status)}"
