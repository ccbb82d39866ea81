"""The sweep for real: Ansible over real SSH to hosts on loopback, each with its own simulated
node (sysroot and shims through host vars), stetho really installed into each host's venv."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import yaml

from tests import sshd as sshd_mod

pytestmark = pytest.mark.xdist_group("sweep")

FAULTY = {"node06": "nvme-rotational", "node07": "hca-fw-old", "node08": "busbw-drop=20"}
HEALTHY = ["node01", "node02", "node03", "node04", "node05"]


def _sim_host(sshd, root, name, faults, venv=None):
    """A loopback inventory host over the test sshd with its own simulated H100 node."""
    from stetho.sim.builder import build_node

    node = build_node(root / "sim" / name, name, faults)
    return {
        "ansible_host": "127.0.0.1", "ansible_port": sshd.port, "ansible_user": "root",
        "ansible_ssh_private_key_file": str(sshd.client_key),
        "ansible_python_interpreter": "/usr/bin/python3",
        "stetho_profile": "h100-sxm-8gpu", "stetho_sysroot": str(node / "sysroot"),
        "stetho_path": f"{node / 'bin'}:/usr/local/bin:/usr/bin:/bin",
        "stetho_venv": str(venv or root / "venvs" / name), "stetho_python": "/usr/bin/python3",
        "stetho_etc": str(root / "etc" / (name if venv is None else "shared")),
    }


@pytest.fixture(scope="session")
def cluster(sshd, tmp_path_factory):
    """10 inventory hosts on 127.0.0.1: 5 healthy, 3 faulty, one on a closed port, one whose
    nvidia-smi hangs past its check's deadline."""
    root = tmp_path_factory.mktemp("cluster")
    faults = {**{n: [f] for n, f in FAULTY.items()}, "node10": ["hang=nvidia-smi"]}
    hosts = {f"node{i:02d}": _sim_host(sshd, root, f"node{i:02d}", faults.get(f"node{i:02d}", []))
             for i in range(1, 11)}
    hosts["node09"]["ansible_port"] = sshd_mod.free_port()  # nothing listens: unreachable
    del hosts["node01"]["stetho_etc"]  # its policies where the Slurm hooks look by default
    hosts["node10"]["stetho_deadline"] = 6  # seconds its probes may take, then it reports
    inventory = root / "inventory.yml"
    inventory.write_text(yaml.safe_dump({"all": {"children": {"gpu": {"hosts": hosts}}}}))
    return root, inventory


def _sweep(inventory, out, *args, timeout=900, env=None):
    env = {**os.environ, "STETHO_CACHE": str(out.parent / "cache"), **(env or {})}
    return subprocess.run([sys.executable, "-m", "stetho", "sweep", "-i", str(inventory),
                           "--out", str(out), *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


@pytest.fixture(scope="session")
def full_sweep(cluster):
    root, inventory = cluster
    proc = _sweep(inventory, root / "runs")  # the per-host timeout computed per host
    runs = sorted((root / "runs").glob("2*"))
    assert runs, proc.stderr
    return proc, runs[-1]


def _results(run_dir):
    return json.loads((run_dir / "results.json").read_text())["results"]


def test_full_sweep_exit_code_and_every_host_once(full_sweep, cluster):
    proc, run_dir = full_sweep
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "Traceback" not in proc.stdout + proc.stderr
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["hosts"] == 10
    results = _results(run_dir)
    assert {r["node"] for r in results} == {f"node{i:02d}" for i in range(1, 11)}
    assert "run folder:" in proc.stdout and "[10/10]" in proc.stderr


def test_exactly_the_three_faulty_nodes_fail(full_sweep):
    proc, run_dir = full_sweep
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["failing_nodes"] == sorted(FAULTY)
    results = _results(run_dir)
    rot = [r for r in results if r["node"] == "node06" and r["status"] == "fail"]
    assert [(r["check"], r["subject"]) for r in rot] == [("disk_rotational", "nvme3n1")]
    fw = {r["check"] for r in results if r["node"] == "node07" and r["status"] == "fail"}
    assert fw == {"versions", "fleet_versions"}
    bw = {r["check"] for r in results if r["node"] == "node08" and r["status"] == "fail"}
    assert bw == {"nccl_busbw", "fleet_busbw"}
    for node in ("node06", "node07", "node08"):
        assert node in proc.stdout  # failing nodes shown on the terminal


def test_unreachable_and_hung_hosts_are_errors_the_rest_complete(full_sweep):
    _, run_dir = full_sweep
    results = _results(run_dir)
    by_node = {}
    for r in results:
        by_node.setdefault(r["node"], []).append(r)
    (unreach,) = by_node["node09"]
    assert unreach["status"] == "error" and unreach["message"].startswith("unreachable")
    # the hung nvidia-smi's checks are errors saying it timed out; the rest keep their verdict
    hung = {(r["check"], r["subject"]): r for r in by_node["node10"]}
    assert hung[("gpu_count", "")]["status"] == "error"
    assert "timed out" in hung[("gpu_count", "")]["message"]
    assert hung[("cpu_governor", "")]["status"] == "pass"
    assert not [k for k, r in hung.items() if r["status"] == "pass"
                and "nvidia-smi" in (r.get("probe") or "")]
    smi = json.loads((run_dir / "hosts" / "node10" / "evidence.json").read_text())[
        "probes"]["nvidia_smi"]
    assert smi["status"] == "timeout" and "6 s deadline" in smi["reason"]
    for node in HEALTHY + sorted(FAULTY):
        rows = [r for r in by_node[node] if not r["check"].startswith("fleet_")]
        assert len(rows) > 90 and all(r["status"] != "error" for r in rows), node
        host = run_dir / "hosts" / node
        assert json.loads((host / "evidence.json").read_text())["node"] == node
        assert (host / "junit.xml").read_text().startswith("<?xml")
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["unreachable"] == ["node09"]
    assert summary["error_nodes"] == ["node09", "node10"]


def test_merged_junit_has_a_suite_per_node(full_sweep):
    import xml.etree.ElementTree as ET

    _, run_dir = full_sweep
    suites = ET.parse(run_dir / "junit.xml").getroot().findall("testsuite")
    assert sorted(s.get("name") for s in suites) == [f"node{i:02d}" for i in range(1, 11)]
    assert (run_dir / "ansible" / "artifacts" / "sweep" / "job_events").is_dir()


def _policies(inventory: Path, node: str) -> Path:
    """Where the sweep puts a host's gate policies: <stetho_etc>/gates, by default
    <stetho_venv>/etc/gates (never the controller's /etc on this loopback test bed)."""
    host = yaml.safe_load(inventory.read_text())["all"]["children"]["gpu"]["hosts"][node]
    return Path(host.get("stetho_etc") or Path(host["stetho_venv"]) / "etc") / "gates"


def test_healthy_limit_exit_0_and_install_skipped(full_sweep, cluster):
    """The usual night: the version's venv is there, so each host runs one task, the check
    (one SSH session: no copy, no install, no policy task), and the steps' shares are in
    meta.json. A site's edit to a policy stays; a policy that went missing comes back."""
    root, inventory = cluster
    pol = _policies(inventory, "node01")
    edited = (pol / "pre-job.yml").read_text() + "# site edit\n"
    (pol / "pre-job.yml").write_text(edited)
    (pol / "nightly.yml").unlink()
    (pol / ".stetho-version").unlink()
    proc = _sweep(inventory, root / "runs-healthy", "--limit", "node[01-05]")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    run_dir = sorted((root / "runs-healthy").glob("2*"))[-1]
    meta = json.loads((run_dir / "meta.json").read_text())
    ran = {s["task"]: s["hosts"] for s in meta["ansible"]["steps"] if s["hosts"]}
    assert ran == {"stetho check": 5}
    assert abs(sum(s["share"] for s in meta["ansible"]["steps"]) - 1) < 0.01
    assert (pol / "pre-job.yml").read_text() == edited
    assert (pol / "nightly.yml").is_file()
    assert (pol / ".stetho-version").read_text().strip() == meta["version_id"]
    assert not (Path("/etc/stetho/gates") / ".stetho-version").exists()
    events = (run_dir / "ansible" / "artifacts" / "sweep" / "stdout").read_text()
    assert "install the wheels" not in events or "skipping" in events
    stats = json.loads((run_dir / "summary.json").read_text())["ansible"]["stats"]
    assert set(stats["processed"]) == set(HEALTHY)
    assert not stats.get("changed")  # nothing installed: the version's venv was there
    # five nodes of the profile: no fleet comparison, a skip saying so, and still exit 0
    fleet = [r for r in _results(run_dir) if r["check"].startswith("fleet_")]
    assert {(r["status"], r["message"]) for r in fleet} == {(
        "skip", "5 h100-sxm-8gpu nodes in this run; fleet comparison needs at least 8 "
                "(profile fleet.min_peers)")}
    assert {r["node"] for r in fleet} == set(HEALTHY)


def test_limit_naming_an_unknown_or_unsafe_host_is_a_usage_error(cluster):
    root, inventory = cluster
    proc = _sweep(inventory, root / "runs-bad", "--limit", "node[01-02],gpu99")
    assert proc.returncode == 2 and "gpu99" in proc.stderr
    proc = _sweep(inventory, root / "runs-bad", "--limit", "node01;reboot")
    assert proc.returncode == 2 and "invalid node name" in proc.stderr


def test_second_sweep_is_refused_while_one_runs(cluster):
    from stetho.core.locks import SweepLock

    root, inventory = cluster
    with SweepLock(root / "runs-locked" / ".sweep.lock", "20260101T000000Z-abcdef"):
        proc = _sweep(inventory, root / "runs-locked", "--limit", "node01")
    assert proc.returncode == 3
    assert "another sweep is running" in proc.stderr and "abcdef" in proc.stderr
    assert f"pid {os.getpid()}" in proc.stderr


def test_replay_of_the_run_folder(full_sweep, tmp_path):
    _, run_dir = full_sweep
    out = tmp_path / "replay.json"
    proc = subprocess.run([sys.executable, "-m", "stetho", "check", "--evidence", str(run_dir),
                           "-n", "2", "--json", str(out), "-q"], capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 1, proc.stderr
    replay = json.loads(out.read_text())["results"]
    swept = _results(run_dir)

    def key(rows):
        # the sweep also ran drift against history; a replay of evidence does not
        return sorted((r["node"], r["check"], r["subject"], r["status"]) for r in rows
                      if r["check"] != "sweep" and not r["check"].startswith("drift_"))

    assert key(replay) == key(swept)


def test_plain_ansible_playbook_with_fetch_dir(full_sweep, cluster, tmp_path):
    """The playbook works without stetho sweep, as the README documents."""
    from stetho.core.resources import shipped
    from stetho.fleet import wheels

    root, inventory = cluster
    house = wheels.build(Path(os.environ.get("STETHO_CACHE", root / "runs" / ".." / "cache"))
                         / "wheelhouse")
    fetch = tmp_path / "fetched"
    extra = {"stetho_version_id": house.version_id, "stetho_wheels": str(house.tarball),
             "stetho_wheel_files": list(house.wheels), "stetho_pip_wheel": house.pip,
             "stetho_fetch_dir": str(fetch)}
    env = {**os.environ, "ANSIBLE_HOST_KEY_CHECKING": "False", "ANSIBLE_PIPELINING": "True",
           "ANSIBLE_HOME": str(tmp_path / "ah")}
    proc = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i",
                           str(inventory), "--limit", "node01", str(shipped("playbooks") /
                           "stetho-check.yml"), "-e", json.dumps(extra)],
                          capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert json.loads((fetch / "node01" / "evidence.json").read_text())["node"] == "node01"
    doc = json.loads((fetch / "node01" / "results.json").read_text())
    assert doc["schema"] == "stetho.results" and doc["exit_code"] == 0
    assert (fetch / "node01" / "junit.xml").read_text().startswith("<?xml")
    # a relative fetch dir would land beside the playbook: refused, naming the fix
    extra["stetho_fetch_dir"] = "fetched/"
    rel = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i",
                          str(inventory), "--limit", "node01", str(shipped("playbooks") /
                          "stetho-check.yml"), "-e", json.dumps(extra)],
                         capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path)
    assert rel.returncode != 0 and "stetho_fetch_dir=$PWD/fetched/" in rel.stdout, rel.stdout
    assert not (shipped("playbooks") / "fetched").exists()


def test_progress_lines_are_per_host(full_sweep):
    proc, _ = full_sweep
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("[")]
    assert len(lines) == 10 and lines[-1].startswith("[10/10]")


def test_concurrent_lock_threads_only_one_wins(tmp_path):
    from stetho.core.locks import SweepLock, SweepLocked

    wins, losses = [], []
    barrier = threading.Barrier(4)

    def attempt(i):
        barrier.wait()
        try:
            lock = SweepLock(tmp_path / ".sweep.lock", f"run{i}")
            lock.__enter__()
            wins.append(lock)
        except SweepLocked:
            losses.append(i)

    threads = [threading.Thread(target=attempt, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(wins) == 1 and len(losses) == 3
    wins[0].__exit__(None, None, None)


def test_sweep_writes_a_report_per_failing_node(full_sweep):
    """The three faulty nodes get diagnosis reports with their cause; healthy nodes get none;
    the unreachable and hung nodes (errors) are reported as undiagnosed."""
    import yaml as _yaml

    _, run_dir = full_sweep
    reports = {p.name.split("-")[0]: p for p in (run_dir / "reports").glob("*.md")}
    assert set(reports) == {"node06", "node07", "node08", "node09", "node10"}
    front = {n: _yaml.safe_load(p.read_text().split("---")[1]) for n, p in reports.items()}
    assert front["node06"]["cause"] == "nvme-rotational"
    assert front["node07"]["cause"] == "version-drift"
    assert front["node09"]["cause"] == "undiagnosed"


def test_report_command_over_the_run_folder(full_sweep, tmp_path):
    import shutil

    # a copy: `stetho report` rewrites the folder's index.html, which other tests read as the
    # sweep wrote it
    run_dir = shutil.copytree(full_sweep[1], tmp_path / "run")
    proc = subprocess.run([sys.executable, "-m", "stetho", "report", str(run_dir), "--node",
                           "node06", "--out", str(tmp_path)], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "node06: NVMe disk reported as rotational" in proc.stdout
    (md,) = tmp_path.glob("node06-nvme-rotational-*.md")
    text = md.read_text()
    assert "nvme3n1" in text and "udev" in text
    # the page it rewrote still links the other nodes' reports in the run folder
    page = (run_dir / "index.html").read_text()
    others = [p for p in (run_dir / "reports").glob("*.md") if not p.name.startswith("node06-")]
    assert others
    for report in others:
        assert f'href="reports/{report.name}"' in page, report.name


def test_inventory_host_with_shell_metacharacters_is_refused(tmp_path):
    """A node name from the inventory reaches argv lists, reports and drain reasons: one that
    could carry shell syntax is refused before anything runs."""
    inv = tmp_path / "inventory.yml"
    inv.write_text(yaml.safe_dump({"all": {"hosts": {"node01": {}, "node02$(reboot)": {}}}}))
    proc = _sweep(inv, tmp_path / "runs")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "invalid node name 'node02$(reboot)'" in proc.stderr
    assert not list((tmp_path / "runs").glob("2*/ansible/artifacts"))  # nothing ran


def _ssh(sshd, command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ssh", "-p", str(sshd.port), "-i", str(sshd.client_key),
                           "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
                           "-o", "BatchMode=yes", "root@127.0.0.1", command],
                          capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("node, code", [("node01", 0), ("node06", 1)])
def test_the_node_install_runs_gate_local_over_ssh(full_sweep, cluster, sshd, node, code):
    """The venv the sweep installed on a host holds pyproject's runtime dependencies, no more:
    `gate --local` (history, policy, reports) runs there; the controller's Ansible does not."""
    import shlex

    root, inventory = cluster
    policy = root / "disks.yml"  # node06's fault (a rotational NVMe) is not a quick check
    policy.write_text("policy: disks\nchecks: [disk_rotational, gpu_count]\n"
                      "local_checks: [disk_rotational, gpu_count]\nblock_on: [fail, error]\n")
    host = yaml.safe_load(inventory.read_text())["all"]["children"]["gpu"]["hosts"][node]
    (venv,) = [p for p in Path(host["stetho_venv"]).iterdir()
               if (p / "bin" / "stetho").exists() and not p.is_symlink()]
    env = {"STETHO_SYSROOT": host["stetho_sysroot"], "PATH": host["stetho_path"],
           "STETHO_DB": str(root / f"{node}-node.db"), "STETHO_PROFILE": "h100-sxm-8gpu",
           "HOME": str(root / f"{node}-home")}
    argv = ["env", *(f"{k}={v}" for k, v in env.items()), str(venv / "bin" / "stetho"), "gate",
            "--local", "--policy", str(policy), "--node", node, "--out", str(root / f"{node}-g")]
    r = _ssh(sshd, shlex.join(argv))
    assert r.returncode == code, r.stdout + r.stderr
    assert ("GO" if code == 0 else "BLOCKED") in r.stdout
    assert (root / f"{node}-node.db").is_file()  # the history was recorded on the node
    # the paths contrib/slurm's hooks use: <venv root>/current, <etc>/gates/pre-job.yml
    assert (Path(host["stetho_venv"]) / "current").resolve() == venv.resolve()
    assert (_policies(inventory, node) / "pre-job.yml").is_file()
    if "stetho_etc" not in host:  # the hooks' own defaults, from STETHO_ROOT alone, find them
        for hook in ("prolog.sh", "healthcheck.sh"):
            lines = [ln for ln in (Path(__file__).resolve().parent.parent / "contrib" / "slurm"
                                   / hook).read_text().splitlines()
                     if ln.startswith(("STETHO=", "POLICY="))]
            env = {"STETHO_ROOT": host["stetho_venv"], "PATH": os.environ["PATH"]}
            got = subprocess.run(["/bin/sh", "-c", "\n".join([*lines, 'echo "$STETHO"',
                                                              'echo "$POLICY"'])],
                                 env=env, capture_output=True, text=True, check=True)
            stetho, policy = got.stdout.split()
            assert Path(stetho).resolve() == (venv / "bin" / "stetho").resolve(), hook
            assert Path(policy) == _policies(inventory, node) / "pre-job.yml", hook
    no_ansible = _ssh(sshd, shlex.join([str(venv / "bin" / "python"), "-c", "import ansible"]))
    assert no_ansible.returncode != 0 and "ModuleNotFoundError" in no_ansible.stderr


def test_bench_sweep_runs_nothing_invasive_on_a_busy_node(sshd, tmp_path_factory):
    """`sweep --bench quick` on two loopback hosts, one with a job's process on a GPU (a real
    recorded compute process): its live nccl-tests is skipped as busy (never a pass), the
    summary lists it, and both ran the quick benchmark (safe beside a job)."""
    root = tmp_path_factory.mktemp("benchsweep")
    hosts = {name: _sim_host(sshd, root, name, faults)
             for name, faults in (("bench01", []), ("bench02", ["gpu-job"]))}
    inventory = root / "inventory.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": hosts}}))
    proc = _sweep(inventory, root / "runs", "--bench", "quick")
    run_dir = sorted((root / "runs").glob("2*"))[-1]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["busy_nodes"] == {"bench02": "node busy (GPU process 100477 "
                                                "/root/src/llama.cpp/build/bin/llama-server)"}, \
        proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "1 of 2 nodes busy" in proc.stdout
    from stetho.fleet.budget import host_budget

    limits = json.loads((run_dir / "meta.json").read_text())["host_timeouts"]
    assert limits == {n: host_budget("h100-sxm-8gpu", "quick")[0] for n in hosts}
    rows = {(r["node"], r["check"], r["subject"]): r for r in _results(run_dir)}
    busy_nccl = rows[("bench02", "nccl_run", "")]
    assert busy_nccl["status"] == "skip" and busy_nccl["message"].startswith("node busy")
    assert rows[("bench01", "nccl_run", "")]["status"] == "pass"
    for node in hosts:
        dcgmi = rows[(node, "bench_metric", "dcgmi-diag-r1.failed_tests")]
        assert dcgmi["status"] == "skip" and "no baseline" in dcgmi["message"]


def test_bench_sweep_refuses_a_timeout_the_benchmarks_outlast(cluster):
    root, inventory = cluster
    proc = _sweep(inventory, root / "runs-short", "--bench", "nightly", "--timeout", "600",
                  "--limit", "node01")
    assert proc.returncode == 2, proc.stderr
    assert "node01: per-host timeout 600 s (--timeout) is shorter than the check can take on " \
        "profile h100-sxm-8gpu with the nightly benchmarks" in proc.stderr
    assert "gpu-burn 300 s" in proc.stderr


def test_a_timeout_shorter_than_the_probes_is_refused(cluster):
    """The per-host timeout must outlast every probe on the host, one after another (the
    NCCL run alone may take 600 s): a shorter one is refused with the numbers."""
    from stetho.fleet.budget import host_budget

    root, inventory = cluster
    need, _ = host_budget("h100-sxm-8gpu", None)
    proc = _sweep(inventory, root / "runs-short", "--timeout", "300", "--limit", "node02")
    assert proc.returncode == 2, proc.stderr
    assert f"node02: per-host timeout 300 s (--timeout) is shorter than the check can take " \
        f"on profile h100-sxm-8gpu: {need} s (" in proc.stderr
    assert "nvidia_smi 60 s" in proc.stderr and "nccl_tests 600 s" in proc.stderr
    assert "mlxlink 8x2x30 s" in proc.stderr  # per HCA, and its fallback too
    assert not list((root / "runs-short").glob("2*/ansible/artifacts"))  # nothing ran


def test_the_probe_cap_in_force_reaches_the_nodes_and_their_timeouts(cluster):
    """STETHO_PROBE_TIMEOUT on the controller is the nodes' cap too, as with `sweep --via
    slurm`: node10's hung nvidia-smi is killed at the 2 s cap (not at its 6 s deadline), and
    the per-host timeout counts each probe at the cap."""
    from stetho.fleet.budget import host_budget

    root, inventory = cluster
    proc = _sweep(inventory, root / "runs-cap", "--limit", "node10",
                  env={"STETHO_PROBE_TIMEOUT": "2"})
    run_dir = sorted((root / "runs-cap").glob("2*"))[-1]
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["host_timeouts"] == {"node10": host_budget("h100-sxm-8gpu", None, 2)[0]}
    assert meta["host_timeouts"]["node10"] < host_budget("h100-sxm-8gpu", None)[0]
    assert meta["probe_timeout"] == 2
    bundle = json.loads((run_dir / "hosts" / "node10" / "evidence.json").read_text())
    smi = bundle["probes"]["nvidia_smi"]
    assert smi["status"] == "timeout", proc.stdout[-3000:] + proc.stderr[-3000:]
    assert smi["reason"] == "hung: killed after its 2 s timeout"
    gpu_count = [r for r in _results(run_dir) if (r["node"], r["check"]) == ("node10", "gpu_count")]
    assert [r["status"] for r in gpu_count] == ["error"]  # fail closed: timed out, never pass


def test_hosts_sharing_one_venv_keep_their_own_evidence(sshd, tmp_path_factory):
    """Two hosts whose stetho_venv is one folder (an NFS home): the install cannot race and
    each brings back its own evidence and verdicts (only node B has powersave CPUs)."""
    root = tmp_path_factory.mktemp("sharedvenv")
    hosts = {name: _sim_host(sshd, root, name, faults, venv=root / "shared-venv")
             for name, faults in (("sharedA", []), ("sharedB", ["governor-powersave"]))}
    inventory = root / "inventory.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": hosts}}))
    proc = _sweep(inventory, root / "runs")
    run_dir = sorted((root / "runs").glob("2*"))[-1]
    rows = _results(run_dir)
    assert not [r for r in rows if r["status"] == "error"], proc.stdout[-3000:]
    gov = {r["node"]: r["status"] for r in rows if r["check"] == "cpu_governor"}
    assert gov == {"sharedA": "pass", "sharedB": "fail"}
    assert json.loads((run_dir / "summary.json").read_text())["failing_nodes"] == ["sharedB"]
    for name in hosts:
        bundle = json.loads((run_dir / "hosts" / name / "evidence.json").read_text())
        assert bundle["node"] == name and bundle["sysroot"] == hosts[name]["stetho_sysroot"]
    (venv,) = [p for p in (root / "shared-venv").iterdir()
               if (p / "bin" / "stetho").exists() and not p.is_symlink()]
    on_node = sorted(p.name for p in venv.glob("evidence-*.json"))
    assert on_node == ["evidence-sharedA.json", "evidence-sharedB.json"]


def test_sweep_with_a_knowledge_base_shows_rule_accuracy_on_its_page_and_textfile(
        full_sweep, cluster, tmp_path, monkeypatch):
    """`stetho sweep --kb REPO --textfile DIR`: the sweep's own run page carries the rules'
    accuracy on the knowledge base's resolved reports (the figures `stetho kb accuracy`
    prints), and DIR/stetho-sweep.prom the sweep's results and the same figures for
    node_exporter."""
    from prometheus_client.parser import text_string_to_metric_families

    from tests import test_kb_resolve as kbr
    from tests.test_kb import git

    cfg = tmp_path / "gitconfig"
    cfg.write_text("[user]\n\tname = KB Test\n\temail = kb@test.invalid\n"
                   "[init]\n\tdefaultBranch = main\n")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(cfg))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("STETHO_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("STETHO_SPOOL", str(tmp_path / "spool"))
    remote = tmp_path / "kb.git"
    git("init", "-q", "--bare", str(remote))
    ids = kbr.publish(tmp_path, remote, [(n, c, d) for n, c, d, _ in kbr.RESOLVED])
    for rid, (_, _, _, found) in zip(ids, kbr.RESOLVED, strict=True):
        if found:
            assert kbr.cli("resolve", rid, "--found", found, "--repo", str(remote))[0] == 0
    root, inventory = cluster
    prom = tmp_path / "textfile" / "stetho-sweep.prom"
    proc = _sweep(inventory, root / "runs-kb", "--limit", "node06", "--kb", str(remote),
                  "--textfile", str(prom.parent))
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    run_dir = sorted((root / "runs-kb").glob("2*"))[-1]
    page = (run_dir / "index.html").read_text()
    assert 'id="accuracy" data-resolved="5"' in page and "no fault found in 1 (20%)" in page
    assert ('<tr data-rule="riser-pcie-slot"><td>riser-pcie-slot</td><td>2</td><td>2</td>'
            "<td>1</td><td>50%</td><td>50%</td><td>1</td></tr>") in page
    assert 'data-node="node06"' in page and "reports/" in page
    fams = {f.name: f for f in text_string_to_metric_families(prom.read_text())}

    def sample(name, **labels):
        return [s.value for s in fams[name].samples
                if all(s.labels.get(k) == v for k, v in labels.items())]

    assert sample("stetho_kb_rule_precision", command="sweep", rule="riser-pcie-slot") == [0.5]
    assert sample("stetho_kb_rule_recall", command="sweep", rule="optics-degrading") == [0.5]
    assert sample("stetho_kb_rule_precision", rule="cpu-governor") == []  # nothing under it
    assert sample("stetho_kb_no_fault_found_ratio", command="sweep") == [0.2]
    assert sample("stetho_check_status", command="sweep", node="node06",
                  check="disk_rotational", subject="nvme3n1") == [2.0]


def test_chromium_draws_the_sweeps_run_page_from_its_run_folder(full_sweep, tmp_path):
    """The sweep's own index.html, opened by headless Chromium from the run folder: the failing
    nodes lead the grid with their cells in the fail colour, each links its diagnosis report
    (the link resolves to a file beside the page), and the screenshot is kept as an artefact
    ($STETHO_TEST_ARTIFACTS, else test-artifacts/)."""
    from urllib.parse import unquote

    from tests import services
    from tests.test_runpage import FAIL_RGB, _long_runs

    reason = services.missing("chromium")
    if reason:
        pytest.skip(reason)
    _, run_dir = full_sweep
    page = run_dir / "index.html"

    rows = services.grid_rows(services.dump_dom(page, tmp_path / "chromium"))
    failing = sorted(FAULTY)
    assert list(rows)[:len(failing)] == failing  # failing nodes first, by name
    assert {n: r["worst"] for n, r in rows.items() if n in failing} == dict.fromkeys(
        failing, "fail")
    for node in failing:
        assert "fail" in rows[node]["cells"], node
        (link,) = rows[node]["links"]
        target = run_dir / unquote(link)
        assert target.is_file() and target.name.startswith(f"{node}-"), link
    assert not any("fail" in r["cells"] for n, r in rows.items() if n not in failing)
    shot = services.screenshot(page, services.artifacts() / "sweep-run-page.png",
                               tmp_path / "chromium", size="1600,1000")
    print(f"sweep run page screenshot: {shot}")
    fail_cells = sum(r["cells"].count("fail") for r in rows.values())
    # each 14 px fail cell is 13+ px runs of the fail colour on its ~14 pixel rows
    assert _long_runs(shot, FAIL_RGB, 13) >= 10 * fail_cells, "failing cells not drawn red"


def test_the_usual_nights_check_needs_no_python_for_ansible_and_quotes_its_vars(
        full_sweep, cluster):
    """On a usual night (this version installed) the check task is raw: a host whose Python
    for Ansible does not exist is still checked, and host vars reach the node's stetho
    intact through the shell line (a sysroot and PATH with a space, a quote and a `$`)."""
    from stetho.sim.builder import build_node

    root, inventory = cluster
    base = yaml.safe_load(inventory.read_text())["all"]["children"]["gpu"]["hosts"]["node02"]
    node = build_node(root / "sim it's $HOME" / "odd01", "odd01", ["governor-powersave"])
    host = {**base, "ansible_python_interpreter": "/nonexistent/python3",
            "stetho_sysroot": str(node / "sysroot"),
            "stetho_path": f"{node / 'bin'}:/usr/local/bin:/usr/bin:/bin"}
    odd = root / "inventory-odd.yml"
    odd.write_text(yaml.safe_dump({"all": {"hosts": {"odd01": host}}}))
    proc = _sweep(odd, root / "runs-odd")
    run_dir = sorted((root / "runs-odd").glob("2*"))[-1]
    rows = _results(run_dir)
    assert not [r for r in rows if r["status"] == "error"], proc.stdout[-2000:] + proc.stderr
    assert {r["status"] for r in rows if r["check"] == "cpu_governor"} == {"fail"}
    assert proc.returncode == 1, proc.stderr[-2000:]
    bundle = json.loads((run_dir / "hosts" / "odd01" / "evidence.json").read_text())
    assert bundle["node"] == "odd01" and bundle["sysroot"] == str(node / "sysroot")
