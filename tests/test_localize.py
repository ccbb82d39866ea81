"""stetho localize: the search on the simulated fabric (real recorded nccl-tests text through the
real parser), the topology sources, fail-closed verdicts, the CLI, the run folder and history."""

from __future__ import annotations

import json
import random
import sqlite3
from collections.abc import Sequence
from pathlib import Path

import pytest
from click.testing import CliRunner

from stetho.cli import cli
from stetho.errors import ConfigError
from stetho.history.store import History
from stetho.localize import fabric, report, runners, topology
from stetho.localize.engine import Engine, Localization
from stetho.localize.judge import Judge
from stetho.localize.model import FAIL, PASS, UNKNOWN, Measurement
from stetho.parsers import nccl_tests
from tests import slurm_testbed as testbed

NODES = [f"gpu{i:03d}" for i in range(1, 97)]  # 6 leaves of 16
TOPO = topology.uniform(NODES, 16)


def found(loc: Localization) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {"node": set(), "pair": set(), "uplink": set(), "switch": set()}
    for f in loc.findings:
        out[f.kind].add("<->".join(sorted(f.nodes)) if f.kind == "pair" else f.subject)
    return out


def localize(fab: fabric.Fabric, **kw: object) -> Localization:
    return Engine(fab.topo, runners.SimRunner(fab), **kw).run()  # type: ignore[arg-type]


# -- the search on the simulated fabric ----------------------------------------------------------
def test_healthy_fleet_is_verified_in_two_rounds() -> None:
    loc = localize(fabric.Fabric(TOPO, seed=1))
    assert loc.exit_code == 0 and loc.verified and not loc.findings
    assert loc.rounds == 2 and len(loc.tests) == 5  # four parts, then the whole fleet
    assert all(t.verdict == PASS for t in loc.tests)


@pytest.mark.parametrize("seed", range(6))
def test_one_bad_node_is_named_and_nobody_else(seed: int) -> None:
    bad = random.Random(seed).choice(NODES)
    fab = fabric.Fabric(TOPO, nodes={bad: 0.6}, seed=seed)
    loc = localize(fab)
    assert loc.exit_code == 1 and found(loc) == fab.faulty()
    (f,) = loc.findings
    # Convicted by its part, its own test and a confirmation with a different buddy.
    tests = {t.id: t for t in loc.tests}
    own = [tests[i] for i in f.convicting if tests[i].nodes == (bad,)]
    assert len(own) == 2 and len({t.padding for t in own}) == 2
    assert all(tests[i].verdict == FAIL for i in f.convicting)
    assert f.clearing and all(tests[i].verdict == PASS and bad not in tests[i].nodes
                              for i in f.clearing)
    assert loc.tests[-1].purpose == "verify" and loc.tests[-1].verdict == PASS
    assert bad not in loc.tests[-1].nodes and len(loc.tests[-1].nodes) == len(NODES) - 1


def test_several_bad_nodes() -> None:
    bad = ["gpu005", "gpu006", "gpu040", "gpu090"]
    fab = fabric.Fabric(TOPO, nodes=dict.fromkeys(bad, 0.7), seed=3)
    loc = localize(fab)
    assert loc.exit_code == 1 and found(loc)["node"] == set(bad)
    assert found(loc) == fab.faulty()


@pytest.mark.parametrize(("a", "b"), [("gpu010", "gpu012"), ("gpu003", "gpu070"),
                                      ("gpu017", "gpu032")])
def test_a_bad_pair_is_the_pair_not_its_nodes(a: str, b: str) -> None:
    fab = fabric.Fabric(TOPO, pairs={frozenset((a, b)): 0.6}, seed=5)
    loc = localize(fab)
    assert loc.exit_code == 1 and found(loc) == {"node": set(), "pair": {f"{a}<->{b}"},
                                                 "uplink": set(), "switch": set()}


def test_a_bad_uplink_is_one_switch_not_sixteen_nodes() -> None:
    fab = fabric.Fabric(TOPO, uplinks={"leaf003": 0.5}, seed=2)
    loc = localize(fab)
    assert loc.exit_code == 1 and found(loc)["uplink"] == {"leaf003"}
    assert report.results(loc) and not found(loc)["node"]


def test_a_bad_leaf_switch_is_the_switch() -> None:
    fab = fabric.Fabric(TOPO, switches={"leaf001": 0.7}, seed=4)
    loc = localize(fab)
    assert loc.exit_code == 1 and found(loc) == {"node": set(), "pair": set(), "uplink": set(),
                                                 "switch": {"leaf001"}}
    (f,) = loc.findings
    assert set(f.nodes) == set(TOPO.leaves()["leaf001"])


def test_two_level_tree_from_topology_conf() -> None:
    conf = "\n".join(
        [f"SwitchName=leaf{i} Nodes=gpu[{i * 8 + 1:03d}-{i * 8 + 8:03d}]" for i in range(8)]
        + ["SwitchName=spine0 Switches=leaf[0-3]", "SwitchName=spine1 Switches=leaf[4-7]",
           "SwitchName=core Switches=spine[0-1]  # the top"])
    topo = topology.from_slurm(conf)
    assert topo.paths["gpu001"] == (topology.ROOT, "core", "spine0", "leaf0")
    assert [len(p) for p in topo.split(list(topo.nodes), 4)] == [32, 32]
    assert topo.split([f"gpu{i:03d}" for i in range(1, 33)], 4) == [
        [f"gpu{i:03d}" for i in range(k * 8 + 1, k * 8 + 9)] for k in range(4)]
    fab = fabric.Fabric(topo, nodes={"gpu042": 0.5}, uplinks={"leaf2": 0.5}, seed=8)
    loc = localize(fab)
    assert loc.exit_code == 1 and found(loc) == fab.faulty()


# -- noise, transients and failing closed --------------------------------------------------------
class Transient:
    """The simulated fabric, with every group holding `node` slow on its first `times` runs:
    a neighbour's job that came and went."""

    name = "transient"

    def __init__(self, fab: fabric.Fabric, node: str, times: int) -> None:
        self.inner, self.node, self.left = runners.SimRunner(fab), node, times

    def run(self, groups: Sequence[tuple[str, ...]]) -> list[Measurement]:
        out = self.inner.run(groups)
        for g, m in zip(groups, out, strict=True):
            if self.node in g and self.left > 0 and m.value is not None:
                self.left -= 1
                m.value *= 0.6
        return out


def test_transient_slowness_does_not_convict() -> None:
    fab = fabric.Fabric(TOPO, seed=9)
    loc = Engine(TOPO, Transient(fab, "gpu020", 2)).run()
    assert not loc.findings and loc.transients and loc.exit_code == 0


def test_judge_repeats_near_the_threshold_and_gives_up_as_unknown() -> None:
    judge = Judge(noise=0.03, min_slowdown=0.15, confidence=0.997, max_runs=3)
    assert judge.verdict([1.0]) == PASS and judge.verdict([0.6]) == FAIL
    assert judge.verdict([0.93]) is None  # too close to call on one run
    assert judge.verdict([0.93, 0.92, 0.93]) == UNKNOWN
    with pytest.raises(ConfigError):
        Judge(noise=0.2, min_slowdown=0.1)


@pytest.mark.parametrize("seed", range(4))
def test_noise_beyond_the_judge_repeats_and_never_accuses_the_healthy(seed: int) -> None:
    # ±8% run to run where the judge was told ±3%: verdicts take repeats or stay unknown,
    # but no healthy node is accused and the slow one is never called healthy.
    fab = fabric.Fabric(TOPO, nodes={"gpu050": 0.8}, noise=0.08, seed=seed)
    loc = localize(fab, judge=Judge(max_runs=3))
    assert any(len(t.rounds) > 1 for t in loc.tests)
    assert loc.exit_code in (1, 3)
    assert report.results(loc)[NODES.index("gpu050")].status != "pass"
    assert found(loc)["node"] <= {"gpu050"} and not found(loc)["pair"]


class Broken:
    name = "broken"

    def run(self, groups: Sequence[tuple[str, ...]]) -> list[Measurement]:
        return [Measurement(None, 1.0, error="srun: Unable to allocate resources")
                for _ in groups]


def test_a_runner_that_cannot_run_is_could_not_finish() -> None:
    loc = Engine(TOPO, Broken()).run()
    assert loc.exit_code == 3 and loc.unresolved and not loc.findings
    assert {r.status for r in report.results(loc)} == {"error"}


def test_a_run_that_could_not_finish_has_a_page_that_says_so(tmp_path: Path) -> None:
    """The page of an unfinished run leads with could-not-finish in the error colour, names
    the unresolved nodes, and shows each test's runner error (escaped) as undecided."""
    from tests.test_runpage import Page

    class Hostile(Broken):
        def run(self, groups: Sequence[tuple[str, ...]]) -> list[Measurement]:
            return [Measurement(None, 1.0, error="<script>x</script>") for _ in groups]

    loc = Engine(TOPO, Hostile()).run()
    report.write_run(loc, tmp_path, {"run": "r1", "command": "<b>stetho</b> localize"})
    text = (tmp_path / "index.html").read_text()
    page = Page(text)
    (h1,) = page.find("h1", id="verdict")
    assert h1["data-status"] == "error" and "could not finish" in "".join(page.text)
    assert page.find("p", id="unresolved") and not page.find("ol", id="actions")
    assert {t["data-verdict"] for t in page.find("tr") if "data-test" in t} == {UNKNOWN}
    assert not {t for t, _ in page.elements} & {"script", "b"}
    assert "&lt;script&gt;x&lt;/script&gt;" in text


def test_a_wrong_expectation_drains_nobody() -> None:
    fab = fabric.Fabric(TOPO, nodes=dict.fromkeys(NODES, 0.5), seed=2)  # "expect" twice real
    loc = localize(fab)
    assert loc.exit_code == 3 and loc.stopped and "--expect" in loc.stopped


def test_budget_stops_with_could_not_finish() -> None:
    fab = fabric.Fabric(TOPO, nodes={"gpu050": 0.5}, seed=1)
    loc = localize(fab, max_rounds=2)
    assert loc.exit_code == 3 and loc.stopped and "round budget" in report.verdict_line(loc)


# -- the simulated nccl-tests output is the real recorded run, parsed by the real parser --------
def test_rendered_output_is_the_recorded_run_scaled() -> None:
    text, healthy = fabric.recorded()
    out = fabric.render(["gpu001", "gpu002", "gpu003"], 0.5)
    run = nccl_tests.parse(out)
    assert run.ok and run.shape.nodes == 3 and run.shape.ranks == 24
    assert {d.host for d in run.devices} == {"gpu001", "gpu002", "gpu003"}
    top = run.largest
    assert top is not None and top.oop_busbw_gbps == pytest.approx(healthy * 0.5, rel=1e-3)
    assert len(run.rows) == len(nccl_tests.parse(text).rows)


def test_failed_benchmark_output_is_a_slow_group(real_dir: Path) -> None:
    text = (real_dir / "03-nccl/allreduce-2node-2xRTX3090-wrong-FAILED.txt").read_text()
    m = runners.nccl_measurement(text, 100.0)
    assert m.failed and m.score == 0.0
    garbage = runners.nccl_measurement("ssh: connect to host gpu01: No route\n", 100.0, rc=255)
    assert garbage.score is None and "exit 255" in (garbage.error or "")


def test_mpirun_runner_argv_is_a_host_list() -> None:
    run = runners.MpirunRunner(180.0, gpus_per_node=8)
    argv = run.argv(("gpu01", "gpu07"))
    assert argv[:5] == ["mpirun", "-np", "16", "-H", "gpu01:8,gpu07:8"]
    assert argv[-len(runners.DEFAULT_NCCL.split()):] == runners.DEFAULT_NCCL.split()


def test_iperf3_pair_rounds_cover_every_pair_once_disjointly() -> None:
    nodes = [f"n{i}" for i in range(7)]
    rounds = runners._pair_rounds(nodes)
    seen = [frozenset(p) for r in rounds for p in r]
    assert len(seen) == len(set(seen)) == 21
    for r in rounds:
        flat = [n for p in r for n in p]
        assert len(flat) == len(set(flat))



class _TableIperf3(runners.Iperf3Runner):
    """The runner's own group logic over a table of flow rates (the netns tests run real ones)."""

    def __init__(self, slow: dict[frozenset[str], float], stop_below: float) -> None:
        super().__init__({}, rate_mbps=20.0, stop_below=stop_below)
        self.slow, self.flows = slow, []

    def flow(self, src: str, dst: str) -> float | str:
        self.flows.append(frozenset((src, dst)))
        return self.slow.get(frozenset((src, dst)), 19.0)


def test_iperf3_group_stops_at_a_flow_that_fails_it_alone_and_a_pass_measures_every_pair(
        ) -> None:
    judge = Judge(0.4, 0.9, 0.9, 6, 0.0)
    assert judge.verdict([judge.fails_alone]) == FAIL
    assert judge.verdict([judge.fails_alone + 0.01]) != FAIL
    group = tuple(f"n{i}" for i in range(8))
    first = runners._pair_rounds(list(group))[0][0]
    stop = _TableIperf3({frozenset(first): 2.0}, judge.fails_alone)
    (m,) = stop.run([group])
    assert m.value == 2.0 and len(stop.flows) == 4  # one round of 4 pairs, not all 28
    # a slow flow that does not fail the group alone, and a healthy group: every pair
    for slow in ({frozenset(first): 20.0 * judge.fails_alone + 1}, {}):
        full = _TableIperf3(slow, judge.fails_alone)
        (m,) = full.run([group])
        assert len(full.flows) == len(set(full.flows)) == 28
        assert m.value == min([19.0, *slow.values()])
    # without a floor (the default) a failing group still measures every pair
    plain = _TableIperf3({frozenset(first): 2.0}, 0.0)
    assert plain.run([group])[0].value == 2.0 and len(plain.flows) == 28

# -- topology sources ---------------------------------------------------------------------------
def test_topology_conf_must_place_every_node() -> None:
    with pytest.raises(ConfigError, match=r"gpu\[03-04\]"):
        topology.from_slurm("SwitchName=s0 Nodes=gpu[01-02]", ["gpu01", "gpu02", "gpu03",
                                                                 "gpu04"])
    with pytest.raises(ConfigError, match="line 1"):
        topology.from_slurm("Nodes=gpu01")


def test_inventory_groups_are_leaves() -> None:
    topo = topology.from_groups(["a1", "b1", "a2", "c1"], {"rack_a": ["a1", "a2"],
                                                           "rack_b": ["b1"]})
    assert topo.nodes == ("a1", "a2", "b1", "c1")
    assert topo.leaves() == {"rack_a": ["a1", "a2"], "rack_b": ["b1"], "ungrouped": ["c1"]}


# -- the command ------------------------------------------------------------------------------
def test_cli_dry_run_prints_the_plan() -> None:
    res = CliRunner().invoke(cli, ["localize", "--nodes", "gpu[001-232]", "--topology",
                                   "uniform:16", "--dry-run"])
    assert res.exit_code == 0, res.output
    assert "232 nodes, 15 leaf switches" in res.output
    assert "all healthy: 5 tests in 2 rounds (~4 min)" in res.output  # 2 min a round
    assert "every pair: 26796 tests" in res.output


def test_cli_sim_run_writes_report_json_and_history(tmp_path: Path) -> None:
    db = tmp_path / "h.db"
    res = CliRunner().invoke(cli, [
        "localize", "--nodes", "gpu[001-064]", "--topology", "uniform:16", "--runner", "sim",
        "--sim-fault", "node=gpu033:0.6", "--out", str(tmp_path / "runs"), "--db", str(db),
        "--json", str(tmp_path / "loc.json")])
    assert res.exit_code == 1, res.output
    assert "node gpu033: drain gpu033" in res.output
    (run_dir,) = (tmp_path / "runs").iterdir()
    md = (run_dir / "localize.md").read_text()
    assert md.startswith("# Localization: 1 fault(s) found: node gpu033")
    assert md.index("## What to do first") < md.index("## Evidence")
    doc = json.loads((run_dir / "localize.json").read_text())
    assert doc["schema"] == "stetho.localize" and doc["exit_code"] == 1
    assert [f["subject"] for f in doc["findings"]] == ["gpu033"]
    assert json.loads((tmp_path / "loc.json").read_text())["findings"] == doc["findings"]
    with sqlite3.connect(db) as conn:
        (kind, code, nodes) = conn.execute("SELECT kind, exit_code, nodes FROM runs").fetchone()
    assert (kind, code, nodes) == ("localize", 1, 1)
    with History(db) as h:
        latest = h.latest_results(["gpu033", "gpu001"], 3600)
    # The accused node gets a failing result the gate blocks on; cleared nodes get no row, so
    # a localization never stands in for their checks.
    assert list(latest) == ["gpu033"]
    (r,) = latest["gpu033"][2]
    assert (r.check, r.status, r.subject) == ("localize", "fail", "node:gpu033")


def test_cli_run_folder_has_a_page_leading_with_what_to_do(tmp_path: Path) -> None:
    """`stetho localize` writes index.html beside localize.md: the verdict in the fail colour,
    what to do first, the suspect, then every group test with its vote; escaped, no script,
    nothing fetched. Headless Chromium (when installed) draws the verdict in the fail colour."""
    from tests import services
    from tests.test_runpage import FAIL_RGB, Page

    res = CliRunner().invoke(cli, [
        "localize", "--nodes", "gpu[001-064]", "--topology", "uniform:16", "--runner", "sim",
        "--sim-fault", "node=gpu033:0.6", "--out", str(tmp_path / "runs"), "--no-history"])
    assert res.exit_code == 1, res.output
    (run_dir,) = (tmp_path / "runs").iterdir()
    text = (run_dir / "index.html").read_text()
    page = Page(text)
    (h1,) = page.find("h1", id="verdict")
    assert h1["data-status"] == "fail" and "s-fail" in h1["class"]
    assert page.find("li", data_kind="node", data_subject="gpu033")
    assert text.index('id="actions"') < text.index('id="suspects"') < text.index('id="tests"')
    doc = json.loads((run_dir / "localize.json").read_text())
    votes = {int(t["data-test"]): t["data-verdict"] for t in page.find("tr") if "data-test" in t}
    assert votes == {t["id"]: t["verdict"] or "undecided" for t in doc["group_tests"]}
    convicting = doc["findings"][0]["convicting_tests"]
    assert convicting and all(votes[t] == "fail" for t in convicting)
    assert "Localization: 1 fault(s) found: node gpu033" in "".join(page.text)
    assert {a["href"] for a in page.find("a")} == {"localize.md", "localize.json"}
    assert not {t for t, _ in page.elements} & {"script", "img", "link", "iframe"}
    assert "http:" not in text and "https:" not in text
    if services.missing("chromium"):
        return
    shot = services.screenshot(run_dir / "index.html", services.artifacts() / "localize.png",
                               tmp_path / "chromium", size="1000,700")
    assert services.colour_count(shot, FAIL_RGB, max_rows=80) > 2000, "verdict not in red"


def test_cli_usage_errors_exit_2() -> None:
    res = CliRunner().invoke(cli, ["localize", "--nodes", "gpu[01-04]"])
    assert res.exit_code != 0 and "--expect" in str(res.exception or res.output)
    res = CliRunner().invoke(cli, ["localize", "--nodes", "gpu[01-04]", "--runner", "sim",
                                   "--sim-fault", "node=gpu99"])
    assert isinstance(res.exception, ConfigError) and "gpu99" not in topology.ROOT


# -- the srun runner through a real slurmctld and slurmd (tests/slurm_testbed.py) ----------------
slurm_testbed = testbed.slurm_testbed
RECORDED = "03-nccl/allreduce-2node-16xA100-40GB-roce-oke.txt"


@pytest.mark.xdist_group("slurm")
def test_srun_runner_measures_through_real_slurm(slurm_testbed: testbed.Testbed,
                                                 real_dir: Path) -> None:
    # The one real slurmd runs the "benchmark" (the recorded nccl-tests output, printed by
    # the job step); gpu01 is configured but DOWN, so a group with it cannot run.
    run = runners.SrunRunner(200.0, f"cat {real_dir / RECORDED}", gpus_per_node=1,
                             env=slurm_testbed.env, immediate_s=5)
    assert run.argv(("gpu01", "gpu02"))[:4] == ["srun", "-w", "gpu[01-02]", "-N"]
    ok, down = run.run([(slurm_testbed.hostname,), ("gpu01",)])
    assert ok.error is None and ok.value == pytest.approx(237.94) and not ok.failed
    assert ok.score == pytest.approx(237.94 / 200.0)
    assert down.score is None and down.error and "srun" in down.error


def test_two_steps_holding_each_others_only_buddy_still_run() -> None:
    """Each waiting request's only known-good buddy is a member of the other: a round that
    would schedule nothing lets the first borrow, instead of idling to the round budget."""
    from stetho.localize.engine import _Active, _Slot
    from stetho.localize.model import Request
    from stetho.localize.search import Search

    topo = topology.uniform(["x", "c1", "y", "c2"], 2)  # leaves (x, c1) and (y, c2)
    ran: list[tuple[str, ...]] = []

    class Healthy:
        name = "table"

        def run(self, groups: Sequence[tuple[str, ...]]) -> list[Measurement]:
            ran.extend(groups)
            return [Measurement(100.0, 100.0) for _ in groups]

    search = Search(topo, cleared={"c1", "c2"})
    # x's only buddy outside its members is c1 (x's leaf), held by the request testing y + c1;
    # y's is c2, held by the request testing x + c2.
    xs = _Slot(Request(("x", "c2"), "locate", pad=1, avoid=frozenset({"c2"})))
    ys = _Slot(Request(("y", "c1"), "locate", pad=1, avoid=frozenset({"c1"})))
    active = [_Active(iter(()), [xs]), _Active(iter(()), [ys])]  # type: ignore[arg-type]
    engine = Engine(topo, Healthy())
    engine._tests = []  # what run() starts with
    assert engine._round(1, search, active) == 1
    assert ran == [("x", "c1", "c2")] and xs.test is not None and xs.test.verdict == PASS
    assert ys.test is None  # it waits one round for the nodes it needs, then runs
    assert engine._round(2, search, active) == 1 and ys.test is not None
    assert set(ran[1]) == {"y", "c1", "c2"}
