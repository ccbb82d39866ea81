"""Every sink reachable from the CLI, end to end in subprocesses as a user runs them: the
node_exporter textfile of check, replay, bench and gate (one file per command in one folder,
--textfile or the config's textfile_dir), run folders with their page, and a simulated node's
history kept out of the default (production) database."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

pytestmark = pytest.mark.xdist_group("faultsim")
PROFILE = "h100-sxm-8gpu"


def stetho(*args: str, env: dict[str, str] | None = None, drop: tuple[str, ...] = (),
           cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k not in drop}
    proc = subprocess.run([sys.executable, "-m", "stetho", *args], capture_output=True,
                          text=True, timeout=300, env={**base, **(env or {})}, cwd=cwd)
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stderr
    return proc


def families(path: Path) -> dict[str, list[tuple[dict[str, str], float]]]:
    return {f.name: [(s.labels, s.value) for s in f.samples]
            for f in text_string_to_metric_families(path.read_text())}


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from stetho.sim.builder import build_node

    root = tmp_path_factory.mktemp("sinksim")
    build_node(root / "idle01", "idle01")
    build_node(root / "busy01", "busy01", ["gpu-job"])
    return root


def test_check_sim_writes_its_textfile_and_keeps_out_of_the_default_history(sim, tmp_path):
    """No STETHO_DB, no --db: the simulated node's run goes to <sim folder>/history.db, and
    the user's default history is never created."""
    node = tmp_path / "simnode"
    from stetho.sim.builder import build_node

    build_node(node, "simnode")
    xdg = tmp_path / "xdg"
    env = {"XDG_DATA_HOME": str(xdg), "XDG_CONFIG_HOME": str(tmp_path / "cfg")}
    tf = tmp_path / "textfile"
    proc = stetho("check", "--sim", str(node), "--profile", PROFILE, "-q", "--textfile",
                  str(tf), env=env, drop=("STETHO_DB", "STETHO_CONFIG"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    fams = families(tf / "stetho-check.prom")
    assert {lb["command"] for lb, _ in fams["stetho_check_status"]} == {"check"}
    assert {lb["node"] for lb, _ in fams["stetho_check_status"]} == {"simnode"}
    assert not (xdg / "stetho" / "history.db").exists()
    from stetho.history.store import History

    with History(node / "history.db") as h:
        assert [k for (k,) in h.conn.execute("SELECT kind FROM runs")] == ["check"]
    explicit = tmp_path / "explicit.db"
    again = stetho("check", "--sim", str(node), "--profile", PROFILE, "-q", "--db",
                   str(explicit), env=env, drop=("STETHO_DB", "STETHO_CONFIG"))
    assert again.returncode == 0 and explicit.is_file()
    with History(node / "history.db") as h:  # --db said otherwise: nothing more here
        assert h.conn.execute("SELECT count(*) FROM runs").fetchone()[0] == 1


def test_replay_out_writes_a_run_folder_with_its_page(fault_bundles, tmp_path):
    run = tmp_path / "RUN"
    proc = stetho("check", "--evidence", str(fault_bundles), "--out", str(run), "-q",
                  env={"STETHO_TEXTFILE_DIR": str(tmp_path / "tf")})
    assert proc.returncode == 1, proc.stdout + proc.stderr
    for name in ("results.json", "junit.xml", "summary.json", "summary.txt", "index.html"):
        assert (run / name).is_file(), name
    page = (run / "index.html").read_text()
    assert 'data-node="clocks" data-worst="fail"' in page
    assert json.loads((run / "results.json").read_text())["exit_code"] == 1
    # the config's textfile_dir (here its variable) is --textfile's default: "replay" label
    fams = families(tmp_path / "tf" / "stetho-replay.prom")
    assert {lb["command"] for lb, _ in fams["stetho_run_timestamp_seconds"]} == {"replay"}
    assert not (tmp_path / "tf" / "stetho-check.prom").exists()


def test_bench_run_writes_its_textfile_and_all_shows_why_benchmarks_skipped(sim, tmp_path):
    tf = tmp_path / "tf"
    args = ("bench", "run", "--suite", "nightly", "--sim", str(sim / "busy01"), "--profile",
            PROFILE, "--no-history", "--textfile", str(tf))
    env = {"STETHO_BUSY_PROBE": "gpu", "COLUMNS": "200"}
    grouped = stetho(*args, env=env)
    assert grouped.returncode == 0, grouped.stdout + grouped.stderr
    fams = families(tf / "stetho-bench.prom")
    assert {lb["command"] for lb, _ in fams["stetho_check_status"]} == {"bench"}
    burn = [v for lb, v in fams["stetho_check_status"] if lb["subject"] == "gpu-burn"
            and lb["check"] == "bench_verdict"]
    assert burn == [4.0]  # skip: the node is busy
    assert "node busy (GPU process 100477" not in grouped.stdout
    every = stetho(*args, "--all", env=env)
    assert every.returncode == 0 and "node busy (GPU process 100477" in every.stdout


@pytest.mark.parametrize("node, code", [("healthy", 0), ("clocks", 1)])
def test_gate_local_writes_its_textfile_and_run_folder_on_every_run(fault_cluster, tmp_path,
                                                                   node, code):
    sim = fault_cluster / node
    env = {"STETHO_SYSROOT": str(sim / "sysroot"), "PATH": f"{sim / 'bin'}:{os.environ['PATH']}",
           "STETHO_DB": str(tmp_path / "h.db"), "STETHO_PROFILE": PROFILE}
    out, tf = tmp_path / "runs", tmp_path / "tf"
    proc = stetho("gate", "--local", "--policy", "pre-job", "--node", node, "--out", str(out),
                  "--textfile", str(tf), env=env)
    assert proc.returncode == code, proc.stdout + proc.stderr
    (folder,) = out.glob("gate-*")
    page = (folder / "index.html").read_text()
    assert f'data-node="{node}"' in page
    doc = json.loads((folder / "results.json").read_text())
    assert doc["exit_code"] == code and doc["blocked"] == ([node] if code else [])
    assert f"run folder: {folder}" in proc.stdout
    if code:
        (report,) = folder.glob("reports/*.md")
        assert report.relative_to(folder).as_posix() in page  # the page links the report
    fams = families(tf / "stetho-gate.prom")
    assert fams["stetho_gate_blocked"] == [
        ({"command": "gate", "policy": "pre-job", "mode": "enforce", "node": node},
         float(code))]
    assert {lb["command"] for lb, _ in fams["stetho_check_status"]} == {"gate"}
