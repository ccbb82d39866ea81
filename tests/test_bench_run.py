"""`stetho bench`: real fio and iperf3 runs through the CLI into JUnit, history, baselines and
`bench_metric` checks; throttled real runs fail against a full-speed baseline; simulated nodes
run the GPU benchmarks on real recorded outputs; nothing invasive runs on a busy node (real
Slurm job on the testbed, a recorded GPU compute process, a site's busy command)."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from stetho.evidence import busy
from stetho.evidence.bundle import ProbeRecord
from tests import slurm_testbed as testbed

slurm_testbed = testbed.slurm_testbed

needs_tools = pytest.mark.skipif(not (shutil.which("fio") and shutil.which("iperf3")),
                                 reason="fio and iperf3 are not installed (apt-get install fio "
                                 "iperf3; .ci/run does)")

SITE_FIO = """\
name: t-fio-randread
description: small fio random reads for the tests
command: [fio, --name=t, "--filename={tmpdir}/f", --size=8M, --rw=randread, --bs=4k,
          --ioengine=psync, "--runtime={runtime_s}", --time_based, --output-format=json]
defaults:
  runtime_s: 1
parser: fio
metrics:
  - name: read_iops
    field: read_iops
    unit: op/s
    direction: higher
repeats: 3
timeout_s: 60
needs: [idle, "tool:fio"]
invasive: true
suites: [nightly]
"""

SITE_IPERF = """\
name: t-iperf3
description: iperf3 over loopback for the tests
server: [iperf3, -s, -1, -p, "{port}"]
command: [iperf3, -c, "{peer}", -p, "{port}", -t, "{runtime_s}", -J]
defaults:
  runtime_s: 1
parser: iperf3
metrics:
  - name: throughput
    field: receiver_bits_per_second
    unit: bit/s
    direction: higher
repeats: 3
timeout_s: 60
needs: [peer, idle, "tool:iperf3"]
invasive: true
suites: [nightly]
"""

#: A slower node, made with the real tools: iperf3 clients capped at 10 Mbit/s, fio at 50 IOPS.
THROTTLE = {
    "iperf3": '#!/bin/sh\ncase " $* " in *" -c "*) exec {real} "$@" -b 10M ;; esac\n'
              'exec {real} "$@"\n',
    "fio": '#!/bin/sh\ncase " $* " in *" --version "*) exec {real} "$@" ;; esac\n'
           'exec {real} "$@" --rate_iops=50\n',
}


def _stetho(*args: str, env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "stetho", *args], capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, **env})


def _results(path: Path) -> dict[str, dict]:
    return {r["subject"]: r for r in json.loads(path.read_text())["results"]
            if r["check"] == "bench_metric"}


# -- the busy probe: one interpretation for bench, collect and the sweep ----------------------


def test_slurm_jobs_make_the_node_busy() -> None:
    rec = ProbeRecord("busy", "command", "ok", argv=("squeue", "-h", "-w", "gpu01", "-o", "%A"),
                      stdout="1234\n1240\n")
    state = busy.interpret(rec)
    assert state.state == "busy" and state.jobs == ("1234", "1240")
    assert state.skip_reason() == "node busy (jobs 1234, 1240)"


def test_gpu_processes_make_the_node_busy_and_none_is_idle() -> None:
    from stetho.sim.draft import GPU_JOB

    argv = busy.GPU_QUERY
    state = busy.interpret(ProbeRecord("busy", "command", "ok", argv=argv, stdout=GPU_JOB + "\n"))
    assert state.skip_reason() == ("node busy (GPU process 100477 "
                                   "/root/src/llama.cpp/build/bin/llama-server)")
    for idle_out in ("", "No running processes found\n"):
        rec = ProbeRecord("busy", "command", "ok", argv=argv, stdout=idle_out)
        assert busy.interpret(rec).idle


def test_a_probe_that_cannot_answer_is_unknown_never_idle() -> None:
    rec = ProbeRecord("busy", "command", "failed", argv=("squeue", "-h"), rc=1,
                      stderr="slurm_load_jobs error: Unable to contact slurm controller\n",
                      reason="exited 1")
    state = busy.interpret(rec)
    assert state.state == "unknown" and not state.idle
    assert "Unable to contact slurm controller" in state.skip_reason()
    assert "busy_probe" in state.skip_reason()


def test_a_site_busy_command_runs_as_argv(tmp_path: Path, stetho_env) -> None:
    from stetho.evidence.runner import Environment

    script = tmp_path / "jobs-here"
    script.write_text("#!/bin/sh\necho \"job $1\"\n")
    script.chmod(0o755)
    stetho_env.setenv("STETHO_BUSY_PROBE", f"{script} 'a b'")
    state, rec = busy.detect("n1", Environment(path=os.defpath))
    assert rec.argv == (str(script), "a b") and state.jobs == ("job a b",)
    assert state.skip_reason() == "node busy (job job a b)"


# -- real fio and iperf3 through `stetho bench run` -------------------------------------------


@pytest.fixture
def site(tmp_path: Path) -> dict[str, str]:
    folder = tmp_path / "benchmarks"
    folder.mkdir()
    (folder / "t-fio-randread.yml").write_text(SITE_FIO)
    (folder / "t-iperf3.yml").write_text(SITE_IPERF)
    profile = tmp_path / "site.yml"
    profile.write_text("profile: site\nextends: generic\nbench:\n  tolerance_pct: 90\n")
    return {"STETHO_BENCHMARKS": str(folder), "STETHO_BUSY_PROBE": "none",
            "STETHO_DB": str(tmp_path / "history.db"), "PROFILE": str(profile)}


@needs_tools
def test_real_runs_reach_junit_history_baseline_and_a_throttled_run_fails(
        site: dict[str, str], tmp_path: Path) -> None:
    import xml.etree.ElementTree as ET

    profile = site.pop("PROFILE")
    run = ("bench", "run", "--suite", "nightly", "--peer", "127.0.0.1", "--profile", profile,
           "-b", "t-fio-randread", "-b", "t-iperf3")
    full = _stetho(*run, "--evidence-out", str(tmp_path / "full.json"), "--junit",
                   str(tmp_path / "full.xml"), "--json", str(tmp_path / "full-r.json"), "-q",
                   env=site)
    assert full.returncode == 0, full.stdout + full.stderr
    first = _results(tmp_path / "full-r.json")
    for key in ("t-fio-randread.read_iops", "t-iperf3.throughput"):
        assert first[key]["status"] == "skip" and "no baseline" in first[key]["message"]
        assert "of 3 runs" in first[key]["message"] and first[key]["value"] > 0
    cases = {c.get("name") for c in ET.parse(tmp_path / "full.xml").getroot().iter("testcase")}
    assert any("t-iperf3.throughput" in name for name in cases), cases
    with sqlite3.connect(site["STETHO_DB"]) as db:
        series = {(s, m) for s, m in db.execute(
            "select subject, metric from series join metrics on metrics.series_id = series.id "
            "where check_name = 'bench_metric'")}
    assert series == {("t-fio-randread", "read_iops"), ("t-iperf3", "throughput")}

    rec = _stetho("bench", "baseline", str(tmp_path / "full.json"), "--profile", profile,
                  "--force", env=site)
    assert rec.returncode == 0, rec.stdout + rec.stderr
    text = Path(profile).read_text()
    assert "t-iperf3.throughput:" in text and "tool.iperf3: iperf 3" in text
    assert "shape: fio --name=t --filename={tmpdir}/f" in text

    shims = tmp_path / "slow-bin"
    shims.mkdir()
    for tool, body in THROTTLE.items():
        (shims / tool).write_text(body.format(real=shutil.which(tool)))
        (shims / tool).chmod(0o755)
    slow_env = {**site, "PATH": f"{shims}:{os.environ['PATH']}"}
    slow = _stetho(*run, "--json", str(tmp_path / "slow.json"), "-q", env=slow_env)
    assert slow.returncode == 1, slow.stdout + slow.stderr
    after = _results(tmp_path / "slow.json")
    for key in ("t-fio-randread.read_iops", "t-iperf3.throughput"):
        assert after[key]["status"] == "fail", after[key]
        assert "against the baseline" in after[key]["message"]


def test_a_noisy_baseline_is_refused_unless_forced(tmp_path: Path) -> None:
    from stetho import profiles
    from stetho.errors import EvaluationError
    from stetho.history import baselines as bl

    profile = tmp_path / "p.yml"
    profile.write_text("profile: p\nextends: generic\n")
    prof = profiles.load(str(profile))
    noisy = bl.BenchEntry("fio-randread-4k.read_iops", 1000.0, "op/s", "fio ...", 12.5, 2,
                          ("node03",))
    m = bl.BenchMeasurement({noisy.key: noisy}, {"kernel": "6.1"}, 2, {})
    with pytest.raises(EvaluationError, match=r"CV 12.5% on node03.*--force"):
        bl.record_bench(prof, m, "runs/x")
    assert "bench" not in profile.read_text()
    bl.record_bench(prof, m, "runs/x", force=True)
    base = profiles.load(str(profile)).bench.baseline["fio-randread-4k.read_iops"]
    assert base.value == 1000.0 and base.cv_pct == 12.5 and base.fingerprint == {"kernel": "6.1"}


# -- simulated nodes: GPU benchmarks on real recorded outputs, and the busy case -------------


@pytest.fixture(scope="module")
def sim_nodes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from stetho.sim.builder import build_node

    root = tmp_path_factory.mktemp("benchsim")
    build_node(root / "idle01", "idle01")
    build_node(root / "busy01", "busy01", ["gpu-job"])
    return root


def test_sim_quick_suite_measures_dcgmi_from_the_recording(sim_nodes: Path,
                                                           tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    proc = _stetho("bench", "run", "--suite", "quick", "--sim", str(sim_nodes / "idle01"),
                   "--profile", "h100-sxm-8gpu", "--json", str(out), "--no-history", "-q",
                   env={})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    got = _results(out)
    assert set(got) == {"dcgmi-diag-r1.failed_tests", "dcgmi-diag-r1.warned_tests"}
    assert got["dcgmi-diag-r1.failed_tests"]["value"] == 0


def test_sim_busy_node_runs_nothing_invasive(sim_nodes: Path, tmp_path: Path) -> None:
    ev = tmp_path / "ev.json"
    out = tmp_path / "r.json"
    proc = _stetho("bench", "run", "--suite", "nightly", "--sim", str(sim_nodes / "busy01"),
                   "--profile", "h100-sxm-8gpu", "--json", str(out), "--evidence-out", str(ev),
                   "--no-history", "-q", env={"STETHO_BUSY_PROBE": "gpu"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    got = _results(out)
    burn = got["gpu-burn.min_gemm_rate"]
    assert burn["status"] == "skip" and burn["message"].startswith("node busy (GPU process 100477")
    bundle = json.loads(ev.read_text())
    ran = [n for n in bundle["probes"] if n.startswith("bench:") and "#" in n]
    assert ran == ["bench:dcgmi-diag-r1#1"]  # the one benchmark that is safe beside a job
    assert bundle["probes"]["nccl_tests"]["status"] == "skipped"  # the profile's live nccl
    assert all(r["status"] != "pass" for k, r in got.items() if not k.startswith("dcgmi-diag-r1"))


def test_sim_idle_node_runs_gpu_benchmarks(sim_nodes: Path, tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    proc = _stetho("bench", "run", "--suite", "nightly", "--sim", str(sim_nodes / "idle01"),
                   "--profile", "h100-sxm-8gpu", "--json", str(out), "--no-history", "-q",
                   "-b", "gpu-burn", "-b", "nvbandwidth", "-b", "nccl-all-reduce",
                   env={"STETHO_BUSY_PROBE": "gpu"})
    got = _results(out)
    assert got["gpu-burn.min_gemm_rate"]["value"] > 1e13, proc.stdout + proc.stderr
    assert got["nvbandwidth.h2d_sum"]["value"] > 1e11
    assert got["nccl-all-reduce.busbw_8g"]["value"] > 1e11


# -- a real Slurm job on the testbed's live node ----------------------------------------------


@pytest.mark.xdist_group("slurm")
def test_real_slurm_job_makes_benchmarks_skip(slurm_testbed: testbed.Testbed,
                                              tmp_path: Path) -> None:
    env = {**os.environ, **slurm_testbed.env}
    node = slurm_testbed.hostname
    sub = subprocess.run(["sbatch", "--parsable", "-p", "local", "-w", node, "-o", "/dev/null",
                          "--wrap", "sleep 300"], env=env, capture_output=True, text=True,
                         timeout=30)
    assert sub.returncode == 0, sub.stderr
    job = sub.stdout.strip().split(";")[0]
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            q = subprocess.run(["squeue", "-h", "-j", job, "-o", "%T"], env=env,
                               capture_output=True, text=True, timeout=30)
            if q.stdout.strip() == "RUNNING":
                break
            time.sleep(0.2)
        assert q.stdout.strip() == "RUNNING", f"job {job} never started: {q.stdout}{q.stderr}"
        (tmp_path / "b").mkdir()
        (tmp_path / "b" / "t-fio-randread.yml").write_text(SITE_FIO)
        out = tmp_path / "r.json"
        proc = _stetho("bench", "run", "--suite", "nightly", "-b", "t-fio-randread",
                       "--node", node, "--json", str(out),
                       "--no-history", "-q",
                       env={**slurm_testbed.env, "STETHO_BUSY_PROBE": "slurm",
                            "STETHO_BENCHMARKS": str(tmp_path / "b")})
        assert proc.returncode == 0, proc.stdout + proc.stderr
        fio = _results(out)["t-fio-randread.read_iops"]
        assert fio["status"] == "skip" and fio["message"] == f"node busy (job {job})"
    finally:
        subprocess.run(["scancel", job], env=env, capture_output=True, timeout=30)
