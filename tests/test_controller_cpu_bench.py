"""bench/controller_cpu.py in its smoke mode (2 Slurm nodes, 2 Ansible hosts, 1 run): every
side ran and the model and floor lines are printed. No time is asserted."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests import slurm_cluster as sc
from tests.conftest import REPO

pytestmark = pytest.mark.xdist_group("slurm-cluster")


def test_the_controller_cpu_bench_runs_in_its_smoke_mode() -> None:
    if sc.missing():
        pytest.skip(f"a multi-node Slurm cannot run here: {', '.join(sc.missing())}")
    r = subprocess.run([sys.executable, str(REPO / "bench" / "controller_cpu.py"), "--smoke"],
                       capture_output=True, text=True, timeout=1500, cwd=REPO)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    for side in ("ansible sweep x2", "ansible sweep x1", "slurm sweep x2", "slurm sweep x1",
                 "ingest x2", "ingest x1", "floor x2"):
        assert re.search(rf"^{side}: median \S+ .*CPU median .*exit \[0\]$", r.stdout, re.M), \
            (side, r.stdout)
    for what in ("ansible sweep", "slurm sweep", "ingest"):
        assert re.search(rf"^model: {what}: [\d.]+ ms CPU per node \+ [\d.]+ s fixed -> 10240 "
                         r"nodes: [\d.]+ CPU-minutes", r.stdout, re.M), r.stdout
    assert "floor: a fresh python reading and JSON-parsing 2 spool files" in r.stdout
    assert re.search(r"^load [\d.]+ / [\d.]+ \(1 / 5 min\)", r.stdout, re.M)
