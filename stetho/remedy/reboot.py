"""Reboot a node through Slurm, behind the drain budget:
`scontrol reboot ASAP nextstate=RESUME reason="stetho: reboot: ..." NODE`.

ASAP drains the node so no new job starts, Slurm reboots it once it is idle (RebootProgram)
and resumes it when it registers again. So a reboot counts against the drain budget like a
drain (a node drained by stetho already costs nothing more). It is refused when the budget
says no, when a person drained or marked the node (Slurm's reboot would overwrite their
reason), and when Slurm's state cannot be read. A node drained by stetho keeps its first
reason, with the reboot appended. After `scontrol` answers, the node's state must show the
reboot requested, or the action failed.
"""

from __future__ import annotations

import shlex
import time

from stetho.errors import StethoError
from stetho.gate import breaker
from stetho.gate.slurm import MAX_REASON, REASON_PREFIX, NodeInfo, Slurm, SlurmError, drain_reason
from stetho.remedy.budget import Budget, refusal_text
from stetho.remedy.outcome import Outcome
from stetho.remedy.plan import Step

WHO = "stetho remedy"


class Rebooter(Slurm):
    """Slurm's scontrol, with the reboot request."""

    def argv(self, node: str, reason: str) -> tuple[str, ...]:
        return (self.scontrol, "reboot", "ASAP", "nextstate=RESUME", f"reason={reason}", node)

    def request(self, node: str, reason: str) -> str | None:
        """Ask Slurm to reboot `node`; None when it shows the reboot requested, else why not."""
        argv = self.argv(node, reason)
        r = self._run(argv)
        if r.returncode != 0:
            return (f"`{shlex.join(argv)}` exited {r.returncode}: "
                    f"{' '.join((r.stderr or r.stdout).split())[:300]}")
        info = self.show([node]).get(node)
        if info is None or not rebooting(info):
            return (f"scontrol accepted the reboot but {node} does not show it requested "
                    f"(State={info.state if info else 'unknown'})")
        return None


def rebooting(info: NodeInfo) -> bool:
    return "REBOOT" in info.state.upper()


def reason_for(step: Step, info: NodeInfo) -> str:
    """stetho's reason; a node stetho drained already keeps its first reason, reboot added."""
    new = drain_reason("reboot", f"{step.cause}: {step.summary or step.title}")
    if info.drained_by_stetho and info.reason:
        extra = new[len(REASON_PREFIX):].strip()
        text = f"{info.reason.splitlines()[0]} | {extra}"
        return text if len(text) <= MAX_REASON else text[:MAX_REASON - 3] + "..."
    return new


def reboot(steps: list[Step], slurm: Rebooter, budget: Budget, act: bool,
           now: float | None = None) -> list[Outcome]:
    """Each step's node rebooted (or why not), the budget asked once for all of them."""
    now = time.time() if now is None else now
    try:
        scope, state = slurm.cluster_name(), slurm.show_all()  # counted per cluster
    except SlurmError as exc:
        return [Outcome(s, "refused", f"Slurm's state could not be read: {exc}") for s in steps]
    out: list[Outcome] = []
    wanted: dict[str, tuple[Step, str]] = {}
    for s in steps:
        info = state.get(s.node)
        if info is None:
            out.append(Outcome(s, "refused", f"Slurm does not know {s.node}"))
        elif info.reason and not info.reason.startswith(REASON_PREFIX):
            out.append(Outcome(s, "refused", f"{s.node} drained or marked by a person "
                               f"(Reason={info.reason!r}): a reboot would overwrite it"))
        elif rebooting(info):
            out.append(Outcome(s, "skipped", f"a reboot is already requested (State="
                               f"{info.state})"))
        elif s.node not in wanted:
            wanted[s.node] = (s, reason_for(s, info))
        else:
            out.append(Outcome(s, "skipped", f"{s.node} is rebooted for "
                               f"{wanted[s.node][0].cause} already"))
    if not wanted:
        return out
    recent = breaker.recent_drains(state, now, _window(budget))
    nodes = list(wanted)
    try:
        ruling = (budget.request(nodes, scope=scope, scope_size=len(state), who=WHO,
                                 reasons={n: r for n, (_, r) in wanted.items()}, now=now,
                                 slurm_recent=recent) if act else
                  budget.preview(nodes, scope=scope, scope_size=len(state), now=now,
                                 slurm_recent=recent))
    except StethoError as exc:  # the ledger unusable: nothing taken out of service
        return out + [Outcome(s, "refused", f"drain budget unusable: {exc}")
                      for s, _ in wanted.values()]
    ok = set(ruling.allowed) | set(ruling.already)
    for node, (s, reason) in wanted.items():
        argv = slurm.argv(node, reason)
        if node not in ok:
            out.append(Outcome(s, "refused", f"drain budget: {refusal_text(ruling)}", argv))
        elif not act:
            out.append(Outcome(s, "planned", f"dry run, the budget allows it: would run "
                               f"`{shlex.join(argv)}`", argv))
        else:
            try:
                why = slurm.request(node, reason)
            except SlurmError as exc:
                why = str(exc)
            out.append(Outcome(s, "failed", why, argv) if why else Outcome(
                s, "done", f"reboot requested: `{shlex.join(argv)}`", argv))
    return out


def _window(budget: Budget) -> float:
    circuit = getattr(budget, "circuit", None)
    return float(getattr(circuit, "window_s", 3600.0))
