"""Load a node's earlier counter readings for the checks' windows (stetho.facts.window).

The checking stage hands them to each node's facts (NodeFacts.window_loader); it reads the
history database's tables directly (read only), below the history stage that writes them.

One query a node and run: every metric value the node recorded within the window and a
lookback before it (to find the reading at the window's start), read-only, so a check never
writes history and a missing database is simply "no earlier reading". The window ends at the
bundle's own collection time, not at the wall clock: a replay judges the hardware as it was.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from stetho.facts.base import Unavailable
from stetho.facts.window import HOUR, CounterWindow, Reading, boot_id

if TYPE_CHECKING:
    from stetho.facts.node import NodeFacts

#: How far before the window's start a reading is still taken as its starting point.
LOOKBACK_S = 7 * 24 * HOUR


def evidence_time(collected_at: str | None) -> float:
    """The bundle's collection time as a Unix time; now where it has none or is no time."""
    if collected_at:
        try:
            t = datetime.fromisoformat(str(collected_at).replace("Z", "+00:00"))
        except ValueError:
            return time.time()
        if t.tzinfo is None:
            t = t.replace(tzinfo=timezone.utc)
        return t.timestamp()
    return time.time()


def load(db: Path, node: str, now: float, window_s: float, boot_now: float | None = None
         ) -> CounterWindow:
    """The node's readings in (now - window - LOOKBACK_S, now]. A database that does not
    exist yet holds none; one that cannot be read is Unavailable (the checks then judge the
    absolute counts and name the reason)."""
    readings: dict[tuple[str, str, str], list[Reading]] = {}
    if not db.exists():
        return CounterWindow(now, window_s, readings, boot_now, source=f"history {db} (new)")
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
        try:
            rows = conn.execute(
                "SELECT s.check_name, s.subject, s.metric, m.time, m.value FROM metrics m "
                "JOIN series s ON s.id = m.series_id JOIN nodes n ON n.id = m.node_id "
                "WHERE n.name = ? AND m.time >= ? AND m.time <= ? ORDER BY m.time",
                (node, int(now - window_s - LOOKBACK_S), int(now))).fetchall()
        finally:
            conn.close()
    except sqlite3.Error as exc:
        raise Unavailable("skip", f"history {db} could not be read ({exc})", "history") from None
    for check, subject, metric, t, value in rows:
        if value is not None:
            readings.setdefault((check, subject, metric), []).append(Reading(t, value))
    return CounterWindow(now, window_s, readings, boot_now, source=f"history {db}")


def loader(db: Path, window_h: float) -> Callable[[NodeFacts], CounterWindow]:
    """A NodeFacts.window_loader over `db` with the profile's window."""

    def load_for(facts: NodeFacts) -> CounterWindow:
        return load(db, facts.name, evidence_time(facts.bundle.collected_at),
                    window_h * HOUR, boot_id(facts))

    return load_for
