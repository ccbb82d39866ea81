"""What the node_exporter textfile costs a node check: wall time of
`stetho check --local --sim <8-GPU node>` with and without `--textfile DIR`, interleaved.

Prints the median of N runs of each and their ratio (target: within 1.05x). The textfile is
rendered from the results the run already holds and written with one fsync, so it should be
lost in the noise of starting Python and pytest.

    python bench/check_textfile.py [--runs 9]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

from bench.check_local import timed


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=9)
    args = ap.parse_args()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    with tempfile.TemporaryDirectory() as tmp:
        from stetho.sim.builder import build_node

        node = build_node(Path(tmp) / "node01", "node01")
        plain = [sys.executable, "-m", "stetho", "check", "--local", "--sim", str(node),
                 "--profile", "h100-sxm-8gpu", "-q"]
        textfile = [*plain, "--textfile", str(Path(tmp) / "textfile")]
        env["STETHO_DB"] = str(Path(tmp) / "history.db")  # both read and record it alike
        for argv in (plain, textfile):  # warm the bytecode caches and the page cache
            timed(argv, env, tmp)
        t_plain: list[float] = []
        t_text: list[float] = []
        for i in range(args.runs):  # interleaved, alternating which goes first
            pair = [(plain, t_plain), (textfile, t_text)]
            for argv, into in pair if i % 2 == 0 else reversed(pair):
                into.append(timed(argv, env, tmp))
        written = (Path(tmp) / "textfile" / "stetho-check.prom").stat().st_size
        inproc = _in_process(plain, env, Path(tmp))
    m_plain, m_text = statistics.median(t_plain), statistics.median(t_text)
    print(f"check --local --sim <8x H100 node>             median {m_plain:.3f} s  "
          f"(min {min(t_plain):.3f}, max {max(t_plain):.3f}, n={args.runs})")
    print(f"check --local --sim <8x H100 node> --textfile  median {m_text:.3f} s  "
          f"(min {min(t_text):.3f}, max {max(t_text):.3f}, n={args.runs}; "
          f"{written / 1024:.0f} KiB written)")
    print(f"ratio with/without textfile: {m_text / m_plain:.3f}x   (target: <= 1.05x)")
    print(f"the textfile alone, in process (render + atomic write + fsync), median of 50: "
          f"{inproc * 1000:.1f} ms")


def _in_process(plain: list[str], env: dict[str, str], tmp: Path) -> float:
    """The textfile's own cost over one node's results: what --textfile adds to a run."""
    import json
    import subprocess
    import time
    from datetime import datetime, timezone

    from stetho.check.outputs import write_textfile
    from stetho.results import Result

    out = tmp / "results.json"
    subprocess.run([*plain, "--json", str(out)], env=env, cwd=tmp, capture_output=True)
    results = [Result.from_json(r) for r in json.loads(out.read_text())["results"]]
    took = []
    for _ in range(50):
        start = time.perf_counter()
        write_textfile(tmp / "inproc", "check", results, run_id="bench",
                       started=datetime.now(timezone.utc), duration_s=1.0)
        took.append(time.perf_counter() - start)
    return statistics.median(took)


if __name__ == "__main__":
    main()
