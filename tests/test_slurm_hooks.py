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


HOOKS = Path(__file__).resolve().parent.parent / "contrib" / "slurm"


def _gate(sim: Path, tmp_path: Path, node: str, mode: str, extra: dict[str, str] | None = None,
          path_first: str = "") -> subprocess.CompletedProcess[str]:
    """The shipped hook itself (contrib/slurm/prolog.sh or healthcheck.sh), as slurmd runs
    it, with this checkout's stetho: the tests cannot drift from what sites install."""
    env = {**os.environ, "STETHO_SYSROOT": str(sim / "sysroot"),
           "PATH": f"{path_first}{sim / 'bin'}:{os.environ['PATH']}",
           "STETHO_DB": str(tmp_path / "h.db"), "STETHO_PROFILE": "h100-sxm-8gpu",
           "STETHO_GATE_OUT": str(tmp_path / "runs"),
           "STETHO": str(Path(sys.executable).parent / "stetho"), "STETHO_POLICY": "pre-job",
           "SLURMD_NODENAME": node, **(extra or {})}
    script = HOOKS / {"prolog": "prolog.sh", "health-check": "healthcheck.sh"}[mode]
    return subprocess.run(["/bin/sh", str(script)], env=env, capture_output=True, text=True,
                          timeout=300)


def _readme_block(after: str) -> str:
    text = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    start = text.index("```\n", text.index(after)) + 4
    return text[start:text.index("```", start)]


def test_the_readme_quotes_the_slurm_conf_lines_sites_and_the_testbed_use():
    lines = (HOOKS / "slurm.conf").read_text()
    assert _readme_block("Slurm runs the gate on the node itself, in `slurm.conf`:") == lines
    settings = dict(testbed.hook_settings())
    for script in ("prolog.sh", "healthcheck.sh"):  # each hook's own header says the same
        text = (HOOKS / script).read_text()
        header = text[text.index("# slurm.conf:\n"):].split("\n#\n", 1)[0].splitlines()[1:]
        pairs = [ln.lstrip("# ").split("#", 1)[0].strip().partition("=") for ln in header]
        assert pairs and all(settings.get(k) == v for k, _, v in pairs), (script, pairs)
        assert f"# contrib/slurm/{script}" in lines


@pytest.mark.xdist_group("slurm")
def test_the_testbeds_slurm_accepts_the_documented_lines(slurm_testbed):
    shown = subprocess.run(["scontrol", "show", "config"], env={**os.environ, **slurm_testbed.env},
                           capture_output=True, text=True, timeout=60, check=True).stdout
    config = {k.strip(): v.strip() for k, _, v in (ln.partition("=") for ln in
                                                      shown.splitlines())}
    assert config["PrologFlags"] == "Alloc"
    assert config["HealthCheckInterval"].split()[0] == "600"
    assert set(config["HealthCheckNodeState"].split(",")) == {"IDLE", "CYCLE"}
    assert "nohold_on_prolog_fail" in config["SchedulerParameters"]
    assert config["HealthCheckProgram"] == config["Prolog"] == "/bin/true"


@pytest.mark.xdist_group("faultsim")
def test_prolog_drains_its_node_with_stethos_reason_then_exits_non_zero(fault_cluster,
                                                                        tmp_path):
    fake = testbed.fake_scontrol(tmp_path / "fake", {"clocks": "ALLOCATED"})
    bad = _gate(fault_cluster / "clocks", tmp_path, "clocks", "prolog",
                path_first=f"{tmp_path / 'fake' / 'bin'}:")
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "stetho: gpu_clocks:" in bad.stderr  # what slurmd logs
    assert "BLOCKED" in bad.stdout
    # stetho drains the node with its own reason (Slurm keeps it, not "Prolog error")
    node = fake.nodes()["clocks"]
    assert "DRAIN" in node["state"] and node["reason"].startswith("stetho: gpu_clocks:"), node
    # no shared ledger named: the budget is this node's own, and the hook says so
    assert "is this node's own" in bad.stderr and "STETHO_DRAIN_LEDGER" in bad.stderr
    fake.set_node("clocks", "ALLOCATED")
    shared = _gate(fault_cluster / "clocks", tmp_path, "clocks", "prolog",
                   {"STETHO_DRAIN_LEDGER": str(tmp_path / "shared" / "ledger.db")},
                   path_first=f"{tmp_path / 'fake' / 'bin'}:")
    assert shared.returncode == 1, shared.stdout + shared.stderr
    assert "this node's own" not in shared.stderr
    ok = _gate(fault_cluster / "healthy", tmp_path, "healthy", "prolog")
    assert ok.returncode == 0, ok.stdout + ok.stderr


@pytest.mark.xdist_group("faultsim")
def test_health_check_says_scheduler_not_dry_run_for_the_drain_it_performs(fault_cluster,
                                                                          tmp_path):
    fake = testbed.fake_scontrol(tmp_path / "fake", {"clocks": "IDLE"})
    sim = fault_cluster / "clocks"
    env = {**os.environ, "STETHO_SYSROOT": str(sim / "sysroot"),
           "PATH": f"{tmp_path / 'fake' / 'bin'}:{sim / 'bin'}:{os.environ['PATH']}",
           "STETHO_DB": str(tmp_path / "h.db"), "STETHO_PROFILE": "h100-sxm-8gpu"}
    r = subprocess.run([sys.executable, "-m", "stetho", "gate", "--local", "--slurm",
                        "health-check", "--policy", "pre-job", "--node", "clocks",
                        "--no-reports", "--out", str(tmp_path / "runs")],
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 1, r.stdout + r.stderr
    node = fake.nodes()["clocks"]
    assert "DRAIN" in node["state"], node  # the drain happened ...
    assert "SCHEDULER drain clocks:" in r.stdout  # ... and stdout says so
    assert "DRY RUN" not in r.stdout + r.stderr


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


_RACE = r"""
import sys, time
from pathlib import Path
from stetho import spool
from stetho.gate import slurm_hooks

def slow_prolog_exit(node):      # the watchdog's drain and Slurm query take their time
    time.sleep(1.5)
    return 0

slurm_hooks.prolog_exit = slow_prolog_exit
folder = Path(sys.argv[1])
with slurm_hooks.watchdog("gpu1", 0.2, drain=False, prolog=True, spool=folder):
    time.sleep(0.6)              # the checks end while the watchdog is still at work
print("body went on", flush=True)
slurm_hooks.spool_verdict(folder, {"results": [], "exit_code": 0}, "gpu1", "prolog", "",
                          "go", time.time())
"""


def test_a_watchdog_that_fired_keeps_the_only_verdict_when_the_checks_end_meanwhile(tmp_path):
    """The checks finishing while the watchdog drains must not spool a second verdict for the
    same run: the watchdog fired, so its could-not-evaluate verdict is the run's one."""
    folder = tmp_path / "spool"
    done = subprocess.run([sys.executable, "-c", _RACE, str(folder)], capture_output=True,
                          text=True, timeout=120,
                          env={**os.environ, "STETHO_RESULT_SPOOL": str(folder)})
    assert "body went on" not in done.stdout, done.stdout
    assert "COULD NOT EVALUATE gpu1" in done.stdout
    files = sorted(folder.glob("gpu1/*.json"))
    assert len(files) == 1, files
    assert b"could_not_evaluate" in files[0].read_bytes()
