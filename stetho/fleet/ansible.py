"""The one typed adapter around ansible-runner. No other module sees its kwargs.

Each run gets a fresh private_data_dir (ansible-runner writes `env/envvars` on the first call
and lets that file override later calls with the same dir) and an ident; its artifacts (job
events, stdout, rc, status) stay there as the evidence of what Ansible did. Per-host events
arrive through `on_event` as typed HostEvents, which is what the progress bar and the sweep's
bookkeeping read; nobody parses Ansible's stdout.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stetho.fleet.steps import Steps, of_events

#: Ansible settings that matter for speed and hygiene (see shared TESTBED.md): pipelining is
#: the big lever, ControlPersist reuses connections, and nothing is written to ~/.ansible or
#: ~/.ssh/known_hosts.
FAST_ENV = {
    "ANSIBLE_PIPELINING": "True",
    "ANSIBLE_HOST_KEY_CHECKING": "False",
    "ANSIBLE_SSH_ARGS": "-o ControlMaster=auto -o ControlPersist=60s -o BatchMode=yes "
                        "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null "
                        "-o LogLevel=ERROR",
    "ANSIBLE_RETRY_FILES_ENABLED": "False",
    "ANSIBLE_GATHERING": "explicit",
    "ANSIBLE_TIMEOUT": "10",
    "ANSIBLE_DEPRECATION_WARNINGS": "False",
    "ANSIBLE_LOCALHOST_WARNING": "False",
    "ANSIBLE_INVENTORY_UNPARSED_WARNING": "False",
    "ANSIBLE_PYTHON_INTERPRETER": "auto_silent",
    # ansible-runner drops an event's result above this many bytes; a node's outcome (results,
    # JUnit, compressed evidence) is ~100 KB, twice over (stdout and stdout_lines).
    "MAX_EVENT_RES": "16000000",
}

EventKind = str  # "ok" | "failed" | "unreachable" | "skipped"


@dataclass(frozen=True)
class HostEvent:
    host: str
    task: str
    kind: EventKind
    result: dict[str, Any] = field(default_factory=dict)

    @property
    def message(self) -> str:
        """Ansible's own reason, as short as it can be said."""
        r = self.result
        for key in ("msg", "stderr", "module_stderr", "module_stdout"):
            value = r.get(key)
            if isinstance(value, str) and value.strip():
                return value.strip().splitlines()[-1][:400]
        return f"{self.kind} (no message)"


@dataclass(frozen=True)
class PlaybookRun:
    status: str  # "successful" | "failed" | "timeout" | "canceled"
    rc: int
    stats: dict[str, Any]
    events: list[HostEvent]
    artifacts: Path
    steps: Steps = Steps(0.0, ())  # each task's share of the playbook's time

    def host_events(self, host: str) -> list[HostEvent]:
        return [e for e in self.events if e.host == host]


_KINDS = {"runner_on_ok": "ok", "runner_on_failed": "failed",
          "runner_on_unreachable": "unreachable", "runner_on_skipped": "skipped",
          "runner_item_on_ok": "ok", "runner_item_on_failed": "failed"}
_TIMING = ("task", "host", "start", "end")


def run_playbook(*, playbook: Path, inventory: Path, private_data_dir: Path, ident: str,
                 limit: list[str] | None = None, forks: int = 50,
                 extravars: dict[str, Any] | None = None, envvars: dict[str, str] | None = None,
                 timeout_s: int | None = None,
                 on_event: Callable[[HostEvent], None] | None = None,
                 cancel: Callable[[], bool] | None = None) -> PlaybookRun:
    """Run one playbook and return its outcome; never raises for a node's failure.

    ansible-runner starts ansible-playbook in a session of its own (a pty), so a signal to
    this process never reaches it: `cancel` is asked about once a second, and when it says
    True ansible-runner kills ansible-playbook's whole process group (its forks and their
    connections) and the run's status is "canceled"."""
    try:
        import ansible_runner
    except ImportError as exc:
        from stetho.errors import StethoError

        raise StethoError("the sweep runs Ansible, which is in stetho's controller extra: "
                          "pip install 'stetho[controller]' (nodes need only plain stetho)"
                          ) from exc

    private_data_dir.mkdir(parents=True, exist_ok=True)
    events: list[HostEvent] = []
    timings: list[dict[str, Any]] = []

    def handler(event: dict[str, Any]) -> bool:
        kind = _KINDS.get(str(event.get("event")))
        data = event.get("event_data") or {}
        timings.append({"event": event.get("event"), "created": event.get("created"),
                        "event_data": {k: data.get(k) for k in _TIMING}})
        if kind is not None and data.get("host"):
            ev = HostEvent(host=str(data["host"]), task=str(data.get("task", "")), kind=kind,
                           result=dict(data.get("res") or {}))
            events.append(ev)
            if on_event is not None:
                on_event(ev)
        return True  # keep ansible-runner's job_events/ artifacts

    import os
    import sys

    from stetho import config

    # ansible-playbook from the running Python's environment, even when that venv is not on
    # PATH (`.venv/bin/stetho sweep`).
    path = str(Path(sys.executable).parent) + os.pathsep + (config.active().path or os.defpath)
    control_dir = _short_control_dir(ident)
    env = {**FAST_ENV, "PATH": path, "ANSIBLE_HOME": str(private_data_dir / "ansible-home"),
           "ANSIBLE_SSH_CONTROL_PATH_DIR": control_dir, **(envvars or {})}
    signals = _Signals() if cancel is None else None
    try:
        runner = ansible_runner.run(
            private_data_dir=str(private_data_dir), ident=ident,
            playbook=str(playbook.resolve()), inventory=str(inventory.resolve()),
            limit=",".join(limit) if limit else None, forks=forks, extravars=extravars or {},
            envvars=env, quiet=True, suppress_env_files=True, event_handler=handler,
            timeout=timeout_s, cancel_callback=cancel or (signals and signals.caught),
            settings={"pexpect_timeout": 1},
        )
    finally:  # the masters it left exit on their own (ControlPersist); their sockets go now
        import shutil

        shutil.rmtree(control_dir, ignore_errors=True)
        if signals is not None:
            signals.restore()  # and a signal that canceled the run takes its usual effect
    return PlaybookRun(status=str(runner.status), rc=int(runner.rc or 0),
                       stats=dict(runner.stats or {}), events=events,
                       artifacts=private_data_dir / "artifacts" / ident,
                       steps=of_events(timings))


class _Signals:
    """SIGTERM and SIGINT while a playbook runs for a caller that gave no `cancel`: the run is
    canceled (ansible-playbook's process group killed), then the handlers the caller had come
    back and the signal is raised again, so it does what it would have done. Left to itself,
    ansible-runner installs handlers that only set a flag and never removes them: afterwards
    a SIGTERM no longer ended the process, and a fork of it (a worker pool) inherited them."""

    def __init__(self) -> None:
        import signal
        import threading

        self.signum: int | None = None
        self._before: dict[int, Any] = {}
        if threading.current_thread() is threading.main_thread():  # only it may set them
            for sig in (signal.SIGTERM, signal.SIGINT):
                self._before[sig] = signal.signal(sig, self._on)

    def _on(self, signum: int, _frame: object) -> None:
        self.signum = self.signum or signum

    def caught(self) -> bool:
        return self.signum is not None

    def restore(self) -> None:
        import signal

        for sig, handler in self._before.items():  # None: one set outside Python, unknowable
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
        if self._before and self.signum is not None:
            signal.raise_signal(self.signum)


def _tool(name: str) -> str:
    """An Ansible CLI next to the running Python first (a venv not on PATH), else on PATH."""
    import shutil
    import sys

    local = Path(sys.executable).parent / name
    return str(local) if local.exists() else (shutil.which(name) or name)


def _short_control_dir(ident: str) -> str:
    """A fresh folder for this run's ssh control sockets, with a short path (sun_path is 108
    bytes). Fresh per run: a folder named after the ident alone let a sweep reuse the master
    connections the sweep before it left (ControlPersist), so it was not cold, and two sweeps
    at once shared masters."""
    import tempfile

    return tempfile.mkdtemp(prefix=f"stetho-cp-{ident[-8:]}-")


def inventory_hosts(inventory: Path, limit: list[str] | None = None) -> dict[str, dict[str, Any]]:
    """Every host of an inventory with its variables, from `ansible-inventory --list`. A YAML
    inventory is first checked for size, depth and alias expansion (a bomb would take
    ansible-inventory's memory)."""
    from stetho.core import yamlconf

    if inventory.is_file():
        yamlconf.check_bounds(inventory)
    data = _inventory_list(inventory, limit)
    hostvars = data.get("_meta", {}).get("hostvars", {})
    hosts: set[str] = set(hostvars)
    for group in data.values():
        if isinstance(group, dict):
            hosts.update(group.get("hosts", []))
    return {h: dict(hostvars.get(h, {})) for h in sorted(hosts)}


def inventory_groups(inventory: Path) -> dict[str, list[str]]:
    """Each group that holds hosts directly -> its hosts (`all` and `ungrouped` left out)."""
    data = _inventory_list(inventory, None)
    return {name: list(group["hosts"]) for name, group in data.items()
            if name not in ("_meta", "all", "ungrouped") and isinstance(group, dict)
            and group.get("hosts")}


def _inventory_list(inventory: Path, limit: list[str] | None) -> dict[str, Any]:
    import json
    import subprocess

    from stetho.errors import ConfigError

    argv = [_tool("ansible-inventory"), "-i", str(inventory), "--list"]
    if limit:
        argv += ["--limit", ",".join(limit)]
    env = {"ANSIBLE_INVENTORY_UNPARSED_FAILED": "True", "ANSIBLE_HOME": "/tmp/stetho-ansible",
           "ANSIBLE_DEPRECATION_WARNINGS": "False"}
    from stetho import config

    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=120,
                              env=config.child_environment(env))
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ConfigError(f"inventory {inventory}: ansible-inventory failed: {exc}") from None
    if proc.returncode != 0:
        raise ConfigError(f"inventory {inventory}: {proc.stderr.strip().splitlines()[-1:]}")
    data: dict[str, Any] = json.loads(proc.stdout)
    return data
