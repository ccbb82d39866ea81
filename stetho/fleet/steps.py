"""Each playbook step's share of a sweep, from ansible-runner's events.

A sweep's time is spent in a few tasks; which one grows is what a slow night needs to know
(the copy of gates/ alone once took 4x an `ansible -m ping`). ansible-runner stamps every
per-host result with its start and end, and the playbook's start and stats events with their
creation time: a step's span is its first host's start to its last host's end, its share that
span over the playbook's wall time. What no task covers (Ansible starting, forking workers,
between tasks) is its own row, so the shares add up to the whole.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

#: The row for the playbook's time outside every task's span.
BETWEEN = "(Ansible between tasks: start-up, workers, bookkeeping)"
_HOST_END = ("runner_on_ok", "runner_on_failed", "runner_on_unreachable", "runner_on_skipped")


@dataclass(frozen=True)
class Step:
    task: str
    hosts: int  # hosts that ran it
    skipped: int  # hosts that skipped it (a skip still costs the controller a worker)
    span_s: float  # first host's start to last host's end
    host_s: float  # summed over its hosts
    share: float  # span over the playbook's wall time

    def as_dict(self) -> dict[str, Any]:
        return {"task": self.task, "hosts": self.hosts, "skipped": self.skipped,
                "span_s": round(self.span_s, 3),
                "host_s": round(self.host_s, 3), "share": round(self.share, 4)}


@dataclass(frozen=True)
class Steps:
    wall_s: float  # playbook start to its stats
    steps: tuple[Step, ...]

    def as_dict(self) -> dict[str, Any]:
        return {"wall_s": round(self.wall_s, 3), "steps": [s.as_dict() for s in self.steps]}


def of_events(events: Iterable[Mapping[str, Any]]) -> Steps:
    """The steps of one playbook run from its raw ansible-runner events (job_events)."""
    first: datetime | None = None
    last: datetime | None = None
    spans: dict[str, list[datetime]] = {}
    host_s: dict[str, float] = {}
    hosts: dict[str, set[str]] = {}
    skipped: dict[str, set[str]] = {}
    for event in events:
        kind = str(event.get("event", ""))
        created = _time(event.get("created"))
        if kind == "playbook_on_start" and created is not None:
            first = created if first is None else min(first, created)
        elif kind == "playbook_on_stats" and created is not None:
            last = created if last is None else max(last, created)
        elif kind in _HOST_END:
            data = event.get("event_data") or {}
            start, end = _time(data.get("start")), _time(data.get("end"))
            task = str(data.get("task") or "")
            if start is None or end is None or not task:
                continue
            ends = spans.setdefault(task, [start, end])
            ends[0], ends[1] = min(ends[0], start), max(ends[1], end)
            host = str(data.get("host", ""))
            if kind == "runner_on_skipped":
                skipped.setdefault(task, set()).add(host)
                hosts.setdefault(task, set())
                host_s.setdefault(task, 0.0)
            else:
                host_s[task] = host_s.get(task, 0.0) + (end - start).total_seconds()
                hosts.setdefault(task, set()).add(host)
    if first is None or last is None:
        return Steps(0.0, ())
    wall = max((last - first).total_seconds(), 1e-9)
    out = [Step(task, len(hosts[task]), len(skipped.get(task, ())), (e - s).total_seconds(),
                host_s[task], (e - s).total_seconds() / wall) for task, (s, e) in spans.items()]
    out.sort(key=lambda st: st.span_s, reverse=True)
    rest = max(wall - sum(st.span_s for st in out), 0.0)
    return Steps(wall, (*out, Step(BETWEEN, 0, 0, rest, 0.0, rest / wall)))


def _time(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return None
