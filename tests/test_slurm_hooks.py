"""`stetho gate --local --slurm health-check|prolog` on a simulated node, draining the real
slurmd node of a localhost Slurm (health-check) or only exiting non-zero (prolog)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from stetho.gate.slurm import Slurm
from tests import slurm_testbed as testbed

slurm_testbed = testbed.slurm_testbed


def _gate(sim: Path, tmp_path: Path, node: str, mode: str, extra: dict[str, str] | None = None,
          path_first: str = "") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "STETHO_SYSROOT": str(sim / "sysroot"),
           "PATH": f"{path_first}{sim / 'bin'}:{os.environ['PATH']}",
           "STETHO_DB": str(tmp_path / "h.db"), "STETHO_PROFILE": "h100-sxm-8gpu",
           "STETHO_GATE_OUT": str(tmp_path / "runs"), **(extra or {})}
    return subprocess.run([sys.executable, "-m", "stetho", "gate", "--local", "--slurm", mode,
                           "--policy", "pre-job", "--node", node, "--quiet", "--no-reports"],
                          env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.xdist_group("faultsim")
def test_prolog_exits_non_zero_with_the_reason_and_drains_nothing(fault_cluster, tmp_path):
    fake = testbed.fake_scontrol(tmp_path / "fake", {"clocks": "ALLOCATED"})
    bad = _gate(fault_cluster / "clocks", tmp_path, "clocks", "prolog",
                path_first=f"{tmp_path / 'fake' / 'bin'}:")
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "stetho: gpu_clocks:" in bad.stderr  # what slurmd logs
    assert "BLOCKED" in bad.stdout
    assert fake.calls() == []  # Slurm drains the node itself on a failed prolog
    ok = _gate(fault_cluster / "healthy", tmp_path, "healthy", "prolog")
    assert ok.returncode == 0, ok.stdout + ok.stderr


def test_slurm_mode_needs_local(tmp_path):
    r = subprocess.run([sys.executable, "-m", "stetho", "gate", "--nodes", "n1", "--slurm",
                        "prolog", "--policy", "pre-job", "--db", str(tmp_path / "h.db")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "--slurm goes with --local" in r.stderr


def _hang_bin(tmp_path: Path) -> str:
    hang = tmp_path / "hang"
    hang.mkdir()
    smi = hang / "nvidia-smi"
    smi.write_text("#!/bin/sh\nexec sleep 120\n")
    smi.chmod(0o755)
    return f"{hang}:"


@pytest.mark.xdist_group("slurm")
def test_health_check_drains_resumes_and_times_out_on_real_slurm(
        slurm_testbed, fault_cluster, tmp_path):
    node = slurm_testbed.hostname
    conf = {"SLURM_CONF": slurm_testbed.env["SLURM_CONF"]}
    sl = Slurm(act=True, env=slurm_testbed.env)
    try:
        bad = _gate(fault_cluster / "clocks", tmp_path, node, "health-check", conf)
        assert bad.returncode == 1, bad.stdout + bad.stderr
        info = sl.show([node])[node]
        assert info.drained_by_stetho and info.reason.startswith("stetho: gpu_clocks:"), info

        ok = _gate(fault_cluster / "healthy", tmp_path, node, "health-check", conf)
        assert ok.returncode == 0, ok.stdout + ok.stderr
        assert not sl.show([node])[node].drained

        # a person's drain survives a passing health check
        subprocess.run(["scontrol", "update", f"NodeName={node}", "State=DRAIN",
                        "Reason=RMA 4711"], env={**os.environ, **conf}, check=True, timeout=30)
        ok = _gate(fault_cluster / "healthy", tmp_path, node, "health-check", conf)
        assert ok.returncode == 0 and sl.show([node])[node].reason == "RMA 4711"
        sl_env = {**os.environ, **conf}
        subprocess.run(["scontrol", "update", f"NodeName={node}", "State=RESUME"], env=sl_env,
                       check=True, timeout=30)

        # a hung probe: the watchdog drains the node saying so, before Slurm's 60 s
        hung = _gate(fault_cluster / "healthy", tmp_path, node, "health-check",
                     {**conf, "STETHO_HEALTH_TIMEOUT": "3"}, path_first=_hang_bin(tmp_path))
        assert hung.returncode == 3, hung.stdout + hung.stderr
        assert "COULD NOT EVALUATE" in hung.stdout
        info = sl.show([node])[node]
        assert info.drained_by_stetho and "did not finish in 3 s" in info.reason, info
    finally:
        sl.resume([node])
