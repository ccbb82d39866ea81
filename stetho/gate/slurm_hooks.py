"""`stetho gate --local --slurm health-check|prolog`: the gate as Slurm's own hooks call it.

* health-check (HealthCheckProgram): the node drains itself with a `stetho:` reason when the
  policy blocks, and resumes only a drain stetho wrote when it passes, as LBNL NHC does. Slurm
  kills a health check after 60 s, and a killed check leaves no trace; so a watchdog drains
  the node itself with a reason that says the checks timed out (fail closed: a node whose
  checks hang is not healthy) before Slurm's limit. The circuit breaker counts the whole
  cluster's recent stetho drains: a broken check pushed to every node must not drain them all.
* prolog (Prolog): nothing is drained by stetho; a non-zero exit makes Slurm drain the node and
  requeue the job. The reason goes to stderr and stdout, which slurmd keeps in its log.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
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
