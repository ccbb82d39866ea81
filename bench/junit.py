"""The fleet's junit.xml at scale: rendered and written for N nodes' real replay results, timed.

Builds bench/replay_scale.py's fleet (16 simulated nodes collected for real, 4 with faults,
cloned under new names up to N), replays it once for real (`stetho check --evidence DIR -n 2
--json OUT`), then, in one process and interleaved, as the run folder writes it
(stetho.fleet.run_folder: a node at a time through junit.render_stream, atomically):
  * this tree's junit.xml, render + write;
  * with `--against REF`, REF's stetho/sinks/junit.py (read with `git show`), the same way,
    whose document must be byte-identical;
  * the floor: writing the same document alone (what no renderer avoids).
Prints medians of wall and CPU (the steadier figure on a shared machine) and the ratios.

    python bench/junit.py [--nodes 1024] [--runs 5] [--against main] [--keep DIR]
    python bench/junit.py --smoke --runs 1
"""

from __future__ import annotations

import importlib.util
import statistics
import subprocess
import sys
from pathlib import Path
from types import ModuleType

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import fleet_args, harness  # noqa: E402


def other_junit(ref: str, work: Path) -> ModuleType:
    """REF's JUnit writer, loaded from its own source beside this tree's."""
    text = subprocess.run(["git", "show", f"{ref}:stetho/sinks/junit.py"], capture_output=True,
                          text=True, check=True).stdout
    path = work / "junit_other.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location("junit_other", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main() -> None:
    ap = fleet_args.parser(__doc__)
    ap.add_argument("--against", help="also time this git ref's junit.py (e.g. main)")
    args = fleet_args.parse(ap)
    from stetho.core import atomic
    from stetho.sinks import junit
    from stetho.sinks.spool import Results

    with fleet_args.workdir(args, "stetho-junit-") as work:
        results = fleet_args.results(args, work)
        stored = Results(results, spill_at=len(results) + 1)
        harness.header(f"the fleet's junit.xml for {args.nodes} nodes ({len(results)} results), "
                       "in process, a node at a time as the run folder writes it")

        def write(mod: ModuleType, name: str) -> Path:
            path = work / name
            atomic.write(path, mod.render_stream(stored))
            return path

        text = write(junit, "junit.xml").read_text(encoding="utf-8")
        sides = {"junit.xml render + write": harness.Call(lambda: write(junit, "junit.xml")),
                 "floor: the document's write alone": harness.Call(
                     lambda: atomic.write(work / "floor.xml", text))}
        same = None
        if args.against:
            other = other_junit(args.against, work)
            same = write(other, "other.xml").read_text(encoding="utf-8") == text
            print(f"{args.against}'s document is {'identical' if same else 'DIFFERENT'} "
                  f"({len(text.encode()) / 2**20:.1f} MiB)")
            sides[f"{args.against}: junit.xml render + write"] = harness.Call(
                lambda: write(other, "other.xml"))
        times = harness.interleave(sides, args.runs)
        for name, call in sides.items():
            print(harness.line(name, times[name], call.cpu))
        names = list(sides)
        harness.judge(names[0], times[names[0]], times[names[1]], None)
        cpu = {n: statistics.median(sides[n].cpu) for n in names}
        print(f"CPU: {names[0]} {cpu[names[0]]:.3f} s, "
              f"{cpu[names[0]] / max(len(results), 1) * 1e6:.1f} us a result")
        if args.against:
            ratio = statistics.median(times[names[2]]) / statistics.median(times[names[0]])
            print(f"speed-up: {names[0]} is {ratio:.2f}x faster than {args.against} (wall "
                  f"medians), {cpu[names[2]] / cpu[names[0]]:.2f}x by CPU")
        harness.goal(f"the same document as {args.against or 'the other ref'} (--against)", same)


if __name__ == "__main__":
    main()
