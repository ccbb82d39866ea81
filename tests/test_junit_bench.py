"""bench/junit.py in its smoke mode (16 nodes, one round) against main's writer: it runs,
prints its medians, the floor, the ratio, the load and that both documents are identical.
No time is asserted (timing belongs in bench/)."""

from __future__ import annotations

import re
import subprocess
import sys

from tests.conftest import REPO


def test_junit_bench_smoke() -> None:
    proc = subprocess.run([sys.executable, "bench/junit.py", "--smoke", "--runs", "1",
                           "--against", "HEAD"], capture_output=True, text=True, cwd=REPO,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    for pattern in (r"junit.xml for 16 nodes \(\d+ results\)",
                    r"load \d+\.\d / \d+\.\d \(1 / 5 min\) on \d+ cores",
                    r"HEAD's document is identical",
                    r"junit.xml render \+ write: median \d+",
                    r"floor: the document's write alone: median \d+",
                    r"HEAD: junit.xml render \+ write: median \d+",
                    r"ratio: junit.xml render \+ write is \d+\.\d\dx the floor",
                    r"goal: the same document as HEAD \(--against\): met"):
        assert re.search(pattern, out), (pattern, out)
