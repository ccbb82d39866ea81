"""`stetho sweep --via slurm`: each idle node of a partition checks itself under one `srun`,
leaves its outcome in the shared spool, and the controller ingests it as one fleet run.

Why one srun over an explicit node list: Slurm itself then guarantees no job runs beside the
check (`--exclusive`, never `--overlap`), launches the tasks over its own tree fan-out, and
kills a task at the time limit; the controller starts one process, not one SSH session a node.
Nodes Slurm does not call idle (stetho.fleet.slurm_nodes) are never touched: they are listed
with Slurm's words, as `skip` when a job or a person holds them (busy, drained: the night's
exit code is not failed by a cluster doing its work) and `error` when Slurm cannot reach them
or says something this sweep cannot judge (down, unknown: as an unreachable Ansible host).

Deadlines are the Ansible sweep's (stetho.fleet.budget): the node's own `--deadline` 60 s
before the limit, `timeout -k 10 LIMIT` around the check, and srun's `--time` past both.
A node whose task died or wrote nothing is its error, with srun's words for it when it said
any (a kill at the limit, a launch failure).

The job is named `stetho-sweep-<run id>` and carries the comment `stetho-sweep:<run id>`:
contrib/slurm/prolog.sh lets that job's nodes through (the check in it is the full one; a
blocking prolog would kill the whole step on every node).
"""

from __future__ import annotations

import math
import os
import re
import shlex
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from stetho.core import hostlist
from stetho.core.locks import SweepLock
from stetho.errors import ConfigError, Interrupted
from stetho.evidence.busy import Busy
from stetho.fleet import slurm_nodes
from stetho.fleet.finish import HostState, SweepResult
from stetho.results import Result

#: contrib/slurm's convention: the version the Ansible install pointed `current` at.
DEFAULT_NODE_STETHO = "/opt/stetho/current/bin/stetho"
SPOOL_KIND = "sweep-slurm"
KILL_AFTER_S = 10  # timeout -k: SIGKILL this long after the SIGTERM at the limit
POLL_S = 1.0
#: srun exits when Slurm cannot give it the nodes this soon (a job took one meanwhile)
IMMEDIATE_S = 120
_TASK_LINE = re.compile(r"srun: error: (\S+): tasks? [\d,\-]+: (.+)$")


@dataclass
class SlurmSweepOptions:
    partition: str
    out: Path
    spool: Path
    reservation: str | None = None
    node_stetho: str = DEFAULT_NODE_STETHO
    profile: str | None = None  # None: the configured profile, else generic
    timeout_s: int | None = None  # None: what the profile's probes can take (budget)
    db: Path | None = None
    reports: bool = True
    kb_repo: str | None = None
    textfile: Path | None = None
    progress: Callable[[str, int, int, int], None] | None = None
    steps: Callable[[str], None] | None = None
    cancel: Callable[[], bool] | None = None
    #: variables laid over this environment for Slurm's commands (SLURM_CONF, PATH)
    env: Mapping[str, str] = field(default_factory=dict)


def sweep(opts: SlurmSweepOptions) -> SweepResult:
    """Plan from Slurm, srun the check on the idle nodes, ingest what they spooled."""
    from stetho import config
    from stetho.history.store import new_run_id

    if not opts.spool.is_absolute():
        raise ConfigError(f"--spool {opts.spool}: the nodes write there, so it must be an "
                          "absolute path on a filesystem they share with this controller")
    profile = opts.profile or config.active().profile or "generic"
    limit = node_limit(profile, opts.timeout_s)  # a too-short --timeout, before Slurm is asked
    run_id = new_run_id()
    env = config.child_environment(dict(opts.env))
    opts.spool.mkdir(parents=True, exist_ok=True)
    with SweepLock(opts.out / ".sweep.lock", run_id):
        plan = slurm_nodes.query(opts.partition, opts.reservation, env)
        checked = plan.of("check")
        say = opts.steps or (lambda _text: None)
        decided = {n: _not_checked(s) for n, s in plan.nodes.items() if s.kind != "check"}
        if checked:
            say(f"srun: checking {len(checked)} idle node{'s' if len(checked) != 1 else ''} of "
                f"partition {opts.partition}; not touched: {len(decided)}")
            said = _run_srun(opts, env, run_id, checked, profile, limit)
            for node, why in said.items():
                decided[node] = HostState(node, done=True, error=why)
        return _ingest(opts, run_id, [n for n in checked if n not in decided], decided)


def node_limit(profile: str, timeout_s: int | None) -> int:
    """The per-node limit, as the Ansible sweep's per-host timeout: what the profile's probes
    can take one after another under this controller's probe timeout cap (which srun_argv
    hands the nodes), or the one given, refused when shorter than that."""
    from stetho import config
    from stetho.fleet.budget import host_budget

    need, parts = host_budget(profile, None, config.active().probe_timeout)
    if timeout_s is None:
        return need
    if timeout_s < need:
        raise ConfigError(f"per-node timeout {timeout_s} s (--timeout) is shorter than the "
                          f"check can take on profile {profile}: {need} s ({', '.join(parts)});"
                          f" give {need} or more, or leave it out")
    return timeout_s


def srun_argv(opts: SlurmSweepOptions, run_id: str, nodes: list[str], profile: str,
              limit: int) -> list[str]:
    """One task per node, on exactly these nodes, alone on them; the node's stetho under
    `timeout`, its own deadline 60 s before the limit (the playbook's rule)."""
    deadline = max(limit - 60, 5)
    minutes = math.ceil((limit + KILL_AFTER_S + 30) / 60)
    check = [opts.node_stetho, "check", "--local", "--profile", profile, "--no-history",
             "--deadline", str(deadline), "--quiet", "--spool", str(opts.spool),
             "--spool-run", run_id, "--spool-kind", SPOOL_KIND]
    # the node's name is Slurm's (SLURMD_NODENAME), not its hostname; the node holds the job
    # alone (--exclusive), so its busy question asks the GPUs, not squeue (which sees this job)
    from stetho import config

    # the probe cap node_limit counted on is the node's (the environment beats its config file)
    cap = config.active().probe_timeout
    script = (f"STETHO_BUSY_PROBE=gpu {f'STETHO_PROBE_TIMEOUT={cap:g} ' if cap else ''}"
              f"exec timeout -k {KILL_AFTER_S} {limit} \"$@\" --node \"$SLURMD_NODENAME\"")
    return ["srun", f"--job-name=stetho-sweep-{run_id}", f"--comment=stetho-sweep:{run_id}",
            f"--partition={opts.partition}",
            *([f"--reservation={opts.reservation}"] if opts.reservation else []),
            f"--nodelist={hostlist.compress(nodes)}", f"--nodes={len(nodes)}",
            f"--ntasks={len(nodes)}", "--ntasks-per-node=1", "--exclusive",
            f"--time={minutes}", f"--immediate={IMMEDIATE_S}", "--kill-on-bad-exit=0",
            "--export=NONE", "/bin/sh", "-c", script, "stetho-sweep", *check]


def _run_srun(opts: SlurmSweepOptions, env: Mapping[str, str], run_id: str,
              nodes: list[str], profile: str, limit: int) -> dict[str, str]:
    """Run the srun, streaming progress as spool files land; on cancel, scancel the job and
    raise Interrupted. Returns node -> srun's words for each node that left no file."""
    argv = srun_argv(opts, run_id, nodes, profile, limit)
    with tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as log:
        proc = subprocess.Popen(argv, env=dict(env), stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
        seen: set[str] = set()
        try:
            while proc.poll() is None:
                if opts.cancel is not None and opts.cancel():
                    _cancel(proc, env, run_id)
                    raise Interrupted(f"srun of stetho-sweep-{run_id} cancelled (scancel); what "
                                      f"nodes finished is in {opts.spool}")
                _progress(opts, run_id, nodes, seen)
                time.sleep(POLL_S)
        except BaseException:
            if proc.poll() is None:
                _cancel(proc, env, run_id)
            raise
        _progress(opts, run_id, nodes, seen)
        log.seek(0)
        text = log.read()
    landed = _landed(opts.spool, run_id, nodes)
    return {n: _why(n, proc.returncode, text, limit) for n in nodes if n not in landed}


def _cancel(proc: subprocess.Popen[bytes], env: Mapping[str, str], run_id: str) -> None:
    """scancel the sweep's job (its steps end on every node), then make sure srun is gone."""
    subprocess.run(["scancel", f"--name=stetho-sweep-{run_id}"], env=dict(env),
                   capture_output=True, timeout=30, check=False)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def _landed(spool: Path, run_id: str, nodes: list[str], seen: set[str] | None = None
            ) -> set[str]:
    """The nodes with this run's file in the spool (`<spool>/<node>/<run>.json`, stetho.spool's
    names): one stat a node not yet seen, so a poll over 10,000 nodes stays cheap."""
    from stetho.spool.files import node_dir

    done = set(seen or ())
    return done | {n for n in nodes if n not in done
                   and (node_dir(spool, n) / f"{run_id}.json").is_file()}


def _progress(opts: SlurmSweepOptions, run_id: str, nodes: list[str], seen: set[str]) -> None:
    """A line a node as its file lands (its verdict is read at ingest, which reports it)."""
    if opts.steps is None:
        return
    for node in sorted(_landed(opts.spool, run_id, nodes, seen) - seen):
        seen.add(node)
        opts.steps(f"srun: {node} reported ({len(seen)}/{len(nodes)})")


def _why(node: str, rc: int | None, text: str, limit: int) -> str:
    """A node that left no outcome, in srun's words where it said something about it."""
    said = [m.group(2).strip() for line in text.splitlines()
            if (m := _TASK_LINE.search(line.strip())) and m.group(1) == node]
    where = f"the check on {node} left no outcome in the spool"
    if said:
        word = said[-1]
        if "124" in word or "137" in word or "Killed" in word or "TIME LIMIT" in text:
            return (f"{where}: killed at the per-node limit of {limit} s (srun: {word}); "
                    "a check stuck past its --deadline")
        return f"{where} (srun: {word})"
    tail = [ln.strip() for ln in text.splitlines() if ln.strip()][-2:]
    return f"{where} (srun exited {rc}{': ' + ' / '.join(tail)[:300] if tail else ''})"


def _not_checked(s: slurm_nodes.NodeState) -> HostState:
    """A node the sweep did not touch: skip when a job or a person holds it, error when Slurm
    cannot reach it or its state cannot be judged. Never a pass."""
    words = {"busy": "busy: not checked", "drained": "drained: not checked",
             "down": "down: not checked", "unknown": "unknown state: not checked"}[s.kind]
    status = "skip" if s.kind in ("busy", "drained") else "error"
    fix = {"busy": "it is checked on the next sweep that finds it idle (or by the prolog "
                   "before the next job)",
           "drained": "resume it when its repair is done; the next sweep checks it",
           "down": "bring slurmd back on the node (`scontrol show node`), then sweep it",
           "unknown": "see `scontrol show node " + s.name + "`; fix the node's state in Slurm"}
    result = Result(node=s.name, check="sweep", subject="", status=status,
                    message=f"{words}: {s.why}", remediation=fix[s.kind], probe="slurm")
    busy = Busy("busy", "slurm", s.jobs or (s.state,), s.why) if s.kind == "busy" else None
    return HostState(s.name, done=True, results=[result], busy=busy)


def _ingest(opts: SlurmSweepOptions, run_id: str, expect: list[str],
            decided: dict[str, HostState]) -> SweepResult:
    from stetho.fleet.ingest import IngestOptions, ingest

    return ingest(IngestOptions(
        spool=opts.spool, out=opts.out, db=opts.db, expect=expect, run=run_id, run_id=run_id,
        reports=opts.reports, kb_repo=opts.kb_repo, textfile=opts.textfile,
        progress=opts.progress, decided=decided, kind=SPOOL_KIND,
        command=f"sweep --via slurm --partition {shlex.quote(opts.partition)}"))
