"""The gate as one library call: results from fresh history or live checks, the policy and
overrides applied, scheduler actions, and diagnosis reports for blocked nodes.

`stetho gate` is a thin layer over `run`; tests and other tools call it directly. Nothing here
prints: the outcome carries what the CLI shows.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from stetho.gate.decision import (
    Decision,
    FromHistory,
    decide,
    from_history,
    lacking,
    load_overrides,
    missing,
    required_checks,
)
from stetho.gate.outcome import GateOutcome, GateRequest
from stetho.gate.pinning import Pins, pins_for
from stetho.gate.policy import GatePolicy
from stetho.results import Result

if TYPE_CHECKING:
    from stetho.checking.nodes import NodeSummary
    from stetho.diagnosis.model import Diagnosis
    from stetho.gate.breaker import Trip
    from stetho.gate.slurm import Action, Slurm
    from stetho.localize.topology import Topology

__all__ = ["GateOutcome", "GateRequest", "run"]


def run(req: GateRequest, *, db: Path, now: float | None = None,
        progress: Callable[[str, int, int, int], None] | None = None,
        steps: Callable[[str], None] | None = None) -> GateOutcome:
    """Decide. `db` is the history the fresh results come from and live ones go to;
    `progress` and `steps` hear the live checks' sweep (stetho.fleet.sweep.SweepOptions)."""
    from stetho.core import hostlist
    from stetho.gate import policy as policies

    if bool(req.nodes) == bool(req.local):
        from stetho.errors import ConfigError

        raise ConfigError("give exactly one of --nodes and --local")
    policy = policies.load(req.policy)
    if policy.mode == "shadow":
        from stetho.gate.shadow import refuse_as_gate

        refuse_as_gate(policy, req.policy)
    topo = _topology(req.topology)  # a bad file: refused before any check
    now = time.time() if now is None else now
    clock = time.monotonic()
    if req.slurm is not None and not req.local:
        from stetho.errors import ConfigError

        raise ConfigError("--slurm goes with --local: it is how Slurm runs the gate on a node")
    names = [] if req.local else hostlist.expand(req.nodes or "")
    slurm = None
    if policy.drain and not req.local:  # Slurm answers while history is read
        from stetho.gate.slurm import Slurm

        slurm = Slurm(act=req.act)
        slurm.read_ahead(names)
    try:
        return _decided(req, policy, topo, db, now, clock, names, slurm, progress, steps)
    finally:
        if slurm is not None:
            slurm.close()


def _decided(req: GateRequest, policy: GatePolicy, topo: Topology | None, db: Path, now: float,
             clock: float, names: list[str], slurm: Slurm | None,
             progress: Callable[[str, int, int, int], None] | None,
             steps: Callable[[str], None] | None) -> GateOutcome:
    """`run` once the request is checked: `names`, the nodes given (--local: none yet, the
    node's own name comes from its check); `slurm`, the scheduler, its state read ahead."""
    from stetho.history.store import new_run_id

    judged: dict[str, dict[str, str]] = {}
    summaries: dict[str, NodeSummary] = {}  # --local: the node's own, as a check spools it
    stored: dict[int, tuple[Result, bytes]] = {}  # results read as history stored them
    if req.local:
        import socket

        pins, _ = pins_for([req.node or socket.gethostname()], db, None)
        results, names, sources, unavailable = _local_hooked(policy, req, db, judged,
                                                             summaries, pins)
    else:
        pins, _ = pins_for(names, db, _inventory_vars(req.inventory, names))
        results, sources, unavailable = _fleet(policy, req, names, db, now, progress, steps,
                                               judged, stored)
    results = pins.apply(results, judged)
    valid, ignored = load_overrides(policy, req.override_repo, now)
    decision = decide(policy, results, valid, sources, ignored)
    decision.history_unavailable = unavailable
    decision.profiles = {n: pins.profile_of(n, judged.get(n, {})) for n in names}
    outcome = GateOutcome(policy, decision, names, acted=req.act or req.slurm is not None,
                          gate_id=new_run_id(), summaries=summaries, stored=stored)
    if policy.shadow:  # judged on the same results, before any action; never acted on
        from stetho.gate import shadow

        outcome.shadow, problems = shadow.attach(policy, results, names, outcome.gate_id,
                                                 req.override_repo, req.local, db, now)
        outcome.output_problems += problems
    if policy.drain and not req.local:
        outcome.actions, outcome.circuit, outcome.breaker_preview = _scheduler(
            decision, names, req.act, policy, now, db, slurm)
    if req.slurm == "health-check":
        from stetho.gate.slurm_hooks import act_on_own_node

        outcome.actions, outcome.circuit = act_on_own_node(names[0], decision, policy.circuit,
                                                           now, db=db)
    if req.slurm == "prolog":
        from stetho.gate.slurm_hooks import prolog_on_own_node

        outcome.actions, outcome.circuit, outcome.hook_exit = prolog_on_own_node(
            names[0], decision, policy.circuit, now, db=db)
    drained = [a.node for a in outcome.actions if a.kind == "drain" and not req.local]
    if drained or topo is not None:  # not in a node's own hook: it must not wait on squeue
        from stetho import config
        from stetho.jobs.blast import at_gate

        outcome.blast, outcome.incidents = at_gate(  # what the drains hit, leaves failing
            drained, decision.blocked_nodes, names, topo, config.child_environment())
    if req.reports and decision.blocking:
        outcome.reports = _reports(outcome, req, db)
    from stetho.gate import gate_outputs

    gate_outputs.write(outcome, req, now, time.monotonic() - clock)
    return outcome


def _topology(spec: str | None) -> Topology | None:
    """--topology's tree (stetho.jobs.parts), imported only when given: a prolog pays nothing."""
    if spec is None:
        return None
    from stetho.jobs.parts import load_topology
    from stetho.localize.setup import slurm_topology_text

    return load_topology(spec, slurm_topology_text)


def _inventory_vars(inventory: Path | None, names: list[str]
                    ) -> Mapping[str, Mapping[str, object]] | None:
    """The nodes' inventory variables (their `stetho_profile` pins them), checked where they
    enter; None without an inventory."""
    if inventory is None:
        return None
    from stetho.fleet import hostvars
    from stetho.fleet.ansible import inventory_hosts

    found = inventory_hosts(inventory)
    hostvars.validate(inventory, found, [n for n in names if n in found])
    return found


def _fleet(policy: GatePolicy, req: GateRequest, names: list[str], db: Path, now: float,
           progress: Callable[[str, int, int, int], None] | None,
           steps: Callable[[str], None] | None = None,
           judged: dict[str, dict[str, str]] | None = None,
           stored: dict[int, tuple[Result, bytes]] | None = None
           ) -> tuple[list[Result], dict[str, str], str | None]:
    """Fresh history per node and check; the nodes lacking any required check run live
    through the sweep (all their checks), or cannot be evaluated. `judged` gets each node's
    profile per check, as its results were judged; `stored` each history result's JSON as
    stored (FromHistory.stored)."""
    from stetho.core import hostlist

    judged = {} if judged is None else judged
    hist = from_history(db, names, policy, now)
    if stored is not None:
        stored.update(hist.stored)
    sources = dict(hist.sources)
    live = [n for n in names if (n not in hist.results or n in hist.lacking)
            and n not in hist.distrusted]
    results = [r for n in names if n not in live and n in hist.results
               for r in hist.results[n]]
    for n, why in hist.distrusted.items():  # tampering is reported, not re-checked away
        results.append(Result(n, "gate", "", "error", why, probe="gate", remediation=(
            "find who could write the history database and what they changed; then record "
            f"a fresh signed result (stetho sweep --limit {n}) or move the database aside")))
        sources[n] = "history (failed its integrity check)"
    judged.update({n: hist.profiles.get(n, {}) for n in names if n not in live
                   and n in hist.results})
    if live and req.inventory:
        from stetho.fleet import sweep as sweep_mod

        swept = sweep_mod.sweep(sweep_mod.SweepOptions(
            inventory=req.inventory, out=req.out, limit=hostlist.compress(live), db=db,
            progress=progress, steps=steps))
        results += swept.results
        sources.update({n: f"live (sweep {swept.run_dir.name})" for n in live})
        summaries = sweep_mod.node_summaries(swept.run_dir, swept.hosts)
        for r in swept.results:
            if r.node in live:
                judged.setdefault(r.node, {})[r.check] = (
                    str(summaries[r.node]["profile"] or "") if r.node in summaries else "")
    else:
        for n in live:
            results += missing([n], _why_missing(policy, db, hist, n)
                               + " and no inventory (-i) to check it live")
            sources[n] = "partial" if n in hist.lacking else "missing"
    return results + _incomplete(policy, results, names, sources), sources, hist.unavailable


def _why_missing(policy: GatePolicy, db: Path, hist: FromHistory, node: str) -> str:
    if not policy.freshness_s:
        return "the policy requires a live check"
    fresh = f"younger than {policy.freshness_s / 3600:g} h"
    if hist.unavailable:
        return f"history unavailable ({hist.unavailable})"
    if node in hist.lacking:  # the checks first: the summary line keeps a reason's start
        lacking = hist.lacking[node]
        listed = ", ".join(lacking[:8]) + (f" and {len(lacking) - 8} more"
                                           if len(lacking) > 8 else "")
        return f"no result {fresh} for {listed} in {db}"
    return f"no results {fresh} in {db}"


def _incomplete(policy: GatePolicy, results: list[Result], names: list[str],
                sources: dict[str, str], required: frozenset[str] | None = None
                ) -> list[Result]:
    """A `gate` error for each node whose results (live or history) lack a check the policy
    needs: a check that was not run is never a pass."""
    need = required_checks(policy) if required is None else required
    out = []
    for n, lacks in lacking(results, names, need).items():
        out += missing([n], f"no result for {', '.join(lacks[:8])}"
                       + (f" and {len(lacks) - 8} more" if len(lacks) > 8 else "")
                       + f" from {sources.get(n, 'the checks')}")
    return out


def _local_hooked(policy: GatePolicy, req: GateRequest, db: Path,
                  judged: dict[str, dict[str, str]], summaries: dict[str, NodeSummary],
                  pins: Pins) -> tuple[list[Result], list[str], dict[str, str], str | None]:
    """_local, under the health-check watchdog when Slurm runs it (HealthCheckProgram and
    Prolog both have a time limit past which Slurm kills the gate without a word). The
    watchdog's verdict carries the profile the checks run under and the one the gate names
    (the node's pin, else that one), as the hook's own verdict does."""
    if req.slurm is None:
        return _local(policy, req, db, judged, summaries)
    import socket

    from stetho import config
    from stetho.gate.slurm_hooks import watchdog
    from stetho.profiles import DEFAULT_PROFILE

    node = req.node or socket.gethostname()
    profile = req.profile or config.active().profile or DEFAULT_PROFILE
    with watchdog(node, config.active().health_timeout, drain=True, circuit=policy.circuit,
                  db=db, prolog=req.slurm == "prolog", spool=config.active().result_spool,
                  policy=policy.name, profile=profile,
                  pinned=pins.profile_of(node, {"": profile})):
        return _local(policy, replace(req, node=node), db, judged, summaries)


def _local(policy: GatePolicy, req: GateRequest, db: Path, judged: dict[str, dict[str, str]],
           summaries: dict[str, NodeSummary]
           ) -> tuple[list[Result], list[str], dict[str, str], str | None]:
    """The policy's local checks on this node (stetho.check), recorded in history; a
    required check that did not run is a `gate` error. `judged` gets the node's profile per
    check."""
    from stetho import check

    problems: list[str] = []
    outcome = check.run(check.CheckRequest(
        command="gate", node=req.node, profile=req.profile,
        select=" or ".join(policy.local_checks) or None, db=db, record=True,
        max_evidence_age_s=policy.freshness_s or None,
        command_line=f"gate --local --policy {policy.name}", warn=problems.append))
    results = list(outcome.results)
    node = outcome.bundles[0].node if outcome.bundles else req.node or "?"
    sources = {node: "live (local)"}
    profile = (str(outcome.summaries[node]["profile"] or "") if node in outcome.summaries
               else "")
    judged[node] = {r.check: profile for r in results if r.node == node}
    if node in outcome.summaries:
        summaries[node] = outcome.summaries[node]
    required = frozenset(policy.local_checks) if policy.local_checks else None
    results += _incomplete(policy, results, [node], sources, required)
    return results, [node], sources, "; ".join(problems) or None


def _scheduler(decision: Decision, names: list[str], act: bool, policy: GatePolicy,
               now: float, db: Path, slurm: Slurm | None = None
               ) -> tuple[list[Action], Trip | None, str | None]:
    """Drain the blocked nodes and resume the rest, behind the drain budget: with `--act`, a
    run that would take the scope's drains in the window past the policy's limit drains none
    of them (stetho.gate.drains); a dry run says what the budget would allow."""
    from stetho.gate import drains
    from stetho.gate.slurm import Slurm, drain_reason

    blocked: dict[str, str] = {}
    for r in decision.blocking:
        blocked.setdefault(r.node, drain_reason(r.check, r.message))
    slurm = Slurm(act=act) if slurm is None else slurm
    budget = drains.budget_for(policy.circuit, db)
    trip, preview = None, None
    if blocked and act:
        done = drains.drain(slurm, blocked, budget=budget, who=f"gate --act {policy.name}",
                            now=now)
        actions, trip = done.actions, done.trip
        if done.trip is not None and done.alert:
            drains.alert(done.trip, f"gate {policy.name}")
    else:
        actions = list(slurm.drain(blocked)) if blocked else []
        seen = drains.preview(slurm, list(blocked), budget=budget, now=now,
                              scope_nodes=names) if blocked else None
        if seen is not None:
            want, ruling = seen
            preview = f"would drain {want}, breaker allows {ruling.room}"
            if ruling.trip is not None:
                preview += " (--act would drain none of them: all or nothing)"
    # Only a node evaluated GO is resumed: never one whose checks errored, were not run, or
    # came from stale or partial results (those are left as they are, for a person).
    evaluated_go = set() if decision.history_unavailable else decision.go_nodes
    go = [n for n in names if n not in blocked and n in evaluated_go]
    if go:
        resumed = list(slurm.resume(go))
        actions += resumed
        if act:
            drains.release(budget, resumed, now)
    return actions, trip, preview


def _reports(outcome: GateOutcome, req: GateRequest, db: Path) -> list[tuple[Diagnosis, Path]]:
    import sqlite3

    from stetho.diagnosis import runs
    from stetho.history.store import HistoryError

    gate_id = outcome.gate_id

    def diagnose(history: Path | None) -> list[tuple[Diagnosis, Path]]:
        return runs.diagnose_results(
            outcome.decision.results, run_dir=None, run=f"gate-{gate_id}",
            out=req.out / f"gate-{gate_id}" / "reports", db=history, gate=outcome.summary(),
            nodes=outcome.decision.blocked_nodes, blast=outcome.blast)

    if outcome.decision.history_unavailable:
        return diagnose(None)
    try:
        return diagnose(db)
    except (HistoryError, sqlite3.Error) as exc:  # the reports still go out, without history
        outcome.decision.history_unavailable = str(exc)
        return diagnose(None)
