"""Load a node's earlier counter readings for the checks' windows (stetho.facts.window).

The checking stage hands them to each node's facts (NodeFacts.window_loader); it reads the
history database's tables directly (read only), below the history stage that writes them.

One query a node and run, read-only, so a check never writes history and a missing database
is simply "no earlier reading": every value the node recorded within the window, and of each
counter only the newest reading at or before the window's start (within a lookback): growth
starts there (stetho.facts.window.growth), so the week of readings before it is not read
(with hourly checks that week was 88% of the rows, and the load grew with the history). The
boot id is read at each starting reading's time too: a reboot is found at whichever run time
a counter's starting reading has. The window ends at the bundle's own collection time, not at
the wall clock: a replay judges the hardware as it was.

Every reading is verified before it is believed (signed run, unbroken chain, intact metrics)
by the history stage's verifier, which this module names (TRUST) rather than imports: the
checking stage sits below history. A history that cannot be believed gives no window: the
counters are judged on their counts since boot or reset, never less strict than their growth,
and the message names the database and the fix.
"""

from __future__ import annotations

import importlib
import sqlite3
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from stetho.errors import StethoError
from stetho.facts.base import Unavailable
from stetho.facts.window import BOOT_METRIC, HOUR, CounterWindow, Reading, boot_id

if TYPE_CHECKING:
    from stetho.facts.node import NodeFacts

#: How far before the window's start a reading is still taken as its starting point.
LOOKBACK_S = 7 * 24 * HOUR

#: The module whose `verified(conn, db, node, rows, until)` says which readings may be believed.
TRUST = "stetho.history.window_trust"


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
    """The node's readings in (now - window - LOOKBACK_S, now], each verified by TRUST's
    `verified`. A database that does not exist yet holds none; one that cannot be read, or
    whose readings cannot be believed, is Unavailable (the checks then judge the absolute
    counts and name the reason)."""
    readings: dict[tuple[str, str, str], list[Reading]] = {}
    if not db.exists():
        return CounterWindow(now, window_s, readings, boot_now, source=f"history {db} (new)")
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
        try:
            rows = conn.execute(_WINDOW_QUERY, {
                "node": node, "now": int(now), "start": int(now - window_s),
                "lookback": int(now - window_s - LOOKBACK_S), "check": BOOT_METRIC[0],
                "subject": BOOT_METRIC[1], "metric": BOOT_METRIC[2]}).fetchall()
            rows = importlib.import_module(TRUST).verified(conn, db, node, rows, int(now))
        finally:
            conn.close()
    except sqlite3.Error as exc:
        raise Unavailable("skip", f"history {db} could not be read ({exc})", "history") from None
    except StethoError as exc:
        raise Unavailable("skip", f"history {db} cannot be believed: {exc}", "history") from None
    for check, subject, metric, t, value, _run in rows:
        readings.setdefault((check, subject, metric), []).append(Reading(t, value))
    return CounterWindow(now, window_s, readings, boot_now, source=f"history {db}")


#: The node's readings in (start, now]; of each series but the boot id, the newest reading in
#: [lookback, start] (SQLite takes a bare column from the row MAX() picked); and the boot id's
#: readings at those starting readings' times (growth compares boot ids only at the times of
#: the readings it uses, stetho.facts.window.growth). Oldest first, each with its run's key
#: (what verifies it: reading the boot id over the whole lookback made every run of the week
#: one to verify); a NULL value is no reading.
_WINDOW_QUERY = """
WITH node AS (SELECT id FROM nodes WHERE name = :node),
boot AS (SELECT id FROM series WHERE node_id = (SELECT id FROM node) AND check_name = :check
         AND subject = :subject AND metric = :metric),
starts AS (
  SELECT series_id, MAX(time) AS time, value, run_key FROM metrics
   WHERE node_id = (SELECT id FROM node) AND time >= :lookback AND time <= :start
     AND value IS NOT NULL AND series_id NOT IN boot
   GROUP BY series_id),
picked AS (
  SELECT series_id, time, value, run_key FROM metrics
   WHERE node_id = (SELECT id FROM node) AND time > :start AND time <= :now
     AND value IS NOT NULL
  UNION ALL
  SELECT series_id, time, value, run_key FROM starts
  UNION ALL
  SELECT series_id, time, value, run_key FROM metrics
   WHERE node_id = (SELECT id FROM node) AND time IN (SELECT time FROM starts)
     AND value IS NOT NULL AND series_id IN boot)
SELECT s.check_name, s.subject, s.metric, p.time, p.value, p.run_key
  FROM picked p JOIN series s ON s.id = p.series_id ORDER BY p.time
"""


def loader(db: Path, window_h: float) -> Callable[[NodeFacts], CounterWindow]:
    """A NodeFacts.window_loader over `db` with the profile's window."""

    def load_for(facts: NodeFacts) -> CounterWindow:
        return load(db, facts.name, evidence_time(facts.bundle.collected_at),
                    window_h * HOUR, boot_id(facts))

    return load_for
