"""Progress on stderr for what can take long before any host reports: the sweep's wheelhouse
build, and the gate's live checks through the sweep. Lines in a log (stderr is not a
terminal here), never on stdout, nothing under --quiet.

The inventory's one host is on a port nothing listens on: the sweep builds the wheelhouse
for real, Ansible finds the host unreachable at once, and the run ends quickly."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
import yaml

from tests import sshd as sshd_mod

pytestmark = pytest.mark.xdist_group("sweep")


@pytest.fixture
def gone(tmp_path):
    """An inventory of one unreachable host, and an environment with its own cache."""
    inventory = tmp_path / "inventory.yml"
    host = {"ansible_host": "127.0.0.1", "ansible_port": sshd_mod.free_port(),
            "ansible_user": "root", "stetho_profile": "h100-sxm-8gpu"}
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {"gone01": host}}}))
    env = {**os.environ, "STETHO_CACHE": str(tmp_path / "cache"),
           "STETHO_DB": str(tmp_path / "history.db")}
    return inventory, env


def _stetho(env, *args):
    return subprocess.run([sys.executable, "-m", "stetho", *args], capture_output=True,
                          text=True, timeout=600, env=env)


def _sweep(tmp_path, gone, *args):
    inventory, env = gone
    return _stetho(env, "sweep", "-i", str(inventory), "--out", str(tmp_path / "runs"),
                   "--no-history", *args)


def _steps(stderr):
    return [ln for ln in stderr.splitlines() if ln.startswith(("wheelhouse:", "ansible:", "["))]


def test_the_wheelhouse_build_shows_its_steps_on_stderr(tmp_path, gone):
    first = _sweep(tmp_path, gone)
    assert first.returncode == 3, first.stdout + first.stderr  # the host is unreachable
    steps = _steps(first.stderr)
    assert steps[0].startswith("wheelhouse: building stetho ")
    counted = [ln for ln in steps if " dependency wheels " in ln]
    total = int(re.match(r"wheelhouse: 1/(\d+) dependency wheels", counted[0])[1])
    assert len(counted) == total > 5
    assert counted[-1].startswith(f"wheelhouse: {total}/{total} dependency wheels")
    assert steps[-3].startswith("wheelhouse: ready (0.")
    assert steps[-2:] == ["ansible: checking 1 host (1 at a time)",
                          "[1/1] gone01 done (1 failing so far)"]
    again = _sweep(tmp_path, gone)
    assert _steps(again.stderr)[0].startswith("wheelhouse: ready (cached, 0.")
    assert len(_steps(again.stderr)) == 3
    # stdout is what it was: the table and the run folder, no progress
    for proc in (first, again):
        assert "wheelhouse:" not in proc.stdout and "[1/1]" not in proc.stdout
    assert re.sub(r"runs/\S+", "", first.stdout) == re.sub(r"runs/\S+", "", again.stdout)
    assert "gone01" in first.stdout and "unreachable" in first.stdout


def test_a_quiet_sweep_shows_no_progress(tmp_path, gone):
    proc = _sweep(tmp_path, gone, "--quiet")
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert not _steps(proc.stderr) and "wheelhouse:" not in proc.stderr, proc.stderr
    assert "1 error" in proc.stdout and "run folder: " in proc.stdout
    assert "gone01" not in proc.stdout  # the summary line, not the table


def test_the_gates_live_checks_show_progress_on_stderr(tmp_path, gone):
    inventory, env = gone
    out = tmp_path / "gate.json"
    args = ["gate", "--policy", "pre-job", "--nodes", "gone01", "-i", str(inventory),
            "--out", str(tmp_path / "runs"), "--no-reports", "--json", str(out)]
    proc = _stetho(env, *args)
    assert proc.returncode == 1, proc.stdout + proc.stderr  # pre-job blocks on errors
    steps = _steps(proc.stderr)
    assert steps[0].startswith("wheelhouse: ")
    assert steps[-1] == "[1/1] gone01 done (1 failing so far)"
    assert json.loads(out.read_text())["blocked"] == ["gone01"]
    assert "wheelhouse:" not in proc.stdout and "[1/1]" not in proc.stdout
    quiet = _stetho(env, *args, "-q")
    assert quiet.returncode == 1
    assert not _steps(quiet.stderr) and "wheelhouse:" not in quiet.stderr, quiet.stderr
    assert json.loads(out.read_text())["blocked"] == ["gone01"]


# -- a sweep stopped from outside leaves no ansible-playbook behind ------------------------------

def _playbooks(marker):
    """pids of ansible-playbook processes (and their forks) whose command line names marker."""
    from pathlib import Path

    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            argv = (d / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(a.endswith(b"ansible-playbook") for a in argv) and \
                any(marker.encode() in a for a in argv):
            found.append(int(d.name))
    return found


def _poll(what, deadline_s=120):
    import time

    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        got = what()
        if got:
            return got
        time.sleep(0.2)
    return what()


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT"])
def test_a_killed_sweep_takes_its_ansible_playbook_with_it(tmp_path, sig):
    import signal

    from stetho.sim.builder import build_node

    node = build_node(tmp_path / "sim" / "slow01", "slow01", ["hang=nvidia-smi"])
    inventory = tmp_path / "inventory.yml"
    host = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
            "stetho_profile": "h100-sxm-8gpu", "stetho_sysroot": str(node / "sysroot"),
            "stetho_path": f"{node / 'bin'}:/usr/local/bin:/usr/bin:/bin",
            "stetho_venv": str(tmp_path / "venvs"), "stetho_python": sys.executable,
            "stetho_etc": str(tmp_path / "etc")}
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {"slow01": host}}}))
    marker = str(inventory.resolve())
    proc = subprocess.Popen([sys.executable, "-m", "stetho", "sweep", "-i", str(inventory),
                             "--out", str(tmp_path / "runs"), "--no-history"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert _poll(lambda: _playbooks(marker)), "ansible-playbook never started"
        proc.send_signal(getattr(signal, sig))
        out, err = proc.communicate(timeout=120)
        left = _poll(lambda: not _playbooks(marker), deadline_s=30)
        assert left is True, f"still running: {_playbooks(marker)}"
        assert proc.returncode == 128 + getattr(signal, sig), out + err
        assert f"stetho: sweep interrupted by {sig}: ansible-playbook and its processes " \
               "were killed" in err
        assert "Traceback" not in err
    finally:
        proc.kill()
        for pid in _playbooks(marker):  # what the old code left behind, so it ends here
            os.kill(pid, 9)
