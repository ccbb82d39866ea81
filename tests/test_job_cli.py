"""`stetho job`'s usage errors, as a user meets them: each names what is wrong and how to fix
it, exit 2, no traceback, before Slurm is asked anything (so no Slurm is needed here; the
command against a real Slurm is tests/test_job_slurm.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO


def _stetho(*args: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    # PATH without Slurm: any attempt to ask it would fail with exit 3, not 2
    (tmp_path / "stetho.toml").write_text("")
    env = {"PATH": str(tmp_path), "HOME": str(tmp_path),
           "STETHO_CONFIG": str(tmp_path / "stetho.toml")}
    return subprocess.run([sys.executable, "-m", "stetho", "job", *args], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=60)


def test_the_command_is_registered_with_its_help(tmp_path: Path) -> None:
    r = _stetho("--help", tmp_path=tmp_path)
    assert r.returncode == 0
    for flag in ("--db", "--topology", "--margin", "--steps", "--nccl-log", "--json"):
        assert flag in r.stdout


@pytest.mark.parametrize("args,says", [
    (["12;reboot"], "job id '12;reboot': expected digits"),
    (["12", "--margin", "soon"], "--margin 'soon': expected a duration"),
    (["12", "--nccl-log", "x.log"], "--nccl-log maps the ranks of --steps"),
    (["12", "--steps", "/nonexistent/steps.csv"], "--steps /nonexistent/steps.csv: cannot "
                                                  "read it"),
])
def test_usage_errors_are_named_exit_2(args: list[str], says: str, tmp_path: Path) -> None:
    r = _stetho(*args, tmp_path=tmp_path)
    assert r.returncode == 2, r.stdout + r.stderr
    assert says in r.stderr and "Traceback" not in r.stderr


def test_a_garbage_topology_names_the_file_and_line(tmp_path: Path) -> None:
    topo = tmp_path / "topology.conf"
    topo.write_text("SwitchName=leafA Nodes=n[01-02]\n\x00\xff garbage\n")
    r = _stetho("12", "--topology", str(topo), tmp_path=tmp_path)
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"--topology {topo}: topology.conf line 2: no SwitchName=" in r.stderr


def test_a_garbage_steps_file_names_the_file_and_line(tmp_path: Path) -> None:
    steps = tmp_path / "steps.csv"
    steps.write_bytes(b"rank,step,seconds\n0,0,1.0\n\x00\x01\x02\n")
    r = _stetho("12", "--steps", str(steps), tmp_path=tmp_path)
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"{steps} line 3" in r.stderr


def test_without_slurm_it_cannot_evaluate(tmp_path: Path) -> None:
    r = _stetho("12", tmp_path=tmp_path)
    assert r.returncode == 3, r.stdout + r.stderr
    assert "scontrol" in r.stderr and "is Slurm installed here?" in r.stderr
