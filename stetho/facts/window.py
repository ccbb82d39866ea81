"""Counters with a time base: how much a cumulative counter grew within a window, from the
node's own earlier readings.

Error counters (IB symbol errors, NVLink replays, corrected AER lines, throttle time) count
since boot, a driver load, a GPU reset or a manual clear. Their absolute value says nothing of
*now*: twelve symbol errors over a year of uptime are not twelve in the last hour. Where the
node's history holds earlier readings, a check judges the growth within the window (default
24 h) instead, and says so; where it holds none, the check keeps the absolute count and says
that too.

Growth is reset-aware, like Prometheus' `increase()`: between two readings of one epoch the
growth is the difference; when the value drops (a counter clear, a GPU reset) or the node
rebooted in between (its boot id changed), a new epoch began and everything the counter holds
now was counted since then. Growth is never negative.

The readings come from the history database (stetho.checking.counter_history loads them, one
query a node); this module is pure, so it is tested on plain numbers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from typing import TYPE_CHECKING, NamedTuple

from stetho.core.record import record
from stetho.facts.base import Unavailable

if TYPE_CHECKING:
    from stetho.facts.base import Facts

HOUR = 3600.0
#: The history metric that marks a boot: the node's boot id folded to a number (equal for
#: every run of one boot, different after a reboot).
BOOT_METRIC = ("host", "", "boot_id")


class Reading(NamedTuple):
    """One earlier reading of a counter. A tuple: a day of hourly checks is thousands."""

    time: float
    value: float


@record
class Growth:
    """How much one counter grew between `since` and `now`."""

    delta: float
    since: float  # when the earliest reading used was taken (the start of the judged span)
    now: float
    full: bool  # a reading at or before the window's start: the whole window is covered
    resets: int  # new epochs (drops, reboots) within the span
    readings: int  # earlier readings used

    @property
    def hours(self) -> float:
        return max(self.now - self.since, 0.0) / HOUR

    def span(self) -> str:
        """'in the last 24 h' / 'in the 6.2 h since the first reading in history'."""
        h = self.hours
        text = f"{h:.0f} h" if h >= 10 else f"{h:.2g} h"
        where = f"in the last {text}" if self.full else \
            f"in the {text} since the node's first reading in history"
        if self.resets:
            where += f" ({self.resets} counter reset{'s' if self.resets > 1 else ''} or "\
                "reboot in between)"
        return where


def growth(earlier: Sequence[Reading], current: float, now: float, window_s: float,
           boots: Sequence[Reading] = (), boot_now: float | None = None) -> Growth | None:
    """The counter's growth within the window ending `now`, or None without an earlier
    reading. `earlier` are the readings before now, oldest first; the span starts at the
    newest one at or before the window's start, else at the oldest within it. `boots` are
    the node's boot-id readings at the same times, `boot_now` the current one."""
    start = now - window_s
    before = [r for r in earlier if r.time <= now]
    if not before:
        return None
    first = 0
    for i, r in enumerate(before):
        if r.time <= start:
            first = i
        else:
            break
    used = before[first:]
    full = used[0].time <= start
    boot_at = {r.time: r.value for r in boots}
    points = [(r.time, r.value, boot_at.get(r.time)) for r in used]
    points.append((now, current, boot_now))
    delta = 0.0
    resets = 0
    for (_, v0, b0), (_, v1, b1) in zip(points, points[1:], strict=False):
        rebooted = b0 is not None and b1 is not None and b0 != b1
        if rebooted or v1 < v0:
            resets += 1
            delta += v1  # everything counted since the new epoch began
        else:
            delta += v1 - v0
    return Growth(delta, used[0].time, now, full, resets, len(used))


@record
class CounterWindow:
    """One node's earlier counter readings, for the window ending at its evidence time.

    `readings` maps (check, subject, metric) as history records them (stetho.facts.metrics)
    to readings, oldest first. `source` says where they came from, for the messages."""

    now: float
    window_s: float
    readings: Mapping[tuple[str, str, str], Sequence[Reading]]
    boot_now: float | None = None
    source: str = "history"

    def growth(self, key: tuple[str, str, str], current: float) -> Growth | None:
        return growth(self.readings.get(key, ()), current, self.now, self.window_s,
                      self.readings.get(BOOT_METRIC, ()), self.boot_now)

    @property
    def hours(self) -> float:
        return self.window_s / HOUR


def boot_id(facts: Facts) -> float | None:
    """The node's boot id as a number (read with the kernel release), None where unread."""
    try:
        text = facts.files("kernel_release").get("/proc/sys/kernel/random/boot_id")
    except Unavailable:
        return None
    return boot_number(text) if text else None


def boot_number(boot_id: str) -> float | None:
    """/proc/sys/kernel/random/boot_id ('3f0c...-...') -> its first 48 bits as a number
    (exact in a float: history stores metric values as REAL); None if it is no boot id."""
    digits = boot_id.strip().replace("-", "")
    if len(digits) < 12:
        return None
    try:
        return float(int(digits[:12], 16))
    except ValueError:
        return None


def count(v: float) -> str:
    """A count as it was read: 4812340, not 4.81234e+06."""
    return str(int(v)) if float(v).is_integer() else f"{v:g}"


def when(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%MZ")


@record
class Counted:
    """One counter as a check judges it: its reading now, and the amount judged (its growth
    within the window where history has an earlier reading, else the reading itself)."""

    now: float
    growth: Growth | None

    @property
    def amount(self) -> float:
        return self.growth.delta if self.growth is not None else self.now

    def describe(self, name: str) -> str:
        """'SymbolErrorCounter +4096 in the last 24 h (SymbolErrorCounter=4096 now)' or
        'SymbolErrorCounter=4096 since boot or its last reset'."""
        if self.growth is None:
            return f"{name}={count(self.now)} since boot or its last reset"
        return f"{name} +{count(self.growth.delta)} {self.growth.span()} " \
               f"({name}={count(self.now)} now)"


class Windows:
    """A check's view of the node's counter window: each counter judged by its growth where
    history allows, and one sentence saying on what basis the check judged."""

    def __init__(self, window: CounterWindow | None, why_none: str = "") -> None:
        self.window = window
        self.why_none = why_none
        self.windowed = 0
        self.absolute = 0

    def count(self, key: tuple[str, str, str], current: float) -> Counted:
        g = self.window.growth(key, current) if self.window is not None else None
        if g is None:
            self.absolute += 1
        else:
            self.windowed += 1
        return Counted(current, g)

    def basis(self) -> str:
        if self.window is None:
            return (f"judged on the counts since boot or the last reset: {self.why_none}"
                    if self.why_none else "judged on the counts since boot or the last reset")
        hours = f"{self.window.hours:g} h"
        if self.absolute and not self.windowed:
            return (f"judged on the counts since boot or the last reset: {self.window.source} "
                    f"holds no earlier reading of these counters (their growth within "
                    f"{hours} is judged from the next run on)")
        if self.absolute:
            return (f"judged on growth within {hours} where {self.window.source} holds an "
                    f"earlier reading; {self.absolute} counters without one on their counts "
                    "since boot or the last reset")
        return f"judged on growth within {hours}, from {self.window.source}"
