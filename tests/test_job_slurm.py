"""`stetho job` on the real multi-node Slurm (tests/slurm_cluster.py): a job submitted with
sbatch, its nodes' verdicts spooled by stetho's own Slurm hooks and ingested into a controller
history, a topology.conf with two leaf switches, and the command run as a user runs it.

Ground truth comes from Slurm and the spooled verdicts themselves (which nodes the job got,
which check the failing node's health check failed), never from `stetho job`'s output."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from stetho.core import hostlist
from stetho.history.store import History
from tests import slurm_cluster as sc
from tests.conftest import REPO

pytestmark = pytest.mark.xdist_group("slurm-cluster")
NCCL_LOG = (REPO / "fixtures" / "real" / "03-nccl" /
            "nccl-debug-info-net-socket-1node-2xA100-80GB.log")


@pytest.fixture
def cluster(slurm_cluster: sc.Cluster) -> sc.Cluster:
    slurm_cluster.reset()
    return slurm_cluster


def _env(c: sc.Cluster) -> dict[str, str]:
    return c.full_env({"STETHO_DRAIN_LEDGER": str(c.ledger),
                       "STETHO_CONFIG": str(c.folder / "stetho.toml")})


def _stetho(c: sc.Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "stetho", *args], env=_env(c),
                          capture_output=True, text=True, timeout=120)


def _submit(c: sc.Cluster) -> tuple[str, list[str]]:
    """sbatch -N 2, then wait until RUNNING: (job id, its nodes as scontrol says)."""
    r = subprocess.run(["sbatch", "--parsable", "-N", "2", "-o", "/dev/null", "--wrap",
                        "sleep 300"], env=c.full_env(), capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 0, r.stderr
    job = r.stdout.strip().split(";")[0]
    fields: dict[str, str] = {}

    def running() -> bool:
        line = c.scontrol("show", "job", "-o", job, check=False)
        fields.update(kv.split("=", 1) for kv in line.split() if "=" in kv)
        return fields.get("JobState") == "RUNNING"

    sc.wait_for(running, 60, f"job {job} RUNNING", c)
    return job, hostlist.expand(fields["NodeList"])


def _spooled(c: sc.Cluster, nodes: list[str], kinds: set[str] | None = None
             ) -> list[dict[str, object]]:
    docs = sc.spooled(c.results)
    return [d for d in docs if d["node"] in nodes and (kinds is None or d["kind"] in kinds)]


def _wait_spooled(c: sc.Cluster, nodes: list[str]) -> None:
    """The prolog (PrologFlags=Alloc) spools one verdict per node of the job as it starts."""
    sc.wait_for(lambda: {d["node"] for d in _spooled(c, nodes)} >= set(nodes), 120,
                f"the prolog's verdicts of {nodes}", c)


def _ingest(c: sc.Cluster, db: Path) -> None:
    r = _stetho(c, "history", "ingest", str(c.results), "--db", str(db), "--out",
                str(db.parent / "runs"))
    assert r.returncode in (0, 1) and "ingested" in r.stdout, r.stdout + r.stderr


def _topology(path: Path, c: sc.Cluster, job_nodes: list[str]) -> tuple[list[str], list[str]]:
    """Two leaves under one spine: leafA holds the job's nodes and one other node, leafB the
    rest."""
    rest = [n for n in c.nodes if n not in job_nodes]
    leaf_a, leaf_b = [*job_nodes, rest[0]], rest[1:]
    path.write_text(f"SwitchName=leafA Nodes={','.join(leaf_a)}\n"
                    f"SwitchName=leafB Nodes={','.join(leaf_b)}\n"
                    "SwitchName=spine Switches=leafA,leafB\n")
    return leaf_a, leaf_b


def _cancel(c: sc.Cluster, job: str) -> None:
    subprocess.run(["scancel", job], env=c.full_env(), capture_output=True, timeout=30)


def test_a_node_failing_during_the_job_is_named_with_its_check_and_shared_leaf(
        cluster: sc.Cluster, tmp_path: Path) -> None:
    c = cluster
    job, nodes = _submit(c)
    try:
        assert len(nodes) == 2
        _wait_spooled(c, nodes)
        topo = tmp_path / "topology.conf"
        leaf_a, _ = _topology(topo, c, nodes)
        bad = nodes[1]
        c.set_failing(bad)
        assert c.run_hook(bad, "health-check").returncode == 1
        (verdict,) = [d for d in _spooled(c, [bad], {"gate-health-check"})
                      if d["exit_code"] != 0]
        failed = sorted({r["check"] for r in verdict["results"]  # type: ignore[union-attr]
                         if r["status"] == "fail"})
        assert failed, verdict
        db = tmp_path / "controller.db"
        _ingest(c, db)

        r = _stetho(c, "job", job, "--db", str(db), "--topology", str(topo))
        assert r.returncode == 1, r.stdout + r.stderr
        headline = r.stdout.splitlines()[0]
        assert headline.startswith(f"likely hardware: node {bad}'s "), r.stdout
        assert any(check in headline for check in failed), r.stdout
        assert "shared leaf leafA with 1 other node of this job" in headline
        # the health check drained the node: the drain is on the timeline with its reason
        (drain,) = [e for e in json.loads(_stetho(
            c, "job", job, "--db", str(db), "--json").stdout)["timeline"]["events"]
            if e["kind"] == "drain"]
        assert drain["node"] == bad and drain["message"].startswith("stetho: ")
        assert drain["message"].endswith("(ledger; still drained in Slurm)")

        doc = json.loads(_stetho(c, "job", job, "--db", str(db), "--topology", str(topo),
                                 "--json").stdout)
        assert doc["job"]["nodes"] == nodes and doc["job"]["source"] == "scontrol"
        assert doc["timeline"]["leaves"] == {n: "leafA" for n in nodes}
        assert {e["node"] for e in doc["timeline"]["events"] if e["kind"] == "fail"} == {bad}
        assert doc["timeline"]["missing"] == []

        # another node under the same leaf, outside the job, fails in the window too: one
        # switch incident, not two node incidents
        neighbour = leaf_a[-1]
        c.set_failing(neighbour)
        assert c.run_hook(neighbour, "health-check").returncode == 1
        _ingest(c, db)
        again = _stetho(c, "job", job, "--db", str(db), "--topology", str(topo))
        assert again.returncode == 1, again.stdout + again.stderr
        assert again.stdout.startswith(
            f"likely the leaf switch leafA: 2 nodes under it failing in the window ({bad} of "
            f"this job; {neighbour} outside it)"), again.stdout
    finally:
        _cancel(c, job)


def test_a_healthy_job_has_no_hardware_finding_and_an_unknown_id_is_refused(
        cluster: sc.Cluster, tmp_path: Path) -> None:
    c = cluster
    job, nodes = _submit(c)
    try:
        _wait_spooled(c, nodes)
        db = tmp_path / "controller.db"
        _ingest(c, db)
        r = _stetho(c, "job", job, "--db", str(db))
        assert r.returncode == 0, r.stdout + r.stderr
        assert r.stdout.startswith("no hardware finding on any of the job's 2 nodes in the "
                                   "window "), r.stdout
        assert "(2 had history; 0 missing)" in r.stdout.splitlines()[0]

        # its step times: rank 1 is 30 % slower; the real NCCL log places it on GPU 1
        steps = tmp_path / "steps.csv"
        steps.write_text("rank,step,seconds\n" + "".join(
            f"{rank},{step},{(1.3 if rank == 1 else 1.0) + 0.002 * step}\n"
            for rank in range(4) for step in range(10)))
        r = _stetho(c, "job", job, "--db", str(db), "--steps", str(steps), "--nccl-log",
                    str(NCCL_LOG))
        assert r.returncode == 0, r.stdout + r.stderr
        (slow,) = [ln for ln in r.stdout.splitlines() if ln.startswith("  rank ")]
        assert slow.startswith("  rank 1: 3767c65d25c4 GPU 1: median step 1.309 s against "
                               "the job's 1.009 s"), r.stdout
        steps.write_text("rank,step,seconds\n0,0,fast\n")
        r = _stetho(c, "job", job, "--db", str(db), "--steps", str(steps))
        assert r.returncode == 2 and f"{steps} line 2" in r.stderr, r.stdout + r.stderr

        # the same job against a history that holds nothing of its nodes: not "no finding"
        empty = tmp_path / "empty.db"
        History(empty).close()  # a valid history that holds nothing
        r = _stetho(c, "job", job, "--db", str(empty))
        assert r.returncode == 3, r.stdout + r.stderr
        assert r.stdout.startswith("cannot tell: no history record for any of the job's 2 "
                                   "nodes"), r.stdout
    finally:
        _cancel(c, job)
    unknown = _stetho(c, "job", "999999", "--db", str(db))
    assert unknown.returncode == 2, unknown.stdout + unknown.stderr
    assert "job 999999: Slurm knows no such job" in unknown.stderr
    assert "Traceback" not in unknown.stderr


def test_slurm_unreachable_is_could_not_evaluate(cluster: sc.Cluster, tmp_path: Path) -> None:
    """A slurm.conf whose controller port nothing listens on: exit 3, naming scontrol."""
    c = cluster
    conf = (c.folder / "slurm.conf").read_text()
    port = next(ln for ln in conf.splitlines() if ln.startswith("SlurmctldPort="))
    dead = tmp_path / "slurm.conf"
    dead.write_text(conf.replace(port, "SlurmctldPort=9"))
    env = {**_env(c), "SLURM_CONF": str(dead)}
    r = subprocess.run([sys.executable, "-m", "stetho", "job", "1", "--db",
                        str(tmp_path / "h.db")], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 3, r.stdout + r.stderr
    assert "scontrol show job -o 1" in r.stderr and "Unable to contact" in r.stderr
    assert "Traceback" not in r.stderr
