"""When a kernel-log event happened, against the GPU's epoch and the profile's window.

A check judges the hardware as it is now: an Xid logged before the GPU was last (re)initialised
is history (the reset that followed it already did what its resolution asks for); one within the
epoch but older than the window is old news (a warning); one inside the window, or whose time is
unknown (fail closed), is present and judged by its severity. "Now" is the bundle's collection
time, never the clock of the machine that replays it.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Literal

from stetho.core.record import record

if TYPE_CHECKING:
    from collections.abc import Sequence

    from stetho.parsers.kernel_log import BusLoss, GpuInit, KernelLog, XidEvent

Placement = Literal["present", "old", "before-reset"]


@record
class Placed:
    """One event and where it falls."""

    event: XidEvent | BusLoss
    placement: Placement
    reset: GpuInit | None  # the (re)initialisation that made it history

    @property
    def present(self) -> bool:
        return self.placement == "present"


def collected_at(stamp: str) -> datetime | None:
    """A bundle's `collected_at` as an aware UTC time, or None when it is not one."""
    try:
        t = datetime.fromisoformat(stamp.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    return t.astimezone(timezone.utc) if t.tzinfo is not None else None


def place(events: Sequence[XidEvent | BusLoss], log: KernelLog, now: datetime | None,
          window: timedelta) -> list[Placed]:
    """Each event placed against its GPU's last (re)initialisation and the window ending now."""
    out = []
    for e in events:
        start = log.epoch_start(e.pci_id)
        if start is not None and e.seq < start.seq:
            out.append(Placed(e, "before-reset", start))
        elif e.time is not None and now is not None and now - e.time > window:
            out.append(Placed(e, "old", None))
        else:
            out.append(Placed(e, "present", None))
    return out


def stamp(t: datetime | None, now: datetime | None) -> str:
    """'2026-12-03T04:10:00Z (3.0 h ago)'; says so when the time or 'now' is unknown."""
    if t is None:
        return "at an unknown time (the log line carries no date and zone)"
    iso = t.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    if now is None:
        return f"at {iso} (age unknown: the bundle has no collection time)"
    return f"at {iso} ({hours(now - t)} ago)"


def hours(span: timedelta) -> str:
    h = span.total_seconds() / 3600
    return f"{h:.1f} h" if abs(h) < 72 else f"{h / 24:.1f} days"


def window_words(window: timedelta) -> str:
    return f"{hours(window)} window before collection, profile gpu.xid_window_h"
