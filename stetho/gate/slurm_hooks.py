"""`stetho gate --local --slurm health-check|prolog`: the gate as Slurm's own hooks call it.

* health-check (HealthCheckProgram): the node drains itself with a `stetho:` reason when the
  policy blocks, and resumes only a drain stetho wrote when it passes, as LBNL NHC does. Slurm
  kills a health check after 60 s, and a killed check leaves no trace; so a watchdog drains
  the node itself with a reason that says the checks timed out (fail closed: a node whose
  checks hang is not healthy) before Slurm's limit. Both drains ask the drain budget
  (`drain_through_budget`, stetho.gate.budget), which counts the whole cluster's stetho drains
  in the window atomically: a broken check pushed to every node must not drain them all.
* prolog (Prolog): nothing is drained by stetho; a non-zero exit makes Slurm drain the node and
  requeue the job. The reason goes to stderr and stdout, which slurmd keeps in its log.
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


@contextmanager
def watchdog(node: str, seconds: float, *, drain: bool, circuit: Circuit | None = None,
             db: Path | None = None) -> Iterator[None]:
    """If the body has not finished in `seconds`, drain `node` (health-check only; through
    the drain budget) with a reason naming the timeout, say so, and end the process with
    exit 3: a hung probe must not leave a node looking healthy. The drain itself gets what
    time Slurm leaves (5 s); a refused drain drains nothing and says why."""

    def fire() -> None:
        from stetho.gate.breaker import Circuit
        from stetho.gate.slurm import drain_reason

        reason = drain_reason("health-check", f"checks did not finish in {seconds:g} s "
                              "(a probe hangs: run `stetho check --local` on the node)")
        line = f"gate: COULD NOT EVALUATE {node}: {reason}"
        if drain:
            try:
                actions, _trip = drain_through_budget(
                    node, reason, f"watchdog@{node}", circuit=circuit or Circuit(), db=db,
                    slurm_timeout_s=5, ledger_timeout_s=4)
                line += "".join(f"; {a.message}" for a in actions)
            except Exception as exc:  # the watchdog must end the process whatever happens
                line += f"; drain failed: {exc}"
        print(line, file=sys.stderr, flush=True)
        print(line, flush=True)
        os._exit(3)

    timer = threading.Timer(seconds, fire)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
