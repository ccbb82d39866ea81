"""The release gate, canaries against controls (issue 30): on the multi-node Slurm testbed
(tests/slurm_cluster.py), `stetho gate --policy release --canaries ... --controls ...` holds
the nodes with a reservation it creates and removes, runs single-node and cross-leaf NCCL
all-reduce through `srun --reservation`, and judges canaries against controls.

Each job step prints what the simulated nodes' nccl-tests would (stetho.sim.nccl_step): the
real recorded outputs, with a NIC fault (`nic-busbw-drop`) slowing only the multi-node runs.
The stored baseline is recorded on an older NCCL, so alone it would only say "stale".
Stages and the comparison itself are unit-tested at the end, without the cluster."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from stetho.cli import main
from stetho.errors import ConfigError
from stetho.gate.release import compare as cmp
from stetho.gate.release import plan, settings
from stetho.localize import topology
from stetho.parsers import nccl_tests
from tests import slurm_cluster as sc

REPO = Path(__file__).resolve().parent.parent
RECORDED = REPO / "fixtures/real/03-nccl/allreduce-2node-16xA100-40GB-roce-oke.txt"
CANARIES, CONTROLS = "n[01-02,05-06]", "n[03-04,07-08]"
OLD_NCCL = "2.19.3"


def _recorded_2node_busbw() -> float:
    top = nccl_tests.parse(RECORDED.read_text()).largest
    assert top is not None and top.oop_busbw_gbps
    return top.oop_busbw_gbps


@pytest.fixture
def cluster(slurm_cluster: sc.Cluster) -> sc.Cluster:
    slurm_cluster.reset()
    return slurm_cluster


@pytest.fixture
def site(tmp_path: Path, cluster: sc.Cluster) -> dict[str, str]:
    """Two leaf switches (n01-n04, n05-n08) and a profile whose baselines were recorded on
    NCCL 2.19.3, one for each shape the gate runs."""
    (tmp_path / "topology.conf").write_text(
        "SwitchName=leafA Nodes=n[01-04]\nSwitchName=leafB Nodes=n[05-08]\n"
        "SwitchName=spine Switches=leafA,leafB\n")
    busbw = _recorded_2node_busbw()
    (tmp_path / "site.yml").write_text(f"""profile: site
extends: h100-sxm-8gpu
nccl:
  baseline:
    source: stetho baseline record (test, the old NCCL)
    measured_on: "2026-01-05"
    shape: {{collective: all_reduce, ranks: 8, nodes: 1, gpus_per_node: 8}}
    measured_with: {{nccl: {OLD_NCCL}}}
    busbw_gbps: {{8G: 478.0}}
  baselines:
    all_reduce-2x8:
      source: stetho baseline record (test, the old NCCL)
      measured_on: "2026-01-05"
      shape: {{collective: all_reduce, ranks: 16, nodes: 2, gpus_per_node: 8}}
      measured_with: {{nccl: {OLD_NCCL}}}
      busbw_gbps: {{8G: {busbw}}}
""")
    step = (f"sh -c '{sys.executable} -m stetho.sim.nccl_step --nodes-root "
            f"{cluster.folder / 'nodes'} --rank \"$SLURM_PROCID\" --hosts "
            "\"$SLURM_STEP_NODELIST\"'")
    return {"topology": str(tmp_path / "topology.conf"), "profile": str(tmp_path / "site.yml"),
            "command": step}


def _argv(site: dict[str, str], *extra: str, canaries: str = CANARIES,
          controls: str = CONTROLS) -> list[str]:
    return [sys.executable, "-m", "stetho", "gate", "--policy", "release",
            "--canaries", canaries, "--controls", controls, "--topology", site["topology"],
            "--profile", site["profile"], "--command", site["command"],
            "--gpus-per-node", "1", "--reservation-minutes", "10", *extra]


def _reservations(c: sc.Cluster) -> list[str]:
    out = c.scontrol("show", "reservation", check=False)
    return [w.split("=", 1)[1] for w in out.split() if w.startswith("ReservationName=")]


def _run_watching(c: sc.Cluster, argv: list[str]) -> tuple[int, str, str, set[str]]:
    """Run the CLI, polling `scontrol show reservation` while it runs: (rc, out, err, the
    stetho reservations seen during the run)."""
    proc = subprocess.Popen(argv, env=c.full_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    seen: set[str] = set()
    deadline = time.monotonic() + 300
    while proc.poll() is None and time.monotonic() < deadline:
        seen |= {r for r in _reservations(c) if r.startswith("stetho-release-")}
        time.sleep(0.1)
    out, err = proc.communicate(timeout=60)
    return proc.returncode, out, err, seen


@pytest.mark.xdist_group("slurm-cluster")
def test_canaries_with_slow_nics_fail_against_healthy_controls_where_the_baseline_is_stale(
        cluster: sc.Cluster, site: dict[str, str], tmp_path: Path) -> None:
    for node in ("n01", "n02", "n05", "n06"):
        cluster.set_hardware(node, "nic-slow")
    report, junit = tmp_path / "gate.json", tmp_path / "gate.xml"
    rc, out, err, seen = _run_watching(
        cluster, _argv(site, "--stage", "canary", "--json", str(report), "--junit", str(junit),
                       "--job", "driver-550.90.07"))
    assert rc == 1, out + err
    doc = json.loads(report.read_text())
    name = doc["reservation"]
    assert name in seen  # held while it ran...
    assert name not in _reservations(cluster)  # ...and removed after
    by = {c["benchmark"].split(" ")[0]: c for c in doc["comparisons"]}
    single, multi = by["single-node"], by["multi-node"]
    assert single["verdict"] == "pass"  # NVLink inside the node: the NICs are not in it
    assert multi["verdict"] == "fail"
    healthy = _recorded_2node_busbw()
    assert multi["control_gbps"] == pytest.approx(healthy, rel=0.02)
    assert multi["canary_gbps"] == pytest.approx(healthy * 0.6, rel=0.02)
    assert sorted(multi["slow_canaries"]) == ["n01+n05", "n02+n06"]  # pairs across leaves
    # the stored baseline alone could not have judged: it is on the old NCCL
    assert multi["baseline"] == f"baseline: stale (NCCL 2.21.5 vs {OLD_NCCL})"
    assert f"[baseline: stale (NCCL 2.21.5 vs {OLD_NCCL})]" in out
    assert "multi-node all_reduce across leaves: FAIL" in out
    assert "stage canary blocked: no further stage may proceed" in out
    assert out.rstrip().endswith("BLOCKED: release gate, canaries against controls "
                                 "(multi-node all_reduce across leaves)")
    assert doc["job"] == "driver-550.90.07" and doc["exit_code"] == 1
    cases = ET.parse(junit).getroot().iter("testcase")
    failing = {c.get("name", ""): c.find("failure") is not None for c in cases}
    assert len(failing) == 2 and sum(failing.values()) == 1
    assert next(n for n, f in failing.items() if f).startswith("release_canary")


@pytest.mark.xdist_group("slurm-cluster")
def test_healthy_canaries_pass_and_the_next_wave_may_proceed(
        cluster: sc.Cluster, site: dict[str, str]) -> None:
    rc, out, err, seen = _run_watching(cluster, _argv(site, "--stage", "canary"))
    assert rc == 0, out + err
    assert "single-node all_reduce: PASS" in out
    assert "multi-node all_reduce across leaves: PASS" in out
    assert "stage canary passed: early (25%) may proceed" in out
    assert len(seen) == 1 and not set(_reservations(cluster)) & seen
    assert out.rstrip().endswith("GO: release gate, canaries against controls")


@pytest.mark.xdist_group("slurm-cluster")
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_an_interrupt_mid_run_removes_the_reservation(cluster: sc.Cluster, site: dict[str, str],
                                                      sig: signal.Signals) -> None:
    proc = subprocess.Popen(_argv(site, "--repeats", "500"), env=cluster.full_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        held: list[str] = []
        while not held and proc.poll() is None and time.monotonic() < deadline:
            held = [r for r in _reservations(cluster) if r.startswith("stetho-release-")]
            time.sleep(0.1)
        assert held, "the reservation never appeared"
        # a step is running inside it: wait until Slurm shows one, so the interrupt lands
        # mid-benchmark
        while proc.poll() is None and time.monotonic() < deadline and not subprocess.run(
                ["squeue", "-h", f"--reservation={held[0]}"], env=cluster.full_env(),
                capture_output=True, text=True).stdout.strip():
            time.sleep(0.05)
        assert proc.poll() is None, "the run ended before it could be interrupted"
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, out + err
    assert held[0] not in _reservations(cluster)
    assert not [r for r in _reservations(cluster) if r.startswith("stetho-release-")]


@pytest.mark.xdist_group("slurm-cluster")
def test_busy_nodes_refuse_the_reservation_and_nothing_is_judged(
        cluster: sc.Cluster, site: dict[str, str], tmp_path: Path) -> None:
    job = subprocess.run(["sbatch", "--parsable", "-w", "n08", f"--output={tmp_path}/j.out",
                          "--wrap", "sleep 300"], env=cluster.full_env(), capture_output=True,
                         text=True, timeout=60, check=True).stdout.strip().split(";")[0]
    try:
        sc.wait_for(lambda: "JobState=RUNNING" in cluster.scontrol("show", "job", "-o", job),
                    60, "the busy job running", cluster)
        r = subprocess.run(_argv(site), env=cluster.full_env(), capture_output=True,
                           text=True, timeout=120)
    finally:
        subprocess.run(["scancel", job], env=cluster.full_env(), timeout=30)
    assert r.returncode == 3, r.stdout + r.stderr
    assert "Slurm refused reservation stetho-release-" in r.stderr
    assert "busy" in r.stderr.lower()
    assert "Traceback" not in r.stderr
    assert not [x for x in _reservations(cluster) if x.startswith("stetho-release-")]


@pytest.mark.xdist_group("slurm-cluster")
def test_too_few_controls_could_not_evaluate_without_holding_anything(
        cluster: sc.Cluster, site: dict[str, str]) -> None:
    r = subprocess.run(_argv(site, "--stage", "canary", controls="n07"),
                       env=cluster.full_env(), capture_output=True, text=True, timeout=120)
    assert r.returncode == 3, r.stdout + r.stderr
    assert "1 control node(s), the policy needs at least 2" in r.stdout
    assert "stage canary could not be evaluated: no further stage may proceed" in r.stdout
    assert r.stdout.rstrip().startswith("release gate") and "COULD NOT EVALUATE" in r.stdout
    assert not [x for x in _reservations(cluster) if x.startswith("stetho-release-")]


# -- without the cluster ------------------------------------------------------------------------
def _main(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    """`stetho ARGV` through the CLI's entry point (which maps errors to exit codes)."""
    with pytest.raises(SystemExit) as done:
        main(list(argv))
    return int(done.value.code or 0), capsys.readouterr().err


def _policy(tmp_path: Path, stages: str) -> Path:
    p = tmp_path / "rel.yml"
    p.write_text(f"policy: rel\nblock_on: [fail]\nstages:\n{stages}")
    return p


def test_stages_grow_and_say_which_may_proceed(tmp_path: Path) -> None:
    from stetho.core import yamlconf

    p = _policy(tmp_path, "  - {name: canary, share: 5%}\n  - {name: early, share: 25}\n"
                          "  - {name: all, share: 100%}\n")
    st = settings.stages_of(yamlconf.Section(yamlconf.load(p)))
    assert [(s.name, s.share_pct) for s in st] == [("canary", 5.0), ("early", 25.0),
                                                   ("all", 100.0)]
    assert settings.stage_line(st, 0, "pass") == "stage canary passed: early (25%) may proceed"
    assert settings.stage_line(st, 1, "pass") == "stage early passed: all (100%) may proceed"
    assert settings.stage_line(st, 2, "pass") == \
        "stage all passed: the rollout is complete (100%)"
    assert settings.stage_line(st, 1, "fail") == \
        "stage early blocked: no further stage may proceed"
    assert settings.stage_line(st, 0, "unknown") == \
        "stage canary could not be evaluated: no further stage may proceed"


@pytest.mark.parametrize("stages, said", [
    ("  - {name: a, share: 25%}\n  - {name: b, share: 5%}\n", "waves only grow"),
    ("  - {name: a, share: 25%}\n  - {name: b, share: 25%}\n", "waves only grow"),
    ("  - {name: a, share: 150%}\n", "at most 100"),
    ("  - {name: a, share: 0%}\n", "above 0"),
    ("  - {name: a, share: lots}\n", "percentage"),
    ("  - {name: a, share: 5%}\n  - {name: a, share: 50%}\n", "named twice"),
    ("  - {name: a, share: 5%, when: now}\n", "unknown key"),
    ("  - canary\n", "a stage is"),
])
def test_a_bad_stage_list_is_exit_2_at_its_line(tmp_path: Path, stages: str, said: str,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    p = _policy(tmp_path, stages)
    code, err = _main(capsys, "gate", "--policy", str(p), "--canaries", "n[01,04]",
                      "--controls", "n[02-03]")
    assert code == 2, err
    assert said in err and f"{p}:" in err and "Traceback" not in err


def test_an_unknown_stage_names_the_policys_stages(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, err = _main(capsys, "gate", "--policy", "release", "--canaries", "n[01,04]",
                      "--controls", "n[02-03]", "--stage", "late")
    assert code == 2
    assert "--stage late: not a stage of policy release (its stages: canary, early, all)" \
        in err
    code, err = _main(capsys, "gate", "--policy", "release", "--canaries", "n01",
                      "--controls", "n[02-03]")
    assert code == 2 and "give at least 2 canary nodes" in err
    with pytest.raises(ConfigError, match="names no stages"):
        settings.find_stage((), "canary", "pre-job")


def _g(nodes: str, *values: float, failed: str = "", error: str = "") -> cmp.GroupRun:
    return cmp.GroupRun(tuple(nodes.split("+")), values, (error,) if error else (),
                        (failed,) if failed else ())


RULES = settings.CanaryRules(max_drop_pct=5.0, noise_floor_pct=3.0, min_controls=2)


def test_controls_that_disagree_beyond_the_noise_band_are_no_reference() -> None:
    ctl = [_g("c1", 100, 101, 99), _g("c2", 100, 100, 100), _g("c3", 88, 88, 88)]
    c = cmp.compare("x", [_g("k1", 100, 100, 100)], ctl, RULES, 2)
    assert c.verdict == "unknown" and "controls disagree: c3 12.0%" in c.reasons[0]


def test_the_noise_band_is_twice_the_noisiest_controls_cv() -> None:
    noisy = (90.0, 100.0, 110.0)  # CV 10%: band 20%
    ctl = [_g("c1", *noisy), _g("c2", 100, 100, 100)]
    passing = cmp.compare("x", [_g("k1", 85, 85, 85)], ctl, RULES, 2)
    assert passing.band_pct == pytest.approx(20.0)
    assert passing.verdict == "pass"  # 15% under, inside the noise
    quiet = [_g("c1", 100, 100.5, 99.5), _g("c2", 100, 100, 100)]
    failing = cmp.compare("x", [_g("k1", 85, 85, 85)], quiet, RULES, 2)
    assert failing.verdict == "fail" and failing.band_pct == 3.0
    assert failing.drop_pct == pytest.approx(15.0)


def test_one_slow_canary_group_fails_though_the_median_passes() -> None:
    ctl = [_g("c1", 100, 100), _g("c2", 100, 100)]
    can = [_g("k1", 100, 100), _g("k2", 100, 100), _g("k3", 70, 70)]
    c = cmp.compare("x", can, ctl, RULES, 2)
    assert c.verdict == "fail" and c.slow == ("k3",)


def test_errors_are_never_pass_and_a_tool_failure_is_a_fail() -> None:
    ctl = [_g("c1", 100, 100), _g("c2", 100, 100)]
    assert cmp.compare("x", [_g("k1", 100, error="srun: down")], ctl, RULES, 2).verdict == \
        "unknown"
    assert cmp.compare("x", [_g("k1", 100)], [_g("c1", 100), _g("c2", error="srun: busy")],
                       RULES, 2).verdict == "unknown"
    assert cmp.compare("x", [_g("k1", 100)], [_g("c1", 100)], RULES, 2).verdict == "unknown"
    bad = cmp.compare("x", [_g("k1", 100, failed="nccl-tests reports 4 wrong elements")], ctl,
                      RULES, 2)
    assert bad.verdict == "fail"
    assert cmp.overall([bad, cmp.Comparison("y", "unknown", ("z",))]) == "fail"
    assert cmp.overall([cmp.Comparison("y", "unknown", ("z",))]) == "unknown"
    assert cmp.overall([]) == "unknown"


def test_pairs_cross_leaves_and_stay_on_one_side() -> None:
    topo = topology.from_slurm("SwitchName=a Nodes=n[01-04]\nSwitchName=b Nodes=n[05-08]\n"
                               "SwitchName=s Switches=a,b\n")
    pairs, spans = plan.cross_leaf_pairs(["n01", "n02", "n05", "n06"], topo)
    assert spans and sorted(pairs) == [("n01", "n05"), ("n02", "n06")]
    same, spans = plan.cross_leaf_pairs(["n01", "n02", "n03"], topo)
    assert not spans and same == [("n01", "n02")]


def test_the_baseline_is_a_second_opinion_current_stale_or_absent(tmp_path: Path) -> None:
    from stetho import profiles
    from stetho.gate.release.opinion import opinion

    p = tmp_path / "p.yml"
    p.write_text("profile: p\nextends: h100-sxm-8gpu\nnccl:\n  baselines:\n    two:\n"
                 "      shape: {collective: all_reduce, ranks: 16, nodes: 2, gpus_per_node: 8}\n"
                 "      measured_with: {nccl: 2.21.5}\n      busbw_gbps: {8G: 200.0}\n")
    prof = profiles.load(str(p))
    g8 = 8 << 30
    assert opinion(prof, 2, 8, 16, g8, 150.0, "2.21.5") == \
        "baseline: 200 GB/s at 8 GiB, canaries -25.0% (beyond its 5% tolerance)"
    assert opinion(prof, 2, 8, 16, g8, 198.0, "2.21.5").endswith("-1.0% (within its 5% "
                                                                "tolerance)")
    assert opinion(prof, 2, 8, 16, g8, 150.0, "2.23.4") == \
        "baseline: stale (NCCL 2.23.4 vs 2.21.5)"
    assert opinion(prof, 2, 8, 16, g8, 150.0, None).startswith("baseline: unknown")
    assert opinion(prof, 4, 8, 32, g8, 150.0, "2.21.5") == \
        "baseline: none for all_reduce 4x8 in profile p"
    assert opinion(None, 2, 8, 16, g8, 150.0, "2.21.5") == "baseline: none (no profile given)"


def test_a_nic_fault_slows_the_multi_node_step_and_not_the_single_node_one(
        tmp_path: Path) -> None:
    """What each simulated job step prints (stetho.sim.nccl_step), parsed by the real parser:
    the slow-NIC node's pairs run at 60% of the recorded 2-node busbw, its own NVLink run as
    the healthy node's."""
    import random

    from stetho.sim.builder import build_node
    from stetho.sim.nccl_step import output

    build_node(tmp_path / "a", "a")
    build_node(tmp_path / "b", "b")
    build_node(tmp_path / "slow", "slow", ["nic-busbw-drop=40"])
    rng = random.Random(0)

    def busbw(hosts: list[str]) -> float:
        run = nccl_tests.parse(output(tmp_path, hosts, 0.0, rng))
        assert run.largest is not None and run.largest.oop_busbw_gbps is not None
        return run.largest.oop_busbw_gbps

    healthy = _recorded_2node_busbw()
    assert busbw(["a", "b"]) == pytest.approx(healthy, abs=0.01)
    assert busbw(["a", "slow"]) == pytest.approx(healthy * 0.6, abs=0.01)
    assert busbw(["slow"]) == pytest.approx(busbw(["a"]), rel=0.02)
    assert nccl_tests.parse(output(tmp_path, ["a", "b"], 0.0, rng)).nccl_version == "2.21.5"
