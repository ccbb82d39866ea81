"""Is a job running on this node? Asked before anything invasive runs (benchmarks marked
`idle`, the profile's live nccl-tests), by `stetho bench` and by every node of a sweep.

One answer, recorded in the bundle as the `busy` probe so a replay and the sweep's summary see
the same thing the node saw. The methods (`busy_probe` in the configuration):

- `slurm`: `squeue -h -w NODE -o %A`: the jobs Slurm has allocated on the node;
- `gpu`: `nvidia-smi --query-compute-apps=...`: processes holding a GPU (any scheduler, or none);
- `auto` (default): Slurm when squeue is installed and answers for this node, else the GPUs;
- `none`: the node is declared dedicated (a bench box): always idle, and the record says so;
- anything else: a command line run as argv (no shell); each line it prints is one job, no
  output is idle, a non-zero exit is unknown.

Fails closed: a node whose state cannot be told is `unknown`, and unknown never runs anything
invasive: the benchmark is `skip` with the reason, never pass.
"""

from __future__ import annotations

import shlex
import shutil

from stetho.core.record import record
from stetho.evidence.bundle import Bundle, ProbeRecord
from stetho.evidence.probes import Probe
from stetho.evidence.runner import Environment, run

PROBE = "busy"
MODES = ("auto", "slurm", "gpu", "none")
GPU_QUERY = ("nvidia-smi", "--query-compute-apps=pid,process_name,used_memory",
             "--format=csv,noheader")
TIMEOUT_S = 15.0


@record
class Busy:
    """The node's state: `idle`, `busy` (with the jobs or GPU processes seen) or `unknown`."""

    state: str
    method: str  # slurm | gpu | command | none
    jobs: tuple[str, ...] = ()
    reason: str = ""

    @property
    def idle(self) -> bool:
        return self.state == "idle"

    def skip_reason(self) -> str:
        """What an invasive benchmark or probe that did not run says: 'node busy (job 1234)'."""
        if self.state == "busy":
            what = "job" if self.method == "slurm" else "GPU process" \
                if self.method == "gpu" else "job"
            shown = ", ".join(self.jobs[:3]) + (f" and {len(self.jobs) - 3} more"
                                                 if len(self.jobs) > 3 else "")
            return f"node busy ({what}{'s' if len(self.jobs) > 1 else ''} {shown})"
        if self.state == "unknown":
            return (f"not run: could not tell whether a job runs on this node ({self.reason}); "
                    "set busy_probe (STETHO_BUSY_PROBE) to a method that works here")
        return ""


def detect(node: str, env: Environment, mode: str | None = None) -> tuple[Busy, ProbeRecord]:
    """Ask the node now; the record goes into the bundle as the `busy` probe."""
    from stetho import config

    mode = mode or config.active().busy_probe
    if mode == "none":
        rec = ProbeRecord(PROBE, "command", "ok", reason="busy_probe = none: the node is "
                          "declared dedicated, no job check")
        return interpret(rec), rec
    if mode in ("slurm", "gpu"):
        rec = _ask(_probe(mode, node), env)
        return interpret(rec), rec
    if mode == "auto":
        tried: list[str] = []
        for method in ("slurm", "gpu"):
            probe = _probe(method, node)
            if shutil.which(probe.argv[0], path=env.path) is None:
                tried.append(f"{probe.argv[0]} not installed")
                continue
            rec = _ask(probe, env)
            state = interpret(rec)
            if state.state != "unknown":
                return state, rec
            tried.append(state.reason)
        rec = ProbeRecord(PROBE, "command", "error",
                          reason="no method answered: " + "; ".join(tried))
        return interpret(rec), rec
    try:
        argv = tuple(shlex.split(mode))
    except ValueError as exc:
        rec = ProbeRecord(PROBE, "command", "error", reason=f"busy_probe {mode!r}: {exc}")
        return interpret(rec), rec
    rec = _ask(Probe(PROBE, argv, timeout_s=TIMEOUT_S), env)
    return interpret(rec), rec


def interpret(rec: ProbeRecord) -> Busy:
    """The state a recorded `busy` probe shows (pure: the sweep and replays call it too)."""
    method = _method(rec.argv)
    if method == "none":
        return Busy("idle" if rec.status == "ok" else "unknown", "none", (),
                    rec.reason or "no method")
    if rec.status != "ok":
        why = rec.reason or rec.status
        err = rec.stderr.strip().splitlines()
        if err and err[-1] not in why:
            why += f": {err[-1][:200]}"
        return Busy("unknown", method, (), f"{' '.join(rec.argv[:1])} {why}".strip())
    if rec.binary:
        return Busy("unknown", method, (), f"{rec.argv[0]} printed binary data, not a job list")
    lines = [ln.strip() for ln in rec.stdout.splitlines() if ln.strip()]
    if method == "gpu":
        lines = [ln for ln in lines if not ln.lower().startswith("no running")]
        jobs = tuple(_gpu_process(ln) for ln in lines)
    else:
        jobs = tuple(lines)
    if jobs:
        return Busy("busy", method, jobs, f"{len(jobs)} seen by {rec.argv[0]}")
    return Busy("idle", method, (), f"nothing running per {rec.argv[0]}")


def from_bundle(bundle: Bundle) -> Busy | None:
    """The state recorded in a bundle; None when the node was not asked (nothing invasive)."""
    rec = bundle.probe(PROBE)
    return interpret(rec) if rec is not None else None


def _probe(method: str, node: str) -> Probe:
    if method == "slurm":
        return Probe(PROBE, ("squeue", "-h", "-w", node, "-o", "%A"), timeout_s=TIMEOUT_S)
    return Probe(PROBE, GPU_QUERY, timeout_s=TIMEOUT_S)


def _ask(probe: Probe, env: Environment) -> ProbeRecord:
    return run(probe, env)


def _method(argv: tuple[str, ...]) -> str:
    if not argv:
        return "none"
    exe = argv[0].rsplit("/", 1)[-1]
    return {"squeue": "slurm", "nvidia-smi": "gpu"}.get(exe, "command")


def _gpu_process(line: str) -> str:
    """'4242, python, 30000 MiB' -> '4242 python'."""
    parts = [p.strip() for p in line.split(",")]
    return " ".join(p for p in parts[:2] if p) or line
