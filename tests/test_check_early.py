"""A quiet local check collects its probes in a forked child while it imports the checks
(stetho.check.early); with a progress display it collects in its own process. Both must give
the same verdicts, the same errors and exit codes, and the child must really be the one
that ran the probes (a sim tool records the process that started it)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

#: a healthy node, a failing GPU check, an unparsable tool output, a failing IB counter
NODES = {"healthy": [], "clocks": ["clocks-unlocked"], "garbage": ["garbage=nvidia-smi"],
         "ibsymbol": ["ib-symbol-errors"]}


def _check(node: Path, out: Path, *args: str) -> tuple[int, int, list[tuple[str, ...]], str]:
    """(exit code, the check's pid, results without durations, stderr)."""
    proc = subprocess.Popen([sys.executable, "-m", "stetho", "check", "--local", "--sim",
                             str(node), "--profile", "h100-sxm-8gpu", "--no-history", "--json",
                             str(out), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    _stdout, stderr = proc.communicate(timeout=300)
    rows = json.loads(out.read_text())["results"] if out.exists() else []
    return proc.returncode, proc.pid, sorted(
        tuple(json.dumps(v, sort_keys=True) for k, v in sorted(r.items()) if k != "duration_s")
        for r in rows), stderr


def _spy_on_chronyc(node: Path, log: Path) -> None:
    """The sim's chronyc writes the pid of the process that started it, then answers."""
    tool = node / "bin" / "chronyc"
    real = tool.with_name("chronyc.real")
    tool.rename(real)
    tool.write_text(f'#!/bin/sh\necho "$PPID" >> {log}\nexec {real} "$@"\n')
    tool.chmod(0o755)


@pytest.mark.parametrize("name", sorted(NODES))
def test_a_quiet_check_collects_in_a_child_and_judges_as_a_shown_one(name: str,
                                                                     tmp_path: Path) -> None:
    from stetho.sim.builder import build_node

    node = build_node(tmp_path / name, name, NODES[name])
    log = tmp_path / "chronyc.ppid"
    _spy_on_chronyc(node, log)
    quiet_code, quiet_pid, quiet, _ = _check(node, tmp_path / "quiet.json", "-q")
    started_by_quiet = log.read_text().split()
    log.unlink()
    shown_code, shown_pid, shown, stderr = _check(node, tmp_path / "shown.json")
    started_by_shown = log.read_text().split()
    # the quiet run's probes were started by its collector child, the shown run's by itself
    assert started_by_quiet and started_by_quiet != [str(quiet_pid)]
    assert started_by_shown == [str(shown_pid)], stderr
    assert quiet_code == shown_code and (quiet_code == 0) == (name == "healthy")
    assert len(quiet) > 100 and quiet == shown


def test_a_failure_in_the_collector_child_is_the_checks_own_error(tmp_path: Path) -> None:
    """A collection that raises in the child (here: a sim folder without its bin/) exits as
    the same run collecting in-process does, with the same words."""
    from stetho.sim.builder import build_node

    node = build_node(tmp_path / "broken", "broken")
    for f in (node / "bin").iterdir():
        f.unlink()
    (node / "bin").rmdir()
    quiet_code, _, _, quiet_err = _check(node, tmp_path / "q.json", "-q")
    shown_code, _, _, shown_err = _check(node, tmp_path / "s.json")
    assert quiet_code == shown_code == 2
    assert "not a simulated node folder" in quiet_err
    assert quiet_err.strip().splitlines()[-1] == shown_err.strip().splitlines()[-1]


CHILD = """
import os, signal, sys
from stetho.check.early import Collection
from stetho.errors import ConfigError, EvaluationError

class Odd(Exception):
    def __init__(self, a, b):  # pickles, but does not rebuild from its args
        super().__init__(f"{a}/{b}")

def bad():
    raise ConfigError("profile x: line 3: no such key")

def odd():
    raise Odd(1, 2)

def killed():
    os.kill(os.getpid(), signal.SIGKILL)

for fn in (bad, odd, killed):
    try:
        Collection(fn).bundle()
        print(fn.__name__, "returned")
    except BaseException as exc:
        print(fn.__name__, type(exc).__name__, exc)
print("value", Collection(lambda: {"gpus": 8}).bundle())
"""


def test_the_collector_child_hands_back_its_value_or_its_exception() -> None:
    proc = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "bad ConfigError profile x: line 3: no such key"
    assert lines[1] == "odd EvaluationError Odd: 1/2"
    assert lines[2].startswith("killed EvaluationError the probe collection (process ")
    assert "killed by signal 9" in lines[2]
    assert lines[3] == "value {'gpus': 8}"
