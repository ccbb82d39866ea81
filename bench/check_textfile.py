"""What the node_exporter textfile costs a node check: wall time of
`stetho check --local --sim <8-GPU node>` with and without `--textfile DIR`, interleaved,
fresh processes, medians with CPU (goal: within 1.05x, README "Performance"; the textfile is
rendered from the results the run already holds and written with one fsync, so it should be
lost in the noise of starting Python and pytest). Also the textfile alone, in process.
`--before REF` times that checkout's `--textfile` run as well.

    python bench/check_textfile.py [--runs 9] [--before REF]
    python bench/check_textfile.py --smoke --runs 1
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import harness  # noqa: E402


def main() -> None:
    ap = harness.parser(__doc__, runs=9)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        from stetho.sim.builder import build_node

        node = build_node(Path(tmp) / "node01", "node01")
        base = {k: v for k, v in os.environ.items() if not k.startswith("STETHO_")}
        base["STETHO_DB"] = str(Path(tmp) / "history.db")  # both read and record it alike
        out = Path(tmp) / "results.json"  # both write it: the in-process part reads it
        check = ("check", "--local", "--sim", str(node), "--profile", "h100-sxm-8gpu", "-q",
                 "--json", str(out))
        textfile = ("--textfile", str(Path(tmp) / "textfile"))
        sides: dict[str, harness.Side] = {}
        for tree in harness.trees(args.before):
            here = tree.label == "this tree"
            if here:
                sides["check --local (without --textfile)"] = harness.Side(
                    tree.stetho(*check), env=tree.env(base), cwd=tree.root)
            sides[f"check --local --textfile ({tree.label})"] = harness.Side(
                tree.stetho(*check, *textfile), env=tree.env(base), cwd=tree.root)
        harness.header("stetho check --local --sim <8x H100 node>, with and without --textfile")
        times = harness.interleave(sides, args.runs, warm=not args.smoke)
        names = list(sides)
        written = (Path(tmp) / "textfile" / "stetho-check.prom").stat().st_size
        for name in names:
            print(harness.line(name, times[name], sides[name].cpu))
        print(f"textfile: {written / 1024:.0f} KiB written")
        harness.judge(names[1], times[names[1]], times[names[0]], 1.05, "the run without it")
        if len(names) == 3:
            harness.judge(names[1], times[names[1]], times[names[2]], 1.0, "the checkout before")
        inproc = _in_process(out, Path(tmp), 3 if args.smoke else 50)
    print(f"the textfile alone, in process (atomic write with fsync): {inproc}")


def _in_process(out: Path, tmp: Path, repeats: int) -> str:
    """The textfile's own cost over one node's results: what --textfile adds to a run."""
    from stetho.check.outputs import write_textfile
    from stetho.results import Result

    results = [Result.from_json(r) for r in json.loads(out.read_text())["results"]]
    call = harness.Call(lambda: write_textfile(tmp / "inproc", "check", results, run_id="bench",
                                               started=datetime.now(timezone.utc),
                                               duration_s=1.0))
    took = [call() for _ in range(repeats)]
    return harness.line("render + write", took, call.cpu)


if __name__ == "__main__":
    main()
