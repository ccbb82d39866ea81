"""Reset one GPU, only when nothing runs on it: `nvidia-smi -r -i N`, after asking nvidia-smi
for the compute processes of every GPU (`--query-compute-apps=pid,gpu_uuid`).

A reset kills whatever holds the GPU, so the check fails closed: a process on that GPU (by
UUID), or on any GPU when the GPU's UUID is not known, or a query that did not answer, refuses
the reset. The commands run through the node's environment (stetho.evidence.runner): on a
simulated node its `bin/` answers them (the sim's nvidia-smi records the reset in
data/resets.log), so no real GPU is touched there.
"""

from __future__ import annotations

from stetho.evidence.probes import Probe
from stetho.evidence.runner import Environment, run
from stetho.remedy.outcome import Outcome
from stetho.remedy.plan import Step

QUERY = ("nvidia-smi", "--query-compute-apps=pid,gpu_uuid", "--format=csv,noheader")
TIMEOUT_S = 60.0


def argv(step: Step) -> tuple[str, ...]:
    return ("nvidia-smi", "-r", "-i", step.get("gpu") or "")


def busy(step: Step, env: Environment) -> str | None:
    """Why the GPU may not be reset now (its processes, or why they are unknown); None: idle."""
    rec = run(Probe("remedy-gpu-apps", QUERY, timeout_s=30.0), env)
    if rec.status != "ok":
        return (f"could not list the GPU's processes ({' '.join(QUERY)}: "
                f"{rec.reason or rec.status}): not reset")
    uuid = step.get("uuid")
    procs = []
    for line in rec.stdout.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if not parts[0] or parts[0].lower().startswith("no running"):
            continue
        if uuid is None or (len(parts) > 1 and parts[1] == uuid):
            procs.append(parts[0])
    if procs:
        on = f"GPU {step.get('gpu')}" if uuid else "a GPU (this GPU's UUID is not known)"
        return f"busy: process {', '.join(procs[:5])} on {on}: not reset"
    return None


def reset(step: Step, env: Environment | None, act: bool) -> Outcome:
    """Reset the step's GPU on its node, or say why not."""
    if step.get("gpu") is None:
        return Outcome(step, "refused", "the evidence names no GPU index to reset")
    cmd = " ".join(argv(step))
    if env is None:
        return Outcome(step, "planned", f"would run `{cmd}` on {step.node} (a GPU reset runs "
                       "on the node itself: `stetho remedy` there, or --sim for a simulated "
                       "node)", argv(step))
    why = busy(step, env)
    if why is not None:
        return Outcome(step, "refused", why, argv(step))
    if not act:
        return Outcome(step, "planned", f"dry run, GPU idle: would run `{cmd}`", argv(step))
    rec = run(Probe("remedy-gpu-reset", argv(step), timeout_s=TIMEOUT_S), env)
    if rec.status != "ok":
        return Outcome(step, "failed", f"`{cmd}` {rec.reason or rec.status}", argv(step))
    said = rec.stdout.strip().splitlines()
    return Outcome(step, "done", f"`{cmd}`: {said[0] if said else 'exit 0'}", argv(step))
