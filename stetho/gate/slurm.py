"""Scheduler actions for the gate: drain the nodes it blocks in Slurm, resume only its own drains.

The gate's verdict is only useful if the scheduler stops placing jobs on a bad node, so stetho
can drain it (`scontrol update ... State=DRAIN Reason=...`). Draining is shared ground with
the people who run the cluster, and two rules keep stetho from trampling them:

* every reason stetho writes starts with ``stetho:`` (REASON_PREFIX), and `resume` only
  resumes nodes whose *current* reason starts with it. A node a person drained (an RMA, a
  maintenance window) is never resumed by stetho, however healthy it now looks;
* a node a person already drained is not re-drained either, since that would overwrite their
  reason (and make the node look like stetho's, so a later resume would undo their drain);
* a node stetho already drained keeps its first reason and stamp (a new reason would stamp
  it "now", and the breaker would count an old drain as recent for good); the drain budget
  (stetho.gate.drains), which decides whether a drain may happen at all, logs the repeat.

The default is a dry run (act=False): nothing changes, and each Action carries the argv that
would run, so a CI gate can print its plan. The current state is still read with the
read-only `scontrol show node -o` (stetho.gate.slurm_state parses it), because the plan
depends on it (whose drain it is).

Commands are argv lists run without a shell; node names are validated first (only letters,
digits, '.', '_', '-'), and a bad name refuses the whole call before any command runs.
Failures (no scontrol, controller unreachable, scontrol refusing) become a failed Action per
node with scontrol's stderr in its message: a gate run must report them, not crash on them.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import time
import unicodedata
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Literal

from stetho.core import hostlist
from stetho.core.record import record
from stetho.errors import ConfigError, StethoError
from stetho.gate.slurm_state import _NOT_FOUND
from stetho.gate.slurm_state import REASON_PREFIX as REASON_PREFIX  # where callers find them
from stetho.gate.slurm_state import NodeInfo as NodeInfo
from stetho.gate.slurm_state import parse_show_node as parse_show_node

#: Slurm keeps longer reasons, but sinfo/squeue columns and people's eyes do not.
MAX_REASON = 200
#: Nodes per `scontrol show node` call: keeps argv short on big clusters.
SHOW_CHUNK = 200
#: Seconds a state read ahead (Slurm.read_ahead) is used for after it was asked for: a gate
#: from history uses it within a second; one whose live checks ran for minutes asks again
#: (a person may have drained a node meanwhile, and stetho never overwrites their reason).
AHEAD_FRESH_S = 5.0

ActionKind = Literal["drain", "resume", "skip"]


class SlurmError(StethoError):
    """scontrol could not be run or did not answer (missing, timed out, controller down)."""


@record
class Action:
    """What stetho did (or, in a dry run, would do) to one node.

    kind: "drain" / "resume" when stetho acts (or tried to), "skip" when it chose not to
    (a person's drain, nothing to do). argv: the command that ran or would run; () when none.
    done: the command ran and scontrol returned 0. failed: something went wrong (the state
    could not be read, the node is unknown, scontrol refused); the message says what.
    """

    node: str
    kind: ActionKind
    argv: tuple[str, ...]
    done: bool
    message: str
    failed: bool = False

    def to_json(self) -> dict[str, object]:
        return {"node": self.node, "kind": self.kind, "argv": list(self.argv),
                "done": self.done, "message": self.message, "failed": self.failed}


# -- reasons and command lines -------------------------------------------------------------------

_QUOTES = str.maketrans({'"': "'", "`": "'", "\u2018": "'", "\u2019": "'", "\u201c": "'",
                         "\u201d": "'", "\u00b4": "'"})


def _clean(text: str) -> str:
    """One printable line: control characters (newlines above all: a newline splits the
    reason over lines of `scontrol show node` output) become spaces, runs of spaces collapse,
    quotes become plain single quotes (a reason is copied into shell commands by people)."""
    text = text.translate(_QUOTES)
    text = "".join(" " if unicodedata.category(ch).startswith("C") else ch for ch in text)
    return " ".join(text.split())


def _cap(text: str, limit: int = MAX_REASON) -> str:
    return text if len(text) <= limit else text[: limit - 3].rstrip() + "..."


def drain_reason(check: str, summary: str) -> str:
    """'stetho: <check>: <summary>', one clean line of at most MAX_REASON characters, so that
    a person reading `sinfo -R` sees who drained the node and why, and resume can tell the
    drain is stetho's."""
    check, summary = _clean(check), _clean(summary)
    body = f"{check}: {summary}" if summary else check
    return _cap(f"{REASON_PREFIX} {body}".rstrip())


def _as_stetho_reason(reason: str) -> str:
    """Any reason stetho writes carries the prefix, even one a caller built by hand: without
    it stetho could never resume the node it drained."""
    reason = _clean(reason)
    if not reason.startswith(REASON_PREFIX):
        reason = f"{REASON_PREFIX} {reason}".rstrip()
    return _cap(reason)


def _valid(node: str) -> str:
    """hostlist.validate, plus a whole-string match: its pattern ends in `$`, which also
    matches before a trailing newline, and a newline must never reach scontrol's argv."""
    hostlist.validate(node)
    if not hostlist.NAME.fullmatch(node):
        raise ConfigError(f"invalid node name {node!r}: only letters, digits, '.', '_' and '-' "
                          "are allowed")
    return node


def drain_argv(node: str, reason: str) -> list[str]:
    """The drain command as argv (no shell, so the reason needs no quoting)."""
    _valid(node)
    return ["scontrol", "update", f"NodeName={node}", "State=DRAIN", f"Reason={reason}"]


def resume_argv(node: str) -> list[str]:
    _valid(node)
    return ["scontrol", "update", f"NodeName={node}", "State=RESUME"]


# -- running scontrol ----------------------------------------------------------------------------


def _which(name: str, path: str) -> str | None:
    """The first executable file `name` on `path` (shutil.which's answer on POSIX, without
    importing shutil, bz2 and lzma on every gate's path): an empty PATH finds nothing."""
    for folder in path.split(os.pathsep) if path else ():
        candidate = os.path.join(folder or os.curdir, name)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


class Slurm:
    """Drain and resume nodes through scontrol.

    act: False is a dry run (nothing changes; Actions say what would run). env: variables
    laid over this process's environment for scontrol (SLURM_CONF, PATH, ...); PATH there
    is where `scontrol` is looked up. timeout_s: per scontrol call; an unreachable controller
    otherwise holds scontrol for its own retry time.
    """

    def __init__(self, *, act: bool, scontrol: str = "scontrol",
                 env: Mapping[str, str] | None = None, timeout_s: float = 30) -> None:
        self.act = act
        self.scontrol = scontrol
        from stetho import config

        self.env: dict[str, str] = config.child_environment(env)
        self.timeout_s = timeout_s
        #: read_ahead's scontrol calls: the nodes asked for, each chunk's (argv, chunk, the
        #: running scontrol or why it could not start), and, once collected, the answer
        self._ahead: tuple[frozenset[str], list[tuple[tuple[str, ...], list[str],
                                                      subprocess.Popen[str] | SlurmError]]
                           ] | None = None
        self._ahead_state: dict[str, NodeInfo] | SlurmError | None = None
        self._ahead_at = 0.0

    # - plumbing -

    def _argv(self, argv: list[str]) -> tuple[str, ...]:
        """A module-level argv (which says "scontrol") with this instance's scontrol."""
        return (self.scontrol, *argv[1:])

    def _resolve(self) -> str:
        if os.sep in self.scontrol:
            if os.access(self.scontrol, os.X_OK) and os.path.isfile(self.scontrol):
                return self.scontrol
            raise SlurmError(f"scontrol {self.scontrol!r} does not exist or is not executable")
        found = _which(self.scontrol, self.env.get("PATH", os.defpath))
        if found is None:
            raise SlurmError(f"{self.scontrol!r} not found on PATH "
                             f"({self.env.get('PATH', os.defpath)}): is Slurm installed here?")
        return found

    def _run(self, argv: tuple[str, ...], extra_env: Mapping[str, str] | None = None
             ) -> subprocess.CompletedProcess[str]:
        exe = self._resolve()
        env = {**self.env, **(extra_env or {})}
        try:
            return subprocess.run([exe, *argv[1:]], env=env, capture_output=True, text=True,
                                  timeout=self.timeout_s, stdin=subprocess.DEVNULL, check=False)
        except subprocess.TimeoutExpired as e:
            raise SlurmError(f"`{shlex.join(argv)}` timed out after {self.timeout_s:g}s "
                             "(is slurmctld reachable?)") from e
        except OSError as e:
            raise SlurmError(f"`{shlex.join(argv)}` could not be run: {e}") from e

    # - reading -

    def show(self, nodes: Iterable[str]) -> dict[str, NodeInfo]:
        """The current state of these nodes (those Slurm does not know are absent): what
        `read_ahead` read, where it asked for all of them and nothing was done to a node since.

        Raises ConfigError for an invalid name, SlurmError when scontrol cannot answer."""
        names = [_valid(n) for n in nodes]
        if self._ahead is not None and time.monotonic() - self._ahead_at > AHEAD_FRESH_S:
            self.close()  # e.g. a gate's live checks ran meanwhile: that answer is too old
        if self._ahead is not None and self._ahead[0].issuperset(names):
            state = self._collect_ahead()
            return {n: state[n] for n in names if n in state}
        out: dict[str, NodeInfo] = {}
        for i in range(0, len(names), SHOW_CHUNK):
            chunk = names[i:i + SHOW_CHUNK]
            argv = self._show_argv(chunk)
            r = self._run(argv, _SHOW_ENV)
            out.update(_chunk_state(argv, chunk, r.returncode, r.stdout, r.stderr))
        return out

    def read_ahead(self, nodes: Iterable[str]) -> None:
        """Start asking scontrol for these nodes' state now, and go on: a gate reads history
        meanwhile (on the other core; a real slurmctld takes tens of ms to answer), and its
        drains and resumes then read the answer through `show`. Errors (scontrol missing,
        refusing, timing out) are raised by that `show`, as if it had asked. The answer
        holds for AHEAD_FRESH_S and until this Slurm runs a command on a node (`--act`);
        then `show` asks again. `close` ends an answer never asked for."""
        self.close()
        names = list(dict.fromkeys(_valid(n) for n in nodes))
        started = []
        for i in range(0, len(names), SHOW_CHUNK):
            chunk = names[i:i + SHOW_CHUNK]
            argv = self._show_argv(chunk)
            try:
                proc: subprocess.Popen[str] | SlurmError = subprocess.Popen(
                    [self._resolve(), *argv[1:]], env={**self.env, **_SHOW_ENV},
                    stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                    text=True)
            except SlurmError as e:
                proc = e
            except OSError as e:
                proc = SlurmError(f"`{shlex.join(argv)}` could not be run: {e}")
            started.append((argv, chunk, proc))
        self._ahead = (frozenset(names), started)
        self._ahead_at = time.monotonic()

    def close(self) -> None:
        """Stop and reap what `read_ahead` started and nobody read."""
        ahead, self._ahead, self._ahead_state = self._ahead, None, None
        for _, _, proc in ahead[1] if ahead is not None else ():
            if isinstance(proc, subprocess.Popen):
                if proc.poll() is None:
                    proc.kill()
                proc.communicate()

    def _collect_ahead(self) -> dict[str, NodeInfo]:
        if self._ahead_state is None:
            assert self._ahead is not None
            known: dict[str, NodeInfo] = {}
            failed: SlurmError | None = None
            for argv, chunk, proc in self._ahead[1]:
                if isinstance(proc, SlurmError):
                    failed = proc
                    break
                try:
                    out, err = proc.communicate(timeout=self.timeout_s)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.communicate()
                    failed = SlurmError(f"`{shlex.join(argv)}` timed out after "
                                        f"{self.timeout_s:g}s (is slurmctld reachable?)")
                    break
                try:
                    known.update(_chunk_state(argv, chunk, proc.returncode, out, err))
                except SlurmError as e:
                    failed = e
                    break
            self._ahead_state = known if failed is None else failed
        if isinstance(self._ahead_state, SlurmError):
            raise SlurmError(str(self._ahead_state))
        return self._ahead_state

    def _show_argv(self, chunk: list[str]) -> tuple[str, ...]:
        return (self.scontrol, "show", "node", "-o", ",".join(chunk))

    def show_all(self) -> dict[str, NodeInfo]:
        """Every node the controller knows: the scope of a node's own health check, whose
        circuit breaker counts the whole cluster's recent drains."""
        argv = (self.scontrol, "show", "node", "-o")
        r = self._run(argv, _SHOW_ENV)
        if r.returncode != 0:
            raise SlurmError(f"`{shlex.join(argv)}` exited {r.returncode}: "
                             f"{_oneline(r.stderr or r.stdout)}")
        return parse_show_node(r.stdout)

    # - acting -

    def drain(self, blocked: Mapping[str, str]) -> list[Action]:
        """Drain each blocked node (node -> reason), unless a person drained it already (or set
        it DOWN with a reason of their own), or stetho did (its first reason and time stay).

        Reasons are made stetho's (prefix, one line, capped) whatever the caller passed."""
        plan = {_valid(n): _as_stetho_reason(r) for n, r in blocked.items()}
        state, error = self._state(list(plan))
        actions: list[Action] = []
        for node, reason in plan.items():
            if error is not None:
                actions.append(self._unread(node, "drain", drain_argv(node, reason), error,
                                            "unless someone else drained it"))
                continue
            info = state.get(node)
            if info is None:
                actions.append(Action(node, "drain", (), False,
                                      f"{node}: not drained: Slurm does not know this node "
                                      "(`scontrol show node` found nothing)", failed=True))
                continue
            if info.reason and not info.reason.startswith(REASON_PREFIX):
                # a person's drain (or DOWN) with their reason: draining would overwrite it,
                # and make the node look like stetho's to a later resume
                by = "drained" if info.drained else "marked"
                actions.append(Action(node, "skip", (), False,
                                      f"{node}: already {by} by someone else (State="
                                      f"{info.state}, Reason={info.reason!r}): left as it is, "
                                      "stetho does not overwrite a person's reason"))
                continue
            if info.drained_by_stetho:
                when = info.reason_time
                since = "" if when is None else f" since {datetime.fromtimestamp(when).isoformat()}"
                actions.append(Action(node, "skip", (), False, f"{node}: already drained by "
                                      f"stetho{since} (Reason={info.reason!r}): first reason "
                                      "kept"))
                continue
            actions.append(self._do(node, "drain", self._argv(drain_argv(node, reason)),
                                    "drained"))
        return actions

    def refuse_unread(self, blocked: Iterable[str], error: str) -> list[Action]:
        """A drain that cannot go ahead (Slurm or the drain ledger unreadable): says why."""
        return [self._unread(n, "drain", drain_argv(_valid(n), REASON_PREFIX), error,
                             "unless someone else drained it") for n in blocked]

    def cluster_name(self) -> str:
        """Slurm's ClusterName (`scontrol show config`): the drain budget's scope."""
        r = self._run(argv := (self.scontrol, "show", "config"))
        found = [v.strip() for k, _, v in (x.partition("=") for x in r.stdout.splitlines())
                 if k.strip() == "ClusterName" and v.strip()]
        if found:
            return found[0]
        raise SlurmError(f"`{shlex.join(argv)}` exited {r.returncode} without a ClusterName: "
                         f"{_oneline(r.stderr or r.stdout)[:200]}")

    def resume(self, nodes: list[str]) -> list[Action]:
        """Resume the nodes stetho drained (current reason starts with "stetho:"); leave a
        person's drain alone, and do nothing to a node that is not drained."""
        names = list(dict.fromkeys(_valid(n) for n in nodes))  # once each, in order
        state, error = self._state(names)
        actions: list[Action] = []
        for node in names:
            if error is not None:
                actions.append(self._unread(node, "resume", resume_argv(node), error,
                                            "if stetho drained it"))
                continue
            info = state.get(node)
            if info is None:
                actions.append(Action(node, "resume", (), False,
                                      f"{node}: not resumed: Slurm does not know this node "
                                      "(`scontrol show node` found nothing)", failed=True))
            elif not info.drained:
                actions.append(Action(node, "skip", (), False,
                                      f"{node}: not drained (State={info.state}): "
                                      "nothing to resume"))
            elif not info.drained_by_stetho:
                actions.append(Action(node, "skip", (), False,
                                      f"{node}: drained by someone else (Reason="
                                      f"{info.reason!r}): left drained, stetho resumes only "
                                      f"its own drains (reason starting {REASON_PREFIX!r})"))
            else:
                actions.append(self._do(node, "resume", self._argv(resume_argv(node)),
                                        "resumed"))
        return actions

    def _state(self, nodes: list[str]) -> tuple[dict[str, NodeInfo], str | None]:
        if not nodes:
            return {}, None
        try:
            return self.show(nodes), None
        except SlurmError as e:
            return {}, str(e)

    def _unread(self, node: str, kind: ActionKind, argv: list[str], error: str,
                condition: str) -> Action:
        """The state could not be read. Acting blind could overwrite a person's drain, so
        nothing runs and the Action fails; a dry run still shows its plan (a gate's dry run
        on a machine without Slurm is useful), saying the state is unknown."""
        if self.act:
            done = "drained" if kind == "drain" else "resumed"
            return Action(node, kind, (), False, f"{node}: not {done}: could not read its "
                          f"state in Slurm: {error}", failed=True)
        full = self._argv(argv)
        return Action(node, kind, full, False,
                      f"{node}: dry run, would run {condition}: {shlex.join(full)} "
                      f"(its current state could not be read: {error})")

    def _do(self, node: str, kind: ActionKind, argv: tuple[str, ...], what: str) -> Action:
        shown = shlex.join(argv)
        if not self.act:
            return Action(node, kind, argv, False, f"{node}: dry run, would run: {shown}")
        self.close()  # a node changes: what was read ahead no longer says how things stand
        try:
            r = self._run(argv)
        except SlurmError as e:
            return Action(node, kind, argv, False, f"{node}: {kind} failed: {e}", failed=True)
        if r.returncode != 0:
            return Action(node, kind, argv, False,
                          f"{node}: {kind} failed: `{shown}` exited {r.returncode}: "
                          f"{_oneline(r.stderr or r.stdout) or '(no output)'}", failed=True)
        return Action(node, kind, argv, True, f"{node}: {what} (`{shown}`)")


#: a fixed time format: the reason's ` [user@time]` stamp is how a reason is parsed
_SHOW_ENV = {"SLURM_TIME_FORMAT": "standard"}


def _chunk_state(argv: tuple[str, ...], chunk: list[str], code: int, stdout: str, stderr: str
                 ) -> dict[str, NodeInfo]:
    """One `scontrol show node -o CHUNK`'s answer: the chunk's nodes Slurm knows. A non-zero
    exit with anything besides nodes and "Node X not found" lines is SlurmError."""
    stray = [x for x in (stdout + "\n" + stderr).splitlines()
             if x.strip() and not x.startswith(("NodeName=", " "))
             and not _NOT_FOUND.match(x.strip())]
    if code != 0 and stray:
        raise SlurmError(f"`{shlex.join(argv)}` exited {code}: {_oneline(stderr or stdout)}")
    return {k: v for k, v in parse_show_node(stdout).items() if k in chunk}


def _oneline(text: str) -> str:
    return " ".join(text.split())[:500]
