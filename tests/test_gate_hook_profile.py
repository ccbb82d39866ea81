"""A Slurm gate hook's verdict (`stetho gate --local --slurm health-check`) reaches history
through the spool and `stetho ingest` with the node's profile, as a check run's does: the
hook spools the node's own summary from its check. Real CLI, real spool, real SQLite; the
node is simulated (no Slurm here: the hook's resume says it could not ask, the verdict
stands)."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO

PROFILE = "h100-sxm-8gpu"


def _stetho(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "stetho", *args], capture_output=True,
                          text=True, timeout=300, cwd=REPO, env={**os.environ, **env})


def test_a_gate_hooks_verdict_is_recorded_with_the_nodes_profile(tmp_path: Path) -> None:
    built = _stetho("sim", "build", str(tmp_path / "sim"), "--nodes", "1", env={})
    assert built.returncode == 0, built.stderr
    (root,) = (tmp_path / "sim").iterdir()
    spool = tmp_path / "spool"
    node_env = {"STETHO_SYSROOT": str(root / "sysroot"),
                "PATH": f"{root / 'bin'}:/usr/bin:/bin", "STETHO_RESULT_SPOOL": str(spool),
                "STETHO_PROFILE": PROFILE, "STETHO_DB": str(tmp_path / "node.db")}
    hook = _stetho("gate", "--local", "--slurm", "health-check", "--policy", "pre-job",
                   "--node", root.name, env=node_env)
    assert f"GO: 1 nodes, 1 go, 0 blocked; profile {PROFILE}" in hook.stdout, \
        hook.stdout + hook.stderr
    db = tmp_path / "controller.db"
    ingest = _stetho("ingest", str(spool), "--db", str(db), "--out", str(tmp_path / "runs"),
                     "-q", env={})
    assert ingest.returncode == 0, ingest.stdout + ingest.stderr
    with sqlite3.connect(db) as c:
        rows = c.execute("SELECT r.kind, n.name, nr.profile FROM node_runs nr JOIN runs r "
                         "ON r.key = nr.run_key JOIN nodes n ON n.id = nr.node_id").fetchall()
    assert rows == [("gate-health-check", root.name, PROFILE)]


def test_a_watchdog_verdict_is_recorded_with_the_profile_and_why(tmp_path: Path) -> None:
    """The hook's checks hang (nvidia-smi never answers): the watchdog's could-not-evaluate
    verdict is spooled with the policy, the profile and a summary saying the checks did not
    finish in 3 s, and reaches history with the node's profile; it stays an error."""
    import json

    built = _stetho("sim", "build", str(tmp_path / "sim"), "--nodes", "1", env={})
    assert built.returncode == 0, built.stderr
    (root,) = (tmp_path / "sim").iterdir()
    hang = tmp_path / "hang"
    hang.mkdir()
    (hang / "nvidia-smi").write_text("#!/bin/sh\nexec sleep 120\n")
    (hang / "nvidia-smi").chmod(0o755)
    spool = tmp_path / "spool"
    node_env = {"STETHO_SYSROOT": str(root / "sysroot"),
                "PATH": f"{hang}:{root / 'bin'}:/usr/bin:/bin", "STETHO_RESULT_SPOOL": str(spool),
                "STETHO_PROFILE": PROFILE, "STETHO_DB": str(tmp_path / "node.db"),
                "STETHO_HEALTH_TIMEOUT": "3"}
    hook = _stetho("gate", "--local", "--slurm", "health-check", "--policy", "pre-job",
                   "--node", root.name, env=node_env)
    assert hook.returncode == 3, hook.stdout + hook.stderr
    assert (f"gate pre-job: COULD NOT EVALUATE {root.name}: stetho: health-check: checks did "
            f"not finish in 3 s") in hook.stdout, hook.stdout
    assert f"; profile {PROFILE}" in hook.stdout
    (spooled,) = spool.glob(f"{root.name}/*.json")
    doc = json.loads(spooled.read_text())
    detail = doc["detail"]
    assert detail["policy"] == "pre-job" and detail["profiles"] == {root.name: PROFILE}
    assert "checks did not finish in 3 s" in detail["summary"]
    assert "checks did not finish in 3 s" in detail["could_not_evaluate"][root.name]
    assert doc["outcome"]["summary"]["profile"] == PROFILE
    db = tmp_path / "controller.db"
    ingest = _stetho("ingest", str(spool), "--db", str(db), "--out", str(tmp_path / "runs"),
                     "-q", env={})
    assert ingest.returncode != 0, ingest.stdout + ingest.stderr  # the node is not healthy
    with sqlite3.connect(db) as c:
        rows = c.execute("SELECT r.kind, n.name, nr.profile FROM node_runs nr JOIN runs r "
                         "ON r.key = nr.run_key JOIN nodes n ON n.id = nr.node_id").fetchall()
    assert rows == [("gate-health-check", root.name, PROFILE)]
    results = json.loads((next((tmp_path / "runs").glob("2*")) / "results.json").read_text())
    mine = [r for r in results["results"] if r["node"] == root.name]
    assert [r["status"] for r in mine if r["check"] == "health-check"] == ["error"]
