"""Carry out (or, in a dry run, show) the planned steps of a run's nodes: GPU resets on idle
GPUs, reboots through Slurm behind the drain budget, tickets to the webhook. With `act`,
every outcome is written to the history (`remedies` table), the escalation's memory."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from stetho.evidence.runner import Environment
from stetho.history import remedies
from stetho.history.store import History
from stetho.remedy import gpu_reset, reboot, ticket
from stetho.remedy.budget import Budget
from stetho.remedy.outcome import Outcome
from stetho.remedy.plan import Step


@dataclass(frozen=True)
class Executors:
    """Where each action runs. env_for(node): the node's tools for a GPU reset (None: not
    here, the reset is only planned); slurm: scontrol for reboots (None: Slurm not used);
    budget: the drain budget reboots ask; ticket_url: the ticket webhook."""

    env_for: Callable[[str], Environment | None]
    slurm: reboot.Rebooter | None
    budget: Budget
    ticket_url: str | None


def execute(steps: list[Step], ex: Executors, *, act: bool, history: History | None = None,
            run: str = "", now: float | None = None) -> list[Outcome]:
    """Each step's outcome, in the steps' order; recorded in the history when acting."""
    now = time.time() if now is None else now
    by_step: dict[int, Outcome] = {}
    reboots = [i for i, s in enumerate(steps) if s.action == "reboot"]
    for i, s in enumerate(steps):
        if s.action == "gpu-reset":
            by_step[i] = gpu_reset.reset(s, ex.env_for(s.node), act)
        elif s.action == "ticket":
            by_step[i] = ticket.send(s, ex.ticket_url, act, run)
        elif s.action == "none":
            by_step[i] = Outcome(s, "skipped", s.why)
    if reboots:
        wanted = [steps[i] for i in reboots]
        if ex.slurm is None:
            got = [Outcome(s, "planned", "no Slurm here (scontrol not found): the reboot is "
                           "not requested") for s in wanted]
        else:
            got = reboot.reboot(wanted, ex.slurm, ex.budget, act, now)
        by_outcome = {id(o.step): o for o in got}
        for i in reboots:
            by_step[i] = by_outcome[id(steps[i])]
    out = [by_step[i] for i in range(len(steps))]
    if act and history is not None:
        for o in out:
            if o.step.action != "none":
                remedies.record(history, remedies.Record(
                    now, o.step.node, o.step.part, o.step.cause, o.step.action, o.outcome,
                    o.detail, run))
    return out
