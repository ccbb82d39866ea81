"""bench/sweep.py in its smoke mode (2 hosts, 1 round), so the bench does not rot: it must
serve hosts on addresses of their own, run both sides cold (a connection per host each,
counted in sshd's log) and print the ratio against the issue's goal and each step's share.
Its figures mean nothing here; only that each line is there is asserted."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.xdist_group("sweep")

ROOT = Path(__file__).resolve().parent.parent


def test_the_sweep_bench_smoke_prints_both_cold_sides_the_ratio_and_the_steps():
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "sweep.py"), "--smoke"],
                          capture_output=True, text=True, timeout=1200, cwd=ROOT)
    out = proc.stdout
    assert proc.returncode == 0, out[-3000:] + proc.stderr[-3000:]
    assert "WARNING" not in out, out
    assert re.search(r"^stetho sweep \(this tree\): median .*; 1 runs\)$", out, re.M), out
    assert re.search(r"^ansible all -m ping: median .*; 1 runs\)$", out, re.M), out
    # cold: each side opened one connection per host (no master left from a run before)
    conns = re.findall(r"connections per run \(sshd's log\): (\d+) for 2 hosts", out)
    assert conns == ["2", "2"], out
    assert re.search(r"^ratio: stetho sweep \(this tree\) is [\d.]+x ansible all -m ping "
                     r"\(goal <= 2x\): (met|NOT MET)$", out, re.M), out
    steps = dict((task.strip(), float(pct)) for pct, task in
                 re.findall(r"^\s+([\d.]+)%  (.+)$", out, re.M))
    assert "stetho check" in steps and any(t.startswith("(controller") for t in steps), out
    assert abs(sum(steps.values()) - 100) < 2, steps  # the shares cover the whole sweep
    assert re.search(r"^load [\d.]+ / [\d.]+ \(1 / 5 min\) on \d+ cores$", out, re.M), out
