"""Localization under heavy-tailed noise: transients, stragglers, confirmations, the bench.

Many seeded trials run in-process on the fabric model (no rendering), so they are fast. The
ground truth is what was injected, and what the fabric's own runs were (its durations log and
the tests' scores), never the search's report of itself.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from click.testing import CliRunner

from stetho.cli import cli
from stetho.localize import fabric, report, runners, topology
from stetho.localize.engine import Engine, Localization
from stetho.localize.judge import Judge
from stetho.localize.model import FAIL, INTERMITTENT, PASS, Measurement

ROOT = Path(__file__).resolve().parent.parent
NODES = [f"gpu{i:03d}" for i in range(1, 65)]
TOPO = topology.uniform(NODES, 16)
JUDGE = Judge(tail=0.03, confirm=2)
SLOW = JUDGE.threshold  # a run below this is a slow run


def heavy(seed: int, **faults: object) -> fabric.Fabric:
    kw: dict[str, object] = {"tail_p": 0.03, **faults}
    return fabric.Fabric(TOPO, seed=seed, model="heavy", **kw)  # type: ignore[arg-type]


def localize(fab: fabric.Fabric) -> Localization:
    return Engine(TOPO, runners.SimRunner(fab, render=False), JUDGE).run()


def test_the_heavy_tail_slows_a_healthy_group_on_about_3_percent_of_runs() -> None:
    fab = heavy(1)
    speeds = [fab.measure(NODES[:8]) for _ in range(20_000)]
    slow = [s for s in speeds if s < SLOW]
    assert 0.02 < len(slow) / len(speeds) < 0.04  # binomial sd at 3%: 0.12%
    assert all(0.55 < s < 0.85 for s in slow)  # 20-40% slow, with the body's 1.5% sd on top
    body = sorted(s for s in speeds if s >= SLOW)
    assert 0.99 < body[len(body) // 2] < 1.01 and body[0] > 0.9


def test_uniform_mode_is_the_old_model() -> None:
    fab = fabric.Fabric(TOPO, seed=1)
    speeds = [fab.measure(NODES[:8]) for _ in range(5_000)]
    assert min(speeds) >= 0.97 and max(speeds) <= 1.03


def test_every_run_has_a_duration_from_the_nccl_tests_model() -> None:
    fab = heavy(2)
    fab.measure(NODES[:2])
    fab.measure(NODES)
    small, big = fab.durations
    _, busbw = fabric.recorded()
    # 20 s launch + 0.25 s a node + 25 iterations of a 1 GiB ring all-reduce at busbw.
    assert abs(small - (20 + 0.5 + 25 * (2 * 20e-6 + (1 << 30) / (busbw * 1e9)))) < 0.05
    assert big > small + 15  # 62 more nodes: 15.5 s more setup
    assert fabric.duration(64, 0.5) > fabric.duration(64, 1.0)  # a slow group runs longer


def test_one_slow_run_is_not_a_failure_two_in_a_row_are() -> None:
    assert JUDGE.verdict([0.7]) is None  # run it again
    assert JUDGE.verdict([0.7, 0.7]) == FAIL
    assert JUDGE.verdict([1.0]) == PASS
    assert JUDGE.verdict([1.0], runs=3) is None and JUDGE.verdict([1.0] * 3, runs=3) == PASS
    assert JUDGE.verdict([0.7, 1.0, 1.0]) is None  # runs disagree: run to max_runs
    assert JUDGE.verdict([0.7, 1.0, 1.0, 1.0, 1.0]) == PASS  # slow once: a transient
    assert JUDGE.verdict([0.7, 1.0, 0.7, 1.0, 0.7]) == INTERMITTENT
    assert JUDGE.transient([0.7, 1.0, 1.0, 1.0, 1.0]) and not JUDGE.transient([1.0])


def test_healthy_fleets_under_the_tail_accuse_nobody() -> None:
    """200 healthy fleets: the tail hits some tests (a slow run the judge saw), and no node is
    ever accused for it."""
    hit = finished = 0
    for seed in range(200):
        loc = localize(heavy(seed))
        assert not loc.findings, (seed, [f.subject for f in loc.findings])
        hit += any(s < SLOW for t in loc.tests for s in t.scores)
        finished += loc.exit_code == 0
    assert hit >= 10  # 5+ tests a trial at 3%: ~30 trials see a slow run
    assert finished >= 196  # the rest unresolved (exit 3), never a finding


class OneSlowRun:
    """The fabric, with the first run of a group holding `node` 40% slow: a one-off."""

    name = "sim"

    def __init__(self, fab: fabric.Fabric, node: str) -> None:
        self.inner, self.node, self.left = runners.SimRunner(fab, render=False), node, 1

    def run(self, groups: Sequence[tuple[str, ...]]) -> list[Measurement]:
        out = self.inner.run(groups)
        for g, m in zip(groups, out, strict=True):
            if self.node in g and self.left and m.value is not None:
                self.left -= 1
                m.value *= 0.6
        return out


def test_a_one_off_slow_run_never_accuses() -> None:
    for seed in range(20):
        fab = heavy(seed, tail_p=0.0)
        runner = OneSlowRun(fab, "gpu020")
        loc = Engine(TOPO, runner, JUDGE).run()
        assert runner.left == 0  # the slow run happened
        assert not loc.findings and loc.exit_code == 0
        assert loc.transients  # and is on record as a transient, not dropped


def test_a_bad_node_is_convicted_only_on_tests_slow_twice() -> None:
    for seed in range(50):
        bad = random.Random(seed).choice(NODES)
        loc = localize(heavy(seed, nodes={bad: 0.7}))
        assert [(f.kind, f.subject) for f in loc.findings] == [("node", bad)], seed
        by_id = {t.id: t for t in loc.tests}
        for tid in loc.findings[0].convicting:
            assert sum(s < SLOW for s in by_id[tid].scores) >= JUDGE.confirm


def test_an_intermittent_straggler_is_unresolved_or_named_never_a_healthy_node() -> None:
    """30% of the straggler's runs are 25% slow. Whenever a test holding it was intermittent,
    the run does not finish (exit 3) with the straggler unresolved; no other node is ever
    accused."""
    caught = intermittent = 0
    for seed in range(300):
        who = NODES[seed % len(NODES)]
        loc = localize(heavy(seed, stragglers={who: (0.3, 0.75)}))
        accused = {n for f in loc.findings for n in f.nodes}
        assert accused <= {who}, (seed, who, accused)
        flaky = [t for t in loc.tests if t.verdict == INTERMITTENT and who in t.nodes + t.padding]
        if flaky:
            intermittent += 1
            assert loc.exit_code == 3 and who in loc.unresolved
            assert "intermittent" in report.verdict_line(loc)
        caught += loc.exit_code == 3 or bool(accused)
    assert intermittent >= 5 and caught >= 30  # ~16% of single passes catch it (the bench)


def test_cli_names_a_straggler_intermittent_and_does_not_finish(tmp_path: Path) -> None:
    res = CliRunner().invoke(cli, [
        "localize", "--nodes", "gpu[001-064]", "--topology", "uniform:16", "--runner", "sim",
        "--sim-fault", "straggler=gpu007", "--seed", "14", "--out", str(tmp_path),
        "--no-history"])
    assert res.exit_code == 3, res.output
    assert "could not finish (unresolved: gpu[001-016]; intermittent" in res.output
    (run_dir,) = tmp_path.iterdir()
    rec = json.loads((run_dir / "localize.json").read_text())
    assert "gpu007" in rec["unresolved"] and not rec["findings"] and rec["exit_code"] == 3
    flaky = [t for t in rec["group_tests"] if t["verdict"] == INTERMITTENT]
    assert flaky and "gpu007" in flaky[0]["nodes"] + flaky[0]["padding"]
    slow = [x for x in flaky[0]["scores"] if x < SLOW]
    assert len(slow) >= 3 and len(slow) < len(flaky[0]["scores"])  # slow, then clean, then slow
    assert "intermittent" in (run_dir / "index.html").read_text()


def stetho(*args: str) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).parent / "stetho"
    return subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=120)


def test_cli_straggler_needs_heavy_noise_and_uniform_stays_selectable(tmp_path: Path) -> None:
    sim = ["localize", "--nodes", "gpu[001-064]", "--topology", "uniform:16", "--runner", "sim",
           "--out", str(tmp_path), "--no-history"]
    res = stetho(*sim, "--sim-noise", "uniform", "--sim-fault", "straggler=gpu007")
    assert res.returncode == 2 and "needs --sim-noise heavy" in res.stderr
    assert "Traceback" not in res.stderr
    res = stetho(*sim, "--sim-noise", "uniform", "--tail", "0", "--sim-fault", "node=gpu033:0.6")
    assert res.returncode == 1 and "node gpu033" in res.stdout
    res = stetho(*sim, "--confirm", "5")
    assert res.returncode == 2 and "confirmations 5" in res.stderr
