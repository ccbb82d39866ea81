"""A node's check under a deadline: what finished keeps its verdict, what did not is an error
that says it timed out; the evidence so far is on disk after every probe; which probe runs is
shown on stderr, never on the machine outcome's stdout. Real processes on simulated nodes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from stetho.evidence import bundle as B
from stetho.evidence.probes import Probe
from stetho.evidence.runner import Environment, Watch, run_all


@pytest.fixture(scope="module")
def hung_node(tmp_path_factory):
    """A simulated 8x H100 node whose nvidia-smi hangs until killed."""
    from stetho.sim.builder import build_node

    return build_node(tmp_path_factory.mktemp("hung") / "node01", "node01", ["hang=nvidia-smi"])


def _check(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "stetho", "check", "--no-history", *args],
                          capture_output=True, text=True, timeout=timeout)


def _rows(doc: dict) -> dict[tuple[str, str], dict]:
    return {(r["check"], r["subject"]): r for r in doc["results"]}


def test_deadline_keeps_what_finished_and_errors_what_did_not(hung_node, tmp_path):
    ev, out = tmp_path / "ev.json", tmp_path / "results.json"
    proc = _check("--local", "--sim", str(hung_node), "--profile", "h100-sxm-8gpu",
                  "--deadline", "4", "--evidence-out", str(ev), "--json", str(out), "-q")
    assert proc.returncode == 3, proc.stdout + proc.stderr
    rows = _rows(json.loads(out.read_text()))
    gpu = rows[("gpu_count", "")]
    assert gpu["status"] == "error" and "timed out" in gpu["message"], gpu
    assert "deadline" in gpu["message"]
    assert rows[("cpu_governor", "")]["status"] == "pass"  # it finished: its real verdict
    assert all(r["status"] == "pass" for k, r in rows.items() if k[0] == "disk_rotational")
    smi = B.load(ev).probes["nvidia_smi"]
    assert smi.status == "timeout" and "4 s deadline" in smi.reason


def test_no_pass_for_a_probe_that_never_finished(tmp_path):
    """A file read blocked in the kernel (a FIFO here, a hung NFS or sysfs read on a node)
    cannot be interrupted: at the deadline it is recorded as timed out and left behind."""
    fifo = tmp_path / "root" / "proc" / "sys" / "kernel"
    fifo.mkdir(parents=True)
    os.mkfifo(fifo / "osrelease")
    (tmp_path / "root" / "etc").mkdir()
    (tmp_path / "root" / "etc" / "hostname").write_text("node01\n")
    probes = (Probe("kernel_release", globs=("/proc/sys/kernel/osrelease",)),
              Probe("hostname", globs=("/etc/hostname",)))
    recs = run_all(probes, Environment(sysroot=str(tmp_path / "root")),
                   watch=Watch.within(0.5))
    assert recs["hostname"].status == "ok"
    assert recs["kernel_release"].status == "timeout"
    assert "timed out: still running at the check's 0.5 s deadline" == \
        recs["kernel_release"].reason


def test_killed_check_leaves_a_partial_bundle_that_fails_closed(hung_node, tmp_path):
    """--evidence-out holds the evidence so far after each probe; a check killed outright
    (the sweep's hard timeout) leaves a readable bundle whose unfinished probes are timed
    out, and a replay of it errors their checks and keeps the rest."""
    ev = tmp_path / "ev.json"
    proc = subprocess.Popen([sys.executable, "-m", "stetho", "check", "--no-history", "--local",
                             "--sim", str(hung_node), "--profile", "h100-sxm-8gpu",
                             "--evidence-out", str(ev), "--outcome", "-"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(600):  # until the governor's read is in the bundle (nvidia-smi hangs)
            if ev.is_file() and B.load(ev).probes["cpu_governor"].status == "ok":
                break
            time.sleep(0.1)
        else:
            raise AssertionError("no partial bundle with cpu_governor")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    partial = B.load(ev)
    assert partial.probes["nvidia_smi"].status == "timeout"
    assert "partial evidence" in partial.probes["nvidia_smi"].reason
    out = tmp_path / "replay.json"
    replay = _check("--evidence", str(ev), "--json", str(out), "-q")
    assert replay.returncode == 3, replay.stdout + replay.stderr
    rows = _rows(json.loads(out.read_text()))
    assert rows[("cpu_governor", "")]["status"] == "pass"
    passed_on_smi = [k for k, r in rows.items() if r["status"] == "pass"
                     and "nvidia-smi" in (r.get("probe") or "")]
    assert not passed_on_smi  # no verdict from a probe that never finished
    assert "timed out" in rows[("gpu_count", "")]["message"]


def test_probe_progress_on_stderr_stdout_stays_clean(tmp_path):
    from stetho.sim.builder import build_node

    node = build_node(tmp_path / "node01", "node01", [])
    proc = _check("--local", "--sim", str(node), "--profile", "h100-sxm-8gpu", "--problems")
    lines = proc.stderr.splitlines()
    assert "probe nvidia_smi ... (timeout 60 s)" in lines, proc.stderr
    assert any(ln.startswith("probe nvidia_smi done ") and ln.endswith(" s") for ln in lines)
    assert "probe nvidia_smi" not in proc.stdout
    machine = _check("--local", "--sim", str(node), "--profile", "h100-sxm-8gpu",
                     "--outcome", "-")
    assert "probe " not in machine.stderr
    json.loads(machine.stdout)  # the outcome, nothing else
    quiet = _check("--local", "--sim", str(node), "--profile", "h100-sxm-8gpu", "-q")
    assert "probe " not in quiet.stderr + quiet.stdout


def test_deadline_is_refused_with_a_replay(tmp_path):
    proc = _check("--evidence", str(tmp_path), "--deadline", "5")
    assert proc.returncode == 2 and "--deadline are for what --local" in proc.stderr



def test_a_sweep_keeps_what_a_killed_check_left(tmp_path):
    """The hard per-host timeout fires before the node's deadline (a check stuck past it): the
    playbook brings back the evidence written so far and the controller judges it. What finished
    keeps its verdict, the probe that never did errors, and the host says it was killed.
    The shipped playbook runs with only its hard limit lowered to 10 s, since a sweep refuses a
    limit shorter than the node's probes (the case this recovery exists for is a check that
    outruns a long enough limit)."""
    import yaml

    from stetho.core.resources import shipped
    from stetho.fleet.sweep import SweepOptions, sweep
    from stetho.sim.builder import build_node

    node = build_node(tmp_path / "sim" / "stuck01", "stuck01", ["hang=nvidia-smi"])
    text = (shipped("playbooks") / "stetho-check.yml").read_text()
    limit = '    stetho_limit_s: "{{ stetho_timeout'
    assert limit in text  # the playbook still sets its hard limit where this test lowers it
    head, tail = text.split(limit, 1)
    playbook = tmp_path / "stetho-check.yml"
    playbook.write_text(head + '    stetho_limit_s: "10"\n    unused_limit: "{{ stetho_timeout'
                        + tail)
    inventory = tmp_path / "inventory.yml"
    host = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
            "stetho_profile": "generic", "stetho_sysroot": str(node / "sysroot"),
            "stetho_path": f"{node / 'bin'}:/usr/local/bin:/usr/bin:/bin",
            "stetho_venv": str(tmp_path / "venvs"), "stetho_python": sys.executable,
            "stetho_etc": str(tmp_path / "etc"), "stetho_deadline": 600}
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {"stuck01": host}}}))
    result = sweep(SweepOptions(inventory=inventory, out=tmp_path / "runs", playbook=playbook,
                                reports=False))
    rows = {(r.check, r.subject): r for r in result.results if r.node == "stuck01"}
    killed = rows[("sweep", "")]
    assert killed.status == "error" and "killed at the per-host timeout" in killed.message
    assert rows[("gpu_count", "")].status == "error"
    assert "timed out" in rows[("gpu_count", "")].message
    disks = [r for (check, _), r in rows.items() if check == "disk_rotational"]
    assert disks and all(r.status == "pass" for r in disks)  # finished before the kill
    smi = [r for r in rows.values() if "nvidia-smi" in (r.probe or "")]
    assert smi and all(r.status == "error" for r in smi)  # never a pass on what never came
    assert (result.run_dir / "hosts" / "stuck01" / "evidence.json").is_file()
    assert result.exit_code == 3
