"""A Slurm job's nodes and time window, from `sacct` or, where accounting is off, from
`scontrol show job`.

Why both: `sacct` knows finished jobs but needs slurmdbd; many sites (and stetho's own
testbed, `AccountingStorageType=accounting_storage/none`) have none, and `sacct` then says
"Slurm accounting storage is disabled". `scontrol show job` knows only the jobs slurmctld still
holds (running ones, and finished ones for MinJobAge), but needs nothing else. The parsers are
pure (text -> Job); `lookup` runs the commands, sacct first, and maps what they say to the
CLI's exits: an id Slurm does not know is the user's mistake (exit 2), a controller that does
not answer is "could not evaluate" (exit 3).

Times are read as Slurm prints them with SLURM_TIME_FORMAT=standard: the controller's local
time, no zone, as stetho.gate.slurm reads drain stamps.
"""

from __future__ import annotations

import re
import shlex
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime

from stetho.core import hostlist
from stetho.errors import ConfigError, EvaluationError, StethoError

SACCT_FIELDS = "JobID,JobName,User,Partition,State,Start,End,NodeList,AllocTRES"
_JOB_ID = re.compile(r"^\d+(?:_\d+)?$")
_KEY = re.compile(r"(?:^|(?<=\s))([A-Za-z][A-Za-z0-9_:/]*)=")
_GPUS = re.compile(r"gres/gpu(?::[\w.-]+)?=(\d+)")
_NOT_ENDED = frozenset({"RUNNING", "PENDING", "SUSPENDED", "CONFIGURING", "RESIZING"})
#: what sacct prints on stderr when slurmdbd is not configured
ACCOUNTING_OFF = "accounting storage is disabled"


class SlurmJobError(StethoError):
    """Slurm could not be asked (no command, controller unreachable, a timeout): exit 3."""


class UnknownJob(ConfigError):
    """Neither sacct nor scontrol knows the job id: exit 2."""


class JobParseError(EvaluationError):
    """Slurm's answer is not in the shape stetho reads: exit 3, naming the command."""


@dataclass(frozen=True)
class Job:
    """A job as the scheduler reports it. `end` is None while it runs (window ends now);
    `gpus` is None where the allocation does not say (no gres/gpu in the TRES)."""

    id: str
    name: str
    user: str
    partition: str
    state: str
    start: float | None
    end: float | None
    nodes: tuple[str, ...]
    gpus: int | None
    source: str  # "sacct" or "scontrol"

    def to_json(self) -> dict[str, object]:
        return {"id": self.id, "name": self.name, "user": self.user,
                "partition": self.partition, "state": self.state, "start": self.start,
                "end": self.end, "nodes": list(self.nodes), "gpus": self.gpus,
                "source": self.source}


def valid_id(job_id: str) -> str:
    """A job id as Slurm writes it (1234, or an array task 1234_5); anything else is refused
    before a command is built from it."""
    if not _JOB_ID.match(job_id.strip()):
        raise ConfigError(f"job id {job_id!r}: expected digits like 1234 or an array task "
                          "like 1234_5")
    return job_id.strip()


def _time(text: str, what: str) -> float | None:
    """`2026-12-06T18:20:01` -> epoch seconds; Unknown/None/empty -> None (not started or
    still running)."""
    t = text.strip()
    if t in ("", "Unknown", "None", "N/A"):
        return None
    try:
        return datetime.fromisoformat(t).timestamp()
    except ValueError:
        raise JobParseError(f"{what}: time {t!r} is not Slurm's standard format "
                            "(YYYY-MM-DDTHH:MM:SS)") from None


def _nodes(text: str, what: str) -> tuple[str, ...]:
    t = text.strip()
    if t in ("", "None assigned", "(null)"):
        return ()
    try:
        return tuple(hostlist.expand(t))
    except (ConfigError, ValueError) as exc:
        raise JobParseError(f"{what}: node list {t!r} cannot be read ({exc})") from None


def _gpus(tres: str) -> int | None:
    found = _GPUS.findall(tres)
    return sum(int(n) for n in found) if found else None


def parse_sacct(text: str, job_id: str) -> Job | None:
    """`sacct -j ID -X -P -n -o SACCT_FIELDS` -> the job, or None where sacct lists nothing
    (it prints nothing for an id it does not know)."""
    what = f"sacct -j {job_id}"
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        return None
    for line in lines:
        parts = line.split("|")
        if len(parts) != SACCT_FIELDS.count(",") + 1:
            raise JobParseError(f"{what}: expected {SACCT_FIELDS.count(',') + 1} '|'-separated "
                                f"fields ({SACCT_FIELDS}), got {len(parts)} in {line[:120]!r}")
        jid, name, user, part, state, start, end, nodelist, tres = parts
        if jid.strip() != job_id:
            continue
        return Job(jid.strip(), name, user, part, state.split()[0] if state.strip() else "",
                   _time(start, what), _time(end, what), _nodes(nodelist, what), _gpus(tres),
                   "sacct")
    return None


def fields(line: str) -> dict[str, str]:
    """`Key=Value Key=Value` of one `-o` line; a value runs to the next key, so values with
    spaces (Command=, Comment=) stay whole. The first of a repeated key wins."""
    keys = list(_KEY.finditer(line))
    out: dict[str, str] = {}
    for i, m in enumerate(keys):
        end = keys[i + 1].start() if i + 1 < len(keys) else len(line)
        out.setdefault(m.group(1), line[m.end():end].strip())
    return out


def parse_scontrol_job(text: str, job_id: str) -> Job:
    """`scontrol show job -o ID` -> the job. UserId=alice(1000) gives the user; the GPUs come
    from TRES= (gres/gpu=N)."""
    what = f"scontrol show job {job_id}"
    for line in text.splitlines():
        if not line.startswith("JobId="):
            continue
        f = fields(line)
        if f.get("JobId") != job_id and f.get("ArrayJobId", "") + "_" + f.get(
                "ArrayTaskId", "") != job_id:
            continue
        missing = [k for k in ("JobState", "StartTime", "EndTime", "NodeList") if k not in f]
        if missing:
            raise JobParseError(f"{what}: no {', '.join(missing)} in the job's record")
        start = _time(f["StartTime"], what)
        state = f["JobState"]
        # a running job's EndTime is its time limit's projection, not an end
        end = None if state in _NOT_ENDED else _time(f["EndTime"], what)
        return Job(f["JobId"], f.get("JobName", ""), f.get("UserId", "").split("(")[0],
                   f.get("Partition", ""), state, start, end, _nodes(f["NodeList"], what),
                   _gpus(f.get("TRES", "") + "," + f.get("AllocTRES", "")), "scontrol")
    raise JobParseError(f"{what}: no JobId={job_id} record in its output "
                        f"({text.strip()[:120]!r})")


def invalid_job(stderr: str) -> bool:
    """scontrol's answer for an id slurmctld does not hold (never, or purged)."""
    return "Invalid job id" in stderr


def accounting_off(stderr: str) -> bool:
    return ACCOUNTING_OFF in stderr.lower()


#: (argv, env) -> (rc, stdout, stderr); raises SlurmJobError when the command cannot run
Runner = Callable[[list[str], Mapping[str, str]], tuple[int, str, str]]


def run_command(argv: list[str], env: Mapping[str, str], timeout_s: float = 30
                ) -> tuple[int, str, str]:
    try:
        r = subprocess.run(argv, env=dict(env), capture_output=True, text=True,
                           timeout=timeout_s, stdin=subprocess.DEVNULL, check=False)
    except subprocess.TimeoutExpired:
        raise SlurmJobError(f"`{shlex.join(argv)}` timed out after {timeout_s:g} s (is "
                            "slurmctld reachable?)") from None
    except OSError as exc:
        raise SlurmJobError(f"`{shlex.join(argv)}` could not be run ({exc.strerror or exc}): "
                            "is Slurm installed here?") from None
    return r.returncode, r.stdout, r.stderr


def lookup(job_id: str, env: Mapping[str, str], run: Runner = run_command) -> Job:
    """The job from sacct, else (accounting off, or sacct knows nothing) from scontrol."""
    job_id = valid_id(job_id)
    env = {**env, "SLURM_TIME_FORMAT": "standard"}
    sacct_said = ""
    try:
        rc, out, err = run(["sacct", "-j", job_id, "-X", "-P", "-n", "-o", SACCT_FIELDS], env)
    except SlurmJobError as exc:
        rc, out, err = 127, "", str(exc)
    if rc == 0 and not accounting_off(err):
        job = parse_sacct(out, job_id)
        if job is not None:
            return job
    else:
        sacct_said = err.strip().splitlines()[-1] if err.strip() else f"exit {rc}"
    rc, out, err = run(["scontrol", "show", "job", "-o", job_id], env)
    if rc != 0 or not out.strip():
        if invalid_job(err):
            raise UnknownJob(f"job {job_id}: Slurm knows no such job (scontrol: Invalid job "
                             "id" + (f"; sacct: {sacct_said}" if sacct_said else "; sacct "
                                     "lists nothing") + "): check the id; a job finished "
                             "longer ago than MinJobAge needs accounting (sacct)")
        said = (err or out).strip().splitlines()
        raise SlurmJobError(f"`scontrol show job -o {job_id}` exited {rc}: "
                            f"{said[-1] if said else 'no output'} (is slurmctld reachable, "
                            "SLURM_CONF right?)")
    return parse_scontrol_job(out, job_id)
