"""Every bench of bench/ in its --smoke mode, so none rots: each runs with `--smoke --runs 1`
and must print its median line(s), a ratio or goal line and the load line. Its figures mean
nothing at that size, and no time is asserted (timing belongs in bench/, not in a test)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.conftest import REPO

MEDIAN = r"median (\d+ ms|\d+\.\d s)"
LOAD = r"load \d+\.\d / \d+\.\d \(1 / 5 min\) on \d+ cores"

# bench -> (extra arguments, patterns its output must hold beyond a median and the load)
BENCHES: dict[str, tuple[list[str], list[str]]] = {
    "stats": ([], [r"history: 72 node_runs rows",
                   r"stetho stats \(this tree\): " + MEDIAN,
                   r"ratio: stetho stats \(this tree\) is \d+\.\d\dx the floor",
                   r"goal: stetho stats \(this tree\) median .* \(goal <= 10\.0 s\)"]),
    "job": ([], [r"job: 8 nodes gpu\[0003-0010\]",  # its 4th node fails its IB port
                 r"stetho job says: likely hardware: node gpu0006's mlx5_0:1 \(ib_port_state\)",
                 r"stetho job 4242 \(this tree\): median \d+ ms .* exit \[1\]",
                 r"floor: the same SQLite query alone: median .* rows 32",
                 r"goal: stetho job 4242 \(this tree\) median .* \(goal <= 2000 ms\)"]),
    "check_textfile": ([], [r"check --local \(without --textfile\): " + MEDIAN,
                            r"check --local --textfile \(this tree\): " + MEDIAN,
                            r"textfile: \d+ KiB written",
                            r"ratio: .* the run without it \(goal <= 1\.05x\)",
                            r"the textfile alone, in process .*: render \+ write: " + MEDIAN]),
    "overrides": ([], [r"database: one sweep of 64 nodes, every pre-job check passing",
                       r"with 20 signed overrides \(15 ignored as expired or revoked\)",
                       r"gate without overrides \(this tree\): " + MEDIAN + r".* exit \[0\]",
                       r"gate with overrides, cache warm \(this tree\): .* exit \[0\]",
                       r"gate with overrides, cache cold \(this tree\): .* exit \[0\]",
                       r"floor: python -c pass: " + MEDIAN,
                       r"goal: added by overrides .* \(goal <= 150 ms\)"]),
    "bench_suite": ([], [r"check --local \(floor\): " + MEDIAN,
                         r"check --local --bench quick \(this tree\): " + MEDIAN,
                         r"goal: the quick suite adds .* \(goal <= 2 s wall\)",
                         r"dcgmi-diag-r1 +1 ", r"nvbandwidth +\d+ "]),
    "gate_replay": ([], [r"3 days x 8 nodes = 24 decision points, 408 stored results",
                         r"stetho gate replay \(this tree\): " + MEDIAN,
                         r"floor: read \+ decode the same rows: " + MEDIAN,
                         r"goal: stetho gate replay \(this tree\) median .* \(goal <= 10\.0 s\)"]),
    "report": ([], [r"run folder: 24 nodes, 6 failing",
                    r"stetho report \(this tree\): " + MEDIAN + r".*\(6 reports, \d+ charts\)",
                    r"floor: read and parse the run folder: " + MEDIAN,
                    r"goal: stetho report \(this tree\) median .* \(goal <= 10\.0 s\)"]),
    "textfile": ([], [r"textfile of 16 nodes, \d+ results, in process",
                      r"render \+ atomic write: " + MEDIAN,
                      r"floor: the atomic write alone: " + MEDIAN,
                      r"goal: render \+ atomic write median .* \(goal <= 500 ms\)"]),
    "observe": ([], [r"16 nodes, \d+ results \(110 subjects each\)",
                     r"textfile render \+ atomic write: " + MEDIAN,
                     r"index\.html render \+ write: " + MEDIAN,
                     r"goal: index\.html render \+ write median .* \(goal <= 1000 ms\)",
                     r"goal: index\.html .* MB <= 5 MB"]),
    "runpage": ([], [r"folded, cold \(template compiled\): " + MEDIAN,
                     r"folded index\.html render \+ write: " + MEDIAN,
                     r"floor: the page's write alone: " + MEDIAN,
                     r"goal: folded index\.html render \+ write median .* \(goal <= 1000 ms\)"]),
    "drift_cost": ([], [r"drift check, 100 metrics x 30 samples, one node: " + MEDIAN,
                        r"floor: read every sample once: " + MEDIAN,
                        r"goal: drift check, .* \(goal <= 10 ms\)"]),
    "drift": ([], [r"false alarms: \d+ drift warnings",
                   r"drift for one node on 3 nights of history: " + MEDIAN,
                   r"floor: reading its history alone: " + MEDIAN,
                   r"goal: 0 drift warnings on healthy nodes \(issue 18\)",
                   r"goal: every drift that started is found \(issue 18\): not judged"]),
    "drain_budget": ([], [r"latency p95 of a round: " + MEDIAN,
                          r"floor: the same callers taking a bare POSIX lock .*: " + MEDIAN,
                          r"goal: latency p95 under 2 callers median .* \(goal <= 100 ms\)",
                          r"goal: granted \[2\] a round, never more than the limit"]),
    "localize": ([], [r"1 seeded trials per line.*noise heavy",
                      *(rf"^ +64 {label} " for label in (
                          "healthy", "1 bad node", "2 bad nodes", "4 bad nodes", "1 bad link",
                          "1 bad uplink", "1 bad switch", "1 straggler")),
                      r"^ +64 healthy +\d+/\d+ +\d+/\d+ +\d+/\d+ +100\.0% +0 ",
                      r"the search's CPU a trial at N=64: " + MEDIAN,
                      r"22-57 tests, ~28 min at N=232",
                      r"goal: detection >= 99% and 0 false accusations at N=232 .*: not judged"]),
    "health_check": ([], [r"cluster of 2 slurmd up",
                          r"health check on n02 \(this tree\): " + MEDIAN,
                          r"floor: python -c pass in the node's namespace: " + MEDIAN,
                          r"goal: health check on n02 .* \(goal <= 5000 ms\)"]),
    "health_check_soak": ([], [r"2 health checks over 2 nodes",
                               r"one health check under the soak: median",
                               r"goal: the drain budget \(\d+\) never passed \(issue 26\): met",
                               r"goal: every verdict reached the history \(issue 26\): met"]),
}

# benches other helpers own, each smoke-tested in its own branch (tightened at integration)
#: modules in bench/ that are not benches (shared code the benches import)
ELSEWHERE = {"history_build", "replay"}


NEEDS_CLUSTER = {"health_check", "health_check_soak"}  # root, slurm-wlm, munge


@pytest.mark.parametrize("name", [
    pytest.param(n, marks=pytest.mark.xdist_group("slurm-cluster")) if n in NEEDS_CLUSTER else n
    for n in sorted(BENCHES)])  # each bench on its own temp files; the clusters take turns
def test_the_bench_runs_in_its_smoke_mode(name: str) -> None:
    if name in NEEDS_CLUSTER:
        from tests import slurm_cluster

        if slurm_cluster.missing():
            pytest.skip(f"the test cluster needs {', '.join(slurm_cluster.missing())}")
    extra, patterns = BENCHES[name]
    env = {k: v for k, v in os.environ.items() if not k.startswith("STETHO_")}
    p = subprocess.run([sys.executable, str(REPO / "bench" / f"{name}.py"), "--smoke",
                        "--runs", "1", *extra], capture_output=True, text=True, env=env,
                       cwd=REPO, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    for pattern in [MEDIAN, LOAD, r"^(ratio|goal): ", *patterns]:
        assert re.search(pattern, p.stdout, re.M), f"{pattern!r} not in:\n{p.stdout}"


def test_every_bench_has_a_smoke_test() -> None:
    """A new bench cannot ship without one: each script in bench/ is in BENCHES above, or a
    test module runs it (names bench/<name>.py and passes --smoke); ELSEWHERE lists the
    modules there that are not benches."""
    # harness and fleet_args are the benches' shared parts, not benches
    scripts = {p.stem for p in (REPO / "bench").glob("*.py")} - {"harness", "fleet_args",
                                                                 "__init__"}
    runners = [p.read_text() for p in (REPO / "tests").glob("test_*.py")
               if p.name != "test_bench_smoke.py"]
    named = {s for s in scripts for text in runners if "--smoke" in text and (
        f"bench/{s}.py" in text or f'"bench" / "{s}.py"' in text)}
    missing = scripts - set(BENCHES) - named - ELSEWHERE
    assert not missing, f"benches without a smoke test: {sorted(missing)}"


def test_before_runs_the_other_checkout_beside_this_one() -> None:
    """`--before REF` times REF's own worktree (made under /tmp, removed here if this test
    made it), interleaved: both `stetho job` lines, each exit 1 for the failing node."""
    rev = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                         capture_output=True, text=True, check=True).stdout.strip()
    where = Path(tempfile.gettempdir()) / f"stetho-before-{rev}"
    made = not where.exists()
    env = {k: v for k, v in os.environ.items() if not k.startswith("STETHO_")}
    try:
        p = subprocess.run([sys.executable, str(REPO / "bench" / "job.py"), "--smoke", "--runs",
                            "1", "--before", "HEAD"], capture_output=True, text=True, env=env,
                           cwd=REPO, timeout=300)
    finally:
        if made and where.exists():
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force",
                            str(where)], capture_output=True)
    assert p.returncode == 0, p.stdout + p.stderr
    assert re.search(r"stetho job 4242 \(this tree\): " + MEDIAN + r".* exit \[1\]", p.stdout)
    assert re.search(rf"stetho job 4242 \(before \(HEAD = {rev}\)\): " + MEDIAN +
                     r".* exit \[1\]", p.stdout), p.stdout
    assert re.search(r"ratio: .* the checkout before \(goal <= 1x\)", p.stdout)
