"""A probe leaves nothing behind: whatever it forked (here a child that ignores SIGTERM)
dies with it, when its timeout or the check's deadline stops it, when it exits first, and when
the Slurm hook's watchdog ends the gate (issue 28: three hung processes were left per run)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from stetho.evidence.probes import Probe
from stetho.evidence.runner import Environment, Watch, run, run_all


def _tool(tmp_path: Path, then: str) -> tuple[Path, Path]:
    """A fake tool on PATH that forks a child ignoring SIGTERM (its pid in a file, written
    before the tool goes on), then runs `then`."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    pidfile = tmp_path / "child.pid"
    tool = bin_dir / "stubborn"
    tool.write_text(
        "#!/bin/sh\n"
        f"sh -c 'trap \"\" TERM; echo $$ > {pidfile}; exec sleep 300' "
        "</dev/null >/dev/null 2>&1 &\n"
        f"while [ ! -s {pidfile} ]; do sleep 0.05; done\n"
        f"{then}\n")
    tool.chmod(0o755)
    return bin_dir, pidfile


def _alive(pid: int) -> bool:
    """Running (a zombie awaiting its reaper is dead), per /proc."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def _gone(pid: int) -> bool:
    for _ in range(100):  # a killed orphan is reaped by init: poll, do not sleep blindly
        if not _alive(pid):
            return True
        time.sleep(0.05)
    return False


def _running_from(bin_dir: Path) -> list[int]:
    """Live processes whose command line names the fake tool in `bin_dir`."""
    found = []
    for entry in os.listdir("/proc"):
        try:
            if entry.isdigit() and str(bin_dir).encode() in Path(
                    f"/proc/{entry}/cmdline").read_bytes() and _alive(int(entry)):
                found.append(int(entry))
        except OSError:
            continue
    return found


def _reap(pid: int) -> None:
    if _alive(pid):
        os.kill(pid, 9)


def test_a_hung_probe_is_killed_with_what_it_forked_at_its_timeout(tmp_path):
    bin_dir, pidfile = _tool(tmp_path, "exec sleep 300")
    env = Environment(path=f"{bin_dir}:{os.defpath}")
    rec = run(Probe("stubborn", argv=("stubborn",), timeout_s=1.0), env)
    child = int(pidfile.read_text())
    try:
        assert rec.status == "timeout", rec
        assert _gone(child), f"the probe's child {child} outlived it"
    finally:
        _reap(child)


def test_the_checks_deadline_kills_the_probe_and_what_it_forked(tmp_path):
    bin_dir, pidfile = _tool(tmp_path, "exec sleep 300")
    env = Environment(path=f"{bin_dir}:{os.defpath}")
    recs = run_all((Probe("stubborn", argv=("stubborn",), timeout_s=60.0),), env,
                   watch=Watch.within(1.0))
    child = int(pidfile.read_text())
    try:
        assert recs["stubborn"].status == "timeout", recs
        assert "deadline" in recs["stubborn"].reason
        assert _gone(child), f"the probe's child {child} outlived the deadline"
    finally:
        _reap(child)


def test_a_probe_that_exits_leaves_no_background_child(tmp_path):
    bin_dir, pidfile = _tool(tmp_path, "echo done")
    env = Environment(path=f"{bin_dir}:{os.defpath}")
    rec = run(Probe("stubborn", argv=("stubborn",), timeout_s=30.0), env)
    child = int(pidfile.read_text())
    try:
        assert rec.status == "ok" and rec.stdout.strip() == "done", rec
        assert _gone(child), f"the probe exited and left {child} running"
    finally:
        _reap(child)


WATCHED = """
import sys
from stetho.evidence.probes import Probe
from stetho.evidence.runner import Environment, run
from stetho.gate.slurm_hooks import watchdog

with watchdog("node1", 1.0, drain=False):
    run(Probe("stubborn", argv=("stubborn",), timeout_s=60.0), Environment(path=sys.argv[1]))
print("the watchdog did not fire")
"""


def test_the_watchdog_kills_every_running_probe_group_before_it_ends_the_gate(tmp_path):
    """The health-check/prolog watchdog ends the process with os._exit: the probes run in
    their own sessions, so unless it kills their groups they (and their children) stay."""
    bin_dir, pidfile = _tool(tmp_path, "exec sleep 300")
    done = subprocess.run([sys.executable, "-c", WATCHED, f"{bin_dir}:{os.defpath}"],
                          capture_output=True, text=True, timeout=120)
    child = int(pidfile.read_text())
    try:
        assert done.returncode == 3, done.stdout + done.stderr
        assert "COULD NOT EVALUATE node1" in done.stdout
        assert _gone(child), f"the watchdog fired and left the probe's child {child} running"
        assert not _running_from(bin_dir), "the hung probe itself outlived the watchdog"
    finally:
        _reap(child)
