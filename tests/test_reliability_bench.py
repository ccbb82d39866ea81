"""bench/stats.py in its tiny mode: it builds a history, runs `stetho stats` and the floor, and
prints the medians, the ratio and the goal (no time is asserted: a test never judges speed)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_bench_runs_in_a_tiny_mode_and_prints_its_figures(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STETHO_")}
    p = subprocess.run([sys.executable, str(ROOT / "bench" / "stats.py"), "--nodes", "6",
                        "--days", "12", "--runs", "1", "--db", str(tmp_path / "h.db")],
                       capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    assert p.returncode == 0, p.stderr
    # 6 nodes x 12 nights, every row read by stats
    assert "history: 72 node_runs rows" in p.stdout
    assert re.search(r"stetho stats --since 13d: median \d+\.\d\d s .* goal <= 10 s", p.stdout)
    assert re.search(r"floor \(one scan .*\): median \d+\.\d\d s", p.stdout)
    assert re.search(r"ratio stats / floor: \d+\.\d\d wall, \d+\.\d\d CPU", p.stdout)
