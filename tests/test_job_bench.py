"""bench/job.py in its tiny mode: it runs, prints a median and a ratio against its floor, and
the `stetho job` it times finds the failure the bench planted. No time is asserted."""

from __future__ import annotations

import re
import subprocess
import sys

from tests.conftest import REPO


def test_the_job_bench_runs_in_its_tiny_mode() -> None:
    r = subprocess.run([sys.executable, str(REPO / "bench" / "job.py"), "--tiny", "--runs",
                        "1"], capture_output=True, text=True, timeout=300, cwd=REPO)
    assert r.returncode == 0, r.stdout + r.stderr
    # tiny: 16 nodes gpu0001-0016, the job the 8 from gpu0003, its 4th node failing
    job = [f"gpu{i:04d}" for i in range(3, 11)]
    assert "job: 8 nodes gpu[0003-0010]" in r.stdout
    assert f"stetho job says: likely hardware: node {job[3]}'s mlx5_0:1 (ib_port_state)" \
        in r.stdout
    assert re.search(r"stetho job 4242 \(8 nodes, 4 h window\): median \d+ ms .*exit \[1\]",
                     r.stdout), r.stdout
    assert re.search(r"floor: the same SQLite query alone \(32 rows\): median \d+ ms", r.stdout)
    assert re.search(r"ratio: \d+\.\d\dx the floor", r.stdout)
