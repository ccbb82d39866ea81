"""A pre-job gate decided from history imports only what it uses (issues 31 and 32): no
template engine for its page, no diagnosis engine on a GO gate, no Ansible, no pytest, no
sqlite-utils, not the profiles' schema, not the override records without an override
repository. In a real subprocess over a real history file; no timing here (bench/gate.py
measures that)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from stetho.core.profile_name import DEFAULT_PROFILE
from stetho.gate.decision import required_checks
from stetho.gate.policy import load as load_policy
from stetho.history.store import History, NodeRun
from stetho.results import Result
from tests.test_cli_lazy import _SHOW_MODULES  # stetho run printing what it imported

#: Never imported by `stetho gate --policy pre-job --nodes ...` on a GO gate.
NOT_ON_A_GO_GATE = ("jinja2", "ansible", "ansible_runner", "pytest", "_pytest", "xdist",
                    "sqlite_utils", "requests", "rich", "stetho.diagnosis", "stetho.profiles",
                    "stetho.sinks.runpage", "stetho.gate.overrides", "stetho.gate.override_store",
                    "stetho.gate.signatures",
                    "stetho.fleet.sweep", "stetho.checking.plugin", "stetho.checking.run",
                    "stetho.localize", "stetho.jobs",
                    # the standard library's heavier modules, each replaced by a few lines
                    # on the gate's path (shutil's which, tempfile's mkstemp, html's escape)
                    "shutil", "tempfile", "html", "bz2", "lzma", "getpass",
                    # what a result JSON cannot hold: only where one does (the gate's page
                    # and results.json check for it without it)
                    "stetho.sinks.safe", "xml.parsers.expat")


def _history(db: Path, nodes: list[str]) -> None:
    """A fresh passing result of every check pre-job needs, for each node."""
    checks = sorted(required_checks(load_policy("pre-job")))
    with History(db) as h:
        h.record("sweep-1", "sweep", [
            NodeRun(n, "h100-sxm-8gpu", [Result(n, c, "", "pass", "ok") for c in checks], [])
            for n in nodes], when=time.time() - 60)


def _gate(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    stub = tmp_path / "bin"  # the dry run asks scontrol about the nodes: one that knows none
    stub.mkdir(exist_ok=True)
    (stub / "scontrol").write_text("#!/bin/sh\nexit 0\n")
    (stub / "scontrol").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith("STETHO_")}
    env.update(PATH=f"{stub}{os.pathsep}{env['PATH']}", HOME=str(tmp_path),
               XDG_CONFIG_HOME=str(tmp_path / "cfg"), STETHO_CACHE=str(tmp_path / "cache"))
    proc = subprocess.run([sys.executable, "-c", _SHOW_MODULES, "gate", "--policy", "pre-job",
                           *args], capture_output=True, text=True, timeout=120, env=env)
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("MODULES ")]
    assert lines, proc.stderr[-2000:]
    return proc, set(json.loads(lines[-1].removeprefix("MODULES ")))


def _heavy(modules: set[str]) -> list[str]:
    return sorted(m for m in modules
                  if any(m == h or m.startswith(h + ".") for h in NOT_ON_A_GO_GATE))


def test_a_go_gate_from_history_imports_nothing_it_does_not_use(tmp_path: Path) -> None:
    db = tmp_path / "h.db"
    _history(db, ["n01", "n02"])
    out = tmp_path / "runs"
    proc, modules = _gate(tmp_path, "--nodes", "n[01-02]", "--db", str(db), "--out", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "GO: 2 nodes, 2 go, 0 blocked" in proc.stdout
    assert _heavy(modules) == []
    # what it did write: the run folder, every node on the page, every result in the JSON
    (folder,) = out.glob("gate-*")
    page = (folder / "index.html").read_text()
    assert 'data-node="n01"' in page and 'data-node="n02"' in page
    doc = json.loads((folder / "results.json").read_text())
    assert doc["exit_code"] == 0
    assert len(doc["results"]) == 2 * len(required_checks(load_policy("pre-job")))


def test_a_blocked_gate_still_writes_its_reports(tmp_path: Path) -> None:
    """The diagnosis engine loads where it is used: a blocked node's report."""
    db = tmp_path / "h.db"
    _history(db, ["n01"])
    with History(db) as h:
        h.record("sweep-2", "sweep", [NodeRun("n01", "h100-sxm-8gpu", [
            Result("n01", "gpu_count", "", "fail", "7 GPUs, expected 8")], [])],
            when=time.time() - 30)
    out = tmp_path / "runs"
    proc, modules = _gate(tmp_path, "--nodes", "n01", "--db", str(db), "--out", str(out))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "stetho.diagnosis.runs" in modules
    (folder,) = out.glob("gate-*")
    (report,) = folder.glob("reports/*.md")
    assert report.relative_to(folder).as_posix() in (folder / "index.html").read_text()


def test_the_fallback_profile_name_is_the_profiles_own() -> None:
    from stetho import profiles

    assert DEFAULT_PROFILE == profiles.DEFAULT_PROFILE
