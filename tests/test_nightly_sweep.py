"""The nightly sweep as shipped: the cron line, the systemd unit and the workflow all run the
`nightly` benchmark suite with a computed per-host timeout their own limits cover, the README
quotes them as they are, and the cron line itself, run over simulated nodes behind a real
sshd, runs `dcgmi diag -r 2` on the idle nodes, skips the busy one by name, fails the node
whose dcgmi diag fails and names the benchmark that regressed against its baseline.

The simulated `dcgmi` (stetho/sim/shims.py) is tested on its own too: the arguments the
benchmark definitions pass, the recorded documents and exit codes, and the ones it refuses.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO

CRON = REPO / "contrib" / "cron" / "stetho-sweep"
UNIT = REPO / "contrib" / "systemd" / "stetho-sweep.service"
WORKFLOW = REPO / ".github" / "workflows" / "nightly.yml"
#: What a scheduler's limit must leave beyond the longest per-host timeout: the wheelhouse
#: build and the installs before the checks start.
INSTALL_MARGIN_S = 1800
GPU_JOB = "node busy (GPU process 100477 /root/src/llama.cpp/build/bin/llama-server)"


# -- the shipped entries and the README -------------------------------------------------------


def cron_file() -> tuple[dict[str, str], list[str]]:
    """contrib/cron/stetho-sweep as cron reads it: its variables, and each job line."""
    env, jobs = {}, []
    for line in CRON.read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        name, eq, value = line.partition("=")
        if eq and re.fullmatch(r"[A-Z_]+", name):
            env[name] = value
        else:
            jobs.append(line)
    return env, jobs


def cron_command() -> str:
    """The job's command: a cron.d line is five time fields, the user, then the command."""
    _, jobs = cron_file()
    (job,) = jobs
    fields = job.split(None, 6)
    assert fields[5] == "stetho", job  # runs as the stetho user
    return fields[6]


def unit_lines() -> dict[str, str]:
    return dict(line.split("=", 1) for line in UNIT.read_text().splitlines()
                if line and not line.startswith(("#", "[")))


def workflow_sweep() -> tuple[int, str]:
    """The sweep job's timeout-minutes and the stetho command line of its sweep step."""
    job = yaml.safe_load(WORKFLOW.read_text())["jobs"]["sweep"]
    (step,) = [s for s in job["steps"] if s.get("id") == "sweep"]
    (line,) = [ln.strip() for ln in step["run"].splitlines() if "stetho sweep" in ln]
    return int(job["timeout-minutes"]), line


def _sweep_args(line: str) -> list[str]:
    argv = shlex.split(line.split(">>", 1)[0].split("&&")[-1])
    return argv[argv.index("sweep"):]


def _readme_block(after: str) -> str:
    text = (REPO / "README.md").read_text()
    start = text.index("```\n", text.index(after)) + 4
    return text[start:text.index("```", start)]


def test_every_shipped_entry_runs_the_nightly_suite_with_a_computed_timeout() -> None:
    lines = {"cron": cron_command(), "systemd": unit_lines()["ExecStart"],
             "workflow": workflow_sweep()[1]}
    for where, line in lines.items():
        args = _sweep_args(line)
        assert args[args.index("--bench") + 1] == "nightly", where
        assert "--timeout" not in args, where  # computed per host, from profile and suite


def test_the_schedulers_limits_cover_the_longest_computed_timeout() -> None:
    """The unit's TimeoutStartSec and the workflow's timeout-minutes outlast the per-host
    timeout the sweep computes for the nightly suite on every shipped profile, plus the
    install: a scheduler that killed the sweep first would lose the night."""
    from stetho.core.resources import shipped
    from stetho.fleet.budget import host_budget

    need = max(host_budget(p.stem, "nightly")[0]
               for p in shipped("baselines").glob("*.yml")) + INSTALL_MARGIN_S
    m = re.fullmatch(r"(\d+)h", unit_lines()["TimeoutStartSec"])
    assert m, "TimeoutStartSec in whole hours"
    assert int(m.group(1)) * 3600 >= need
    minutes, _ = workflow_sweep()
    assert minutes * 60 >= need
    assert minutes * 60 <= 5 * 24 * 3600  # a self-hosted runner's job limit


def test_the_readme_shows_the_shipped_nightly_lines() -> None:
    _, jobs = cron_file()
    assert _readme_block("`contrib/cron/stetho-sweep` (copy it to") == "\n".join(jobs) + "\n"
    unit = unit_lines()
    assert _readme_block("`contrib/systemd/stetho-sweep.service` (with") == (
        f"ExecStart={unit['ExecStart']}\nTimeoutStartSec={unit['TimeoutStartSec']}\n")
    minutes, line = workflow_sweep()
    assert _readme_block("`.github/workflows/nightly.yml` (a self-hosted") == (
        f"timeout-minutes: {minutes}\n{line}\n")


# -- the simulated dcgmi ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def dcgm_nodes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from stetho.sim.builder import build_node

    root = tmp_path_factory.mktemp("dcgmsim")
    build_node(root / "pass01", "pass01")
    build_node(root / "fail01", "fail01", ["dcgm-diag-fail"])
    return root


def _dcgmi(node: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(node / "bin" / "dcgmi"), *args], capture_output=True, text=True,
                          timeout=30)


def test_dcgmi_answers_every_level_the_benchmarks_ask_for(dcgm_nodes: Path) -> None:
    from stetho.benchmarks import spec
    from stetho.benchmarks.verdict import judge_text
    from stetho.sim import shims

    dcgm = [b for b in spec.load_all().values() if b.command[0] == "dcgmi"]
    assert sorted(b.argv()[3] for b in dcgm) == ["1", "2", "3"]
    recorded = {n: (REPO / "fixtures" / "real" / f).read_text()
                for n, f in (("pass01", shims.DCGMI_PASS), ("fail01", shims.DCGMI_FAIL))}
    for bench in dcgm:
        ok = _dcgmi(dcgm_nodes / "pass01", *bench.argv()[1:])
        assert (ok.returncode, ok.stdout) == (0, recorded["pass01"]), bench.name
        assert judge_text("dcgmi_diag", ok.stdout).status == "pass"  # type: ignore[union-attr]
        bad = _dcgmi(dcgm_nodes / "fail01", *bench.argv()[1:])
        assert (bad.returncode, bad.stdout) == (226, recorded["fail01"]), bench.name
        said = judge_text("dcgmi_diag", bad.stdout)
        assert said is not None and said.status == "fail" and "software" in said.summary


@pytest.mark.parametrize("args", [("diag", "--run", "2", "--json"), ("diag", "-j", "-r", "3")])
def test_dcgmi_takes_the_long_options_in_any_order(dcgm_nodes: Path, args: tuple[str, ...]
                                                   ) -> None:
    assert _dcgmi(dcgm_nodes / "pass01", *args).returncode == 0


@pytest.mark.parametrize("args", [
    ("diag", "-r", "4", "-j"),           # no such level
    ("diag", "-r", "1"),                 # the table output: not recorded
    ("diag", "-r"),                      # a level missing
    ("diag", "-j"),
    ("diag", "-r", "1", "-j", "-v"),     # any other option
    ("discovery", "-l"),
    (),
])
def test_dcgmi_refuses_what_it_has_no_recording_for(dcgm_nodes: Path, args: tuple[str, ...]
                                                    ) -> None:
    for node in ("pass01", "fail01"):
        proc = _dcgmi(dcgm_nodes / node, *args)
        assert proc.returncode == 2 and proc.stdout == "", (node, args)
        assert proc.stderr.startswith("simulated dcgmi: unsupported arguments")


def test_bench_run_fails_a_node_whose_dcgmi_diag_fails(dcgm_nodes: Path, tmp_path: Path
                                                      ) -> None:
    """`stetho bench run --suite nightly -b dcgmi-diag-r2`: the README's level on a simulated
    node is a pass, and with the fault a fail quoting the failed test (never skip or error)."""
    rows = {}
    for node, code in (("pass01", 0), ("fail01", 1)):
        out = tmp_path / f"{node}.json"
        proc = subprocess.run(
            [sys.executable, "-m", "stetho", "bench", "run", "--sim", str(dcgm_nodes / node),
             "--profile", "h100-sxm-8gpu", "--suite", "nightly", "-b", "dcgmi-diag-r2",
             "--json", str(out), "--no-history", "-q"], capture_output=True, text=True,
            timeout=300, env={**os.environ, "STETHO_BUSY_PROBE": "gpu"})
        assert proc.returncode == code, proc.stdout + proc.stderr
        rows[node] = {(r["check"], r["subject"]): r
                      for r in json.loads(out.read_text())["results"]}
    assert rows["pass01"][("bench_verdict", "dcgmi-diag-r2")]["status"] == "pass"
    failed = rows["fail01"][("bench_verdict", "dcgmi-diag-r2")]
    assert failed["status"] == "fail" and "software" in failed["message"]


# -- the cron line, run over simulated nodes behind a real sshd --------------------------------

#: night01 healthy, night02 slower all_reduce (regresses against the baseline), night03's
#: dcgmi diag fails, night04 has a job's process on a GPU (busy).
NIGHT = {"night01": [], "night02": ["busbw-drop=20"], "night03": ["dcgm-diag-fail"],
         "night04": ["gpu-job"]}


def _node_tools(folder: Path) -> Path:
    """The node's system tools: this machine's, less fio and squeue. The simulated nodes'
    disks are simulated (fio would measure this machine's disk: fio-* benchmarks skip as
    `fio not installed`), and they run no Slurm (they say whether they are busy from their
    GPUs' compute processes)."""
    folder.mkdir(parents=True, exist_ok=True)
    for d in ("/usr/local/bin", "/usr/bin", "/bin"):
        for exe in sorted(Path(d).iterdir()) if Path(d).is_dir() else ():
            link = folder / exe.name
            if exe.name not in ("fio", "squeue") and not link.is_symlink():
                link.symlink_to(exe)
    return folder


@pytest.fixture(scope="session")
def night(sshd, tmp_path_factory):  # type: ignore[no-untyped-def]
    """The shipped cron command, its paths pointed at a temp folder, over 4 loopback hosts
    sharing one venv; the site profile's nccl-all-reduce baseline recorded from night01 with
    `stetho bench run` and `stetho bench baseline`, as a site does."""
    from stetho.sim.builder import build_node

    root = tmp_path_factory.mktemp("nightly")
    tools = _node_tools(root / "node-tools")
    profile = root / "night-h100.yml"
    profile.write_text("profile: night-h100\nextends: h100-sxm-8gpu\n"
                       "description: the nightly test's site profile\n")
    hosts = {}
    for name, faults in NIGHT.items():
        node = build_node(root / "sim" / name, name, faults)
        hosts[name] = {
            "ansible_host": "127.0.0.1", "ansible_port": sshd.port, "ansible_user": "root",
            "ansible_ssh_private_key_file": str(sshd.client_key),
            "ansible_python_interpreter": "/usr/bin/python3", "stetho_profile": str(profile),
            "stetho_sysroot": str(node / "sysroot"), "stetho_path": f"{node / 'bin'}:{tools}",
            "stetho_venv": str(root / "venv"), "stetho_python": "/usr/bin/python3",
            "stetho_etc": str(root / "etc")}
    env = {**os.environ, "STETHO_BUSY_PROBE": "gpu", "STETHO_CACHE": str(root / "cache")}

    def stetho(*args: str) -> None:
        proc = subprocess.run([sys.executable, "-m", "stetho", *args], capture_output=True,
                              text=True, timeout=300, env=env)
        assert proc.returncode == 0, proc.stdout + proc.stderr

    stetho("bench", "run", "--sim", str(root / "sim" / "night01"), "--profile", str(profile),
           "--suite", "nightly", "-b", "nccl-all-reduce", "--evidence-out",
           str(root / "baseline.json"), "--no-history", "-q")
    stetho("bench", "baseline", str(root / "baseline.json"), "--profile", str(profile))
    inventory = root / "inventory.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": hosts}}))

    paths = {"/opt/stetho-controller/bin/stetho": Path(sys.executable).parent / "stetho",
             "/etc/stetho/inventory.yml": inventory, "/var/lib/stetho": root / "var-lib",
             "/var/log/stetho": root / "var-log"}
    command = cron_command()
    for shipped, here in paths.items():
        assert shipped in command, shipped
        command = command.replace(shipped, str(here))
    for d in ("var-lib", "var-log"):
        (root / d).mkdir()
    cron_env, _ = cron_file()
    proc = subprocess.run([cron_env.get("SHELL", "/bin/sh"), "-c", command], text=True,
                          capture_output=True, timeout=1500,
                          env={**os.environ, **cron_env, "HOME": str(root),
                               "STETHO_CACHE": str(root / "cache"),
                               "STETHO_DB": str(root / "history.db")})
    log = (root / "var-log" / "sweep.log").read_text()
    runs = sorted((root / "var-lib" / "runs").glob("2*"))
    assert runs, log[-3000:] + proc.stderr
    return proc.returncode, log, runs[-1], profile


def _rows(run_dir: Path) -> dict[tuple[str, str, str], dict]:
    return {(r["node"], r["check"], r["subject"]): r
            for r in json.loads((run_dir / "results.json").read_text())["results"]}


def _ran(run_dir: Path, node: str) -> dict[str, dict]:
    """The benchmark repeats the node ran (its evidence's `bench:<name>#<i>` records)."""
    probes = json.loads((run_dir / "hosts" / node / "evidence.json").read_text())["probes"]
    return {k: v for k, v in probes.items() if k.startswith("bench:") and "#" in k}


@pytest.mark.xdist_group("sweep")
def test_the_cron_line_runs_dcgmi_diag_on_the_idle_nodes(night) -> None:
    rc, log, run_dir, profile = night
    assert rc == 1, log[-4000:]  # night02 regressed, night03's dcgmi diag failed
    assert "Traceback" not in log
    from stetho.fleet.budget import host_budget

    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["bench"] == "nightly"
    assert meta["host_timeouts"] == {n: host_budget(str(profile), "nightly")[0] for n in NIGHT}
    rows = _rows(run_dir)
    for node in ("night01", "night02", "night03"):
        ran = _ran(run_dir, node)
        assert ran["bench:dcgmi-diag-r2#1"]["argv"] == ["dcgmi", "diag", "-r", "2", "-j"]
        assert "bench:gpu-burn#1" in ran  # the other invasive GPU benchmarks ran too
    for node in ("night01", "night02"):
        assert rows[(node, "bench_verdict", "dcgmi-diag-r2")]["status"] == "pass"
        fio = rows[(node, "bench_verdict", "fio-randread-4k")]
        assert fio["status"] == "skip" and "fio not installed" in fio["message"]


@pytest.mark.xdist_group("sweep")
def test_the_busy_node_is_skipped_by_name(night) -> None:
    _, log, run_dir, _ = night
    rows = _rows(run_dir)
    ran = _ran(run_dir, "night04")
    assert list(ran) == ["bench:dcgmi-diag-r1#1"]  # the one benchmark safe beside a job
    r2 = rows[("night04", "bench_verdict", "dcgmi-diag-r2")]
    assert (r2["status"], r2["message"]) == ("skip", GPU_JOB)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["busy_nodes"] == {"night04": GPU_JOB}
    assert summary["bench"]["busy"] == {"night04": GPU_JOB}
    assert summary["bench"]["ran"] == ["night01", "night02", "night03"]
    assert "1 busy, invasive benchmarks skipped: night04" in log


@pytest.mark.xdist_group("sweep")
def test_a_failing_dcgmi_diag_is_a_fail_not_a_skip(night) -> None:
    _, _, run_dir, _ = night
    rows = _rows(run_dir)
    for level in ("dcgmi-diag-r1", "dcgmi-diag-r2"):
        r = rows[("night03", "bench_verdict", level)]
        assert r["status"] == "fail" and "software" in r["message"], r
    ran = _ran(run_dir, "night03")
    assert ran["bench:dcgmi-diag-r2#1"]["rc"] == 226  # dcgmi's own exit code, as recorded
    summary = json.loads((run_dir / "summary.json").read_text())
    assert "night03" in summary["failing_nodes"]
    assert summary["bench"]["failed"] == {"dcgmi-diag-r1": ["night03"],
                                          "dcgmi-diag-r2": ["night03"]}


@pytest.mark.xdist_group("sweep")
def test_the_night_says_what_ran_what_was_busy_and_what_regressed(night) -> None:
    _, log, run_dir, _ = night
    bench = json.loads((run_dir / "summary.json").read_text())["bench"]
    assert bench["regressed"] == {"nccl-all-reduce.avg_busbw": ["night02"],
                                  "nccl-all-reduce.busbw_8g": ["night02"]}
    assert bench["compared"] == 12 and bench["missing"] == []  # 4 metrics x 3 idle nodes
    line = (run_dir / "summary.txt").read_text().splitlines()[1]
    assert line.startswith("nightly suite: ran on 3 of 4 nodes; 1 busy, invasive benchmarks "
                           "skipped: night04; regressed against baselines: "
                           "nccl-all-reduce.avg_busbw (night02), nccl-all-reduce.busbw_8g "
                           "(night02) (of 12 compared, ")
    assert line.endswith("; failed by the tool's own verdict: dcgmi-diag-r1 (night03), "
                         "dcgmi-diag-r2 (night03)")  # its metrics' missing values: said once
    tail = log.splitlines()[-3:]  # the CLI's last lines: the busy nodes, the suite, the folder
    assert tail[1] == line and tail[2].startswith("run folder: ")
    page = (run_dir / "index.html").read_text()
    assert 'id="suite" data-ran="3" data-busy="1" data-hosts="4"' in page
    assert '<li data-busy="night04">night04: node busy (GPU process 100477' in page
    assert '<li data-regressed="nccl-all-reduce.busbw_8g">' in page
    assert '<li data-failed="dcgmi-diag-r2">' in page
    assert 'href="reports/night03' in page  # the failing node links its diagnosis report


# -- the suite's summary, fail closed ---------------------------------------------------------


def test_a_night_without_baselines_never_reads_as_no_regression() -> None:
    from stetho.results import Result
    from stetho.sinks.suite import summarize

    rows = [Result("n1", "bench_metric", "gpu-burn.min_gemm_rate", "skip",
                   "1.2e+13 flop/s (1 run); no baseline for gpu-burn.min_gemm_rate in profile p"),
            Result("n1", "bench_verdict", "gpu-burn", "pass"),
            Result("n2", "bench_verdict", "gpu-burn", "error", "did not finish: timeout"),
            Result("n3", "gpu_count", "", "pass")]
    s = summarize("nightly", rows, ["n1", "n2", "n3", "n4"], {"n4": "node busy (job 7)"})
    assert (s.ran, s.missing, s.compared, s.no_baseline) == (("n1", "n2"), ("n3",), 0, 1)
    assert s.line() == ("nightly suite: ran on 2 of 4 nodes; 1 busy, invasive benchmarks "
                        "skipped: n4; 1 brought back no benchmark result: n3; no metric "
                        "compared against a baseline (1 without one: record them with `stetho "
                        "bench baseline`); could not be judged: gpu-burn (n2)")


def test_the_run_pages_suite_section_escapes_what_nodes_said() -> None:
    from stetho.results import Result
    from stetho.sinks import runpage
    from stetho.sinks.suite import summarize

    evil = '<script>alert(1)</script>'
    rows = [Result("n1", "bench_verdict", "dcgmi-diag-r2", "fail", "x")]
    s = summarize("nightly", rows, ["n1", "n2"], {"n2": f"node busy (job {evil})"})
    page = runpage.render(rows, title="t", suite=s)
    assert evil not in page and "node busy (job &lt;script&gt;" in page
    assert '<li data-failed="dcgmi-diag-r2">dcgmi-diag-r2 failed by the tool' in page
