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
