"""The run page at fleet scale: index.html for 1,024 nodes from a real replay, timed.

Builds bench/replay_scale.py's fleet (16 simulated nodes collected for real, 4 with faults,
cloned under new names up to N), replays it once for real (`stetho check --evidence DIR -n 2
--json OUT`), then renders and writes index.html from those results `--repeat` times in one
process, every failing or unevaluated node linked to a report as a sweep links them. Prints the
first (cold: template compiled) and the median render+write seconds (wall and CPU: the steadier
figure on a shared machine), and the page's size. `--unfolded` also measures the page with
every healthy node drawn one row each (what runpage.MAX_HEALTHY_ROWS avoids). Targets (issue
27): <= 1 s and <= 5 MB at 1,024 nodes.

    python bench/runpage.py [--nodes 1024] [--repeat 5] [--keep DIR]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.replay_scale import fleet, seeds


def replayed(folder: Path, out: Path) -> Path:
    proc = subprocess.run([sys.executable, "-m", "stetho", "check", "--evidence", str(folder),
                           "-n", "2", "--json", str(out), "-q"], capture_output=True, text=True)
    if proc.returncode not in (0, 1, 3):
        sys.exit(f"replay exited {proc.returncode}: {proc.stderr[-800:]}")
    return out


def measure(results: list, run_dir: Path, repeat: int) -> tuple[float, float, float, int]:
    """(cold seconds, median wall seconds, median CPU seconds, bytes) of render + write, the
    way a sweep calls them. CPU time is the steadier figure on a loaded machine."""
    from stetho.sinks import runpage

    links = {r.node: f"reports/{r.node}-cause-r1.md" for r in results
             if r.status in ("fail", "error")}
    times, cpus = [], []
    for _ in range(repeat + 1):
        start, cpu = time.perf_counter(), time.process_time()
        page = runpage.write(run_dir, runpage.render(
            results, title="stetho sweep bench", reports=links,
            busbw=runpage.busbw_from(results), generated_at="2026-12-06T00:00:00+00:00"))
        times.append(time.perf_counter() - start)
        cpus.append(time.process_time() - cpu)
    return (times[0], statistics.median(times[1:]), statistics.median(cpus[1:]),
            page.stat().st_size)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=1024)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--unfolded", action="store_true")
    ap.add_argument("--keep", type=Path, help="keep the generated fleet and replay here")
    args = ap.parse_args()
    from stetho.sinks import json_out, runpage

    work = args.keep or Path(tempfile.mkdtemp(prefix="stetho-runpage-"))
    folder = fleet(work / f"fleet{args.nodes}", args.nodes, seeds())
    out = work / f"replay{args.nodes}.json"
    if not out.is_file():
        replayed(folder, out)
    results = json_out.load(out.read_text())
    bad = len({r.node for r in results if r.status in ("fail", "error")})
    print(f"{args.nodes} nodes replayed: {len(results)} results, {bad} nodes failing or not "
          f"evaluated; render + write, {args.repeat} runs, median")
    variants = [("folded", runpage.MAX_HEALTHY_ROWS)] + (
        [("unfolded", 10 ** 9)] if args.unfolded else [])
    for label, rows in variants:
        runpage.MAX_HEALTHY_ROWS = rows
        run_dir = work / f"run-{label}"
        run_dir.mkdir(exist_ok=True)
        cold, median, cpu, size = measure(results, run_dir, args.repeat)
        print(f"{label:8s} index.html: {median:.3f} s wall, {cpu:.3f} s CPU (cold {cold:.3f} s "
              f"wall), {size / 1e6:.2f} MB  [targets <= 1 s, <= 5 MB]")
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
