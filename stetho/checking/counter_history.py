"""Load a node's earlier counter readings for the checks' windows (stetho.facts.window).

The checking stage hands them to each node's facts (NodeFacts.window_loader); it reads the
history database's tables directly (read only), below the history stage that writes them.

One read a node and run, read-only, so a check never writes history and a missing database
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
from collections.abc import Callable, Set
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from stetho.errors import StethoError
from stetho.facts.base import Unavailable
from stetho.facts.window import BOOT_METRIC, HOUR, CounterWindow, Reading, boot_id

if TYPE_CHECKING:
    from stetho.facts.node import NodeFacts

_new = tuple.__new__  # a Reading made as the tuple it is, not through a Python __new__

#: How far before the window's start a reading is still taken as its starting point.
LOOKBACK_S = 7 * 24 * HOUR

#: The module whose `verified(conn, db, node, since, until)` reads the node's readings between
#: two times that may be believed.
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
            rows = read(conn, db, node, int(now), int(now - window_s),
                        int(now - window_s - LOOKBACK_S))
        finally:
            conn.close()
    except sqlite3.Error as exc:
        raise Unavailable("skip", f"history {db} could not be read ({exc})", "history") from None
    except StethoError as exc:
        raise Unavailable("skip", f"history {db} cannot be believed: {exc}", "history") from None
    for key, t, value in rows:
        readings.setdefault(key, []).append(_new(Reading, (t, value)))
    return CounterWindow(now, window_s, readings, boot_now, source=f"history {db}")


def read(conn: sqlite3.Connection, db: Path, node: str, now: int, start: int, lookback: int
         ) -> list[tuple[tuple[str, str, str], int, float]]:
    """((check, subject, metric), time, value) of the readings growth uses, oldest first:
    every reading in (start, now]; of each series but the boot id, the newest in [lookback,
    start] (growth starts there, stetho.facts.window.growth); and the boot id at those
    starting readings' times (growth compares boot ids only at the readings it uses). Each
    comes from TRUST's verified read from the oldest starting reading to `now` (so the week
    before the start is not read: with hourly checks it was 88% of the rows), in the run
    that verifies it; a NULL value is no reading."""
    found = conn.execute("SELECT id FROM nodes WHERE name = ?", (node,)).fetchone()
    if found is None:
        return []
    nid = int(found[0])
    names = {int(sid): (c, s, m) for sid, c, s, m in conn.execute(
        "SELECT id, check_name, subject, metric FROM series WHERE node_id = ?", (nid,))}
    boot = {sid for sid, key in names.items() if key == BOOT_METRIC}
    starts = _starts(conn, nid, names.keys() - boot, lookback, start)
    at = {t for t, _k in starts.values()}
    verified = importlib.import_module(TRUST).verified
    out = []
    for sid, t, value, run_key in verified(conn, db, node, min(at, default=start + 1), now):
        if value is not None and (t > start or starts.get(sid) == (t, run_key)
                                  or (sid in boot and t in at)):
            out.append((sid, t, value))
    missing = {sid for sid, _t, _v in out} - names.keys()  # a row moved from another node
    if missing:
        names.update((int(sid), (c, s, m)) for sid, c, s, m in conn.execute(
            "SELECT id, check_name, subject, metric FROM series WHERE id IN "
            f"({','.join(map(str, missing))})"))
    return [(names.get(sid, ("", "", "")), t, v) for sid, t, v in out]


#: How many of the newest runs before the window's start are read one at a time for the
#: starting readings; series still without one are then found in one grouped scan of the rest
#: of the lookback (a series the node no longer has would otherwise walk the whole week).
_STEPS = 4


def _starts(conn: sqlite3.Connection, nid: int, wanted: Set[int], lookback: int,
            start: int) -> dict[int, tuple[int, int]]:
    """Each wanted series' newest reading in [lookback, start] as series -> (time, run key).
    Most nodes record every series in every run, so the newest run before the start holds
    them all: read from there back, not the lookback's week of rows (a grouped scan of it was
    most of the window's load with hourly checks)."""
    found: dict[int, tuple[int, int]] = {}
    hi = start
    for _ in range(_STEPS):
        if len(found) >= len(wanted):
            return found
        t = conn.execute("SELECT MAX(time) FROM metrics WHERE node_id = ? AND time >= ? AND "
                         "time <= ?", (nid, lookback, hi)).fetchone()[0]
        if t is None:
            return found
        for sid, run_key in conn.execute("SELECT series_id, run_key FROM metrics WHERE "
                                         "node_id = ? AND time = ? AND value IS NOT NULL",
                                         (nid, t)):
            if sid in wanted and sid not in found:
                found[sid] = (int(t), int(run_key))
        hi = int(t) - 1
    if len(found) < len(wanted):
        for sid, t, run_key in conn.execute(
                "SELECT series_id, MAX(time), run_key FROM metrics WHERE node_id = ? AND "
                "time >= ? AND time <= ? AND value IS NOT NULL GROUP BY series_id",
                (nid, lookback, hi)):  # SQLite takes the bare run_key from MAX()'s row
            if sid in wanted and sid not in found:
                found[sid] = (int(t), int(run_key))
    return found


def loader(db: Path, window_h: float) -> Callable[[NodeFacts], CounterWindow]:
    """A NodeFacts.window_loader over `db` with the profile's window."""

    def load_for(facts: NodeFacts) -> CounterWindow:
        return load(db, facts.name, evidence_time(facts.bundle.collected_at),
                    window_h * HOUR, boot_id(facts))

    return load_for
