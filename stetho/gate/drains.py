"""Every drain stetho makes, whoever asks (`gate --act`, a node's health check, its prolog, the
watchdog), goes through `drain`: read Slurm, ask the drain budget, drain only what it granted.

Slurm is read first because the budget's count includes Slurm's own view (stetho drains the
ledger never saw) and because a node already drained needs no budget: a person's drain is left
alone, and a drain of stetho's keeps its first reason and time (the repeat is written to the
ledger). Slurm unreadable, or the ledger unusable, means nothing is drained: each node's Action
fails and says why, and a person decides.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import field
from pathlib import Path

from stetho.core.record import record
from stetho.gate import breaker
from stetho.gate.breaker import Circuit, Trip
from stetho.gate.budget import DrainBudget, LedgerError, Ruling, ledger_path
from stetho.gate.slurm import Action, NodeInfo, Slurm, SlurmError


@record(frozen=False)
class Drained:
    """What a drain request did: one Action per node, the trip when the breaker refused,
    whether this refusal is the window's first (alert now), and the budget's ruling."""

    actions: list[Action] = field(default_factory=list)
    trip: Trip | None = None
    alert: bool = False
    ruling: Ruling | None = None


def budget_for(circuit: Circuit, db: Path | None = None, busy_timeout_s: float | None = None
               ) -> DrainBudget:
    """The ledger the policy, STETHO_DRAIN_LEDGER or the history database `db` names."""
    b = DrainBudget(ledger_path(circuit, db), circuit)
    if busy_timeout_s is not None:
        b.busy_timeout_s = busy_timeout_s
    return b


def _scope(slurm: Slurm) -> tuple[str, dict[str, NodeInfo]]:
    """(cluster name, every node's state): the budget is counted per cluster."""
    return slurm.cluster_name(), slurm.show_all()


def drain(slurm: Slurm, blocked: Mapping[str, str], *, budget: DrainBudget, who: str,
          now: float) -> Drained:
    """Drain the blocked nodes (node -> reason) the budget grants, all or none per call."""
    if not blocked:
        return Drained()
    try:
        scope, state = _scope(slurm)
    except SlurmError as exc:
        return Drained(slurm.refuse_unread(blocked, str(exc)))
    known = [n for n in blocked if n in state]
    drained = [n for n in known if state[n].drained]
    fresh = [n for n in known if not state[n].drained]
    recent = breaker.recent_drains(state, now, budget.circuit.window_s)
    out = Drained()
    try:
        for n in drained:
            if state[n].drained_by_stetho:
                budget.note_repeat(n, scope=scope, who=who, reason=blocked[n], now=now)
        ruling = budget.request(fresh, scope=scope, scope_size=len(state), who=who,
                                reasons={n: blocked[n] for n in fresh}, now=now,
                                slurm_recent=recent) if fresh else None
    except LedgerError as exc:
        return Drained(slurm.refuse_unread(blocked, str(exc)))
    go = set(drained) | {n for n in blocked if n not in state}
    if ruling is not None:
        out.ruling, out.trip, out.alert = ruling, ruling.trip, ruling.alert
        go |= set(ruling.allowed) | set(ruling.already)
    todo = {n: r for n, r in blocked.items() if n in go}
    done = {a.node: a for a in slurm.drain(todo)} if todo else {}
    for n in blocked:
        if n in done:
            out.actions.append(done[n])
        elif out.trip is not None:
            out.actions.append(Action(n, "skip", (), False,
                                      f"{n}: not drained: {out.trip.message()}", failed=True))
    return out


def preview(slurm: Slurm, blocked: Sequence[str], *, budget: DrainBudget, now: float,
            scope_nodes: Sequence[str]) -> tuple[int, Ruling] | None:
    """A dry run's view: (new drains it would ask for, the budget's read-only answer). Slurm
    unreadable: the ledger alone, over `scope_nodes`. None when the ledger is unusable."""
    try:
        scope, state = _scope(slurm)
    except SlurmError:
        scope, state = "", {}
    fresh = [n for n in blocked if not (n in state and state[n].drained)]
    recent = breaker.recent_drains(state, now, budget.circuit.window_s)
    try:
        ruling = budget.preview(fresh, scope=scope or "cluster",
                                scope_size=len(state) or len(scope_nodes), now=now,
                                slurm_recent=recent)
    except LedgerError:
        return None
    return len(fresh), ruling


def release(budget: DrainBudget, actions: Sequence[Action], now: float) -> None:
    """Nodes stetho resumed (they passed) stop holding budget. A ledger that cannot be
    written leaves them counted until the window ends: the breaker errs towards less."""
    for a in actions:
        if a.kind == "resume" and a.done:
            try:
                budget.release(a.node, now)
            except LedgerError:
                return


def alert(trip: Trip, name: str) -> None:
    """One alert per open breaker and window (the ledger decided it is this one)."""
    from stetho.publish.alerts import Alert
    from stetho.publish.notify import notify_all

    notify_all([Alert(node=name, cause="circuit_open", severity="critical",
                      title=f"stetho {name}: circuit breaker open", summary=trip.message())])
