"""bench/ingest.py in its smoke mode: it builds a spool of 16 node outcomes, ingests it in a
fresh process against the parse-every-file floor, and prints its figures and goals. No time
is asserted: the figures of a smoke run mean nothing."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.conftest import REPO

# both share the bench's spool and work folders under the temporary directory: one worker
pytestmark = pytest.mark.xdist_group("ingest-bench")


def test_the_ingest_bench_runs_in_its_smoke_mode() -> None:
    r = subprocess.run([sys.executable, str(REPO / "bench" / "ingest.py"), "--smoke"],
                       capture_output=True, text=True, timeout=900, cwd=REPO)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "ingest of 16 node outcomes from the spool" in r.stdout
    assert re.search(r"spool: 16 files, \d+ MiB", r.stdout)
    assert re.search(r"^ingest: median \d+(\.\d)? m?s .*CPU median", r.stdout, re.M), r.stdout
    assert re.search(r"^floor: median \d+(\.\d)? m?s", r.stdout, re.M)
    assert re.search(r"peak RSS \(tree\): ingest median \d+ MiB", r.stdout)
    # the 16 seeds carry 4 faults: the ingest took every file and its exit code says a fail
    assert "ingest exit codes [1]; last line: ingested 16 spool files in 1 run" in r.stdout
    # the goal is the at 10,240 nodes: a smaller run states the model, never "met"
    assert re.search(r"goal: judged at 10240 nodes only \(here 16\); linear model: \d+ ms CPU "
                     r"a node -> \d+ CPU-seconds and \d+ MiB at 10240", r.stdout), r.stdout
    assert " met" not in r.stdout


def test_the_ingest_bench_ingests_after_earlier_nights() -> None:
    """`--history-nights 1`: each side's history holds a night of the same nodes first, so
    the timed ingest judges their counters against readings (every night but the first)."""
    r = subprocess.run([sys.executable, str(REPO / "bench" / "ingest.py"), "--smoke",
                        "--history-nights", "1"],
                       capture_output=True, text=True, timeout=900, cwd=REPO)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "after 1 earlier nights in the history" in r.stdout
    assert "ingest exit codes [1]; last line: ingested 16 spool files in 1 run" in r.stdout
    assert "runs in the history after ingest's last round: 2 (1 earlier nights" in r.stdout
