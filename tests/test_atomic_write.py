"""Whole-or-nothing writes (stetho.core.atomic): a symlink planted under a predictable
temporary name never redirects an output write, through the CLI and the helper itself."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from stetho.core import atomic

pytestmark = pytest.mark.xdist_group("faultsim")  # shares the simulated nodes


def _plant(folder: Path, name: str, victim: Path) -> list[Path]:
    """Symlinks at every temporary name a writer of `name` could have predicted."""
    links = []
    for guess in (f"{name}.tmp", f".{name}.tmp", f".{name}.{os.getpid()}.tmp"):
        link = folder / guess
        link.symlink_to(victim)
        links.append(link)
    return links


def test_collect_does_not_write_through_a_planted_symlink(fault_cluster: Path,
                                                          tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    out = tmp_path / "out"
    out.mkdir()
    _plant(out, "bundle.json", victim)
    proc = subprocess.run([sys.executable, "-m", "stetho", "collect", "--sim",
                           str(fault_cluster / "healthy"), "-o", str(out / "bundle.json")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert victim.read_text() == "precious\n"
    bundle = out / "bundle.json"
    assert not bundle.is_symlink() and json.loads(bundle.read_text())["schema"] == \
        "stetho.evidence"


def test_the_helper_never_follows_a_planted_link_and_leaves_no_temporary(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    links = _plant(tmp_path, "report.md", victim)
    target = atomic.write(tmp_path / "report.md", ["# one\n", "two\n"], fsync=True)
    assert target.read_text() == "# one\ntwo\n" and victim.read_text() == "precious\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["victim.txt", "report.md", *(p.name for p in links)])
    # A symlink at the target itself is replaced, not written through.
    (tmp_path / "state.json").symlink_to(victim)
    atomic.write(tmp_path / "state.json", b"{}", mode=0o600)
    assert victim.read_text() == "precious\n"
    st = (tmp_path / "state.json").lstat()
    assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600
    # Default mode: what open() would make (0666 less the umask), readable by a web server.
    mask = os.umask(0o022)
    os.umask(mask)
    assert stat.S_IMODE(target.stat().st_mode) == 0o666 & ~mask


def test_a_temporary_name_already_taken_is_never_written_through(tmp_path, monkeypatch):
    """The temporary file is created O_EXCL|O_NOFOLLOW: a file or a symlink already at the
    name drawn (planted, or another writer's) is left alone and another name drawn."""
    victim = tmp_path / "victim"
    victim.write_text("keep")
    taken = tmp_path / ".out.json.000000000000.tmp"
    taken.symlink_to(victim)
    draws = iter([bytes(6), bytes(6), b"\x01" * 6])
    monkeypatch.setattr(atomic.os, "urandom", lambda n: next(draws))
    atomic.write(tmp_path / "out.json", "{}")
    assert (tmp_path / "out.json").read_text() == "{}" and victim.read_text() == "keep"
    assert taken.is_symlink() and sorted(p.name for p in tmp_path.iterdir()) == [
        ".out.json.000000000000.tmp", "out.json", "victim"]
