"""Slurm's own drain/resume stamps: the node events slurmdbd keeps (`sacctmgr show event`)
and the nodes drained or down now, with the time their reason was set (`sinfo -R`).

An operator who drains or resumes a node by hand with scontrol leaves no trace in stetho's
drain ledger; these two are where Slurm keeps it. Both are asked for the free-text field
(the reason) last, so a `|` typed into a reason cannot shift a column.

Slurm prints times in the local time of the machine that runs the command (no zone in the
text); they are read as local time here, as Slurm wrote them.

`parse_*` are pure and strict: a line that does not read as an event is a NodeEventsError
naming the command and line, never a drain skipped. `current` and `history` run the
commands. slurmdbd missing (accounting disabled, slurmdbd unreachable) is not an error:
`history` returns None with the reason, since most clusters run without it.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from stetho.errors import EvaluationError

#: a command that hangs (slurmctld gone: sinfo retries for a minute) is given up after this
TIMEOUT_S = 30
SINFO_FORMAT = "%N|%H|%u|%T|%E"
SACCTMGR_FORMAT = "NodeName,Start,End,State,User,Reason"
#: a node state as sinfo %T prints it: drained, down*, idle+drain, draining@
_STATE = re.compile(r"^[a-zA-Z_]+[a-zA-Z_+*~#$@!%^-]*$")
_OPEN_END = {"unknown", "none", ""}


class NodeEventsError(EvaluationError):
    """sinfo or sacctmgr could not be run, failed, or printed something that is not node
    events: Slurm's drain stamps are unknown (exit 3)."""


@dataclass(frozen=True)
class NodeEvent:
    """A node out of service from `start` until `end` (None: still out). `source` says who
    told: "slurm-events" (sacctmgr) or "slurm-current" (sinfo -R). `start` None: Slurm has no
    time for it (sinfo prints `Unknown` where a node went down with no reason stamp, as after
    a slurmctld restart): the node is out now, since when is not known."""

    node: str
    start: float | None
    end: float | None
    state: str
    user: str
    reason: str
    source: str


def _time(text: str, what: str) -> float:
    try:
        return datetime.strptime(text.strip(), "%Y-%m-%dT%H:%M:%S").timestamp()
    except ValueError:
        raise NodeEventsError(f"{what}: {text!r} is not a time like 2026-12-06T19:25:31"
                              ) from None


def _fields(text: str, n: int, cmd: str) -> list[tuple[int, list[str]]]:
    if "\x00" in text:
        raise NodeEventsError(f"{cmd}: output is binary, not the node events asked for")
    out = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split("|", n - 1)
        if len(parts) != n or not parts[0].strip():
            raise NodeEventsError(f"{cmd} line {lineno}: {line[:120]!r} is not "
                                  f"{n} '|'-separated fields starting with a node name")
        out.append((lineno, [p.strip() for p in parts]))
    return out


def parse_sinfo(text: str) -> list[NodeEvent]:
    """`sinfo -R -N -h -o SINFO_FORMAT` -> one open event per node (a node listed under two
    partitions once); a node whose reason has no time (`Unknown`) is an event with no start,
    never a reason to refuse the whole listing."""
    seen: dict[str, NodeEvent] = {}
    for lineno, (node, at, user, state, reason) in _fields(text, 5, "sinfo -R"):
        if not _STATE.match(state):
            raise NodeEventsError(f"sinfo -R line {lineno}: state {state!r} is not a node "
                                  "state")
        when = None if at.lower() in _OPEN_END else _time(at, f"sinfo -R line {lineno}")
        ev = NodeEvent(node, when, None, state, user, reason, "slurm-current")
        seen.setdefault(node, ev)
    return list(seen.values())


def parse_sacctmgr(text: str) -> list[NodeEvent]:
    """`sacctmgr -n -P show event Event=Node Format=SACCTMGR_FORMAT` -> the node events;
    an End of "Unknown" is an event still open."""
    out = []
    for lineno, (node, start, end, state, user, reason) in _fields(text, 6, "sacctmgr"):
        what = f"sacctmgr line {lineno}"
        stop = None if end.lower() in _OPEN_END else _time(end, what)
        began = _time(start, what)
        ev = NodeEvent(node, began, stop, state, user, reason, "slurm-events")
        if stop is not None and stop < began:
            raise NodeEventsError(f"{what}: ends ({end}) before it starts ({start})")
        out.append(ev)
    return out


def sinfo_argv(sinfo: str = "sinfo") -> list[str]:
    return [sinfo, "-R", "-N", "-h", "-o", SINFO_FORMAT]


def sacctmgr_argv(since: float, sacctmgr: str = "sacctmgr") -> list[str]:
    start = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(since))
    return [sacctmgr, "-n", "-P", "show", "event", "Event=Node", f"Start={start}",
            f"Format={SACCTMGR_FORMAT}"]


def _run(argv: list[str], env: Mapping[str, str]) -> subprocess.CompletedProcess[str]:
    try:
        # a user's SLURM_TIME_FORMAT (relative, strftime) would change the times' text
        return subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT_S,
                              check=False, env={**env, "SLURM_TIME_FORMAT": "standard"})
    except subprocess.TimeoutExpired:
        raise NodeEventsError(f"{argv[0]}: no answer in {TIMEOUT_S} s (is slurmctld up, "
                              "SLURM_CONF right?)") from None
    except OSError as exc:
        raise NodeEventsError(f"{argv[0]}: cannot run it ({exc})") from None


def current(env: Mapping[str, str]) -> list[NodeEvent]:
    """The nodes drained or down now. Slurm not reachable is a NodeEventsError. `env`: the
    child's environment (SLURM_CONF, PATH), built at the edge."""
    exe = shutil.which("sinfo", path=env.get("PATH", ""))
    if exe is None:
        raise NodeEventsError("sinfo: not on PATH; Slurm's drain stamps cannot be read "
                              "(install Slurm's client, or leave out --slurm)")
    r = _run(sinfo_argv(exe), env)
    if r.returncode != 0:
        last = (r.stderr.strip().splitlines() or ["no message"])[-1]
        raise NodeEventsError(f"sinfo -R exited {r.returncode}: {last} (is slurmctld up, "
                              "SLURM_CONF right?)")
    return parse_sinfo(r.stdout)


def history(since: float, env: Mapping[str, str]) -> tuple[list[NodeEvent] | None, str]:
    """(events since `since`, "") or (None, why not): without slurmdbd, or when it cannot
    be reached, Slurm keeps no past events and only the open drains are known."""
    exe = shutil.which("sacctmgr", path=env.get("PATH", ""))
    if exe is None:
        return None, "sacctmgr not on PATH: past drains/resumes from Slurm not available"
    r = _run(sacctmgr_argv(since, exe), env)
    if r.returncode != 0:
        why = " ".join(r.stderr.split())[:200] or f"exited {r.returncode}"
        return None, (f"sacctmgr show event: {why} (Slurm accounting, slurmdbd, not "
                      "available): past drains/resumes from Slurm not available")
    return parse_sacctmgr(r.stdout), ""
