"""A node's own check and `stetho --help`, each against its floor (issue 32's goals).

* `stetho check --local --sim <8x H100 node>` (the node check with its history, as a Slurm
  prolog or the sweep runs it) against **a pytest run of one trivial test**, the same
  interpreter: the cost of starting Python and pytest that any pytest-based check pays.
  Goal: <= 1.5x the floor.
* `stetho --help` against **`python -c pass`**: what a user waits for before anything is
  checked. Goal: <= 3x the floor. Timed both as `python -m stetho --help` (the form `--before`
  can run for another checkout) and, where installed, as the `stetho` script a user types
  (this tree's, as the editable install points here).

Every side is a fresh process, interleaved (bench/harness.py), bytecode caching on for all of
them, as on an installed node; medians of wall and CPU, with the load. `--before REF` also runs
REF's checkout for real (a worktree) for both commands; `--smoke` is what
tests/test_check_local_bench.py runs (its figures mean nothing).

`--history-runs N` first records N earlier runs of the node in each tree's history, an hour
apart (the last N hours, as hourly health checks leave them; each tree records with its own
code): a node's check reads its counter window and drift window from that history, so this
is the check as a node that has been checking itself for a while runs it.

    python bench/check_local.py [--runs 15] [--before main] [--history-runs 168] [--smoke]
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: the repository root on the path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import harness  # noqa: E402

#: The issue's goals, as multiples of each floor.
CHECK_GOAL = 1.5
HELP_GOAL = 3.0


def timed(argv: list[str], env: dict[str, str], cwd: str) -> float:
    """Wall seconds of one run (exit 0 or 1 accepted: a check may fail); what
    bench/check_textfile.py times with."""
    start = time.perf_counter()
    proc = subprocess.run(argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True)
    elapsed = time.perf_counter() - start
    if proc.returncode not in (0, 1):
        sys.exit(f"{' '.join(argv)} exited {proc.returncode}: {proc.stderr[-500:]}")
    return elapsed


#: Records `n` runs of the simulated node in `db`, an hour apart and ending an hour ago, with
#: the code of the tree it runs in: collected and checked once, each run dated (the bundle's
#: collection time and the recording time alike) as `stetho check` would have recorded it.
HISTORY = """
import sys, time
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from stetho import config
from stetho.checking import run as checkrun
from stetho.evidence import collect
from stetho.history import recording
from stetho.history.store import new_run_id

config.activate(config.load())
node, db, n = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
bundle = collect.collect_local(profile="h100-sxm-8gpu", sim=node)
checked = checkrun.run([bundle], profile="h100-sxm-8gpu")
now = time.time()
for i in range(n, 0, -1):
    when = now - i * 3600
    stamp = datetime.fromtimestamp(when, timezone.utc).isoformat(timespec="seconds")
    summaries = {k: {**v, "collected_at": stamp} for k, v in checked.summaries.items()}
    recording.after_run("check", new_run_id(), list(checked.results), summaries, db, when=when)
"""


def sides(tmp: Path, before: str | None, history_runs: int = 0) -> dict[str, harness.Side]:
    """Every command this bench times, by label: this tree's (and REF's) check and --help,
    and the two floors."""
    from stetho.sim.builder import build_node

    node = build_node(tmp / "node01", "node01")
    trivial = tmp / "floor" / "test_trivial.py"
    trivial.parent.mkdir()
    trivial.write_text("def test_trivial():\n    assert True\n")
    out: dict[str, harness.Side] = {}
    for i, tree in enumerate(harness.trees(before)):
        # one history database per tree: a schema the other tree does not know never mixes
        env = tree.env(dict(os.environ, STETHO_DB=str(tmp / f"history-{i}.db")))
        if history_runs:
            subprocess.run([sys.executable, "-c", HISTORY, str(node), env["STETHO_DB"],
                            str(history_runs)], env=env, cwd=tree.root, check=True)
        tag = "" if i == 0 else " [before]"
        out["check" + tag] = harness.Side(
            tree.stetho("check", "--local", "--sim", str(node), "--profile", "h100-sxm-8gpu",
                        "-q"), env=env, cwd=tree.root)
        out["help" + tag] = harness.Side(tree.stetho("--help"), env=env, cwd=tree.root)
        if i == 0:
            out["pytest floor"] = harness.Side(
                [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(trivial)],
                env=env, cwd=tmp)
            out["python -c pass"] = harness.Side([sys.executable, "-c", "pass"], env=env,
                                                 cwd=tmp)
            script = Path(sys.executable).parent / "stetho"  # what a user types, no runpy
            if script.is_file():
                out["stetho --help (script)"] = harness.Side([str(script), "--help"], env=env,
                                                             cwd=tree.root)
    return out


def main() -> None:
    ap = harness.parser(__doc__, runs=15)
    ap.add_argument("--history-runs", type=int, default=0, metavar="N",
                    help="record N hourly runs of the node in each history first")
    args = ap.parse_args()
    runs = 1 if args.smoke else args.runs
    history = min(args.history_runs, 2) if args.smoke else args.history_runs
    harness.header(f"stetho check --sim and --help against their floors ({runs} rounds"
                   f"{f', {history} hourly runs in each history' if history else ''}"
                   f"{', smoke: figures mean nothing' if args.smoke else ''})")
    with tempfile.TemporaryDirectory() as tmp:
        timed_sides = sides(Path(tmp), args.before, history)
        times = harness.interleave(timed_sides, runs)
    for name, side in timed_sides.items():
        bad = side.codes - {0, 1}
        if bad or ("check" in name and 0 not in side.codes):
            sys.exit(f"{name} exited {sorted(side.codes)}: {side.last_output[-800:]}")
        print(harness.line(name, times[name], side.cpu))
    harness.judge("check --sim", times["check"], times["pytest floor"], CHECK_GOAL,
                  "the one-test pytest floor")
    harness.judge("python -m stetho --help", times["help"], times["python -c pass"],
                  HELP_GOAL, "python -c pass")
    if "stetho --help (script)" in times:
        harness.judge("stetho --help", times["stetho --help (script)"],
                      times["python -c pass"], HELP_GOAL, "python -c pass")
    cpu = {n: statistics.median(s.cpu) for n, s in timed_sides.items()}
    print(f"CPU ratios: check {cpu['check'] / cpu['pytest floor']:.2f}x the pytest floor, "
          f"--help {cpu['help'] / cpu['python -c pass']:.2f}x python -c pass")
    if args.before:
        for cmd in ("check", "help"):
            ratio = statistics.median(times[cmd]) / statistics.median(times[cmd + " [before]"])
            print(f"this/before: {cmd} {ratio:.2f}x")
    print(harness.load())


if __name__ == "__main__":
    main()
