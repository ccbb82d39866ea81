"""Observability outputs for a 1,024-node run: the Prometheus textfile (render + atomic write)
and the static run page (render + write), in process as a sweep makes them, each interleaved
with its floor (writing the same text alone), medians of wall and CPU, and their sizes.

Goals (issue 17): textfile for 1,024 nodes x 110 subjects <= 0.5 s; index.html for 1,024
nodes <= 1 s and <= 5 MB. The results are real: two simulated H100 nodes (one healthy, one
with a powersave governor and a 20% busbw drop) checked through the CLI, then copied to 1,024
node names (every 16th node failing) with 110 subjects each.

    python bench/observe.py [--nodes 1024] [--subjects 110] [--runs 7]
    python bench/observe.py --smoke --runs 1
"""

from __future__ import annotations

import dataclasses
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import harness  # noqa: E402
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


def main() -> None:
    ap = harness.parser(__doc__, runs=7)
    ap.add_argument("--nodes", type=int, default=1024)
    ap.add_argument("--subjects", type=int, default=110)
    args = ap.parse_args()
    harness.in_process(ap, args.before)
    if args.smoke:
        args.nodes = 16
    with tempfile.TemporaryDirectory(prefix="stetho-observe-bench-") as tmp:
        folder = Path(tmp)
        results = fleet(folder, args.nodes, args.subjects)
        nodes = sorted({r.node for r in results})
        gate = {"pre-job": {n: n.endswith(("06", "22")) for n in nodes}}
        prom = folder / "textfile" / "stetho.prom"
        prom.parent.mkdir()

        def prom_text() -> str:
            return prometheus.render(results, run_id="bench", started_at=time.time(),
                                     duration_s=1.0, gate=gate, command="sweep")

        page = folder / "index.html"
        reports = {n: f"{n}/diagnosis-report.md" for n in nodes}
        busbw = runpage.busbw_from(results)

        def page_text() -> str:
            return runpage.render(results, title="bench sweep", reports=reports, busbw=busbw)

        text, html = prom_text(), page_text()
        sides = {
            "textfile render + atomic write": harness.Call(
                lambda: prometheus.write(prom, prom_text())),
            "floor: the textfile's atomic write alone": harness.Call(
                lambda: prometheus.write(folder / "textfile" / "floor.prom", text)),
            "index.html render + write": harness.Call(
                lambda: page.write_text(page_text(), encoding="utf-8")),
            "floor: index.html's write alone": harness.Call(
                lambda: (folder / "floor.html").write_text(html, encoding="utf-8"))}
        harness.header(f"{len(nodes)} nodes, {len(results)} results ({args.subjects} subjects "
                       "each), in process")
        times = harness.interleave(sides, args.runs)
        for name, call in sides.items():
            print(harness.line(name, times[name], call.cpu))
        lines = prom.read_text().count("\n")
        print(f"textfile: {prom.stat().st_size / 1e6:.1f} MB, {lines} lines; index.html: "
              f"{page.stat().st_size / 1e6:.2f} MB")
        names = list(sides)
        harness.judge(names[0], times[names[0]], times[names[1]], None)
        harness.absolute(names[0], times[names[0]], 0.5)
        harness.judge(names[2], times[names[2]], times[names[3]], None)
        harness.absolute(names[2], times[names[2]], 1.0)
        harness.goal(f"index.html {page.stat().st_size / 1e6:.2f} MB <= 5 MB",
                     page.stat().st_size <= 5e6)


if __name__ == "__main__":
    main()
