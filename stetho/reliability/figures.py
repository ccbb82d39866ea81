"""The arithmetic: incidents and the sources in, JSON-ready figures out (every view, the
table, `--json` and the Prometheus textfile, renders this one dict).

Time bases, stated in the output too: observed time is each node's span from its first to its
last run in the window, summed (node-hours); every duration is in hours. A figure with nothing
under it (no incident, no report) is None, never 0; one resting on a source that failed to
load is None with the error beside it.

ETTR (effective training time ratio, the share of wall time a job spends on useful training)
is defined in Kokolis et al., "Revisiting Reliability in Large-Scale Machine Learning Research
Clusters", HPCA 2025. The model here is a simplification of theirs, ours: a job of N GPUs on
ceil(N / gpus-per-node) nodes fails as a Poisson process with rate nodes / MTBF_node; each
failure loses half a checkpoint interval of work plus a fixed restart overhead;
ETTR = 1 / (1 + rate * (checkpoint / 2 + restart)). Not modelled: queueing after a failure,
the cost of writing checkpoints, failures that are not hardware incidents stetho sees.
"""

from __future__ import annotations

import math
import statistics
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from stetho.reliability import sources
from stetho.reliability.drains import Interval, merge, to_json
from stetho.reliability.sources import Source
from stetho.reliability.timeline import Incident, Timeline

H = 3600.0
#: a drain this long before an incident's first failing run is still its drain (the clocks
#: of the gate and the sweep differ by seconds)
DRAIN_SLACK_S = 3600
MODEL_SOURCE = ("Kokolis et al., Revisiting Reliability in Large-Scale Machine Learning "
                "Research Clusters, HPCA 2025 (defines ETTR)")
MODEL = ("failures Poisson with rate nodes/MTBF_node; lost work per failure = checkpoint/2 + "
         "restart; ETTR = 1 / (1 + rate * (checkpoint/2 + restart)); queueing and checkpoint "
         "write cost not modelled")


@dataclass(frozen=True)
class Params:
    lemon_k: int = 3
    lemon_days: float = 30
    gpus_per_job: int = 512
    gpus_per_node: int = 8
    checkpoint_s: float = 1800
    restart_s: float = 600
    by: str = "cause"


def _utc(t: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def _hours(x: float) -> float:
    return round(x / H, 6)


def _dist(xs: Sequence[float]) -> dict[str, Any]:
    """Mean and median of durations (seconds) in hours; None when there are none."""
    if not xs:
        return {"n": 0, "mean": None, "median": None}
    return {"n": len(xs), "mean": _hours(statistics.fmean(xs)),
            "median": _hours(statistics.median(xs))}


def compute(tl: Timeline, ledger: Source, kb: Source, ovr: Source, p: Params,
            leaf_of: dict[str, str] | None = None,
            slurm: Source | None = None) -> dict[str, Any]:
    """`slurm` None: not asked (sources.slurm says so)."""
    slurm = slurm if slurm is not None else sources.slurm(None, tl.since)
    drains = merge(ledger, slurm)
    incs = sorted(tl.incidents, key=lambda i: (i.opened, i.node))
    node_s = sum(last - first for first, last in tl.spans.values())
    out: dict[str, Any] = {
        "window": {"since": tl.since, "until": tl.until, "since_utc": _utc(tl.since),
                   "until_utc": _utc(tl.until), "days": round((tl.until - tl.since) / 86400, 3)},
        "rows": {"read": tl.rows, "excluded": tl.excluded, "why": tl.why},
        "sources": {s.name: s.to_json() for s in (ledger, slurm, kb, ovr)},
        "notes": [*(s.absent or s.error for s in (ledger, kb, ovr) if not s.usable),
                  *(n for n in (slurm.error, slurm.note, drains.note) if n)],
        "nodes": len(tl.spans),
        "node_hours": _hours(node_s),
        "time_base": "node-hours: each node's first to last run in the window, summed",
        "incidents": len(incs),
        "open": sum(1 for i in incs if i.closed is None),
        "by_cause": dict(sorted(Counter(c for i in incs for c in i.causes).items())),
    }
    out["mtbf_hours"] = _mtbf(node_s, len(incs), p)
    out["mttr_hours"] = _mttr(incs, drains, tl.until)
    out["drains"] = _drains(drains)
    out["time_to_detect_hours"] = _ttd(incs, drains)
    out["time_to_localize_hours"] = _ttl(incs, kb, tl.until)
    out["false_positives"] = _fp(incs, kb, ovr, tl.until)
    out["lemons"] = _lemons(incs, p)
    out["ettr"] = _ettr(out["mtbf_hours"]["per_node"], p)
    out["groups"] = _groups(incs, tl, p, leaf_of)
    return out


def _mtbf(node_s: float, n: int, p: Params) -> dict[str, Any]:
    per_node = _hours(node_s / n) if n else None
    return {"per_node": per_node,
            "per_1000_gpus": round(per_node * p.gpus_per_node / 1000, 6) if per_node else None,
            "gpus_per_node": p.gpus_per_node,
            "at_least": None if n else _hours(node_s)}


def _drain_of(i: Incident, drains: Source, until: int) -> Interval | None:
    end = i.closed if i.closed is not None else until
    for d in drains.of(i.node):
        if i.opened - DRAIN_SLACK_S <= d.at <= end:
            return d  # type: ignore[no-any-return]
    return None


def _mttr(incs: list[Incident], drains: Source, until: int) -> dict[str, Any]:
    """Drain -> resume where the node was drained (the ledger's or Slurm's stamps) and
    resumed, else fail -> next pass. An incident whose drain is still open is ongoing: left
    out, never a zero and never its fail -> pass (the node is not back)."""
    if drains.error:
        return {**_dist([]), "unknown": drains.error}
    xs: list[float] = []
    by = Counter({s: 0 for s in ("ledger", "slurm-events")})
    ongoing = 0
    for i in incs:
        d = _drain_of(i, drains, until) if drains.usable else None
        if d is not None and d.released is None:
            ongoing += 1
        elif d is not None and d.released is not None:
            xs.append(d.released - d.at)
            # credited to the source whose end was used: Slurm's where Slurm saw the drain
            by[next((s for s in d.sources if s != "ledger"), "ledger")] += 1
        elif i.closed is not None:
            xs.append(i.closed - i.opened)
    from_drain = sum(by.values())
    return {**_dist(xs), "from_drains": from_drain, "from_passes": len(xs) - from_drain,
            "drains_by_source": dict(by), "drain_still_open": ongoing}


def _drains(drains: Source) -> dict[str, Any]:
    """Every drain interval and who told of it; the open ones, oldest first, said apart."""
    if not drains.usable:
        return {"known": False, "intervals": [], "open": None, "oldest_open_since": None,
                "why": drains.error or drains.absent}
    rows = [to_json(m, _utc) for m in drains.items]
    opened = sorted(m.at for m in drains.items if m.released is None)
    return {"known": True, "intervals": rows, "open": len(opened),
            "oldest_open_since": opened[0] if opened else None,
            "oldest_open_since_utc": _utc(int(opened[0])) if opened else None}


def _ttd(incs: list[Incident], drains: Source) -> dict[str, Any]:
    """First warning on the node and check -> the failure (or an earlier drain)."""
    xs = []
    for i in incs:
        if i.first_warn is None:
            continue
        seen = float(i.opened)
        for d in drains.of(i.node):
            if i.first_warn <= d.at < seen:
                seen = d.at
        xs.append(seen - i.first_warn)
    return {**_dist(xs), "without_warning": len(incs) - len(xs)}


def _report_of(i: Incident, kb: Source, until: int) -> Any:
    end = i.closed if i.closed is not None else until
    hits = [r for r in kb.of(i.node) if i.opened <= r.date.timestamp() <= end]
    return min(hits, key=lambda r: r.date) if hits else None


def _ttl(incs: list[Incident], kb: Source, until: int) -> dict[str, Any]:
    """First failing run -> the diagnosis report's time, where a report exists."""
    if kb.error:
        return {**_dist([]), "unknown": kb.error}
    if not kb.usable:
        return {**_dist([]), "absent": "no knowledge base given (--kb)"}
    xs = []
    for i in incs:
        r = _report_of(i, kb, until)
        if r is not None:
            xs.append(r.date.timestamp() - i.opened)
    return {**_dist(xs), "without_report": len(incs) - len(xs)}


def _fp(incs: list[Incident], kb: Source, ovr: Source, until: int) -> dict[str, Any]:
    """Incidents a person overrode, or whose report was resolved no-fault-found."""
    from stetho.gate.overrides import parse_ts
    from stetho.publish.resolve import NO_FAULT_FOUND

    errors = [s.error for s in (kb, ovr) if s.error]
    basis = [s.name for s in (kb, ovr) if s.usable]
    if errors or not basis:
        return {"count": None, "rate": None, "overridden": None, "no_fault_found": None,
                "basis": basis, "unknown": "; ".join(errors) or "no source given"}
    overridden, nff = set(), set()
    for n, i in enumerate(incs):
        end = i.closed if i.closed is not None else until
        if ovr.usable and any(i.node in o.nodes and o.check in i.causes
                              and i.opened <= parse_ts(o.requested_at) <= end
                              for o in ovr.items):
            overridden.add(n)
        r = _report_of(i, kb, until) if kb.usable else None
        if r is not None and r.resolution is not None and r.resolution.found == NO_FAULT_FOUND:
            nff.add(n)
    fp = len(overridden | nff)
    return {"count": fp, "rate": round(fp / len(incs), 6) if incs else None,
            "overridden": len(overridden) if ovr.usable else None,
            "no_fault_found": len(nff) if kb.usable else None, "basis": basis}


def _lemons(incs: list[Incident], p: Params) -> dict[str, Any]:
    """Nodes with at least K incidents opened within some W-day stretch."""
    opens: dict[str, list[int]] = defaultdict(list)
    for i in incs:
        opens[i.node].append(i.opened)
    w = p.lemon_days * 86400
    lemons = {node: len(ts) for node, ts in opens.items()
              if any(ts[j + p.lemon_k - 1] - ts[j] <= w for j in range(len(ts) - p.lemon_k + 1))}
    return {"k": p.lemon_k, "days": p.lemon_days, "nodes": dict(sorted(lemons.items()))}


def _ettr(mtbf_node_h: float | None, p: Params) -> dict[str, Any]:
    nodes = math.ceil(p.gpus_per_job / p.gpus_per_node)
    out: dict[str, Any] = {"gpus": p.gpus_per_job, "nodes": nodes,
                           "checkpoint_hours": _hours(p.checkpoint_s),
                           "restart_hours": _hours(p.restart_s), "model": MODEL,
                           "source": MODEL_SOURCE, "failures_per_hour": None, "ettr": None}
    if mtbf_node_h:
        rate = nodes / mtbf_node_h
        loss_h = (p.checkpoint_s / 2 + p.restart_s) / H
        out["failures_per_hour"] = round(rate, 6)
        out["ettr"] = round(1 / (1 + rate * loss_h), 6)
    return out


def _groups(incs: list[Incident], tl: Timeline, p: Params,
            leaf_of: dict[str, str] | None) -> dict[str, Any]:
    if p.by == "node":
        per: dict[str, list[Incident]] = defaultdict(list)
        for i in incs:
            per[i.node].append(i)
        rows: list[dict[str, Any]] = []
        for node, (first, last) in sorted(tl.spans.items()):
            n = len(per.get(node, ()))
            rows.append({"node": node, "incidents": n, "node_hours": _hours(last - first),
                         "mtbf_hours": _hours((last - first) / n) if n else None})
        rows.sort(key=lambda r: (-r["incidents"], r["node"]))
        return {"by": "node", "rows": rows}
    if p.by == "switch":
        leaf_of = leaf_of or {}
        events: dict[tuple[str, int], set[str]] = defaultdict(set)
        for i in incs:
            events[(leaf_of.get(i.node, "(not in topology)"), i.run_key)].add(i.node)
        per_leaf: dict[str, dict[str, Any]] = {}
        for (leaf, _), nodes in sorted(events.items()):
            row = per_leaf.setdefault(leaf, {"switch": leaf, "incidents": 0, "shared": 0,
                                             "node_incidents": 0, "nodes": set()})
            row["incidents"] += 1
            row["shared"] += len(nodes) > 1
            row["node_incidents"] += len(nodes)
            row["nodes"] |= nodes
        return {"by": "switch", "rows": [{**r, "nodes": sorted(r["nodes"])}
                                         for r in per_leaf.values()]}
    return {"by": "cause", "rows": [{"cause": c, "incidents": n} for c, n in
                                    Counter(c for i in incs for c in i.causes).most_common()]}
