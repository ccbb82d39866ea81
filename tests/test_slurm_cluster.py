"""stetho's Slurm hooks on a real multi-node Slurm (tests/slurm_cluster.py): slurmd runs them
in each node's own network namespace, against each node's simulated hardware.

Every test starts from `reset()` (all nodes healthy and idle, an empty ledger and spool) and
shares the one cluster: xdist_group "slurm-cluster"."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from stetho.history.store import History
from tests import slurm_cluster as sc

pytestmark = pytest.mark.xdist_group("slurm-cluster")


@pytest.fixture
def cluster(slurm_cluster: sc.Cluster) -> sc.Cluster:
    slurm_cluster.reset()
    return slurm_cluster


def _reason(c: sc.Cluster, node: str) -> str:
    line = c.scontrol("show", "node", "-o", node)
    return line.split(" Reason=", 1)[1] if " Reason=" in line else ""


def _ingest(spool: Path, db: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "stetho", "history", "ingest", str(spool),
                           "--db", str(db), "--out", str(db.parent / "runs")],
                          capture_output=True, text=True, timeout=120)


def _runs(db: Path, kind: str) -> list[tuple[str, str, int]]:
    with History(db) as h:
        return list(h.conn.execute(
            "SELECT r.id, n.name, nr.exit_code FROM runs r JOIN node_runs nr ON nr.run_key = "
            "r.key JOIN nodes n ON n.id = nr.node_id WHERE r.kind = ? ORDER BY r.id", (kind,)))


def test_slurmd_runs_the_health_check_on_every_node_under_its_slurm_name(
        slurm_cluster: sc.Cluster) -> None:
    """slurmd runs HealthCheckProgram as it starts, in its namespace, with SLURMD_NODENAME:
    one GO verdict per node reached the shared spool, each under the node's Slurm name."""
    assert slurm_cluster.startup_verdicts == [(n, 0) for n in slurm_cluster.nodes]
    shown = slurm_cluster.scontrol("show", "config")
    config = {k.strip(): v.strip() for k, _, v in (ln.partition("=") for ln in
                                                      shown.splitlines())}
    assert set(config["HealthCheckNodeState"].split(",")) == {"IDLE", "CYCLE"}
    assert config["PrologFlags"] == "Alloc"
    assert config["HealthCheckProgram"].endswith("/stetho-healthcheck")
    assert config["Prolog"].endswith("/stetho-prolog")


def test_concurrent_health_checks_lose_no_verdict_on_their_way_to_history(
        slurm_cluster: sc.Cluster, tmp_path: Path) -> None:
    """The slurmds' start-up checks ran all at once; `stetho history ingest` (the same as
    `stetho ingest`) records each verdict once, moves the files out of the spool, and a
    second ingest adds nothing."""
    c = slurm_cluster
    spool = tmp_path / "results"
    shutil.copytree(c.startup_results, spool)
    db = tmp_path / "controller.db"
    r = _ingest(spool, db)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"ingested {len(c.nodes)} spool files" in r.stdout
    assert sorted(n for _, n, code in _runs(db, "gate-health-check") if code == 0) == c.nodes
    assert not sc.spooled(spool)  # moved to <node>/ingested/
    assert len(sc.spooled(spool, "ingested")) == len(c.nodes)
    again = _ingest(spool, db)  # nothing new: nothing twice
    assert again.returncode == 0 and "nothing to ingest" in again.stdout
    assert len(_runs(db, "gate-health-check")) == len(c.nodes)


def test_an_ingest_killed_mid_way_then_run_again_records_each_nodes_health_check_once(
        slurm_cluster: sc.Cluster, tmp_path: Path) -> None:
    """The nodes' start-up health checks, each in its node's spool folder: an ingest killed
    (SIGKILL) between its commit and its moves, then run again, leaves each node's verdict
    in the history once, and every file moved."""
    from tests.test_ingest import KILL

    c = slurm_cluster
    spool = tmp_path / "results"
    shutil.copytree(c.startup_results, spool)
    db = tmp_path / "controller.db"
    killed = subprocess.run([sys.executable, "-c", KILL, "moving", "5", "ingest", str(spool),
                             "--db", str(db), "--out", str(tmp_path / "runs"), "-q"],
                            capture_output=True, text=True, timeout=300)
    assert killed.returncode == -9, killed.stdout + killed.stderr
    assert len(sc.spooled(spool)) == len(c.nodes) - 5  # recorded, five moved, the rest not
    r = _ingest(spool, db)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"{len(c.nodes) - 5} spool files were already in the history" in r.stdout
    assert sorted(n for _, n, code in _runs(db, "gate-health-check") if code == 0) == c.nodes
    assert not sc.spooled(spool) and len(sc.spooled(spool, "ingested")) == len(c.nodes)


def test_reset_undoes_what_any_test_may_leave(cluster: sc.Cluster, tmp_path: Path) -> None:
    """One cluster serves every Slurm module of the session, so reset() must undo whatever a
    test left: a running job, a reservation, an extra partition, a drained node, failing or
    hanging hardware, a node's root replaced, a simulated tree edited, a hang marker, the
    ledger, the spool and the nodes' histories."""
    c = cluster
    job = subprocess.run(["sbatch", "--parsable", "-w", "n04", f"-o{tmp_path}/hold.out",
                          "--wrap", "sleep 900"], env=c.full_env(), capture_output=True,
                         text=True, timeout=60, check=True).stdout.strip().split(";")[0]
    sc.wait_for(lambda: "JobState=RUNNING" in c.scontrol("show", "job", "-o", job), 60,
                f"job {job} running", c)
    c.scontrol("create", "ReservationName=leftover", "Nodes=n05", "StartTime=now",
               "Duration=60", "Users=root")
    c.scontrol("create", "PartitionName=leftover", "Nodes=n06,n07", "State=UP")
    c.scontrol("update", "NodeName=n08", "State=DRAIN", "Reason=left by a test")
    c.set_failing("n01")
    c.set_hardware("n02", "hanging")
    (c.folder / "nodes" / "n03").unlink()
    (c.folder / "nodes" / "n03").mkdir()
    (c.folder / "nodes" / "stray").symlink_to(c.folder / "sim" / "failing")
    edited = next(p for p in sorted((c.folder / "sim" / "healthy").rglob("*")) if p.is_file()
                  and not p.is_symlink())
    original = edited.read_bytes()
    edited.write_bytes(b"garbage")
    (c.folder / "hang-n09").touch()
    c.ledger.write_bytes(b"not a ledger")
    (c.results / "n10").mkdir()
    (c.results / "n10" / "left.json").write_text("{}")
    c.node_db("n11").write_bytes(b"not a history")

    c.reset()

    assert c.jobs() == [] and c.reservations() == [] and c.partitions() == [sc.PARTITION]
    assert {n: s.rstrip("*") for n, s in c.states().items()} == {n: "idle" for n in c.nodes}
    assert _reason(c, "n08") == ""
    nodes = c.folder / "nodes"
    assert sorted(p.name for p in nodes.iterdir()) == c.nodes
    assert {os.readlink(nodes / n) for n in c.nodes} == {str(c.folder / "sim" / "healthy")}
    assert edited.read_bytes() == original  # the simulated node rebuilt as it was built
    assert not list(c.folder.glob("hang-*")) and not c.ledger.exists()
    assert not list(c.results.iterdir()) and not list((c.folder / "db").iterdir())
    # and the cluster still works: a job runs on a node the test had drained
    r = subprocess.run(["srun", "-w", "n08", "--wait=0", "hostname"], env=c.full_env(),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr


def test_a_failing_prolog_drains_its_node_with_stethos_reason_and_the_job_runs_elsewhere(
        cluster: sc.Cluster, tmp_path: Path) -> None:
    c = cluster
    bad = c.nodes[0]  # equal weights: the scheduler tries the first node first
    c.set_failing(bad)
    r = subprocess.run(["sbatch", "--parsable", "-N1", f"--output={tmp_path}/job-%j.out",
                        "--wrap", "echo ran on $SLURMD_NODENAME"], env=c.full_env(),
                       capture_output=True, text=True, timeout=60, check=True)
    job = r.stdout.strip().split(";")[0]
    deadline = time.monotonic() + 120
    show = ""
    while time.monotonic() < deadline:
        show = c.scontrol("show", "job", "-o", job)
        if "JobState=COMPLETED" in show or "JobState=FAILED" in show:
            break
        time.sleep(0.2)
    assert "JobState=COMPLETED" in show, show
    assert "Restarts=1" in show, show  # it went to the failing node first, then was requeued
    ran = (tmp_path / f"job-{job}.out").read_text().split()[-1]
    assert ran != bad and ran in c.nodes
    assert c.states()[bad].startswith("drain")
    reason = _reason(c, bad)
    assert reason.startswith("stetho: gpu_clocks:"), reason
    assert "Prolog error" not in reason

    # the prolog's verdict, from the node that failed, is in the controller's history
    db = tmp_path / "controller.db"
    assert _ingest(c.results, db).returncode == 1  # exit codes as a sweep's: one node fails
    prologs = _runs(db, "gate-prolog")
    assert (bad, 1) in [(n, code) for _, n, code in prologs], prologs
    assert (ran, 0) in [(n, code) for _, n, code in prologs], prologs
    jobs = {d.get("job") for d in sc.spooled(c.results, "ingested")}
    assert jobs == {job}  # each prolog's verdict names the job it ran for (SLURM_JOB_ID)


def _at_once(c: sc.Cluster, mode: str, extra: dict[str, str] | None = None
             ) -> dict[str, subprocess.CompletedProcess[str]]:
    """The hook on every node at the same moment, each in its namespace as slurmd runs it."""
    procs = {n: subprocess.Popen(c.hook_argv(n, mode), env=c.hook_env(n, extra),
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for n in c.nodes}
    out = {}
    for n, p in procs.items():
        stdout, stderr = p.communicate(timeout=300)
        out[n] = subprocess.CompletedProcess(p.args, p.returncode, stdout, stderr)
    return out


def _drained(c: sc.Cluster) -> list[str]:
    return sorted(n for n, s in c.states().items() if s.startswith("drain"))


def _verdicts(c: sc.Cluster) -> dict[str, dict]:
    docs = sc.spooled(c.results)
    assert len(docs) == len(c.nodes), [d["node"] for d in docs]
    return {d["node"]: d for d in docs}


LIMIT = 2  # max(2 nodes, 10% of 16)


def test_16_health_checks_failing_at_once_drain_exactly_the_budget(cluster: sc.Cluster
                                                                    ) -> None:
    """A bad push fails every node's health check at the same moment (Slurm's default
    without CYCLE): the drain budget lets exactly its limit through, no more."""
    c = cluster
    for node in c.nodes:
        c.set_failing(node)
    # the checks must finish (this is the budget's test; the watchdog's is the next one): 16
    # at once on a loaded 2-core machine took more than the default 50 s
    outs = _at_once(c, "health-check", {"STETHO_HEALTH_TIMEOUT": "240"})
    drained = _drained(c)
    assert len(drained) == LIMIT, (drained, {n: o.stdout for n, o in outs.items()})
    for node in drained:
        assert _reason(c, node).startswith("stetho: gpu_clocks:")
    refused = [n for n in c.nodes if n not in drained]
    assert all(outs[n].returncode == 3 and "circuit open" in outs[n].stdout for n in refused)
    verdicts = _verdicts(c)  # every check's verdict is spooled, drained or not
    assert all(d["blocked"] == [n] for n, d in verdicts.items())


def test_a_watchdog_storm_drains_within_the_budget(cluster: sc.Cluster) -> None:
    """nvidia-smi hangs on every node at once: each watchdog fires and asks the budget."""
    c = cluster
    for node in c.nodes:
        c.set_hardware(node, "hanging")
    outs = _at_once(c, "health-check", {"STETHO_HEALTH_TIMEOUT": "3"})
    assert all(o.returncode == 3 and "did not finish in 3 s" in o.stdout
               for o in outs.values()), {n: o.stdout + o.stderr for n, o in outs.items()}
    drained = _drained(c)
    assert len(drained) == LIMIT, drained
    assert all("did not finish in 3 s" in _reason(c, n) for n in drained)
    assert {d["exit_code"] for d in _verdicts(c).values()} == {3}


def test_a_re_drain_keeps_the_first_reason_and_time(cluster: sc.Cluster) -> None:
    c = cluster
    node = c.nodes[4]
    c.set_failing(node)
    assert c.run_hook(node, "health-check").returncode == 1
    first = _reason(c, node)
    c.set_hardware(node, "hanging")  # a different failure, later
    again = c.run_hook(node, "health-check", {"STETHO_HEALTH_TIMEOUT": "3"})
    assert again.returncode == 3, again.stdout + again.stderr
    assert _reason(c, node) == first and first.startswith("stetho: gpu_clocks:")


def test_a_hung_prolog_drains_its_node_through_the_budget_and_requeues(cluster: sc.Cluster
                                                                        ) -> None:
    """The prolog's watchdog: checks that do not finish are a failure (unknown is never go),
    drained with stetho's reason, exit 1 so the job goes elsewhere, the verdict spooled."""
    c = cluster
    node = c.nodes[2]
    c.set_hardware(node, "hanging")
    r = c.run_hook(node, "prolog", {"STETHO_HEALTH_TIMEOUT": "3"})
    assert r.returncode == 1, r.stdout + r.stderr
    assert "did not finish in 3 s" in _reason(c, node)
    (doc,) = sc.spooled(c.results)
    assert (doc["node"], doc["kind"], doc["exit_code"]) == (node, "gate-prolog", 1)


def test_prologs_failing_at_once_drain_the_budget_and_let_the_other_jobs_run(
        cluster: sc.Cluster) -> None:
    """Past the budget the prolog does not take its node out: a non-zero exit would make
    Slurm drain it around the budget. Its verdict is still BLOCKED, and says why."""
    c = cluster
    for node in c.nodes:
        c.set_failing(node)
    outs = _at_once(c, "prolog")
    drained = _drained(c)
    assert len(drained) == LIMIT, (drained, {n: o.stdout for n, o in outs.items()})
    assert sorted(n for n, o in outs.items() if o.returncode == 1) == drained
    assert all(o.returncode == 0 for n, o in outs.items() if n not in drained)
    refused = next(o for n, o in outs.items() if n not in drained)
    assert "BLOCKED" in refused.stdout and "job runs here" in refused.stdout, refused.stdout
    assert "circuit open" in refused.stdout
    for node, doc in _verdicts(c).items():
        assert doc["kind"] == "gate-prolog" and doc["blocked"] == [node]
        assert doc["exit_code"] == (1 if node in drained else 0)


def test_ingest_refuses_nothing_silently(tmp_path: Path) -> None:
    """A torn file in a node's folder is that node's error, moved to its bad/ with the reason,
    and the command exits 3; the good ones are recorded."""
    from stetho import spool as spool_mod
    from stetho.fleet.outcome import Outcome
    from stetho.results import Result

    spool = tmp_path / "spool"
    passing = [Result("n01", "gpu_clocks", "GPU0", "pass", "locked")]
    spool_mod.write(spool, Outcome("n01", 0, passing, "", None), kind="gate-prolog",
                    run_id="20260101T000000Z-aaaaaa", when=1767225600.0)
    (spool / "n02").mkdir()
    (spool / "n02" / "20260101T000000Z-bbbbbb.json").write_text('{"run_id": ')
    r = _ingest(spool, tmp_path / "h.db")
    assert r.returncode == 3, r.stdout + r.stderr
    assert "ingested 2 spool files (1 refused" in r.stdout
    assert (spool / "n02" / "bad" / "20260101T000000Z-bbbbbb.json").exists()
    assert "not valid JSON" in (spool / "n02" / "bad" / "20260101T000000Z-bbbbbb.json.why"
                                ).read_text()
    with History(tmp_path / "h.db") as h:
        assert h.latest_results(["n01"], max_age_s=10**10)["n01"][2][0].status == "pass"
        assert h.latest_results(["n02"], max_age_s=10**10)["n02"][2][0].status == "error"


def test_the_result_spool_must_be_absolute(tmp_path: Path) -> None:
    r = subprocess.run([sys.executable, "-m", "stetho", "history", "ingest"],
                       env={**os.environ, "STETHO_RESULT_SPOOL": "spool"}, cwd=tmp_path,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "expected an absolute path" in r.stderr


def test_every_module_shares_the_sessions_cluster() -> None:
    """The cluster fixture lives in tests/conftest.py: a module that defines or re-exports
    its own (`slurm_cluster = sc.slurm_cluster`, a fixture calling sc.start or
    sc.for_session) would start 16 more slurmd for itself, kept until the session ends."""
    import re

    here = Path(__file__).resolve().parent
    own = [p.name for p in sorted(here.glob("test_*.py"))
           if re.search(r"^slurm_cluster\s*=|^def slurm_cluster\(|sc\.for_session\(|"
                        r"\bsc\.start\(", p.read_text(), re.M)]
    assert own == [], f"start no cluster per module (tests/conftest.py has one): {own}"
    assert "def slurm_cluster(" in (here / "conftest.py").read_text()
