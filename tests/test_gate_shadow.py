"""Shadow mode: a `mode: shadow` policy named by the enforcing one is evaluated beside it on
the same results and recorded in history and the textfile, and it blocks nothing: the exit
code and the drains (through the recording stand-in scontrol) are the enforcing policy's."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from stetho.history import decisions
from stetho.history.store import History, NodeRun
from stetho.results import Result
from tests import slurm_testbed as testbed

NODES = testbed.FAKE_NODES  # gpu01..gpu04


def stetho(*args, env=None):
    return subprocess.run([sys.executable, "-m", "stetho", *args], capture_output=True,
                          text=True, timeout=300, env={**os.environ, **(env or {})})


def _row(node: str, temp: float, governor: str) -> NodeRun:
    return NodeRun(node, "p", [
        Result(node, "gpu_temperature", "gpu0", "pass", "under the limit", temp, "C"),
        Result(node, "cpu_governor", "", governor, "governor is " + (
            "performance" if governor == "pass" else "powersave"))], [])


@pytest.fixture
def site(tmp_path):
    gates = tmp_path / "gates"
    gates.mkdir()
    common = "checks: [gpu_temperature, cpu_governor]\nblock_on: [fail]\nfreshness: 6h\n"
    (gates / "enf.yml").write_text(f"policy: enf\n{common}shadow: [tight]\n")
    (gates / "tight.yml").write_text(f"policy: tight\nmode: shadow\n{common}"
                                     "tighten:\n  gpu_temperature:\n    max: 80\n")
    db = tmp_path / "h.db"
    with History(db) as h:  # gpu02 runs at 85 C (the check passes it); gpu03's governor fails
        h.record("sweep", "sweep", [_row("gpu01", 60, "pass"), _row("gpu02", 85, "pass"),
                                    _row("gpu03", 60, "fail"), _row("gpu04", 60, "pass")],
                 when=time.time() - 600)
    fake = testbed.fake_scontrol(tmp_path / "fake")
    env = {**fake.env, "STETHO_GATES": str(gates), "STETHO_CACHE": str(tmp_path / "cache")}
    return {"db": db, "gates": gates, "fake": fake, "env": env, "tmp": tmp_path}


def gate(site, policy="enf", *extra):
    return stetho("gate", "--policy", policy, "--nodes", "gpu[01-04]", "--db",
                  str(site["db"]), "--no-reports", "--out", str(site["tmp"] / "runs"),
                  "--textfile", str(site["tmp"] / "prom"), *extra, env=site["env"])


def test_shadow_blocks_nothing_and_is_recorded(site):
    proc = gate(site, "enf", "--act")
    # enf blocks gpu03 only (its governor): exit 1, one drain; the shadow would also block
    # gpu02 (85 C over its 80) and is only reported.
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "shadow policy tight would have blocked: gpu[02-03] [not acted on]" in proc.stdout
    assert proc.stdout.strip().splitlines()[-1].startswith(
        "gate enf: BLOCKED: 4 nodes, 3 go, 1 blocked (gpu03)")
    drains = [c for c in site["fake"].calls() if "State=DRAIN" in " ".join(c)]
    assert [c[1] for c in drains] == ["NodeName=gpu03"], site["fake"].calls()
    assert site["fake"].nodes()["gpu02"]["state"] != "DRAIN"
    prom = (site["tmp"] / "prom" / "stetho-gate.prom").read_text()
    for policy, mode, node, value in (("tight", "shadow", "gpu02", 1),
                                      ("tight", "shadow", "gpu03", 1),
                                      ("tight", "shadow", "gpu01", 0),
                                      ("enf", "enforce", "gpu02", 0),
                                      ("enf", "enforce", "gpu03", 1)):
        assert (f'stetho_gate_blocked{{command="gate",policy="{policy}",mode="{mode}",'
                f'node="{node}"}} {value}') in prom
    with History(site["db"]) as h:
        kept = decisions.read(h)
        kinds = [r[0] for r in h.conn.execute("SELECT kind FROM runs ORDER BY key")]
    assert kinds == ["sweep", "gate-shadow"]
    assert {(d.node, d.verdict, d.checks) for _, _, d in kept} == {
        ("gpu01", "go", ()), ("gpu02", "block", ("gpu_temperature",)),
        ("gpu03", "block", ("cpu_governor",)), ("gpu04", "go", ())}
    assert {(d.policy, d.mode) for _, _, d in kept} == {("tight", "shadow")}


def test_the_shadow_record_does_not_change_the_next_gate(site):
    """The gate-shadow run has no node_runs rows: the next gate reads the same results and
    says the same thing (a verdict recorded as a result would have hidden or added one)."""
    first = gate(site)
    second = gate(site)
    assert first.returncode == second.returncode == 1
    assert first.stdout.splitlines()[-1] == second.stdout.splitlines()[-1]


def test_a_shadow_policy_is_refused_as_the_gate(site):
    proc = gate(site, "tight")
    assert proc.returncode == 2
    assert "'tight'" in proc.stderr and "is `mode: shadow`" in proc.stderr
    assert "stetho gate replay --policy tight" in proc.stderr and site["fake"].calls() == []


def test_a_broken_shadow_is_a_warning_never_the_verdict(site):
    """A shadow that does not exist, or is not `mode: shadow`, is not evaluated, is said,
    and the gate decides as before."""
    (site["gates"] / "enf.yml").write_text(
        "policy: enf\nchecks: [gpu_temperature, cpu_governor]\nblock_on: [fail]\n"
        "freshness: 6h\nshadow: [missing, enf]\n")
    proc = gate(site)
    assert proc.returncode == 1
    assert "shadow policy missing: unknown gate policy 'missing'" in proc.stderr
    assert "shadow policy enf: policy 'enf'" in proc.stderr and "not `mode: shadow`" \
        in proc.stderr
    assert "would have blocked" not in proc.stdout


def test_a_shadow_needing_an_unrun_check_cannot_evaluate_but_blocks_nothing(site):
    """The shadow needs gpu_ecc, which the gate's results lack: every node is unevaluated
    under it (never GO), and the gate's own verdict is unchanged."""
    (site["gates"] / "tight.yml").write_text(
        "policy: tight\nmode: shadow\nchecks: [gpu_ecc]\nblock_on: [fail]\n")
    proc = gate(site, "enf", "--act")
    assert proc.returncode == 1
    assert ("shadow policy tight would have blocked: no node (could not evaluate gpu[01-04])"
            in proc.stdout)
    with History(site["db"]) as h:
        assert {d.verdict for _, _, d in decisions.read(h)} == {"unevaluated"}


def test_shadow_key_is_validated(site):
    (site["gates"] / "odd.yml").write_text("policy: odd\nmode: shadow\nshadow: [x]\n")
    proc = stetho("gate", "replay", "--policy", "odd", "--db", str(site["db"]),
                  env=site["env"])
    assert proc.returncode == 2 and "odd.yml:3" in proc.stderr
    assert "a shadow policy cannot name shadows" in proc.stderr
