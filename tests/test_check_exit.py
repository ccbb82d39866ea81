"""`stetho check` exits after its verdict and leaves nothing behind: no xdist worker alive
(one that ignores the exit request is killed), and nothing made or cleaned up in the user's
pytest temporary directories (pytest's exit-time cleanup of /tmp/pytest-of-USER held a
`stetho check -n 2` in shutil.rmtree past 300 s after its summary)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.xdist_group("faultsim")

#: A site check whose worker never exits by itself: its atexit handler blocks.
_STUBBORN = ("import atexit, os, pathlib, threading\n"
             "def test_stubborn_worker(node, facts):\n"
             "    pathlib.Path(__file__).with_name('PID').write_text(str(os.getpid()))\n"
             "    atexit.register(threading.Event().wait)\n")

#: A site check that uses pytest's tmp_path (pytest makes its base temporary directory).
_USES_TMP = ("def test_uses_tmp(node, facts, tmp_path):\n"
             "    (tmp_path / 'scratch').write_text('x')\n")


def _site(root: Path, body: str) -> Path:
    site = root / "site"
    site.mkdir()
    (site / "conftest.py").write_text("stetho_checks = True\n")
    (site / "test_site.py").write_text(body)
    return site


def _check(evidence: Path, site: Path, cwd: Path, *extra: str,
           env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "stetho", "check", "--evidence", str(evidence),
                           "--checks", str(site), "--json", str(cwd / "r.json"), "-q", *extra],
                          capture_output=True, text=True, timeout=300, cwd=cwd,
                          env=env or dict(os.environ))


def _alive(pid: int) -> bool:
    """The process runs (a zombie or a reused pid running something else is not it)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z" and b"exec(eval(sys.stdin.readline()))" in cmdline


def test_a_worker_that_ignores_the_exit_request_does_not_outlive_the_run(fault_bundles,
                                                                          tmp_path):
    site = _site(tmp_path, _STUBBORN)
    proc = _check(fault_bundles / "healthy.json", site, tmp_path, "-n", "2")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "1 node, " in proc.stdout and " 0 fail" in proc.stdout
    pid = int((site / "PID").read_text())
    assert not _alive(pid), f"worker {pid} outlived the run"


@pytest.mark.parametrize("workers", [None, "2"], ids=["serial", "xdist"])
def test_a_run_leaves_the_users_pytest_temp_alone(fault_bundles, tmp_path, workers):
    """Another pytest run's leftovers under $TMPDIR/pytest-of-USER stay; the check makes no
    numbered directory there and leaves none of its own."""
    site = _site(tmp_path, _USES_TMP)
    tmp = tmp_path / "tmp"
    theirs = tmp / "pytest-of-someone"
    (theirs / "garbage-0123").mkdir(parents=True)
    (theirs / "garbage-0123" / "keep").write_text("another run's")
    for n in range(5):
        (theirs / f"pytest-{n}").mkdir()
    env = {**os.environ, "TMPDIR": str(tmp), "PYTEST_DEBUG_TEMPROOT": str(tmp),
           "USER": "someone", "LOGNAME": "someone"}
    proc = _check(fault_bundles / "healthy.json", site, tmp_path,
                  *(["-n", workers] if workers else []), env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    rows = json.loads((tmp_path / "r.json").read_text())["results"]
    assert [r["status"] for r in rows if r["check"] == "uses_tmp"] == ["pass"]
    assert sorted(p.name for p in tmp.iterdir()) == ["pytest-of-someone"]
    assert sorted(p.name for p in theirs.iterdir()) == \
        ["garbage-0123", *(f"pytest-{n}" for n in range(5))]
    assert (theirs / "garbage-0123" / "keep").read_text() == "another run's"
