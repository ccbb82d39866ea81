"""The evidence file a node keeps up to date while it collects, for a check killed at the
sweep's hard per-host timeout: the controller brings back what it left and evaluates it
(probes unfinished in it are `timeout`).

Saving the whole bundle after every one of ~72 probes cost a third of a node's check (each
save encoded every probe again and replaced a 300 KB file). Here a probe is encoded once (its
line kept for the saves after it) and the file is replaced at most every `every_s` seconds:
a probe that finishes in between is saved by a timer at the end of that interval, so the
file is never more than `every_s` behind the collection, and `close()` saves the last state
before the collection's bundle is used. The hard timeout is at least a minute past the
node's own deadline, so a second behind loses nothing a kill could have kept.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from stetho.evidence.bundle import Bundle, ProbeRecord

#: The most the file may lag behind the evidence collected so far.
EVERY_S = 1.0


class PartialFile:
    """A sink for the collector's `on_partial`: the evidence so far, saved atomically to
    `path`. A write that fails (a full disk) never stops the collection: saving stops and the
    final save names the failure (stetho.check.outputs)."""

    def __init__(self, path: Path, every_s: float = EVERY_S) -> None:
        self.path = path
        self.every_s = every_s
        self.saves = 0  # files written (tests read it)
        self._lines: dict[str, tuple[ProbeRecord, str]] = {}
        self._lock = threading.Lock()
        self._latest: Bundle | None = None  # the newest state, saved or not
        self._saved: Bundle | None = None
        self._saved_at = float("-inf")
        self._timer: threading.Timer | None = None
        self._failed = self._closed = False

    def __call__(self, bundle: Bundle) -> None:
        with self._lock:
            if self._closed or self._failed:
                return
            self._latest = bundle
            wait = self._saved_at + self.every_s - time.monotonic()
            if wait <= 0:
                self._save()
            elif self._timer is None:  # the trailing save: this state reaches the file too
                self._timer = threading.Timer(wait, self._due)
                self._timer.daemon = True
                self._timer.start()

    def _due(self) -> None:
        with self._lock:
            self._timer = None
            if not self._closed:
                self._save()

    def close(self) -> None:
        """Save the last state now (if a timer still owed it) and stop saving."""
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            self._save()
            self._closed = True

    def _save(self) -> None:
        bundle = self._latest
        if bundle is None or bundle is self._saved or self._failed:
            return
        try:
            bundle.save(self.path, self._lines)
        except OSError:
            self._failed = True
            return
        self._saved, self._saved_at = bundle, time.monotonic()
        self.saves += 1
