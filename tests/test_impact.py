"""Parts resolved to nodes, the blast radius over known jobs, switch incidents, and the
commands that show them where no Slurm is needed: `stetho impact` refusing an unknown part
(exit 2) and failing closed when squeue cannot answer (exit 3), and `stetho gate --topology`
telling a leaf's failing nodes as one switch incident. The same commands against a running
Slurm are in tests/test_impact_slurm.py."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from stetho.errors import ConfigError
from stetho.history.store import History, NodeRun
from stetho.jobs import blast, parts
from stetho.jobs.squeue import Job
from stetho.results import Result
from tests.conftest import REPO

RECORDED = REPO / "fixtures" / "recorded" / "squeue-slurm22-testbed"
TOPOLOGY = "SwitchName=leafA Nodes=n[01-04]\nSwitchName=leafB Nodes=n[05-08]\n" \
           "SwitchName=spine Switches=leafA,leafB\n"


def _no_slurm() -> set[str]:
    raise AssertionError("Slurm was asked, though the topology holds every name")


@pytest.fixture
def topo(tmp_path: Path):
    f = tmp_path / "topology.conf"
    f.write_text(TOPOLOGY)
    return parts.load_topology(str(f), lambda: "")


def test_the_recorded_scontrol_topology_reads_as_its_two_leaves_and_spine() -> None:
    """`scontrol show topology` repeats the leaves' nodes on the spine's line; the spine is
    still their parent, not a third leaf."""
    text = (RECORDED / "scontrol-show-topology.txt").read_text()
    t = parts.load_topology("slurm", lambda: text)
    assert t is not None
    assert t.leaves() == {"leafA": ["n01", "n02"], "leafB": ["n03", "n04"]}
    assert parts.switches(t) == ["spine", "leafA", "leafB"]
    assert parts.under(t, "spine") == ("n01", "n02", "n03", "n04")


@pytest.mark.parametrize("spec, kind, nodes", [
    ("leafA", "switch", ("n01", "n02", "n03", "n04")),
    ("spine", "switch", tuple(f"n{i:02d}" for i in range(1, 9))),
    ("n06", "node", ("n06",)),
    ("n[03-05]", "nodes", ("n03", "n04", "n05")),
    ("n06:mlx5_0/1", "node-port", ("n06",)),
    ("leafB:17", "switch-port", ("n05", "n06", "n07", "n08")),
])
def test_parts_resolve_to_the_nodes_behind_them(topo, spec, kind, nodes) -> None:
    p = parts.resolve(spec, topo, _no_slurm)
    assert (p.kind, p.nodes) == (kind, nodes)
    assert ("upper bound" in p.note) == (kind == "switch-port")


def test_a_node_outside_the_topology_must_be_one_slurm_knows(topo) -> None:
    assert parts.resolve("login1", topo, lambda: {"login1"}).nodes == ("login1",)
    with pytest.raises(ConfigError) as info:
        parts.resolve("leafC", topo, lambda: {"login1"})
    assert "unknown part 'leafC'" in str(info.value)
    assert "known switches: spine, leafA, leafB" in str(info.value)


def test_without_a_topology_a_switch_is_unknown_and_says_how_to_name_one() -> None:
    with pytest.raises(ConfigError, match="--topology"):
        parts.resolve("leafA", None, lambda: {"n01"})


@pytest.mark.parametrize("spec", ["n01:", "n01:mlx5_0/x", "n[01-02]:mlx5_0/1", "a b"])
def test_malformed_parts_are_refused(topo, spec) -> None:
    with pytest.raises(ConfigError):
        parts.resolve(spec, topo, lambda: set())


JOBS = [Job("11", "alice", "gpu", "train", "RUNNING", ("n01", "n02", "n05"), 8),
        Job("12", "bob", "gpu", "eval", "RUNNING", ("n03",), None),
        Job("13", "carol", "debug", "x", "RUNNING", ("n07", "n08"), None)]


def test_the_blast_radius_of_a_leaf(topo) -> None:
    """leafA holds n01-n04: job 11 on two of its three nodes (8 GPUs each, Slurm's count),
    job 12 on n03 (no GPU count: the profile's 4), not job 13 (leafB only)."""
    imp = blast.of(parts.resolve("leafA", topo, _no_slurm), JOBS, {f"n{i:02d}": 4
                                                                   for i in range(1, 9)})
    got = [(j.job.job_id, j.affected, j.gpus, j.gpu_source) for j in imp.jobs]
    assert got == [("11", ("n01", "n02"), 16, "slurm"), ("12", ("n03",), 4, "profile")]
    assert imp.gpus == 20 and imp.idle == ["n04"]
    text = blast.render(imp)
    assert "total: 2 running jobs of 2 users (alice, bob), 20 GPUs" in text
    assert "without jobs: n04" in text and "carol" not in text


def test_an_unknown_gpu_count_leaves_the_total_unknown(topo) -> None:
    imp = blast.of(parts.resolve("leafB", topo, _no_slurm), JOBS, {})
    assert [j.gpus for j in imp.jobs] == [8, None]
    assert imp.gpus is None
    assert "GPUs affected: unknown (no GPU count from Slurm or --profile for job 13)" in \
        blast.render(imp)
    assert imp.to_json()["gpus_affected"] is None


def test_no_jobs_is_said_plainly(topo) -> None:
    text = blast.render(blast.of(parts.resolve("n04", topo, _no_slurm), JOBS, {}))
    assert text.splitlines()[-1] == "no running jobs on n04"


def test_drain_phrases_name_each_job_its_owner_and_size() -> None:
    got = blast.drain_phrases(["n05", "n06"], JOBS)
    assert got == {"n05": "draining n05 affects job 11 (alice, gpu, 3 nodes)",
                   "n06": "draining n06 affects no running job"}


def test_switch_incidents_need_two_nodes_and_half_the_leaf(topo) -> None:
    evaluated = [f"n{i:02d}" for i in range(1, 9)]
    (inc,) = blast.switch_incidents(topo, ["n01", "n02", "n05"], ["n01", "n02", "n03", "n05"])
    assert (inc.switch, inc.failing, inc.leaf_size) == ("leafA", ("n01", "n02"), 4)
    assert blast.switch_incidents(topo, ["n01", "n05"], evaluated) == []  # one per leaf
    # two of four failing is half: an incident; two of the four evaluated, out of 4
    assert [i.switch for i in blast.switch_incidents(topo, ["n05", "n08"], evaluated)] == \
        ["leafB"]


# -- the commands ----------------------------------------------------------------------------

def _stetho(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    import os

    return subprocess.run([sys.executable, "-m", "stetho", *args], capture_output=True,
                          text=True, timeout=120, env={**os.environ, **(env or {})})


def _no_cluster(tmp_path: Path) -> dict[str, str]:
    """A slurm.conf that names no cluster: the real squeue and scontrol refuse it at once (a
    missing one sends them looking for a controller in DNS for a minute)."""
    conf = tmp_path / "slurm.conf"
    conf.write_text("")
    return {"SLURM_CONF": str(conf)}


def test_impact_refuses_an_unknown_part_with_the_known_switches(tmp_path: Path) -> None:
    f = tmp_path / "topology.conf"
    f.write_text(TOPOLOGY)
    r = _stetho("impact", "no/such", "--topology", str(f))
    assert r.returncode == 2, r.stderr
    assert "unknown part 'no/such'" in r.stderr
    assert "known switches: spine, leafA, leafB" in r.stderr and "Traceback" not in r.stderr


def test_impact_with_squeue_unable_to_answer_is_exit_3_never_no_jobs(tmp_path: Path) -> None:
    """The real squeue (or none at all) with no Slurm to ask: the radius is unknown."""
    f = tmp_path / "topology.conf"
    f.write_text(TOPOLOGY)
    r = _stetho("impact", "leafA", "--topology", str(f),
                env=_no_cluster(tmp_path))
    assert r.returncode == 3, r.stdout + r.stderr
    assert "could not evaluate the blast radius of leafA" in r.stderr
    assert "no running jobs" not in r.stdout + r.stderr


def test_impact_with_an_unreadable_topology_is_a_usage_error(tmp_path: Path) -> None:
    r = _stetho("impact", "leafA", "--topology", str(tmp_path / "nope.conf"))
    assert r.returncode == 2 and "--topology" in r.stderr and "cannot read" in r.stderr


def _history(db: Path, failing: set[str], nodes: list[str]) -> None:
    runs = [NodeRun(n, "p", [Result(n, "cpu_governor", "", "fail" if n in failing else "pass",
                                    "governor is powersave" if n in failing else "ok")], [])
            for n in nodes]
    with History(db) as h:
        h.record("r-now", "sweep", runs, when=time.time() - 60)


def test_gate_with_a_topology_tells_a_leafs_failures_as_one_switch_incident(
        tmp_path: Path) -> None:
    """n01 and n02 fail under leafA (2 of the 4 nodes evaluated there): one SWITCH line in
    place of their BLOCK lines; n06 fails alone under leafB and keeps its own line."""
    nodes = [f"n{i:02d}" for i in range(1, 9)]
    db = tmp_path / "h.db"
    _history(db, {"n01", "n02", "n06"}, nodes)
    policy = tmp_path / "p.yml"
    policy.write_text("policy: p\nfreshness: 6h\nchecks: [cpu_governor]\nblock_on: [fail]\n")
    topo = tmp_path / "topology.conf"
    topo.write_text(TOPOLOGY)
    out = tmp_path / "gate.json"
    r = _stetho("gate", "--policy", str(policy), "--nodes", "n[01-08]", "--db", str(db),
                "--topology", str(topo), "--no-reports", "--out", str(tmp_path / "runs"),
                "--json", str(out))
    assert r.returncode == 1, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert "SWITCH leafA: 2 of 4 nodes failing together: n[01-02] (cpu_governor); suspect " \
           "the switch or its uplink before the nodes" in lines
    assert not [ln for ln in lines if ln.startswith(("BLOCK n01", "BLOCK n02"))]
    assert [ln for ln in lines if ln.startswith("BLOCK n06 cpu_governor")]
    doc = json.loads(out.read_text())
    assert doc["switch_incidents"] == [{"switch": "leafA", "failing": ["n01", "n02"],
                                        "evaluated": ["n01", "n02", "n03", "n04"],
                                        "leaf_size": 4}]
    assert sorted(doc["blocked"]) == ["n01", "n02", "n06"]  # the verdict is unchanged


def test_gate_without_a_topology_keeps_one_line_per_node(tmp_path: Path) -> None:
    nodes = ["n01", "n02"]
    db = tmp_path / "h.db"
    _history(db, set(nodes), nodes)
    policy = tmp_path / "p.yml"
    policy.write_text("policy: p\nfreshness: 6h\nchecks: [cpu_governor]\nblock_on: [fail]\n")
    r = _stetho("gate", "--policy", str(policy), "--nodes", "n[01-02]", "--db", str(db),
                "--no-reports", "--out", str(tmp_path / "runs"))
    assert r.returncode == 1
    assert [ln.split()[1] for ln in r.stdout.splitlines() if ln.startswith("BLOCK ")] == nodes
    assert "SWITCH" not in r.stdout


def test_a_drain_whose_jobs_cannot_be_read_says_so_never_no_job(tmp_path: Path) -> None:
    """A dry-run drain with no Slurm to ask: the drain's blast radius is unknown, and the
    line and JSON say it could not be evaluated."""
    db = tmp_path / "h.db"
    _history(db, {"n01"}, ["n01"])
    policy = tmp_path / "p.yml"
    policy.write_text("policy: p\nfreshness: 6h\nchecks: [cpu_governor]\nblock_on: [fail]\n"
                      f"scheduler:\n  drain: true\n  circuit: {{ledger: {tmp_path / 'l.db'}}}\n")
    out = tmp_path / "gate.json"
    r = _stetho("gate", "--policy", str(policy), "--nodes", "n01", "--db", str(db),
                "--no-reports", "--out", str(tmp_path / "runs"), "--json", str(out),
                env=_no_cluster(tmp_path))
    assert r.returncode == 1, r.stdout + r.stderr
    (line,) = [ln for ln in r.stdout.splitlines() if ln.startswith("BLAST ")]
    assert line.startswith("BLAST blast radius of draining n01 could not be evaluated: ")
    assert "no running job" not in r.stdout
    assert "could not be evaluated" in json.loads(out.read_text())["blast_radius"]["n01"]
