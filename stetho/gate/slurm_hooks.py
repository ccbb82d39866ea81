"""`stetho gate --local --slurm health-check|prolog`: the gate as Slurm's own hooks call it.

* health-check (HealthCheckProgram): the node drains itself with a `stetho:` reason when the
  policy blocks, and resumes only a drain stetho wrote when it passes, as LBNL NHC does. Slurm
  kills a health check after 60 s, and a killed check leaves no trace; so a watchdog drains
  the node itself with a reason that says the checks timed out (fail closed: a node whose
  checks hang is not healthy) before Slurm's limit. The circuit breaker counts the whole
  cluster's recent stetho drains: a broken check pushed to every node must not drain them all.
* prolog (Prolog): a blocked node drains itself through the same budget, with stetho's reason,
  and only then exits non-zero, which makes Slurm requeue the job onto another node (with
  `SchedulerParameters=nohold_on_prolog_fail`; Slurm keeps a reason already set, so the
  node's reason stays stetho's, not "Prolog error"). When the budget refuses the drain the
  prolog exits 0 and the job runs here: a non-zero exit would make Slurm drain the node
  itself, around the budget, and a storm of prologs failing at once is what the budget
  exists to stop (a broken check or driver push, far more often than that many bad nodes).
  The verdict stays BLOCKED in the history and the spool, and the refusal is on stderr.
* Both leave their verdict in the shared result spool (STETHO_RESULT_SPOOL) for `stetho
  history ingest` on the controller: a node's own history never reaches it otherwise.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from pathlib import Path

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


def act_on_own_node(node: str, decision: Decision, circuit: Circuit, now: float
                    ) -> tuple[list[Action], Trip | None]:
    """Drain this node when the decision blocks (behind the cluster-wide breaker), else
    resume it if (and only if) stetho drained it."""
    from stetho.gate import breaker
    from stetho.gate.slurm import Action, Slurm, SlurmError

    slurm = Slurm(act=True)
    if not decision.blocking:  # resume only a node evaluated GO, never an unevaluated one
        return (slurm.resume([node]) if node in decision.go_nodes else []), None
    reason = block_reason(decision)
    try:
        cluster = slurm.show_all()
    except SlurmError:
        cluster = {}
    trip = breaker.check(circuit, list(cluster) or [node], [node], cluster, now)
    if trip is not None:
        return [Action(node, "skip", (), False, f"{node}: not drained: {trip.message()}",
                       failed=True)], trip
    return slurm.drain({node: reason}), None


def prolog_on_own_node(node: str, decision: Decision, circuit: Circuit, now: float
                       ) -> tuple[list[Action], Trip | None, int]:
    """The prolog's actions and exit code: a blocked node drains through the budget (as a
    health check would) and the prolog exits 1, so Slurm requeues the job elsewhere, only if
    the node is out of service now (this drain, an earlier one, a person's); otherwise 0."""
    from stetho.gate.slurm import Slurm, SlurmError

    if not decision.blocking:
        return [], None, 0
    actions, trip = act_on_own_node(node, decision, circuit, now)
    try:
        info = Slurm(act=False, timeout_s=5).show([node]).get(node)
    except SlurmError:
        info = None
    return actions, trip, (1 if info is not None and info.drained else 0)


def spool_verdict(folder: Path, doc: dict[str, object], node: str, mode: str, policy: str,
                  summary: str, now: float) -> Path:
    """Leave this hook's verdict (the gate's JSON document `doc`) in the shared result spool
    (stetho.history.inbox), for `stetho history ingest` on the controller."""
    from stetho.history import inbox
    from stetho.history.store import new_run_id

    doc = {**doc, "run_id": new_run_id(), "node": node, "kind": f"gate-{mode}", "time": now,
           "command": f"gate --local --slurm {mode} --policy {policy}", "summary": summary}
    return inbox.write(folder, doc)


@contextmanager
def watchdog(node: str, seconds: float, *, drain: bool) -> Iterator[None]:
    """If the body has not finished in `seconds`, drain `node` (health-check only) with a
    reason naming the timeout, say so, and end the process with exit 3: a hung probe must not
    leave a node looking healthy. The drain itself gets what time Slurm leaves (5 s)."""

    def fire() -> None:
        from stetho.gate.slurm import Slurm, drain_reason

        reason = drain_reason("health-check", f"checks did not finish in {seconds:g} s "
                              "(a probe hangs: run `stetho check --local` on the node)")
        line = f"gate: COULD NOT EVALUATE {node}: {reason}"
        if drain:
            try:
                (action,) = Slurm(act=True, timeout_s=5).drain({node: reason})
                line += f"; {action.message}"
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
