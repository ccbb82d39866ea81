"""A full disk under an output is named (exit 3, "cannot write X: No space left on device")
and the verdict line is still printed: a real 64 KiB tmpfs, filled, and the real CLI."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

PROFILE = "h100-sxm-8gpu"


def stetho(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "stetho", *args], capture_output=True,
                          text=True, timeout=300, env={**os.environ, "STETHO_PROFILE": PROFILE})


@pytest.fixture(scope="module")
def rot(tmp_path_factory):
    """A simulated node whose NVMe disk reports rotational=1 (only disk_rotational fails)."""
    from stetho.sim.builder import build_node

    return build_node(tmp_path_factory.mktemp("sim") / "rot", "rot", ["nvme-rotational"])


@pytest.fixture
def full(tmp_path: Path) -> Iterator[Path]:
    """A 64 KiB tmpfs with no room left (mount needs root: skipped, saying so, without)."""
    mnt = tmp_path / "full"
    mnt.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {proc.stderr.strip() or proc.returncode}")
    try:
        fd = os.open(mnt / "filler", os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            while os.write(fd, b"\0" * 4096):
                pass
        except OSError:
            pass
        finally:
            os.close(fd)
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=True)


def test_evidence_out_on_a_full_disk_keeps_the_verdict(rot, full, tmp_path):
    target = full / "rot.json"
    proc = stetho("check", "--sim", str(rot), "--no-history", "-q",
                  "--evidence-out", str(target), "--json", str(tmp_path / "r.json"))
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert re.fullmatch(r"1 node, \d+ results: 1 fail, 0 error, 0 warn, \d+ skip, \d+ pass\n",
                        proc.stdout), proc.stdout
    assert proc.stderr.strip().splitlines()[-1] == \
        f"stetho: cannot write {target}: No space left on device"
    assert "internal error" not in proc.stderr and "Traceback" not in proc.stderr
    assert (tmp_path / "r.json").is_file()  # the other outputs are still written
    assert sorted(p.name for p in full.iterdir()) == ["filler"]  # no temporary left behind


def test_every_check_output_on_a_full_disk_is_named(rot, full):
    outs = {"--json": full / "r.json", "--junit": full / "j.xml",
            "--textfile": full / "prom"}
    proc = stetho("check", "--sim", str(rot), "--no-history", "-q",
                  *[a for flag, p in outs.items() for a in (flag, str(p))])
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert re.fullmatch(r"1 node, \d+ results: 1 fail.*\n", proc.stdout), proc.stdout
    errors = proc.stderr.strip().splitlines()
    assert f"stetho: cannot write {outs['--json']}: No space left on device" in errors
    assert f"stetho: cannot write {outs['--junit']}: No space left on device" in errors
    assert any(e.startswith(f"stetho: cannot write the textfile {outs['--textfile']}")
               for e in errors), errors


def _sweep_env(rot: Path) -> dict[str, str]:
    """A sweep of this machine (no inventory) that sees the simulated node."""
    return {"STETHO_SYSROOT": str(rot / "sysroot"), "PATH": f"{rot / 'bin'}:{os.environ['PATH']}"}


def sweep(rot: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "stetho", "sweep", "-q", "--no-history",
                           *args], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "STETHO_PROFILE": PROFILE, **_sweep_env(rot)})


def test_sweep_out_on_a_full_disk_is_named_not_an_internal_error(rot, full):
    proc = sweep(rot, "--out", str(full / "runs"))
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert proc.stdout == (f"sweep: COULD NOT EVALUATE: nothing was judged (cannot write "
                           f"{full / 'runs'}: No space left on device)\n")
    assert proc.stderr.strip().splitlines()[-1] == \
        f"stetho: cannot write {full / 'runs'}: No space left on device"


def test_a_sweep_output_on_a_full_disk_keeps_the_verdict(rot, full, tmp_path):
    prom = full / "stetho-sweep.prom"
    proc = sweep(rot, "--out", str(tmp_path / "runs"), "--textfile", str(prom))
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert re.fullmatch(r"1 node, \d+ results: 1 fail, 0 error, 0 warn, \d+ skip, \d+ pass\n",
                        proc.stdout), proc.stdout
    assert proc.stderr.strip().splitlines()[-1] == \
        f"stetho: cannot write {prom}: No space left on device"
    run = next((tmp_path / "runs").iterdir())
    assert (run / "results.json").is_file() and (run / "index.html").is_file()
