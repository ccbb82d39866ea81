"""Which nodes of a Slurm partition `stetho sweep --via slurm` may check now, and why not the
others: Slurm's own word, read with `scontrol show partition|reservation|node -o` and
`squeue`, so a busy node is never touched.

Only a node Slurm calls plain IDLE is checked (with `--reservation R`: every node of R that
no job holds, MAINT and RESERVED flags allowed). Everything else is listed with why:
- busy (ALLOCATED, MIXED, COMPLETING, a planned or reserved node): a job has it;
- drained (DRAIN, FAIL): someone took it out of service; its reason is shown;
- down (DOWN, NOT_RESPONDING `*`, POWERED_DOWN ...): Slurm cannot reach it now;
- unknown (UNKNOWN, a state this code does not know, a line it cannot read): Slurm's answer
  cannot be trusted, so the node is neither checked nor passed.

Parsing is pure (text in, NodeState out); `query` runs the commands. A state is never guessed:
what is not recognised is `unknown`, which the sweep reports as that node's error.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass

from stetho.core import hostlist
from stetho.errors import ConfigError, EvaluationError

BASE_STATES = {"IDLE", "ALLOCATED", "MIXED", "DOWN", "ERROR", "FUTURE", "UNKNOWN"}
#: Flags that mean a job has (or is about to have) the node.
BUSY_FLAGS = {"COMPLETING", "PLANNED", "RESERVED", "MAINT", "MAINTENANCE"}
DRAIN_FLAGS = {"DRAIN", "DRAINED", "DRAINING", "FAIL", "FAILING"}
DOWN_FLAGS = {"NOT_RESPONDING", "POWERED_DOWN", "POWER_DOWN", "POWERING_DOWN", "POWERING_UP",
              "REBOOT_REQUESTED", "REBOOT_ISSUED", "CLOUD", "INVALID_REG", "BLOCKED"}
#: Single-character suffixes scontrol adds to a state: `*` not responding, `~` powered down ...
SUFFIXES = {"*": "NOT_RESPONDING", "~": "POWERED_DOWN", "#": "POWERING_UP",
            "%": "POWERING_DOWN", "!": "POWER_DOWN", "@": "REBOOT_REQUESTED",
            "^": "REBOOT_ISSUED", "$": "MAINT", "-": "PLANNED"}
KINDS = ("check", "busy", "drained", "down", "unknown")
_FIELD = re.compile(r"(?:^|\s)([A-Za-z]+)=(\S*)")


class SlurmQueryError(EvaluationError):
    """scontrol or squeue could not answer: nothing is checked, nothing judged."""


@dataclass(frozen=True)
class NodeState:
    """One node as Slurm sees it now: its `kind` (one of KINDS) and why, in words."""

    name: str
    state: str  # Slurm's own text: IDLE, MIXED+DRAIN, DOWN*, ...
    kind: str
    why: str = ""
    jobs: tuple[str, ...] = ()  # the jobs Slurm says hold it (busy)


def fields(line: str) -> dict[str, str]:
    """The Key=Value fields of one `-o` line before its free-text Reason (first one wins)."""
    head = re.split(r"(?:^|\s)Reason=", line, maxsplit=1)[0]
    out: dict[str, str] = {}
    for m in _FIELD.finditer(head):
        out.setdefault(m.group(1), m.group(2))
    return out


def reason_of(line: str) -> str:
    """The free-text Reason of a node line, without Slurm's ` [user@time]` stamp."""
    parts = re.split(r"(?:^|\s)Reason=", line, maxsplit=1)
    if len(parts) < 2:
        return ""
    return re.sub(r"\s\[[^\]]*@[^\]]*\]\s*$", "", parts[1].strip())[:200]


def flags_of(state: str) -> tuple[str, set[str]]:
    """`DOWN*+DRAIN` -> ("DOWN", {"NOT_RESPONDING", "DRAIN"}); ValueError on what is not one."""
    parts = [p for p in state.strip().upper().split("+")]
    if not parts or not parts[0]:
        raise ValueError("empty state")
    flags: set[str] = set()
    cleaned = []
    for p in parts:
        while p and p[-1] in SUFFIXES:
            flags.add(SUFFIXES[p[-1]])
            p = p[:-1]
        if not re.fullmatch(r"[A-Z_]+", p):
            raise ValueError(f"{state!r} is not a Slurm node state")
        cleaned.append(p)
    base = cleaned[0]
    flags |= set(cleaned[1:])
    if base in DRAIN_FLAGS:  # sinfo's long names: drained, draining
        base, flags = "IDLE", flags | {"DRAIN"}
    return base, flags


def classify(name: str, state: str, reason: str = "", *, reservation: str | None = None,
             jobs: Mapping[str, list[str]] | None = None) -> NodeState:
    """What the sweep does with this node: check it, or list it as busy/drained/down/unknown."""
    try:
        base, flags = flags_of(state)
    except ValueError as exc:
        return NodeState(name, state, "unknown", f"Slurm's state {exc}")
    held = (jobs or {}).get(name, [])
    said = f" ({reason})" if reason else ""
    if base not in BASE_STATES or base == "UNKNOWN" or not flags <= (
            BUSY_FLAGS | DRAIN_FLAGS | DOWN_FLAGS):
        return NodeState(name, state, "unknown", f"Slurm says {state}{said}: a state this sweep "
                         "cannot judge safely")
    if base in ("ALLOCATED", "MIXED") or held or "COMPLETING" in flags:
        what = (f"job{'s' if len(held) > 1 else ''} {', '.join(held[:3])} running" if held
                else f"Slurm says {state}")
        return NodeState(name, state, "busy", what, tuple(held))
    if flags & DRAIN_FLAGS:
        return NodeState(name, state, "drained", f"Slurm says {state}{said}")
    if base in ("DOWN", "ERROR", "FUTURE") or flags & DOWN_FLAGS:
        return NodeState(name, state, "down", f"Slurm says {state}{said}")
    if flags & BUSY_FLAGS and reservation is None:
        return NodeState(name, state, "busy", f"Slurm says {state}: reserved or a job is "
                         "planned here")
    if "PLANNED" in flags:
        return NodeState(name, state, "busy", f"Slurm says {state}: a job is planned here")
    return NodeState(name, state, "check")


def parse_nodes(text: str, wanted: list[str], *, reservation: str | None = None,
                jobs: Mapping[str, list[str]] | None = None) -> dict[str, NodeState]:
    """`scontrol show node -o` -> NodeState for each wanted node; a wanted node with no line,
    or with one that has no State, is `unknown` (never idle)."""
    seen: dict[str, NodeState] = {}
    for line in text.splitlines():
        f = fields(line)
        name = f.get("NodeName", "")
        if name not in wanted or name in seen:
            continue
        if not f.get("State"):
            seen[name] = NodeState(name, "", "unknown", "Slurm gave no State for it")
            continue
        seen[name] = classify(name, f["State"], reason_of(line), reservation=reservation,
                              jobs=jobs)
    for name in wanted:
        seen.setdefault(name, NodeState(name, "", "unknown", "Slurm did not describe it "
                                        "(scontrol show node)"))
    return {n: seen[n] for n in wanted}


def parse_jobs(text: str) -> dict[str, list[str]]:
    """`squeue -h -o '%i %N'` -> node -> the job ids on it. SlurmQueryError on garbage."""
    out: dict[str, list[str]] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.split()
        if len(parts) != 2 or not re.fullmatch(r"\d+(?:[_+][\d\[\]-]+)?", parts[0]):
            raise SlurmQueryError(f"squeue printed {line[:120]!r}, not '<job id> <nodes>'")
        try:
            nodes = hostlist.expand(parts[1])
        except ConfigError as exc:
            raise SlurmQueryError(f"squeue: node list {parts[1]!r}: {exc}") from None
        for n in nodes:
            out.setdefault(n, []).append(parts[0])
    return out


def _one(kind: str, name: str, text: str) -> dict[str, str]:
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if len(lines) != 1:
        raise ConfigError(f"{kind} {name}: scontrol printed {len(lines)} records, not one")
    return fields(lines[0])


@dataclass(frozen=True)
class Plan:
    """The partition's nodes as Slurm says now: those to check and the rest, with why."""

    partition: str
    reservation: str | None
    nodes: dict[str, NodeState]

    def of(self, kind: str) -> list[str]:
        return [n for n, s in self.nodes.items() if s.kind == kind]


def query(partition: str, reservation: str | None, env: Mapping[str, str],
          timeout_s: float = 60) -> Plan:
    """Ask Slurm for the partition (and reservation) and classify every node in it."""
    p = _one("partition", partition, _run(["scontrol", "show", "partition", partition, "-o"],
                                          env, timeout_s, f"partition {partition}"))
    try:
        nodes = hostlist.expand(p.get("Nodes", "")) if p.get("Nodes") not in ("", "(null)") \
            else []
    except ConfigError as exc:
        raise SlurmQueryError(f"partition {partition}: Nodes={p.get('Nodes')}: {exc}") from None
    if reservation is not None:
        r = _one("reservation", reservation, _run(
            ["scontrol", "show", "reservation", reservation, "-o"], env, timeout_s,
            f"reservation {reservation}"))
        if r.get("State", "").upper() != "ACTIVE":
            raise ConfigError(f"reservation {reservation} is not active (State="
                              f"{r.get('State', '?')}): srun would wait for it")
        try:
            held = set(hostlist.expand(r.get("Nodes", "")))
        except ConfigError as exc:
            raise SlurmQueryError(f"reservation {reservation}: Nodes: {exc}") from None
        nodes = [n for n in nodes if n in held]
    if not nodes:
        raise ConfigError(f"partition {partition}"
                          f"{' in reservation ' + reservation if reservation else ''} "
                          "has no nodes")
    listed = hostlist.compress(nodes)
    jobs = parse_jobs(_run(["squeue", "--noheader", "--states=RUNNING,COMPLETING,CONFIGURING,"
                            "SUSPENDED,STOPPED", "--format=%i %N", "--nodelist", listed],
                           env, timeout_s, "running jobs"))
    text = _run(["scontrol", "show", "node", "-o", listed], env, timeout_s, "nodes")
    return Plan(partition, reservation, parse_nodes(text, nodes, reservation=reservation,
                                                    jobs=jobs))


def _run(argv: list[str], env: Mapping[str, str], timeout_s: float, what: str) -> str:
    exe = shutil.which(argv[0], path=env.get("PATH"))
    if exe is None:
        raise SlurmQueryError(f"{argv[0]} not found on PATH: is Slurm installed here and "
                              "SLURM_CONF set?")
    try:
        r = subprocess.run([exe, *argv[1:]], env=dict(env), capture_output=True, text=True,
                           timeout=timeout_s, stdin=subprocess.DEVNULL, errors="replace")
    except subprocess.TimeoutExpired:
        raise SlurmQueryError(f"{' '.join(argv[:3])}: no answer in {timeout_s:g} s "
                              "(slurmctld unreachable?)") from None
    if r.returncode != 0:
        err = (r.stderr.strip() or r.stdout.strip() or f"exit {r.returncode}")[:300]
        if "not found" in err or "Invalid" in err:
            raise ConfigError(f"{what}: Slurm says: {err}")
        raise SlurmQueryError(f"{' '.join(argv[:3])} failed: {err}")
    return r.stdout
