"""The run page at fleet scale: index.html for 1,024 nodes from a real replay, timed.

Builds bench/replay_scale.py's fleet (16 simulated nodes collected for real, 4 with faults,
cloned under new names up to N), replays it once for real (`stetho check --evidence DIR -n 2
--json OUT`), then renders and writes index.html from those results in one process (as a
sweep does), every failing or unevaluated node linked to a report as a sweep links them,
interleaved with the floor (writing the same page alone). Prints the first (cold: template
compiled) and the median render+write seconds (wall and CPU: the steadier figure on a shared
machine), and the page's size. `--unfolded` also measures the page with every healthy node
drawn one row each (what runpage.MAX_HEALTHY_ROWS avoids). Goals (issue 27): <= 1 s and
<= 5 MB at 1,024 nodes.

    python bench/runpage.py [--nodes 1024] [--runs 5] [--keep DIR] [--unfolded]
    python bench/runpage.py --smoke --runs 1
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import fleet_args, harness  # noqa: E402


def main() -> None:
    ap = fleet_args.parser(__doc__)
    ap.add_argument("--unfolded", action="store_true")
    args = fleet_args.parse(ap)
    from stetho.sinks import runpage

    with fleet_args.workdir(args, "stetho-runpage-") as work:
        results = fleet_args.results(args, work)
        bad = len({r.node for r in results if r.status in ("fail", "error")})
        links = {r.node: f"reports/{r.node}-cause-r1.md" for r in results
                 if r.status in ("fail", "error")}
        harness.header(f"index.html for {args.nodes} nodes' results ({len(results)} results, "
                       f"{bad} nodes failing or not evaluated), in process")
        folded = runpage.MAX_HEALTHY_ROWS

        def page(rows: int, run_dir: Path) -> Path:
            run_dir.mkdir(exist_ok=True)
            runpage.MAX_HEALTHY_ROWS = rows
            return runpage.write(run_dir, runpage.render(
                results, title="stetho sweep bench", reports=links,
                busbw=runpage.busbw_from(results), generated_at="2026-12-06T00:00:00+00:00"))

        cold = harness.Call(lambda: page(folded, work / "run-folded"))
        print(harness.line("folded, cold (template compiled)", [cold()], cold.cpu))
        html = (work / "run-folded" / "index.html").read_text()
        sides = {"folded index.html render + write": harness.Call(
                     lambda: page(folded, work / "run-folded")),
                 "floor: the page's write alone": harness.Call(
                     lambda: (work / "floor.html").write_text(html, encoding="utf-8"))}
        if args.unfolded:
            sides["unfolded index.html render + write"] = harness.Call(
                lambda: page(10 ** 9, work / "run-unfolded"))
        times = harness.interleave(sides, args.runs)
        runpage.MAX_HEALTHY_ROWS = folded
        for name, call in sides.items():
            print(harness.line(name, times[name], call.cpu))
        names = list(sides)
        size = (work / "run-folded" / "index.html").stat().st_size
        print(f"folded index.html: {size / 1e6:.2f} MB" + (
            f"; unfolded: {(work / 'run-unfolded' / 'index.html').stat().st_size / 1e6:.2f} MB"
            if args.unfolded else ""))
        harness.judge(names[0], times[names[0]], times[names[1]], None)
        harness.absolute(names[0], times[names[0]], 1.0)
        harness.goal(f"folded index.html {size / 1e6:.2f} MB <= 5 MB", size <= 5e6)


if __name__ == "__main__":
    main()
