"""`stetho impact` and the gate's blast radius on the real multi-node Slurm
(tests/slurm_cluster.py): jobs submitted with sbatch run on given nodes under two leaf switches
of a topology.conf, and the commands name exactly the jobs behind each part.

Shares the session's cluster (xdist_group "slurm-cluster"); every job is cancelled and every
drain resumed in a finally."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from stetho.history.store import History, NodeRun
from stetho.results import Result
from tests import slurm_cluster as sc

pytestmark = pytest.mark.xdist_group("slurm-cluster")

TOPOLOGY = ("SwitchName=leafA Nodes=n[01-04]\nSwitchName=leafB Nodes=n[05-08]\n"
            "SwitchName=spine Switches=leafA,leafB\n")
#: job key -> the nodes it is pinned to (-w)
PLACED = {"a": ["n01", "n02"], "b": ["n03"], "c": ["n05", "n06"]}


@dataclass
class Running:
    cluster: sc.Cluster
    topology: Path
    ids: dict[str, str]  # key -> Slurm job id
    scratch: Path

    def stetho(self, *args: str) -> subprocess.CompletedProcess[str]:
        """stetho with the cluster's SLURM_CONF, no profile and an empty history of its own:
        a GPU count comes only from what a test gives."""
        env = {k: v for k, v in self.cluster.full_env({"STETHO_DB": str(
            self.scratch / "empty.db")}).items() if k != "STETHO_PROFILE"}
        return subprocess.run([sys.executable, "-m", "stetho", *args], env=env,
                              capture_output=True, text=True, timeout=180)


def _squeue_states(c: sc.Cluster, ids: list[str]) -> dict[str, str]:
    out = subprocess.run(["squeue", "-h", "-j", ",".join(ids), "-o", "%i %T"],
                         env=c.full_env(), capture_output=True, text=True, timeout=30).stdout
    return dict(line.split() for line in out.splitlines() if line.strip())


@pytest.fixture
def running(slurm_cluster: sc.Cluster, tmp_path: Path) -> Iterator[Running]:
    """Three jobs RUNNING on PLACED's nodes (polled, not slept for)."""
    c = slurm_cluster
    c.reset()
    topo = tmp_path / "topology.conf"
    topo.write_text(TOPOLOGY)
    ids: dict[str, str] = {}
    try:
        for key, nodes in PLACED.items():
            r = subprocess.run(["sbatch", "-o", "/dev/null", "-N", str(len(nodes)), "-w",
                                ",".join(nodes), "-J", f"impact-{key}", "--wrap", "sleep 300"],
                               env=c.full_env(), capture_output=True, text=True, timeout=30)
            m = re.search(r"Submitted batch job (\d+)", r.stdout)
            assert m, r.stdout + r.stderr
            ids[key] = m.group(1)
        sc.wait_for(lambda: set(_squeue_states(c, list(ids.values())).values()) == {"RUNNING"}
                    and len(_squeue_states(c, list(ids.values()))) == len(ids),
                    120, "the three jobs RUNNING", c)
        yield Running(c, topo, ids, tmp_path)
    finally:
        if ids:
            subprocess.run(["scancel", *ids.values()], env=c.full_env(), timeout=30,
                           capture_output=True)
            sc.wait_for(lambda: not _squeue_states(c, list(ids.values())), 60,
                        "the jobs gone", c)
        for node, state in c.states().items():
            if "drain" in state:
                c.scontrol("update", f"NodeName={node}", "State=RESUME", check=False)


def test_impact_of_a_leaf_names_its_jobs_and_not_the_other_leafs(running: Running) -> None:
    r = running.stetho("impact", "leafA", "--topology", str(running.topology), "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    ids = running.ids
    got = {j["job"]: (j["user"], j["partition"], j["nodes"], j["affected_nodes"])
           for j in doc["jobs"]}
    assert got == {ids["a"]: ("root", "gpu", 2, 2), ids["b"]: ("root", "gpu", 1, 1)}
    assert doc["nodes"] == ["n01", "n02", "n03", "n04"]
    assert doc["nodes_without_jobs"] == ["n04"]
    assert doc["gpus_affected"] is None  # the testbed has no GPU GRES and no profile given
    text = running.stetho("impact", "leafA", "--topology", str(running.topology))
    assert text.returncode == 0
    rows = {ln.split()[0] for ln in text.stdout.splitlines()[2:] if ln[:1].isdigit()}
    assert rows == {ids["a"], ids["b"]} and "impact-c" not in text.stdout
    assert "total: 2 running jobs of 1 user (root)" in text.stdout


def test_impact_of_a_node_and_of_its_port(running: Running, tmp_path: Path) -> None:
    ids = running.ids
    for part in ("n03", "n03:mlx5_0/1"):
        doc = json.loads(running.stetho("impact", part, "--json").stdout)
        assert [j["job"] for j in doc["jobs"]] == [ids["b"]], part
    free = running.stetho("impact", "n04")
    assert free.returncode == 0 and free.stdout.splitlines()[-1] == "no running jobs on n04"
    # with a profile, the GPUs the part takes are the profile's 8 per node: job a on 2 nodes
    doc = json.loads(running.stetho("impact", "n[01-02]", "--profile", "h100-sxm-8gpu",
                                    "--json").stdout)
    assert [(j["job"], j["gpus_affected"]) for j in doc["jobs"]] == [(ids["a"], 16)]
    # without --profile, each node's own as history pins it: n01's (8 GPUs), n02 none
    db = tmp_path / "h.db"
    with History(db) as h:
        h.record("r-pin", "sweep", [NodeRun("n01", "h100-sxm-8gpu", [
            Result("n01", "cpu_governor", "", "pass", "performance")], [])],
            when=time.time() - 60)
    doc = json.loads(running.stetho("impact", "n01", "--db", str(db), "--json").stdout)
    assert [(j["job"], j["gpus_affected"], j["gpu_source"]) for j in doc["jobs"]] == [
        (ids["a"], 8, "profile")]
    doc = json.loads(running.stetho("impact", "n[01-02]", "--db", str(db), "--json").stdout)
    assert doc["gpus_affected"] is None  # n02 has no profile: the total is unknown


def test_impact_of_an_unknown_part_or_a_slurm_without_topology_is_exit_2(
        running: Running) -> None:
    r = running.stetho("impact", "n99", "--topology", str(running.topology))
    assert r.returncode == 2
    assert "unknown part 'n99'" in r.stderr and "known switches: spine, leafA, leafB" in r.stderr
    # this cluster runs no topology plugin: `--topology slurm` says so, and how to fix it
    r = running.stetho("impact", "leafA", "--topology", "slurm")
    assert r.returncode == 2 and "Slurm reports no switches" in r.stderr


def _history(db: Path, failing: list[str]) -> None:
    runs = [NodeRun(n, "p", [Result(n, "cpu_governor", "", "fail", "governor is powersave")],
                    []) for n in failing]
    with History(db) as h:
        h.record("r-now", "sweep", runs, when=time.time() - 60)


def test_a_gate_drain_names_its_blast_radius(running: Running, tmp_path: Path) -> None:
    """n01 (job a's) and n07 (no job) fail: `gate --act` drains both and says which job
    each drain hits, in its lines, its JSON and n01's diagnosis report."""
    db = tmp_path / "h.db"
    _history(db, ["n01", "n07"])
    policy = tmp_path / "act.yml"
    policy.write_text("policy: act\nfreshness: 6h\nchecks: [cpu_governor]\nblock_on: [fail]\n"
                      "scheduler:\n  drain: true\n  circuit: {min_nodes: 4, ledger: "
                      f"{tmp_path / 'ledger.db'}}}\n")
    out = tmp_path / "gate.json"
    r = running.stetho("gate", "--policy", str(policy), "--nodes", "n01,n07", "--db", str(db),
                       "--act", "--out", str(tmp_path / "runs"), "--json", str(out))
    assert r.returncode == 1, r.stdout + r.stderr
    a = running.ids["a"]
    assert f"BLAST draining n01 affects job {a} (root, gpu, 2 nodes)" in r.stdout.splitlines()
    assert "BLAST draining n07 affects no running job" in r.stdout.splitlines()
    states = running.cluster.states()
    assert "drain" in states["n01"] and "drain" in states["n07"]  # the drains did happen
    doc = json.loads(out.read_text())
    assert doc["blast_radius"] == {
        "n01": f"draining n01 affects job {a} (root, gpu, 2 nodes)",
        "n07": "draining n07 affects no running job"}
    (report,) = (tmp_path / "runs").glob("gate-*/reports/n01-*.md")
    line = next(ln for ln in report.read_text().splitlines()
                if ln.startswith("**Blast radius**"))
    assert line.replace("\\", "") == \
        f"**Blast radius**: draining n01 affects job {a} (root, gpu, 2 nodes)."
