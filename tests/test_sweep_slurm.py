"""`stetho sweep --via slurm` on a real multi-node Slurm (tests/slurm_cluster.py): srun runs
each idle node's stetho in its namespace against its simulated hardware, the nodes spool their
outcomes, the controller ingests them. A busy node (a real sbatch job) is listed, untouched.

The Ansible side of the comparison is the real Ansible sweep over real SSH (tests/sshd.py on
loopback) to inventory hosts pointing at the same simulated nodes (the cluster's sysroots)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests import slurm_cluster as sc

pytestmark = pytest.mark.xdist_group("slurm-cluster")

PARTITION = "sweep"
NODES = ["n01", "n02", "n03", "n04", "n05"]
BUSY, FAULTY = "n03", "n02"

_NODE_STETHO = """#!/bin/sh
# the node's stetho, as a site installs it: its simulated hardware, its own config and cache
root={nodes}/$SLURMD_NODENAME
[ -e {folder}/hang-$SLURMD_NODENAME ] && exec sleep 1000  # a check stuck past its deadline
export STETHO_SYSROOT="$root/sysroot" PATH="$root/bin:/usr/local/bin:/usr/bin:/bin"
export STETHO_CONFIG={folder}/stetho.toml HOME={folder} STETHO_CACHE={folder}/cache
exec {stetho} "$@"
"""


@pytest.fixture(scope="module")
def cluster(slurm_cluster: sc.Cluster) -> Iterator[sc.Cluster]:
    """The session's cluster with a partition of five of its nodes and a node-side stetho."""
    c = slurm_cluster
    c.reset()
    c.scontrol("create", f"PartitionName={PARTITION}", f"Nodes={','.join(NODES)}",
               "State=UP", "MaxTime=INFINITE")
    wrapper = c.folder / "bin" / "node-stetho"
    wrapper.write_text(_NODE_STETHO.format(nodes=c.folder / "nodes", folder=c.folder,
                                           stetho=Path(sys.executable).parent / "stetho"))
    wrapper.chmod(0o755)
    try:
        yield c
    finally:
        c.scontrol("delete", f"PartitionName={PARTITION}", check=False)


def _hold(c: sc.Cluster, node: str, tmp: Path) -> str:
    """A running sbatch job on `node` (its id), once Slurm says RUNNING."""
    r = subprocess.run(["sbatch", "--parsable", "-p", "gpu", "-w", node, f"-o{tmp}/hold.out",
                        "--wrap", "sleep 900"], env=c.full_env(), capture_output=True,
                       text=True, timeout=60, check=True)
    job = r.stdout.strip().split(";")[0]
    sc.wait_for(lambda: "JobState=RUNNING" in c.scontrol("show", "job", "-o", job), 60,
                f"job {job} running", c)
    return job


def _slurm_sweep(c: sc.Cluster, root: Path, *args: str, timeout: float = 600
                 ) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "stetho", "sweep", "--via", "slurm", "--partition", PARTITION,
         "--profile", "h100-sxm-8gpu", "--spool", str(root / "spool"), "--out",
         str(root / "runs"), "--node-stetho", str(c.folder / "bin" / "node-stetho"),
         "--no-history", *args],
        env=c.full_env({"STETHO_CACHE": str(root / "cache")}), capture_output=True, text=True,
        timeout=timeout)


def _verdicts(run_dir: Path, nodes: list[str]) -> dict[str, set[tuple[str, str, str]]]:
    rows = json.loads((run_dir / "results.json").read_text())["results"]
    out: dict[str, set[tuple[str, str, str]]] = {n: set() for n in nodes}
    for r in rows:
        if r["node"] in out:
            out[r["node"]].add((r["check"], r["subject"], r["status"]))
    return out


@pytest.fixture(scope="module")
def slurm_run(cluster: sc.Cluster, tmp_path_factory: pytest.TempPathFactory
              ) -> Iterator[tuple[subprocess.CompletedProcess[str], Path, str, Path,
                                  dict[str, object]]]:
    c = cluster
    root = tmp_path_factory.mktemp("slurmsweep")
    c.set_failing(FAULTY)
    job = _hold(c, BUSY, root)
    try:
        proc = _slurm_sweep(c, root)
        still = c.scontrol("show", "job", "-o", job)
        after = sorted(p.name for p in (c.folder / "spool" / BUSY).iterdir())
        sweeps = [ln for ln in c.scontrol("show", "job", "-o").splitlines()
                  if "JobName=stetho-sweep-" in ln]
        runs = sorted((root / "runs").glob("2*"))
        assert runs, proc.stdout[-3000:] + proc.stderr[-3000:]
        yield proc, runs[-1], still, root, {"after": after, "sweeps": sweeps}
    finally:
        subprocess.run(["scancel", job], env=c.full_env(), timeout=30, check=False)
        c.set_failing(FAULTY, False)


def test_slurm_sweep_checks_the_idle_nodes_and_lists_the_busy_one(slurm_run) -> None:
    proc, run_dir, still, root, seen = slurm_run
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    assert "JobState=RUNNING" in still  # the job holding the busy node ran on, untouched
    (job,) = seen["sweeps"]  # the sweep's one job: exactly the idle nodes
    assert "NodeList=n[01-02,04-05] " in job and "Comment=stetho-sweep:" in job, job
    jid = re.search(r"JobId=(\d+)", job).group(1)  # type: ignore[union-attr]
    # slurmd's spool on the busy node: nothing of the sweep's job was ever there
    assert not [f for f in seen["after"] if re.search(rf"(?<!\d){jid}(?!\d)", f)], seen
    assert not (root / "spool" / BUSY).exists()  # nothing ran there: nothing spooled
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["failing_nodes"] == [FAULTY]
    assert list(summary["busy_nodes"]) == [BUSY]
    (busy,) = [r for r in json.loads((run_dir / "results.json").read_text())["results"]
               if r["node"] == BUSY]
    assert busy["status"] == "skip" and busy["message"].startswith("busy: not checked: job ")
    assert f"busy: not checked: 1 node ({BUSY}: job " in proc.stdout
    assert f"run folder: {run_dir}" in proc.stdout
    for node in ("n01", "n02", "n04", "n05"):  # each spooled once, then ingested
        assert len(list((root / "spool" / node / "ingested").glob("*.json"))) == 1
        assert f"srun: {node} reported" in proc.stderr


def test_slurm_sweep_gives_the_ansible_sweeps_verdicts(slurm_run, cluster, sshd,
                                                        tmp_path_factory) -> None:
    """The same simulated nodes through Ansible over SSH: per node, the same checks, subjects
    and statuses (fleet checks included: the same peers)."""
    from tests.test_sweep import _sim_host, _sweep

    proc, run_dir, _, _, _ = slurm_run
    root = tmp_path_factory.mktemp("ansible-side")
    checked = [n for n in NODES if n != BUSY]
    hosts = {}
    for n in checked:
        host = _sim_host(sshd, root, n, [], venv=root / "venv")
        node = cluster.folder / "nodes" / n
        host.update(stetho_sysroot=str(node / "sysroot"),
                    stetho_path=f"{node / 'bin'}:/usr/local/bin:/usr/bin:/bin")
        hosts[n] = host
    cluster.set_failing(FAULTY)
    try:
        inventory = root / "inventory.yml"
        inventory.write_text(yaml.safe_dump({"all": {"hosts": hosts}}))
        ansible = _sweep(inventory, root / "runs", "--no-history")
    finally:
        cluster.set_failing(FAULTY, False)
    assert ansible.returncode == proc.returncode == 1, ansible.stdout[-3000:]
    ansible_dir = sorted((root / "runs").glob("2*"))[-1]
    theirs, ours = _verdicts(ansible_dir, checked), _verdicts(run_dir, checked)
    for n in checked:
        assert ours[n] == theirs[n], (n, ours[n] ^ theirs[n])
    assert {c for c, _, s in ours[FAULTY] if s == "fail"} >= {"gpu_clocks"}


def test_a_node_killed_past_its_limit_is_its_error(cluster, tmp_path, monkeypatch) -> None:
    """A check stuck past its deadline on one node: `timeout` kills it at the per-node limit
    (the profile's budget, made short here), srun says so, the node is an error naming the
    kill; the other node's outcome is judged as usual."""
    from stetho.fleet import budget, slurm_sweep

    c = cluster
    c.scontrol("create", "PartitionName=sweepkill", "Nodes=n06,n07", "State=UP")
    (c.folder / "hang-n07").touch()
    monkeypatch.setattr(budget, "host_budget",
                        lambda profile, bench, cap=None: (90, ["test: 90 s"]))
    lines: list[str] = []
    try:
        result = slurm_sweep.sweep(slurm_sweep.SlurmSweepOptions(
            partition="sweepkill", out=tmp_path / "runs", spool=tmp_path / "spool",
            node_stetho=str(c.folder / "bin" / "node-stetho"), profile="h100-sxm-8gpu",
            env=c.env, steps=lines.append))
    finally:
        (c.folder / "hang-n07").unlink()
        c.scontrol("delete", "PartitionName=sweepkill", check=False)
    (err,) = [r for r in result.results if r.node == "n07"]
    assert err.status == "error", err
    assert "killed at the per-node limit of 90 s" in err.message and "124" in err.message
    n06 = [r for r in result.results if r.node == "n06"]
    assert len(n06) > 90 and not [r for r in n06 if r.status == "error"]
    assert "srun: n06 reported (1/2)" in lines
    assert result.exit_code == 3


def test_an_unknown_partition_is_a_usage_error_naming_it(cluster, tmp_path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "stetho", "sweep", "--via", "slurm", "--partition", "nosuch",
         "--spool", str(tmp_path / "spool"), "--out", str(tmp_path / "runs")],
        env=cluster.full_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "partition nosuch" in proc.stderr and "Traceback" not in proc.stderr


def test_sigterm_cancels_the_sweeps_job(cluster, tmp_path) -> None:
    """SIGTERM mid-srun: the sweep scancels its job (no step left on any node) and exits as
    the Ansible sweep does (128 + 15), nothing judged."""
    c = cluster
    for n in NODES:
        (c.folder / f"hang-{n}").touch()
    env = c.full_env({"STETHO_CACHE": str(tmp_path / "cache")})
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "stetho", "sweep", "--via", "slurm", "--partition",
             PARTITION, "--spool", str(tmp_path / "spool"), "--out", str(tmp_path / "runs"),
             "--node-stetho", str(c.folder / "bin" / "node-stetho"), "--no-history"],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

        def running() -> bool:
            return "JobName=stetho-sweep-" in c.scontrol("show", "job", "-o") and any(
                "JobState=RUNNING" in ln and "JobName=stetho-sweep-" in ln
                for ln in c.scontrol("show", "job", "-o").splitlines())

        sc.wait_for(running, 120, "the sweep's job running", c)
        proc.terminate()
        out, err = proc.communicate(timeout=120)
    finally:
        for n in NODES:
            (c.folder / f"hang-{n}").unlink()
    assert proc.returncode == 128 + 15, out + err
    assert "interrupted by SIGTERM" in err and "scancel" in err
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        jobs = [ln for ln in c.scontrol("show", "job", "-o").splitlines()
                if "JobName=stetho-sweep-" in ln and "JobState=RUNNING" in ln]
        if not jobs:
            break
        time.sleep(0.2)
    assert not jobs


def test_a_maintenance_reservation_is_checked_inside_it(cluster, tmp_path) -> None:
    """`--reservation R`: every node of R in the partition that no job holds is checked, in
    R (a plain sweep lists R's node as reserved, not checked)."""
    c = cluster
    c.scontrol("create", "reservation", "ReservationName=stetho-maint", "Nodes=n06",
               "StartTime=now", "Duration=30", "Users=root", "Flags=MAINT")
    try:
        r = subprocess.run(
            [sys.executable, "-m", "stetho", "sweep", "--via", "slurm", "--partition", "gpu",
             "--reservation", "stetho-maint", "--profile", "h100-sxm-8gpu", "--spool",
             str(tmp_path / "spool"), "--out", str(tmp_path / "runs"), "--node-stetho",
             str(c.folder / "bin" / "node-stetho"), "--no-history", "--all"],
            env=c.full_env({"STETHO_CACHE": str(tmp_path / "cache")}), capture_output=True,
            text=True, timeout=600)
        state = c.states()["n06"]
    finally:
        c.scontrol("delete", "ReservationName=stetho-maint", check=False)
    assert r.returncode == 0, (state, r.stdout[-3000:] + r.stderr[-3000:])
    run_dir = sorted((tmp_path / "runs").glob("2*"))[-1]
    rows = json.loads((run_dir / "results.json").read_text())["results"]
    assert {x["node"] for x in rows} == {"n06"}, state
    assert "not checked" not in r.stdout
