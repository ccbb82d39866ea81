"""From a diagnosis to what stetho would do about it by itself: one Step per cause found (the
leading one and each independent one), chosen by the cause's rule (`remedy:`) and escalated
when the history shows the same action already ran on the same fault.

"The same fault" is the same node, cause and part (a GPU by serial, else PCI address, else
index; an HCA port; else the node), within ESCALATE_WINDOW_S: a fault seen again after an
action that ran means the action did not help, so the next rung of the rule's ladder is taken
(gpu-reset -> ticket, reboot -> ticket) and a ticket is never sent twice.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from stetho.diagnosis.model import Diagnosis, Evidence, Hypothesis
from stetho.diagnosis.remedies import choose
from stetho.diagnosis.rules import Rule
from stetho.facts.base import Unavailable
from stetho.history import remedies
from stetho.history.store import History

#: An action older than this does not make a fault "the same one again" (30 days).
ESCALATE_WINDOW_S = 30 * 86400.0


@dataclass(frozen=True)
class Step:
    """One planned action on one fault. `where`: what the evidence names of the part (gpu,
    pci, serial, uuid, device, port, guid, cable), as (key, value) pairs."""

    node: str
    cause: str
    title: str
    part: str
    action: str  # gpu-reset | reboot | ticket | none
    why: str
    where: tuple[tuple[str, str], ...] = ()
    summary: str = ""
    severity: str = "medium"
    evidence: tuple[Evidence, ...] = ()
    earlier: tuple[remedies.Record, ...] = ()

    def get(self, key: str) -> str | None:
        return dict(self.where).get(key)

    def to_json(self) -> dict[str, Any]:
        return {"node": self.node, "cause": self.cause, "title": self.title, "part": self.part,
                "action": self.action, "why": self.why, "where": dict(self.where),
                "summary": self.summary, "severity": self.severity,
                "earlier": [r.to_json() for r in self.earlier]}


def plan(d: Diagnosis, rules: dict[str, Rule], history: History | None = None, *,
         now: float, facts: Any = None, seen: float | None = None,
         window_s: float = ESCALATE_WINDOW_S) -> list[Step]:
    """The steps for one node's diagnosis (none for a node with no finding). `seen`: when the
    evidence was collected (None: unknown, taken as now)."""
    if d.top is None:
        if d.verdict in ("fail", "error"):
            return [Step(d.node, "undiagnosed", "no cause found", "node", "none",
                         "no rule explains the failure: nothing automatic, a person looks")]
        return []
    return [_step(d.node, h, rules.get(h.cause), history, now, facts, window_s,
                  now if seen is None else seen) for h in (d.top, *d.also_found)]


def _step(node: str, h: Hypothesis, rule: Rule | None, history: History | None, now: float,
          facts: Any, window_s: float, seen: float) -> Step:
    where = _enrich(_where(h), facts)
    part = part_key(where)
    base = Step(node, h.cause, h.title, part, "none", "", tuple(where.items()), h.summary,
                h.severity, h.evidence)
    option = choose(rule.remedy, h) if rule is not None else None
    if option is None or option.action == "none":
        return _with(base, "none", f"rule {h.cause} declares nothing automatic for this "
                     "evidence: a person acts on the report")
    earlier = tuple(remedies.done(history, node, h.cause, part, now - window_s)
                    ) if history is not None else ()
    since = [r for r in earlier if r.time >= seen]
    if since and since[-1].action == "ticket":
        return _with(base, "none", f"ticket already sent {_iso(since[-1].time)} for this "
                     "fault: not sent twice", earlier)
    if since:  # evidence older than the action: whether it helped is not known yet
        return _with(base, "none", f"{since[-1].action} ran {_iso(since[-1].time)}, after "
                     f"this evidence was collected ({_iso(seen)}): check {node} again to "
                     "see whether it helped", earlier)
    ran = {r.action for r in earlier}
    ladder = (option.action, *option.escalate)
    nxt = next((a for a in ladder if a not in ran), None)
    if nxt is None:
        last = earlier[-1]
        done = "sent" if last.action == "ticket" else "done"
        return _with(base, "none", f"{last.action} already {done} {_iso(last.time)} for this "
                     "fault and it is back: nothing more stetho does by itself", earlier)
    if nxt != option.action:
        last = earlier[-1]
        return _with(base, nxt, f"escalated: {last.action} ran {_iso(last.time)} and the same "
                     f"fault is seen after it, so not again", earlier)
    return _with(base, nxt, f"rule {h.cause}: {nxt}", earlier)


def _with(s: Step, action: str, why: str, earlier: tuple[remedies.Record, ...] = ()) -> Step:
    from dataclasses import replace

    return replace(s, action=action, why=why, earlier=earlier)


def _where(h: Hypothesis) -> dict[str, str]:
    """The part the cause's evidence names: the first failing piece that names one."""
    ev = sorted(h.evidence, key=lambda e: (e.status != "fail", -e.weight))
    for e in ev:
        w = dict(e.where)
        if any(k in w for k in ("gpu", "pci", "device", "disk")):
            return w
    return {}


def part_key(where: dict[str, str]) -> str:
    """The fault's part as an identity: a GPU by serial, else PCI address, else index; an HCA
    port; a disk; else the node itself."""
    for key in ("serial", "pci", "gpu"):
        if key in where:
            return f"gpu:{where[key]}"
    if "device" in where:
        return f"hca:{where['device']}/{where.get('port', '1')}"
    if "disk" in where:
        return f"disk:{where['disk']}"
    return "node"


def _enrich(where: dict[str, str], facts: Any) -> dict[str, str]:
    """Add what the node's evidence bundle knows of the part: the GPU's UUID (to match its
    processes), the HCA's GUID, its cable's far end and the cable's serial."""
    if facts is None:
        return where
    out = dict(where)
    try:
        if "gpu" in out:
            g = next((g for g in facts.gpus() if str(g.index) == out["gpu"]), None)
            if g is not None and g.uuid:
                out["uuid"] = g.uuid
    except Unavailable:
        pass
    device = out.get("device")
    if device:
        from stetho.facts import iblinks

        try:
            ca = next((c for c in facts.ibstat().cas if c.name == device), None)
            if ca is not None and ca.node_guid:
                out["guid"] = ca.node_guid
        except Unavailable:
            pass
        cable = iblinks.cable(facts, device, int(out.get("port", "1") or 1))
        if cable and "unknown" not in cable:
            out["cable"] = cable
        try:
            module = facts.mlxlink_for(device).module
            if module is not None and module.serial_number:
                out["cable_serial"] = module.serial_number
        except Unavailable:
            pass
    return out


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
