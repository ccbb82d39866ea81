"""The CLI end to end, in subprocesses as a user runs it: exit codes, table, JUnit, JSON."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

pytestmark = pytest.mark.xdist_group("faultsim")


def stetho(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None,
           timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "stetho", *args], capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, **(env or {})},
                          cwd=cwd)


def _no_traceback(proc: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in proc.stdout + proc.stderr


def test_local_on_this_machine_without_gpu(tmp_path):
    """The embedded default: this machine, generic profile. GPU checks skip and say why."""
    out = tmp_path / "r.json"
    proc = stetho("check", "--local", "--json", str(out))
    _no_traceback(proc)
    assert proc.returncode in (0, 1), proc.stderr
    results = json.loads(out.read_text())["results"]
    gpu = [r for r in results if r["check"] == "gpu_clocks"]
    assert gpu and all(r["status"] == "skip" for r in gpu)
    assert "nvidia-smi" in gpu[0]["message"] or "GPU" in gpu[0]["message"]
    assert "results:" in proc.stdout


def test_healthy_sim_exit_0_with_junit_and_json(fault_cluster, tmp_path):
    junit, js, ev = tmp_path / "out.xml", tmp_path / "out.json", tmp_path / "bundle.json"
    proc = stetho("check", "--sim", str(fault_cluster / "healthy"), "--profile",
                  "h100-sxm-8gpu", "--junit", str(junit), "--json", str(js),
                  "--evidence-out", str(ev))
    _no_traceback(proc)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads(js.read_text())
    assert doc["schema"] == "stetho.results" and doc["exit_code"] == 0
    assert doc["counts"]["fail"] == 0 and doc["counts"]["pass"] > 90
    root = ET.parse(junit).getroot()
    suites = root.findall("testsuite")
    assert [s.get("name") for s in suites] == ["healthy"]
    cases = suites[0].findall("testcase")
    assert len(cases) == len(doc["results"])
    clocks = next(c for c in cases if c.get("name") == "gpu_clocks[healthy/gpu0]")
    props = {p.get("name"): p.get("value") for p in clocks.iter("property")}
    assert props["status"] == "pass" and props["expected"] == "SM 1980 / mem 2619 MHz"
    assert json.loads(ev.read_text())["schema"] == "stetho.evidence"


def test_failing_node_exit_1_failures_first_and_junit_failure(fault_cluster, tmp_path):
    junit = tmp_path / "out.xml"
    proc = stetho("check", "--sim", str(fault_cluster / "clocks"), "--profile",
                  "h100-sxm-8gpu", "--junit", str(junit))
    _no_traceback(proc)
    assert proc.returncode == 1
    lines = proc.stdout.splitlines()
    body = lines[lines.index(next(ln for ln in lines if ln.startswith("-----"))) + 1:]
    assert "FAIL" in body[0] and "gpu_clocks" in body[0]  # failures first
    assert all(len(ln) <= 80 for ln in lines)  # not a terminal: 80 columns
    case = next(c for c in ET.parse(junit).getroot().iter("testcase")
                if c.get("name") == "gpu_clocks[clocks/gpu3]")
    failure = case.find("failure")
    assert failure is not None and "SM 86 MHz" in failure.get("message")
    assert "-lgc 1980,1980" in failure.text


def test_errors_only_exit_3(fault_cluster, tmp_path):
    """A node whose nvidia-smi prints garbage cannot be evaluated: exit 3, not 0 and not 1."""
    js = tmp_path / "out.json"
    proc = stetho("check", "--sim", str(fault_cluster / "garbage"), "--profile",
                  "h100-sxm-8gpu", "--json", str(js), "-k", "gpu_clocks or cpu_governor",
                  "--no-history")
    _no_traceback(proc)
    assert proc.returncode == 3
    rows = json.loads(js.read_text())["results"]
    assert {r["status"] for r in rows} == {"error", "pass"}


def test_replay_gives_the_same_results_as_live(fault_cluster, tmp_path):
    live, replay, ev = tmp_path / "live.json", tmp_path / "replay.json", tmp_path / "b.json"
    stetho("check", "--sim", str(fault_cluster / "thermal"), "--profile", "h100-sxm-8gpu",
           "--json", str(live), "--evidence-out", str(ev), "--no-history")
    proc = stetho("check", "--evidence", str(ev), "--json", str(replay))
    assert proc.returncode == 1

    def key(path):
        return sorted((r["node"], r["check"], r["subject"], r["status"], r["message"])
                      for r in json.loads(path.read_text())["results"])

    assert key(live) == key(replay)


@pytest.mark.parametrize("args, needle", [
    (["check", "--profile", "no-such-profile"], "unknown profile 'no-such-profile'"),
    (["check", "--evidence", "x.json", "--local"], "cannot be combined"),
    (["check", "--bogus"], "No such option"),
    (["sim", "build", "OUT", "--fault", "node01=melted"], "unknown fault 'melted'"),
    (["sim", "build", "OUT", "--fault", "node09=nvme-rotational"], "not built"),
])
def test_usage_errors_exit_2(tmp_path, args, needle):
    proc = stetho(*[a.replace("OUT", str(tmp_path / "sim")) for a in args])
    _no_traceback(proc)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert needle in proc.stderr


def test_malformed_profile_exit_2_names_file_and_line(tmp_path):
    bad = tmp_path / "bad.yml"
    bad.write_text("profile: bad\nextends: generic\ngpu:\n  count: eight\n")
    proc = stetho("check", "--profile", str(bad))
    _no_traceback(proc)
    assert proc.returncode == 2
    assert f"{bad}:4" in proc.stderr and "gpu.count must be an integer" in proc.stderr


def test_unreadable_evidence_exit_3(tmp_path):
    (tmp_path / "junk.json").write_text("{not json")
    out = tmp_path / "results.json"
    proc = stetho("check", "--evidence", str(tmp_path / "junk.json"), "--json", str(out), "-q")
    _no_traceback(proc)
    # the node's error, not an aborted run (tests/test_replay.py: the same with many nodes)
    assert proc.returncode == 3
    rows = json.loads(out.read_text())["results"]
    assert rows and all("junk.json: cannot read evidence bundle" in r["message"] for r in rows
                        if r["node"] == "junk")
    proc = stetho("check", "--evidence", str(tmp_path / "nothing-here"))
    assert proc.returncode == 3 and "no such file or folder" in proc.stderr


def test_every_command_has_help():
    for cmd in (["--help"], ["check", "--help"], ["sim", "--help"], ["sim", "build", "--help"],
                ["sim", "faults", "--help"], ["collect", "--help"]):
        proc = stetho(*cmd)
        assert proc.returncode == 0 and "Usage:" in proc.stdout, cmd
        assert len(proc.stdout.splitlines()) > 3


def test_sim_faults_physics_says_what_each_fault_breaks():
    """`stetho sim faults --physics`: the hardware side of each fault, written apart from the
    diagnosis rules: a riser's fault leaves the single-node busbw alone (it runs on NVLink)."""
    from stetho.sim import faults, physics

    proc = stetho("sim", "faults", "--physics")
    assert proc.returncode == 0, proc.stderr
    block = proc.stdout.split("\nriser ", 1)[1].split("\nrowremap", 1)[0]
    assert "leaves alone: busbw: the single-node run is on NVLink" in block
    assert "found: riser-pcie-slot (drain)" in block
    assert "found: nothing to fix" in proc.stdout  # busbw-drop alone names no part
    for name in physics.FAULTS:  # every physics entry is a fault the simulator injects
        assert physics.physics(name) and name.split("=")[0] in faults.FAULTS, name


def test_sim_faults_lists_every_fault():
    from stetho.sim.faults import FAULTS

    proc = stetho("sim", "faults")
    assert proc.returncode == 0
    for name in FAULTS:
        assert name in proc.stdout


@pytest.mark.parametrize("extra", [(), ("-n", "2")])
def test_k_matching_no_check_says_so_and_exits_2(fault_bundles, tmp_path, extra):
    """A misspelled -k is a usage error listing the checks, never "0 fail" and exit 0."""
    out = tmp_path / "r.json"
    proc = stetho("check", "--evidence", str(fault_bundles), "-k", "gpu_clokcs", "--json",
                  str(out), "-q", *extra)
    _no_traceback(proc)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "-k 'gpu_clokcs' matches no check; checks are: " in proc.stderr
    assert "gpu_clocks" in proc.stderr.split("checks are: ", 1)[1]
    assert not out.exists()  # no verdict written for a selection of nothing
    ok = stetho("check", "--evidence", str(fault_bundles / "healthy.json"), "-k", "gpu_clocks",
                "-q", *extra)
    assert ok.returncode == 0, ok.stdout + ok.stderr
