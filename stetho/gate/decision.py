"""`stetho gate`: go or no-go for a job or a release, by policy.

Results come from the history database when they are fresh enough (the policy says how
fresh), else from a live check (on this node with --local, or through the sweep with an
inventory). The policy keeps the checks it counts, tightens thresholds, and says which
statuses block; a valid override (stetho.gate.overrides) lets one check pass on named nodes, shown
as passed-with-override. Exit: 0 go, 1 blocked, 3 could not evaluate where errors do not block.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from stetho.gate.policy import GatePolicy, Tighten
from stetho.results import Result

if TYPE_CHECKING:
    from stetho.gate.override_check import Honoured
    from stetho.gate.overrides import Override

#: An override the gate did not apply (or a file it could not read), and why.
Ignored = tuple["Override | Path", str]


@dataclass
class Decision:
    policy: GatePolicy
    results: list[Result]  # what the policy counts, after tightening and overrides
    blocking: list[Result]
    sources: dict[str, str]  # node -> "history <run> (<age>)" | "live" | "missing"
    ignored_overrides: list[Ignored] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        if self.blocking:
            return 1
        if any(r.status == "error" for r in self.results):
            return 3
        return 0

    @property
    def blocked_nodes(self) -> list[str]:
        return sorted({r.node for r in self.blocking})


def decide(policy: GatePolicy, results: list[Result],
           overrides: list[Honoured] | None = None, sources: dict[str, str] | None = None,
           ignored: list[Ignored] | None = None) -> Decision:
    """Apply a policy (and verified overrides) to results. Pure: no I/O."""
    from stetho.gate.overrides import covers

    kept = [_tighten(policy, r) for r in results if policy.counts(r.check)]
    final = []
    for r in kept:
        if r.status in policy.block_on:
            h = next((h for h in overrides or []
                      if covers(h.override, policy.name, r.check, r.node)), None)
            if h is not None:
                r = replace(r, status="pass", override={
                    "id": h.id, "approver": h.approver, "reason": h.override.reason,
                    "expires_at": h.override.expires_at, "requester": h.requester,
                    "was": r.status})
        final.append(r)
    blocking = [r for r in final if r.status in policy.block_on]
    return Decision(policy, final, blocking, sources or {}, ignored or [])


def _tighten(policy: GatePolicy, r: Result) -> Result:
    rules = [t for t in policy.tighten if t.check == r.check]
    if not rules or r.status not in ("pass", "warn") or not isinstance(r.value, (int, float)):
        return r
    for t in rules:
        why = _violates(t, float(r.value), r.reference)
        if why:
            limit, op = _limit(t, r.reference)
            return replace(r, status="fail",
                           message=f"{policy.name} policy: {why} (check said: {r.message})",
                           threshold=_describe(t), limit=limit, limit_op=op)
    return r


def _limit(t: Tighten, reference: float | None) -> tuple[float | None, str | None]:
    """The policy's own limit as a number, in the result's unit, when it is one number."""
    if t.max is not None and t.min is None:
        return t.max, "<="
    if t.min is not None and t.max is None:
        return t.min, ">="
    if t.max_drop_pct is not None and reference and t.max is None and t.min is None:
        return round(reference * (1 - t.max_drop_pct / 100), 6), ">="
    return None, None


def _violates(t: Tighten, value: float, reference: float | None) -> str | None:
    if t.max is not None and value > t.max:
        return f"{value:g} over the policy's maximum {t.max:g}"
    if t.min is not None and value < t.min:
        return f"{value:g} under the policy's minimum {t.min:g}"
    if t.max_drop_pct is not None and reference:
        drop = (reference - value) / reference * 100
        if drop > t.max_drop_pct:
            return f"{drop:.1f}% under the baseline {reference:g} (policy allows " \
                   f"{t.max_drop_pct:g}%)"
    return None


def _describe(t: Tighten) -> str:
    parts = []
    if t.max is not None:
        parts.append(f"<= {t.max:g}")
    if t.min is not None:
        parts.append(f">= {t.min:g}")
    if t.max_drop_pct is not None:
        parts.append(f"drop <= {t.max_drop_pct:g}%")
    return "policy: " + ", ".join(parts)


def from_history(db: Path, nodes: list[str], max_age_s: float, now: float | None = None
                 ) -> tuple[dict[str, list[Result]], dict[str, str]]:
    """Fresh results per node from history, and where each node's came from."""
    from stetho.history.store import History

    now = now if now is not None else time.time()
    found: dict[str, list[Result]] = {}
    sources: dict[str, str] = {}
    if max_age_s <= 0 or not db.exists():
        return found, sources
    with History(db) as h:
        for node, (t, run, results) in h.latest_results(nodes, max_age_s, now=now).items():
            found[node] = results
            sources[node] = f"history {run} ({_age(now - t)} old)"
    return found, sources


def _age(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"


def missing(nodes: list[str], why: str) -> list[Result]:
    return [Result(n, "gate", "", "error", why, probe="gate",
                   remediation="run the checks on it (stetho sweep --limit NODE, or give the "
                               "gate an inventory with -i) or fix what stopped them")
            for n in nodes]


def load_overrides(policy: GatePolicy, repo: str | None, now: float
                   ) -> tuple[list[Honoured], list[Ignored]]:
    """The overrides this policy honours (every signature verified against its allowed
    signers file, no revocation anywhere in the history), and the ignored ones with why."""
    if not repo:
        return [], []
    from stetho.gate.override_check import effective, judging
    from stetho.gate.override_store import OverrideStore

    snap = OverrideStore(repo).read()
    bad: list[Ignored] = [(p, why) for p, why in snap.unreadable()]
    with judging(policy.overrides, snap.root, snap.revocations, snap.problem) as judge:
        valid, ignored = effective(snap.overrides(), judge, now)
    return valid, bad + list(ignored)


def lines(decision: Decision) -> list[str]:
    """One line per blocking result (node, check, value against expected, remediation)."""
    from stetho.results import format_value

    out = []
    for r in sorted(decision.blocking, key=lambda r: (r.node, r.check, r.subject)):
        value = format_value(r.value, r.unit)
        vs = f"{value} (expected {r.expected})" if r.expected is not None else value
        subject = f"/{r.subject}" if r.subject else ""
        out.append(f"BLOCK {r.node}{subject} {r.check}: {r.message}"
                   + (f" [{vs}]" if vs else "")
                   + (f" -> {r.remediation}" if r.remediation else ""))
    for r in decision.results:
        if r.override:
            o = r.override
            out.append(f"OVERRIDE {r.node}/{r.subject or '-'} {r.check}: passed with override "
                       f"{o['id']} approved by {o['approver']}, expires {o['expires_at']} "
                       f"(reason: {o['reason']})")
    for what, why in decision.ignored_overrides:
        oid = what if isinstance(what, Path) else what.id
        out.append(f"IGNORED override {oid}: {why}")
    return out


def summary(decision: Decision, nodes: list[str]) -> str:
    blocked = decision.blocked_nodes
    errors = sorted({r.node for r in decision.results if r.status == "error"} - set(blocked))
    verdict = "BLOCKED" if blocked else ("COULD NOT EVALUATE" if decision.exit_code == 3
                                         else "GO")
    text = (f"gate {decision.policy.name}: {verdict}: {len(nodes)} nodes, "
            f"{len(nodes) - len(blocked)} go, {len(blocked)} blocked")
    if blocked:
        from stetho.core.hostlist import compress

        text += f" ({compress(blocked)})"
    if errors:
        text += f"; could not evaluate {len(errors)} (errors do not block under this policy)"
    return text
