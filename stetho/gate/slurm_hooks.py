"""`stetho gate --local --slurm health-check|prolog`: the gate as Slurm's own hooks call it.

* health-check (HealthCheckProgram): the node drains itself with a `stetho:` reason when the
  policy blocks, and resumes only a drain stetho wrote when it passes, as LBNL NHC does. Slurm
  kills a health check after 60 s, and a killed check leaves no trace; so a watchdog drains
  the node itself with a reason that says the checks timed out (fail closed: a node whose
  checks hang is not healthy) before Slurm's limit. Both drains ask the drain budget
  (`drain_through_budget`, stetho.gate.budget), which counts the whole cluster's stetho drains
  in the window atomically: a broken check pushed to every node must not drain them all.
* prolog (Prolog): a blocked node drains itself through the same budget, with stetho's reason,
  and only then exits non-zero, which makes Slurm requeue the job onto another node (with
  `SchedulerParameters=nohold_on_prolog_fail`; Slurm keeps a reason already set, so the
  node's reason stays stetho's, not "Prolog error"). When the budget refuses the drain the
  prolog exits 0 and the job runs here: a non-zero exit would make Slurm drain the node
  itself, around the budget, and a storm of prologs failing at once is what the budget
  exists to stop (a broken check or driver push, far more often than that many bad nodes).
  The verdict stays BLOCKED in the spool and the history, and the refusal is in the ledger
  (slurmd keeps no output of a prolog that exits 0).
* Both leave their verdict in the shared result spool (STETHO_RESULT_SPOOL), in the node's
  own folder, for `stetho ingest` on the controller: a node's own history never reaches it
  otherwise.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from pathlib import Path

    from stetho.checking.nodes import NodeSummary
    from stetho.gate.breaker import Circuit, Trip
    from stetho.gate.decision import Decision
    from stetho.gate.slurm import Action

Mode = Literal["health-check", "prolog"]
MODES: tuple[str, ...] = ("health-check", "prolog")


def block_reason(decision: Decision) -> str:
    """The drain reason for this node: its first blocking result, or could-not-evaluate."""
    from stetho.gate.slurm import drain_reason

    if not decision.blocking:
        return ""
    first = decision.blocking[0]
    more = len(decision.blocking) - 1
    text = first.message + (f" (+{more} more)" if more else "")
    return drain_reason(first.check, text)


def shared_ledger_named(circuit: Circuit) -> bool:
    """A ledger path was given (STETHO_DRAIN_LEDGER or the policy's), not the default beside
    this node's own history database."""
    from stetho import config

    return config.active().drain_ledger is not None or circuit.ledger is not None


def drain_through_budget(node: str, reason: str, who: str, *, circuit: Circuit,
                         now: float | None = None, db: Path | None = None,
                         slurm_timeout_s: float = 30, ledger_timeout_s: float | None = None
                         ) -> tuple[list[Action], Trip | None]:
    """Drain `node` with `reason` if the drain budget grants it (the one way a hook drains):
    refused, the Action fails with the breaker's message and the Trip is returned; the
    window's first refusal alerts. `who` goes to the ledger (e.g. "prolog@gpu07")."""
    from stetho.gate import drains
    from stetho.gate.slurm import Slurm

    t = time.time() if now is None else now
    budget = drains.budget_for(circuit, db, ledger_timeout_s)
    if not shared_ledger_named(circuit):
        print(f"stetho: warning: {who}: the drain ledger {budget.path} is this node's own: "
              "a budget no other node sees bounds nothing across the cluster; set "
              "STETHO_DRAIN_LEDGER (or the policy's `circuit: {ledger:}`) to a path every "
              "node shares", file=sys.stderr, flush=True)
    done = drains.drain(Slurm(act=True, timeout_s=slurm_timeout_s), {node: reason},
                        budget=budget, who=who, now=t)
    if done.trip is not None and done.alert:
        drains.alert(done.trip, f"{who.split('@')[0]} {node}")
    return done.actions, done.trip


def act_on_own_node(node: str, decision: Decision, circuit: Circuit, now: float,
                    db: Path | None = None) -> tuple[list[Action], Trip | None]:
    """Drain this node when the decision blocks (through the cluster-wide drain budget), else
    resume it if (and only if) stetho drained it, freeing its budget."""
    from stetho.gate import drains
    from stetho.gate.slurm import Slurm

    if not decision.blocking:  # resume only a node evaluated GO, never an unevaluated one
        if node not in decision.go_nodes:
            return [], None
        resumed = Slurm(act=True).resume([node])
        drains.release(drains.budget_for(circuit, db), resumed, now)
        return resumed, None
    return drain_through_budget(node, block_reason(decision), f"health-check@{node}",
                                circuit=circuit, now=now, db=db)


def prolog_on_own_node(node: str, decision: Decision, circuit: Circuit, now: float,
                       db: Path | None = None) -> tuple[list[Action], Trip | None, int]:
    """The prolog's actions and exit code: a blocked node drains through the budget and the
    prolog exits 1, so Slurm requeues the job elsewhere, only if the node is out of service
    now (this drain, an earlier one, a person's); otherwise 0."""
    if not decision.blocking:
        return [], None, 0
    actions, trip = drain_through_budget(node, block_reason(decision), f"prolog@{node}",
                                         circuit=circuit, now=now, db=db)
    return actions, trip, prolog_exit(node)


def prolog_exit(node: str) -> int:
    """1 when `node` is drained now (Slurm then requeues the job elsewhere and keeps the
    reason), else 0: a prolog never asks Slurm to drain a node the budget did not."""
    from stetho.gate.slurm import Slurm, SlurmError

    try:
        info = Slurm(act=False, timeout_s=5).show([node]).get(node)
    except SlurmError:
        return 0
    return 1 if info is not None and info.drained else 0


def spool_verdict(folder: Path, doc: dict[str, object], node: str, mode: str, policy: str,
                  summary: str, now: float, node_summary: NodeSummary | None = None) -> Path:
    """Leave this hook's verdict (the gate's JSON document `doc`) in the shared result spool,
    `<folder>/<node>/` (stetho.spool, signed with STETHO_SPOOL_KEY when set), for `stetho
    ingest` on the controller; the gate's own fields (blocked, job, policy...) ride along.
    `node_summary`, the node's own from its check, carries its profile into history (and its
    versions into the fleet checks), as a check's spool file does."""
    from stetho import config, spool
    from stetho.fleet.outcome import Outcome
    from stetho.history.store import new_run_id
    from stetho.results import Result
    from stetho.sinks import junit
    from stetho.spool import keys

    rows = doc.get("results")
    results = [Result.from_json(r) for r in rows if isinstance(r, dict)] \
        if isinstance(rows, list) else []
    code = doc.get("exit_code")
    outcome = Outcome(node, code if isinstance(code, int) else 3, results,
                      junit.render(results), None, node_summary)
    key_file = config.active().spool_key
    key = keys.read_key(key_file, "spool key (STETHO_SPOOL_KEY)") if key_file else None
    detail = {k: v for k, v in doc.items() if k not in ("results", "exit_code")}
    return spool.write(folder, outcome, run_id=new_run_id(), kind=f"gate-{mode}", when=now,
                       key=key, command=f"gate --local --slurm {mode} --policy {policy}",
                       detail={**detail, "summary": summary, "policy": policy})


@contextmanager
def watchdog(node: str, seconds: float, *, drain: bool, circuit: Circuit | None = None,
             db: Path | None = None, prolog: bool = False, spool: Path | None = None,
             policy: str = "", profile: str = "", pinned: str = "") -> Iterator[None]:
    """If the body has not finished in `seconds`, drain `node` (through the drain budget)
    with a reason naming the timeout, say so, leave the verdict in `spool` (with the
    `policy`, the `profile` the checks run under, and the one the gate names, `pinned`, as the
    hook's own verdict carries them), and end the
    process: exit 3 for a health check (a hung probe must not leave a node looking healthy);
    for a prolog, 1 only when the node is now out of service (see prolog_on_own_node), else 0.
    The drain itself gets what time Slurm leaves (5 s); a refused drain says why. Every probe
    still running is killed last, with all it forked: probes run in their own process groups,
    out of reach of Slurm's kill, and a hung one would outlive the hook (killed earlier, it
    would let the checks run on and end the process before the drain was done)."""

    # Exactly one verdict a run: the body may finish while fire() is draining (cancel() cannot
    # stop a timer already running); then the body's own verdict must not follow the
    # watchdog's, so the body waits here for the watchdog to end the process.
    state = threading.Lock()
    fired = finished = False

    def fire() -> None:
        nonlocal fired
        with state:
            if finished:
                return
            fired = True
        from stetho.evidence.runner import kill_running_probes
        from stetho.gate.breaker import Circuit
        from stetho.gate.slurm import drain_reason


        reason = drain_reason("health-check", f"checks did not finish in {seconds:g} s "
                              "(a probe hangs: run `stetho check --local` on the node)")
        shown = pinned or profile
        line = (f"gate{' ' + policy if policy else ''}: COULD NOT EVALUATE {node}: {reason}"
                + (f"; profile {shown}" if shown else ""))
        code = 3
        try:
            if drain:
                actions, _trip = drain_through_budget(
                    node, reason, f"{'prolog-' if prolog else ''}watchdog@{node}",
                    circuit=circuit or Circuit(), db=db, slurm_timeout_s=5,
                    ledger_timeout_s=4)
                line += "".join(f"; {a.message}" for a in actions)
            if prolog:
                code = prolog_exit(node)
                line += f"; prolog exits {code}"
            if spool is not None:
                _spool_timeout(spool, node, reason, code, "prolog" if prolog else
                               "health-check", line, policy, profile, shown)
        except Exception as exc:  # the watchdog must end the process whatever happens
            line += f"; {type(exc).__name__}: {exc}"
        print(line, file=sys.stderr, flush=True)
        print(line, flush=True)
        try:  # last: a killed probe would let the checks run on, and end the process first
            kill_running_probes()
        except Exception:  # noqa: BLE001 - the watchdog must end the process whatever happens
            pass
        os._exit(code)

    timer = threading.Timer(seconds, fire)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
        with state:
            finished = True
            lost = fired
        if lost:  # the watchdog has the verdict and ends the process (os._exit in fire)
            threading.Event().wait()


def _spool_timeout(folder: Path, node: str, reason: str, code: int, mode: str,
                   summary: str, policy: str, profile: str, shown: str) -> None:
    """The watchdog's verdict (could not evaluate: the checks did not finish), spooled like
    any other hook's: its summary line, policy and profiles, and a node summary that carries
    the profile into history (no versions, busbw or metrics: the checks never got there;
    no evidence time, so ingest takes its receive time)."""
    from stetho.results import Result

    result = Result(node, "health-check", node, "error", reason)
    own: NodeSummary | None = None
    if profile:
        own = {"node": node, "profile": profile, "versions": {}, "busbw": {}, "metrics": [],
               "collected_at": ""}
    spool_verdict(folder, {"results": [result.to_json()], "exit_code": code,
                           "blocked": [node], "could_not_evaluate": {node: reason},
                           "profiles": {node: shown} if shown else {}},
                  node, mode, policy, summary, time.time(), own)
