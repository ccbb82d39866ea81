"""Observability outputs for a 1,024-node run: the Prometheus textfile (render + atomic write)
and the static run page (render + write), median wall time of several runs, and their sizes.

Targets (issue 17): textfile for 1,024 nodes x 110 subjects <= 0.5 s; index.html for 1,024
nodes <= 1 s and <= 5 MB. The results are real: two simulated H100 nodes (one healthy, one
with a powersave governor and a 20% busbw drop) checked through the CLI, then copied to 1,024
node names (every 16th node failing) with 110 subjects each.

    python bench/observe.py [--nodes 1024] [--subjects 110] [--runs 7]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from stetho.results import Result  # noqa: E402
from stetho.sim.builder import build_node  # noqa: E402
from stetho.sinks import prometheus, runpage  # noqa: E402


def checked(folder: Path, name: str, faults: list[str]) -> list[Result]:
    build_node(folder / name, name, faults)
    out = folder / f"{name}.json"
    subprocess.run([sys.executable, "-m", "stetho", "check", "--sim", str(folder / name),
                    "--profile", "h100-sxm-8gpu", "-q", "--json", str(out)], check=False,
                   capture_output=True, timeout=300)
    return [Result.from_json(r) for r in json.loads(out.read_text())["results"]]


def fleet(folder: Path, nodes: int, subjects: int | None = None) -> list[Result]:
    """`nodes` copies of a healthy and (every 16th, from the 6th) a faulty simulated node's
    results, busbw jittered; `subjects`: only each node's first results (None: all)."""
    healthy = checked(folder, "healthy", [])[:subjects]
    faulty = checked(folder, "faulty", ["governor-powersave", "busbw-drop=20"])[:subjects]
    rng = random.Random(7)
    out: list[Result] = []
    for i in range(nodes):
        name = f"gpu{i + 1:04d}"
        for r in faulty if i % 16 == 5 else healthy:
            if r.check == "nccl_busbw" and isinstance(r.value, float):
                r = dataclasses.replace(r, value=round(r.value * rng.uniform(0.97, 1.02), 2))
            out.append(dataclasses.replace(r, node=name))
    return out


def median_s(fn, runs: int) -> float:  # type: ignore[no-untyped-def]
    fn()  # warm-up (caches, page cache)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=1024)
    ap.add_argument("--subjects", type=int, default=110)
    ap.add_argument("--runs", type=int, default=7)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="stetho-observe-bench-") as tmp:
        folder = Path(tmp)
        results = fleet(folder, args.nodes, args.subjects)
        nodes = sorted({r.node for r in results})
        gate = {"pre-job": {n: n.endswith(("06", "22")) for n in nodes}}
        prom = folder / "textfile" / "stetho.prom"
        prom.parent.mkdir()

        def textfile() -> None:
            prometheus.write(prom, prometheus.render(
                results, run_id="bench", started_at=time.time(), duration_s=1.0,
                gate=gate, command="sweep"))

        page = folder / "index.html"
        reports = {n: f"{n}/diagnosis-report.md" for n in nodes}
        busbw = runpage.busbw_from(results)

        def index() -> None:
            page.write_text(runpage.render(results, title="bench sweep", reports=reports,
                                           busbw=busbw), encoding="utf-8")

        t_prom = median_s(textfile, args.runs)
        t_page = median_s(index, args.runs)
        lines = prom.read_text().count("\n")
        print(f"{len(nodes)} nodes, {len(results)} results ({args.subjects} subjects each), "
              f"median of {args.runs}")
        print(f"textfile render + atomic write: {t_prom:.3f} s  "
              f"({prom.stat().st_size / 1e6:.1f} MB, {lines} lines; target <= 0.5 s)")
        print(f"index.html render + write:      {t_page:.3f} s  "
              f"({page.stat().st_size / 1e6:.2f} MB; target <= 1 s, <= 5 MB)")


if __name__ == "__main__":
    main()
