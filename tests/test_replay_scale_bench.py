"""bench/replay_scale.py's smoke mode runs (so the bench does not rot): its floor and its
replay interleaved in fresh processes, the load, the issue's goal and a results digest. Its
figures mean nothing at this size and are not asserted."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_smoke_prints_floor_replay_goal_and_digest(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "bench.replay_scale", "--smoke", "--workers",
                           "1", "--keep", str(tmp_path)], capture_output=True, text=True,
                          timeout=1200, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "interleaved rounds" in out and re.search(r"load [\d.]+ / [\d.]+", out)
    assert re.search(r"^  floor \(read \+ JSON-parse every bundle\): median .*CPU median",
                     out, re.M), out
    assert re.search(r"^  this tree: median .*CPU median .*; 1 runs\)", out, re.M), out
    line = re.search(r"x the floor; CPU [\d.]+ ms/node; peak RSS \d+ MiB .* (\d+) results "
                     r"\((\d+) fail, (\d+) error\); digest ([0-9a-f]{12})", out)
    assert line, out
    assert int(line.group(1)) > 32 * 100  # every node's subjects, plus the fleet checks
    assert int(line.group(3)) == 0  # the clones' evidence is whole: nothing unevaluated
    assert int(line.group(2)) > 0  # the faulty seeds fail
    assert "goal (issue 32, 32 nodes): wall median" in out and "(<= 60 s)" in out
    assert "peak RSS" in out and "(<= 2 GiB)" in out
    assert len(list((tmp_path / "fleet32").glob("*.json"))) == 32
