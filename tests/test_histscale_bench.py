"""bench/history.py --bulk and bench/gate.py in their tiny modes: they build a real-size
history (signed, chained, partly pruned), record through the history interface, and the gate
they time decides GO on it. No time is asserted."""

from __future__ import annotations

import re
import subprocess
import sys

from tests.conftest import REPO


def test_the_bulk_history_bench_runs_in_its_tiny_mode(tmp_path) -> None:
    r = subprocess.run([sys.executable, str(REPO / "bench" / "history.py"), "--bulk",
                        "--smoke", "--db", str(tmp_path / "h.db")], capture_output=True,
                       text=True, timeout=600, cwd=REPO)
    assert r.returncode == 0, r.stdout + r.stderr
    assert re.search(r"one real node-night \(stetho check --sim, healthy 8x H100\): \d{3} "
                     r"results, a \d+\.\d KiB blob, \d{3} metrics", r.stdout), r.stdout
    assert "building 10 nights x 16 nodes" in r.stdout
    assert "the newest 4 nights with their results, older pruned" in r.stdout
    assert re.search(r"built in \d+ s: .* 160 node-runs", r.stdout), r.stdout
    assert "extrapolated, not built: metrics for all 10 nights" in r.stdout
    assert re.search(r"one more sweep \(16 nodes, \d+ results and \d+ metrics each, "
                     r"History.record\) inserted in: median", r.stdout), r.stdout
    assert "database size:" in r.stdout


def test_the_gate_bench_runs_in_its_tiny_mode() -> None:
    before = set(REPO.glob("runs/gate-*"))
    r = subprocess.run([sys.executable, str(REPO / "bench" / "gate.py"), "--smoke"],
                       capture_output=True, text=True, timeout=600, cwd=REPO)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "recorded through the history interface" in r.stdout
    assert re.search(r"database: .* 64 nodes, \d+ runs, [\d,]+ node-runs \([\d,]+ pruned to "
                     r"their verdict\)", r.stdout), r.stdout
    assert re.search(r"gate \(this tree\): p50 \d+ ms, p95 \d+ ms wall; CPU p50 \d+ ms, p95 "
                     r"\d+ ms; 2 runs; exit \[0\]", r.stdout), r.stdout
    assert "gate pre-job: GO: 64 nodes, 64 go, 0 blocked" in r.stdout
    assert re.search(r"floor: p50 \d+ ms, p95 \d+ ms wall", r.stdout), r.stdout
    assert re.search(r"ratio: the gate's p50 is \d+\.\d\dx the floor's", r.stdout)
    assert re.search(r"the seal's first read in a process .*: p50 \d+\.\d ms, p95 \d+\.\d ms",
                     r.stdout), r.stdout
    assert re.search(r"goal: gate p95 \d+ ms \(goal <= 200 ms\): (met|NOT MET)", r.stdout)
    assert set(REPO.glob("runs/gate-*")) == before, "the bench wrote a run folder in the repo"
