"""The jobs Slurm runs now, from `squeue`: who, where, and how many GPUs on each node.

`squeue` is asked for a fixed set of fields (FIELDS), each ended by the ASCII unit separator
(0x1f), which Slurm never puts in a user, partition, state, node list or TRES string; the job
name, the one field a user types freely, comes last, so even a separator in it cannot shift
a column. This text form reads the same on Slurm 20.11 to 24.x, where `--json` changed shape.

`parse` is pure and strict: a line that does not read as a job is a SqueueError naming the
line, never a job skipped, since a blast radius that silently drops a job says "no jobs".
`running` (and `known_nodes`, through sinfo) are where the commands run.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass

from stetho.core import hostlist
from stetho.errors import ConfigError, EvaluationError

SEP = "\x1f"
#: squeue --Format fields, in order; `Name` last (see the module docstring).
FIELDS = ("JobID", "UserName", "Partition", "State", "NumNodes", "NodeList", "tres-per-node",
          "tres-alloc", "Name")
FORMAT = ",".join(f"{f}:0{SEP}" for f in FIELDS[:-1]) + f",{FIELDS[-1]}:0"
#: Jobs holding their nodes now: running, or allocated and still starting (prolog).
STATES = "RUNNING,CONFIGURING"
_JOB_ID = re.compile(r"^\d+(?:[_+]\d+)?$")
_STATE = re.compile(r"^[A-Z_]+$")
#: `gres:gpu:8`, `gres/gpu:h100:8`, `gres/gpu=8` in tres-per-node
_PER_NODE = re.compile(r"(?:^|,)gres[:/]gpu(?::[^:,=]+)?[:=](\d+)(?:,|$)")
#: `gres/gpu=16` in tres-alloc: the job's whole GPU count (the typed ones repeat it)
_ALLOC = re.compile(r"(?:^|,)gres/gpu=(\d+)(?:,|$)")


class SqueueError(EvaluationError):
    """squeue could not be run, failed, or printed something that is not the jobs asked for:
    the running jobs are unknown (exit 3), which is never "no jobs"."""


@dataclass(frozen=True)
class Job:
    """One running job. `gpus_per_node` is None when Slurm does not say (no GPU GRES): the
    count is then the node profile's, or unknown; never 0."""

    job_id: str
    user: str
    partition: str
    name: str
    state: str
    nodes: tuple[str, ...]
    gpus_per_node: int | None

    def to_json(self) -> dict[str, object]:
        return {"job": self.job_id, "user": self.user, "partition": self.partition,
                "name": self.name, "state": self.state, "nodes": len(self.nodes),
                "nodelist": hostlist.compress(list(self.nodes)),
                "gpus_per_node": self.gpus_per_node}


def argv(squeue: str = "squeue") -> list[str]:
    """The command whose output `parse` reads."""
    return [squeue, "--noheader", f"--states={STATES}", f"--Format={FORMAT}"]


def parse(text: str) -> list[Job]:
    """squeue's output for `argv()` -> the jobs, in its order. SqueueError on anything else."""
    if "\x00" in text:
        raise SqueueError("squeue: output is binary, not the job list asked for")
    jobs = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        jobs.append(_job(line, lineno))
    return jobs


def _job(line: str, lineno: int) -> Job:
    fields = [f.strip() for f in line.split(SEP, len(FIELDS) - 1)]

    def bad(what: str) -> SqueueError:
        return SqueueError(f"squeue line {lineno}: {what} in {line[:120]!r}; expected the "
                           f"fields {', '.join(FIELDS)} separated by 0x1f")

    if len(fields) != len(FIELDS):
        raise bad(f"{len(fields)} fields, not {len(FIELDS)}")
    job_id, user, partition, state, count, nodelist, per_node, alloc, name = fields
    if not _JOB_ID.match(job_id):
        raise bad(f"job id {job_id!r} is not a Slurm job id")
    if not user or not partition or not _STATE.match(state):
        raise bad("an empty user or partition, or a state that is not a Slurm state")
    if not count.isdigit() or int(count) < 1:
        raise bad(f"node count {count!r} is not a positive number")
    try:
        nodes = tuple(hostlist.expand(nodelist))
    except ConfigError as exc:
        raise bad(f"node list {nodelist!r} does not expand ({exc})") from None
    if len(nodes) != int(count):
        raise bad(f"node list {nodelist!r} names {len(nodes)} nodes, the count says {count}")
    return Job(job_id, user, partition, name, state, nodes, _gpus(per_node, alloc, len(nodes)))


def _gpus(per_node: str, alloc: str, nodes: int) -> int | None:
    """GPUs per node from the request per node, else the allocation spread evenly (when it
    is); None when Slurm gives no GPU count."""
    m = _PER_NODE.search(per_node)
    if m:
        return int(m.group(1))
    m = _ALLOC.search(alloc)
    if m and int(m.group(1)) % nodes == 0 and int(m.group(1)) > 0:
        return int(m.group(1)) // nodes
    return None


def running(env: Mapping[str, str], squeue: str = "squeue", timeout_s: float = 30) -> list[Job]:
    """Run squeue (looked up on env's PATH) and parse it. SqueueError when it cannot answer."""
    return parse(_run(argv(squeue), env, timeout_s))


def known_nodes(env: Mapping[str, str], sinfo: str = "sinfo", timeout_s: float = 30
                ) -> set[str]:
    """Every node Slurm knows (`sinfo -N`): a part named without a topology must be one, or
    a typo would read as "no running jobs"."""
    out = _run([sinfo, "--noheader", "--Node", "--format=%N"], env, timeout_s)
    return {line.strip() for line in out.splitlines() if line.strip()}


def _run(cmd: list[str], env: Mapping[str, str], timeout_s: float) -> str:
    exe = shutil.which(cmd[0], path=env.get("PATH"))
    if exe is None:
        raise SqueueError(f"{cmd[0]!r} not found on PATH ({env.get('PATH', '')}): is Slurm "
                          "installed here, and SLURM_CONF set?")
    try:
        r = subprocess.run([exe, *cmd[1:]], env=dict(env), capture_output=True, text=True,
                           timeout=timeout_s, stdin=subprocess.DEVNULL, check=False,
                           errors="replace")
    except subprocess.TimeoutExpired:
        raise SqueueError(f"`{shlex.join(cmd)}` timed out after {timeout_s:g} s (is "
                          "slurmctld reachable?)") from None
    except OSError as exc:
        raise SqueueError(f"`{shlex.join(cmd)}` could not be run: {exc}") from None
    if r.returncode != 0:
        said = " ".join((r.stderr or r.stdout).split())[:300]
        raise SqueueError(f"`{shlex.join(cmd)}` exited {r.returncode}: {said}")
    return r.stdout
