"""Reboots on the real Slurm testbed (tests/slurm_testbed.py): `scontrol reboot ASAP
nextstate=RESUME reason=...` is requested only when the drain budget allows it, and Slurm's
own `show node` then reads the reboot requested with stetho's reason; a person's drain is
never overwritten; without a budget nothing is rebooted. The fake nodes are DOWN with no
slurmd: Slurm accepts the request (RebootProgram is set) and holds it as REBOOT_REQUESTED."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from stetho.gate.breaker import Circuit
from stetho.gate.budget import DrainBudget
from stetho.remedy import reboot
from stetho.remedy.budget import NoBudget
from stetho.remedy.plan import Step
from tests import slurm_testbed as testbed

slurm_testbed = testbed.slurm_testbed
slurm = testbed.slurm

pytestmark = pytest.mark.xdist_group("slurm")


def _sc(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["scontrol", *args], env={**os.environ, **env,
                                                    "SLURM_TIME_FORMAT": "standard"},
                          capture_output=True, text=True, timeout=30)


def _fields(env: dict[str, str], node: str) -> dict[str, str]:
    line = _sc(env, "show", "node", "-o", node).stdout
    out = {k: line.split(f" {k}=", 1)[1].split()[0] for k in ("State", "NextState")
           if f" {k}=" in line}
    out["Reason"] = line.partition(" Reason=")[2].rsplit(" [", 1)[0].strip()
    return out


@pytest.fixture
def clean(slurm):
    """The nodes' reboot requests cancelled and drains lifted, before and after (a reboot
    cancelled puts a node back as it was: DOWN with no reason, for a fake node)."""
    nodes = ["gpu03", "gpu04"]

    def reset() -> None:
        for n in nodes:
            if "REBOOT" in _fields(slurm, n)["State"]:
                _sc(slurm, "cancel_reboot", n)
            if "DRAIN" in _fields(slurm, n)["State"]:
                _sc(slurm, "update", f"NodeName={n}", "State=RESUME")

    reset()
    yield slurm
    reset()


def _step(node: str) -> Step:
    return Step(node, "gpu-off-bus", "GPU fell off the bus", "gpu:0000:4c:00.0", "reboot",
                "rule gpu-off-bus: reboot", summary="A GPU at 0000:4c:00.0 fell off the bus")


def _budget(tmp_path: Path, **circuit: float) -> DrainBudget:
    return DrainBudget(tmp_path / "ledger.db", Circuit(**circuit))  # type: ignore[arg-type]


def _reboot_asked(state: str) -> bool:
    """Slurm holds the request as REBOOT_REQUESTED and, once slurmctld's background pass has
    acted on it (sooner or later on a busy machine), REBOOT_ISSUED: both say it was asked."""
    return "REBOOT_REQUESTED" in state or "REBOOT_ISSUED" in state


def test_a_reboot_allowed_by_the_budget_is_requested_in_slurm(clean, tmp_path):
    sl = reboot.Rebooter(act=True, env=clean)
    (o,) = reboot.reboot([_step("gpu04")], sl, _budget(tmp_path), act=True)
    assert o.outcome == "done", o.detail
    f = _fields(clean, "gpu04")
    assert _reboot_asked(f["State"]) and "DRAIN" in f["State"], f
    assert f["NextState"] == "RESUME"
    assert f["Reason"] == "stetho: reboot: gpu-off-bus: A GPU at 0000:4c:00.0 fell off the bus"
    # asked again while it waits: nothing more requested, nothing more counted
    (again,) = reboot.reboot([_step("gpu04")], sl, _budget(tmp_path), act=True)
    assert again.outcome == "skipped" and "already requested" in again.detail


def test_a_dry_run_previews_the_budget_and_changes_nothing(clean, tmp_path):
    before = _fields(clean, "gpu04")
    sl = reboot.Rebooter(act=False, env=clean)
    (o,) = reboot.reboot([_step("gpu04")], sl, _budget(tmp_path), act=False)
    assert o.outcome == "planned" and "the budget allows it" in o.detail
    assert o.argv[1:] == ("reboot", "ASAP", "nextstate=RESUME",
                          "reason=stetho: reboot: gpu-off-bus: A GPU at 0000:4c:00.0 fell off "
                          "the bus", "gpu04")
    assert _fields(clean, "gpu04") == before


def test_an_open_breaker_or_no_budget_reboots_nothing(clean, tmp_path):
    before = _fields(clean, "gpu04")
    sl = reboot.Rebooter(act=True, env=clean)
    (o,) = reboot.reboot([_step("gpu04")], sl, NoBudget(), act=True)
    assert o.outcome == "refused" and "no drain budget configured" in o.detail
    tight = _budget(tmp_path, max_pct=1.0, min_nodes=1)
    scope = reboot.Rebooter(act=False, env=clean).cluster_name()
    tight.request(["gpu01"], scope=scope, scope_size=5, who="t", reasons={},
                  now=time.time())
    (o,) = reboot.reboot([_step("gpu04")], sl, tight, act=True)
    assert o.outcome == "refused" and "circuit open" in o.detail, o.detail
    assert _fields(clean, "gpu04") == before


def test_an_unusable_drain_ledger_reboots_nothing(clean, tmp_path):
    before = _fields(clean, "gpu04")
    (tmp_path / "ledger.db").mkdir()  # a folder where the ledger file should be
    (o,) = reboot.reboot([_step("gpu04")], reboot.Rebooter(act=True, env=clean),
                         _budget(tmp_path), act=True)
    assert o.outcome == "refused" and o.detail.startswith("drain budget unusable: ")
    assert _fields(clean, "gpu04") == before


def test_a_persons_drain_is_not_rebooted_over(clean, tmp_path):
    _sc(clean, "update", "NodeName=gpu03", "State=DRAIN", "Reason=RMA 4711 - alice")
    (o,) = reboot.reboot([_step("gpu03")], reboot.Rebooter(act=True, env=clean), NoBudget(),
                         act=True)
    assert o.outcome == "refused" and "RMA 4711 - alice" in o.detail
    f = _fields(clean, "gpu03")
    assert f["Reason"] == "RMA 4711 - alice" and "REBOOT" not in f["State"]


def test_a_node_stetho_drained_keeps_its_first_reason(clean, tmp_path):
    first = "stetho: gpu_xid: Xid 79 on 0000:4c:00.0"
    _sc(clean, "update", "NodeName=gpu03", "State=DRAIN", f"Reason={first}")
    (o,) = reboot.reboot([_step("gpu03")], reboot.Rebooter(act=True, env=clean),
                         _budget(tmp_path), act=True)
    assert o.outcome == "done", o.detail
    f = _fields(clean, "gpu03")
    assert f["Reason"].startswith(first + " | reboot: gpu-off-bus"), f
    assert _reboot_asked(f["State"]), f


def test_reboot_from_the_cli_on_a_simulated_node(clean, tmp_path):
    """A simulated node named as a Slurm node (gpu04, Xid 79) is rebooted by `stetho remedy
    --act`, behind the drain ledger STETHO_DRAIN_LEDGER names."""
    sim, run = tmp_path / "sim", tmp_path / "run"
    env = {**os.environ, **clean, "STETHO_DRAIN_LEDGER": str(tmp_path / "ledger.db")}

    def stetho(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "stetho", *args], capture_output=True,
                              text=True, timeout=300, env=env)

    assert stetho("sim", "build", str(sim), "--nodes", "4", "--prefix", "gpu",
                  "--fault", "gpu04=xid=79").returncode == 0
    (run / "hosts" / "gpu04").mkdir(parents=True)
    r = stetho("check", "--sim", str(sim / "gpu04"), "--profile", "h100-sxm-8gpu", "-q",
               "--no-history", "--json", str(run / "results.json"),
               "--evidence-out", str(run / "hosts" / "gpu04" / "evidence.json"))
    assert r.returncode == 1, r.stderr
    dry = stetho("remedy", str(run), "--db", str(tmp_path / "h.db"))
    assert dry.returncode == 0, dry.stdout + dry.stderr
    assert "gpu04: gpu-off-bus" in dry.stdout and "-> reboot: planned: dry run, the budget " \
        "allows it" in dry.stdout
    assert "would reboot 1, the drain budget allows 1" in dry.stdout
    assert "REBOOT" not in _fields(clean, "gpu04")["State"]
    act = stetho("remedy", str(run), "--db", str(tmp_path / "h.db"), "--act")
    assert act.returncode == 0, act.stdout + act.stderr
    assert "-> reboot: done: reboot requested" in act.stdout
    f = _fields(clean, "gpu04")
    assert _reboot_asked(f["State"]) and f["NextState"] == "RESUME", f
    assert f["Reason"].startswith("stetho: reboot: gpu-off-bus")


def test_the_dry_run_says_how_many_reboots_the_budget_allows(clean, tmp_path):
    from stetho.cli.remedy import exit_code, render

    tight = _budget(tmp_path, max_pct=1.0, min_nodes=1)  # 17 nodes: 1 may go
    steps = [_step("gpu03"), _step("gpu04")]
    before = [_fields(clean, n) for n in ("gpu03", "gpu04")]
    got = reboot.reboot(steps, reboot.Rebooter(act=False, env=clean), tight, act=False)
    assert [o.outcome for o in got] == ["refused", "refused"]  # all or nothing per request
    assert "circuit open: 2 of 17 nodes would be drained (limit 1)" in got[0].detail
    assert render(got, act=False)[-1] == ("dry run: 2 reboot; would reboot 2, the drain "
                                          "budget allows 0; nothing changed (--act carries "
                                          "it out)")
    assert exit_code(got) == 3
    assert [_fields(clean, n) for n in ("gpu03", "gpu04")] == before
    (one,) = reboot.reboot(steps[:1], reboot.Rebooter(act=False, env=clean), tight, act=False)
    assert one.outcome == "planned" and render([one], act=False)[-1].startswith(
        "dry run: 1 reboot; would reboot 1, the drain budget allows 1")
