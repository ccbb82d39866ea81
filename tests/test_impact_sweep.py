"""`stetho sweep --topology`: the README's three simulated nodes (examples/inventory.yml,
Ansible's local connection), with node02 and node03 failing under one leaf of a
topology.conf: the sweep names that leaf as one switch incident. Runs a real sweep (about
3 minutes here: the wheelhouse and three node installs)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO


def test_a_sweep_with_a_topology_names_the_leaf_whose_nodes_fail_together(
        tmp_path: Path) -> None:
    shutil.copytree(REPO / "examples", tmp_path / "examples")
    env = {**os.environ, "PWD": str(tmp_path), "STETHO_DB": str(tmp_path / "h.db")}
    stetho = [sys.executable, "-m", "stetho"]
    built = subprocess.run([*stetho, "sim", "build", "sim", "--nodes", "3", "--fault",
                            "node02=busbw-drop=20", "--fault", "node03=xid=79"], cwd=tmp_path,
                           env=env, capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr
    (tmp_path / "topology.conf").write_text("SwitchName=leafA Nodes=node01\n"
                                            "SwitchName=leafB Nodes=node[02-03]\n")
    r = subprocess.run([*stetho, "sweep", "-i", "examples/inventory.yml", "--out", "runs",
                        "-q", "--topology", "topology.conf"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 1, r.stdout + r.stderr
    (line,) = [ln for ln in r.stdout.splitlines() if ln.startswith("SWITCH ")]
    assert line.startswith("SWITCH leafB: 2 of 2 nodes failing together: node[02-03] (")
    # the checks named are the ones that failed there, as the run's own results say
    import json

    (run,) = (tmp_path / "runs").glob("2*")
    failed = sorted({r["check"] for r in json.loads((run / "results.json").read_text())[
        "results"] if r["status"] == "fail"})
    assert failed and line.split(" (", 1)[1].startswith(", ".join(failed) + ")")
    bad = subprocess.run([*stetho, "sweep", "-i", "examples/inventory.yml", "--out", "runs",
                          "--topology", "missing.conf"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "--topology missing.conf" in bad.stderr
    assert len(list((tmp_path / "runs").glob("2*"))) == 1  # refused before sweeping
