"""The node_exporter textfile for a 1,024-node run: `stetho.sinks.prometheus.render` plus the
atomic `write`, in process (a sweep renders it in its own long-lived process), interleaved with
the render alone and the floor, medians of wall and CPU, and the file's size.

Goal (issue 17): <= 0.5 s for 1,024 nodes. The results are real: a healthy simulated H100
node and one with a powersave governor and a 20% busbw drop, each checked through the CLI
(every subject it reports, about 220), then copied to 1,024 node names (every 16th failing),
busbw jittered per node as on a real fleet. The floor, measured in the same run, writes a
text of the same size the same way (fsync, rename): what remains is rendering.

    python bench/textfile.py [--nodes 1024] [--runs 7] [--subjects 110]
    python bench/textfile.py --smoke --runs 1
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import harness  # noqa: E402
from bench.observe import fleet  # noqa: E402
from stetho.sinks import prometheus  # noqa: E402


def main() -> None:
    ap = harness.parser(__doc__, runs=7)
    ap.add_argument("--nodes", type=int, default=1024)
    ap.add_argument("--subjects", type=int, default=None,
                    help="the first N results of each node only (bench/observe.py: 110)")
    args = ap.parse_args()
    harness.in_process(ap, args.before)
    if args.smoke:
        args.nodes = 16
    with tempfile.TemporaryDirectory(prefix="stetho-textfile-bench-") as tmp:
        folder = Path(tmp)
        results = fleet(folder, args.nodes, args.subjects)
        nodes = sorted({r.node for r in results})
        gate = {"pre-job": {n: n.endswith(("06", "22")) for n in nodes}}
        prom = folder / "textfile" / "stetho-sweep.prom"
        prom.parent.mkdir()

        def render() -> str:
            return prometheus.render(results, run_id="bench", started_at=time.time(),
                                     duration_s=1.0, gate=gate, command="sweep")

        text = render()
        sides = {"render + atomic write": harness.Call(lambda: prometheus.write(prom, render())),
                 "render alone": harness.Call(render),
                 "floor: the atomic write alone": harness.Call(
                     lambda: prometheus.write(folder / "textfile" / "floor.prom", text))}
        harness.header(f"the node_exporter textfile of {len(nodes)} nodes, {len(results)} "
                       "results, in process")
        times = harness.interleave(sides, args.runs)
        for name, call in sides.items():
            print(harness.line(name, times[name], call.cpu))
        print(f"textfile: {prom.stat().st_size / 1e6:.1f} MB, {text.count(chr(10))} lines")
        first = "render + atomic write"
        harness.judge(first, times[first], times["floor: the atomic write alone"], None)
        harness.absolute(first, times[first], 0.5)


if __name__ == "__main__":
    main()
