"""A replay's figures: per policy node-days blocked, blocks added and removed against the
current policy, and precision and recall where outcomes are known. Plain JSON-ready data that
`stetho gate replay` prints and writes (`--json`), so every view shows the same numbers.

How each is counted (also in `DEFINITIONS`, which the output carries):
* a decision point is one node's row of one recorded run; its verdict is block, go or
  unevaluated (a check errored or was missing: never GO, never a block);
* node-days blocked: distinct (node, UTC calendar day) with at least one block;
* added: a point the candidate blocks and the current policy does not; removed: the reverse;
* outcomes, per point, from events on the same node in [t, t + horizon]: a hardware incident
  (a knowledge-base report resolved with a found cause, dated by the report) makes a block a
  true positive and a GO a miss; otherwise an override honoured for one of the blocking checks
  (under a replayed policy) or a report resolved no-fault-found makes a block a false positive.
  A block with neither is unknown and a GO with no incident is not scored: no outcome is ever
  taken as correct. precision = TP / (TP + FP), recall = TP / (TP + miss); None with nothing
  under it.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timezone

from stetho.gate.replay import Replay

DEFINITIONS = {
    "decision_point": "one node's row of one recorded run (sweep, gate, check) at its time",
    "node_days_blocked": "distinct (node, UTC day) with at least one blocking decision point",
    "added": "the candidate blocks a decision point the policy it is compared against does not",
    "removed": "the policy compared against blocks a decision point the candidate does not",
    "true_positive": "a block followed within the horizon (same node, [t, t+horizon]) by a "
                     "hardware incident: a knowledge-base report resolved with a found cause",
    "false_positive": "a block with no such incident but, within the horizon, an override "
                      "honoured for one of its blocking checks or a report resolved "
                      "no-fault-found",
    "miss": "a GO followed within the horizon by a hardware incident on that node",
    "unknown": "a block with none of those events: not counted in precision or recall",
    "precision": "TP / (TP + FP); null when both are 0",
    "recall": "TP / (TP + miss); null when both are 0",
    "excluded": "rows failing their integrity check, unsigned rows from before signing and "
                "unreadable rows, rows whose results were pruned: left out, never judged",
}


@dataclass(frozen=True)
class Event:
    """Something that happened on a node that says whether a block was right."""

    node: str
    t: float
    kind: str  # "incident" | "no-fault" | "override"
    what: str
    check: str = ""


def kb_events(repo: str) -> list[Event]:
    """Resolved reports of the knowledge base: a found cause is an incident, no-fault-found
    says the node was fine. Open reports are no outcome."""
    from stetho.publish import kb
    from stetho.publish.resolve import NO_FAULT_FOUND

    out = []
    for r in kb.reports(repo):
        if r.resolution is None:
            continue
        t = r.date.timestamp()
        kind = "no-fault" if r.resolution.found == NO_FAULT_FOUND else "incident"
        out.append(Event(r.node, t, kind, f"{r.id}: found {r.resolution.found}"))
    return out


def override_events(replay: Replay) -> list[Event]:
    """Each override a replayed policy honoured, from the first moment it was honoured."""
    out = []
    for line in replay.timelines:
        for oid, (t, o) in line.first_honoured().items():
            out += [Event(n, t, "override", f"{oid} ({o.policy})", o.check) for n in o.nodes]
    return out


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def score(replay: Replay, *, against: int | None, horizon_s: float,
          events: Iterable[Event], outcome_sources: dict[str, bool]) -> dict[str, object]:
    """The figures (see the module docstring) as JSON-ready data. `against`: the index of
    the current policy among the replayed ones (by position: a candidate may carry the name
    of the policy it would replace, to inherit its overrides)."""
    by_node: dict[str, list[Event]] = {}
    for e in sorted(events, key=lambda e: e.t):
        by_node.setdefault(e.node, []).append(e)
    times = {n: [e.t for e in es] for n, es in by_node.items()}
    base = replay.policies[against] if against is not None else None
    policies = []
    for v in replay.policies:
        row: dict[str, object] = {"policy": v.policy.name, "source": v.policy.source,
                               "mode": v.policy.mode,
                               "role": "current" if v is base else "candidate"}
        tally = {"block": 0, "go": 0, "unevaluated": 0}
        days: set[tuple[str, str]] = set()
        tp = fp = miss = unknown = 0
        for (node, t, _run), (verdict, checks) in zip(replay.points, v.verdicts, strict=True):
            tally[verdict] += 1
            near = _near(by_node.get(node, []), times.get(node, []), t, horizon_s)
            if verdict == "block":
                days.add((node, _iso(t)[:10]))
                if any(e.kind == "incident" for e in near):
                    tp += 1
                elif any(e.kind == "no-fault" or (e.kind == "override" and e.check in checks)
                         for e in near):
                    fp += 1
                else:
                    unknown += 1
            elif verdict == "go" and any(e.kind == "incident" for e in near):
                miss += 1
        row.update(decision_points=tally, node_days_blocked=len(days), outcomes={
            "true_positive": tp, "false_positive": fp, "miss": miss,
            "unknown_blocks": unknown, "precision": _ratio(tp, tp + fp),
            "recall": _ratio(tp, tp + miss)})
        if base is not None and v is not base:
            row["against"] = base.policy.name
            row["added"], row["removed"] = _diff(replay, v.verdicts, base.verdicts)
        policies.append(row)
    ex = replay.excluded
    return {
        "since": _iso(replay.since), "until": _iso(replay.until), "horizon_s": horizon_s,
        "decision_points": len(replay.points),
        "nodes": len({p[0] for p in replay.points}),
        "excluded": {"total": ex.total(), "failed_integrity": ex.distrusted,
                     "unsigned": ex.unsigned, "unreadable": ex.unreadable, "pruned": ex.pruned,
                     "why": ex.why},
        "outcome_sources": outcome_sources, "problems": replay.problems,
        "policies": policies, "definitions": DEFINITIONS,
    }


def _near(events: list[Event], times: list[float], t: float, horizon: float) -> list[Event]:
    lo = bisect.bisect_left(times, t)
    hi = bisect.bisect_right(times, t + horizon)
    return events[lo:hi]


def _ratio(hits: int, total: int) -> float | None:
    return round(hits / total, 4) if total else None


def _diff(replay: Replay, cand: list[tuple[str, tuple[str, ...]]],
          cur: list[tuple[str, tuple[str, ...]]]) -> tuple[list[dict[str, object]],
                                                         list[dict[str, object]]]:
    added: list[dict[str, object]] = []
    removed: list[dict[str, object]] = []
    for (node, t, run), (cv, cc), (bv, bc) in zip(replay.points, cand, cur, strict=True):
        if cv == "block" and bv != "block":
            added.append({"node": node, "time": _iso(t), "run": run, "checks": list(cc),
                          "was": bv})
        elif bv == "block" and cv != "block":
            removed.append({"node": node, "time": _iso(t), "run": run, "checks": list(bc),
                            "now": cv})
    return added, removed
