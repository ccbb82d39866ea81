"""Configuration from outside (inventory values, policies, hostlists) is validated where it
enters, with file:line, and bounded: a bad value is exit 2 naming it, never a traceback or
memory exhaustion (issue 28)."""

from __future__ import annotations

import os
import resource
import subprocess
import sys

import pytest
import yaml


def stetho(*args, cwd=None):
    def cap_memory() -> None:  # an alias bomb must fail by the bound, not by luck
        resource.setrlimit(resource.RLIMIT_AS, (2 * 2**30, 2 * 2**30))

    return subprocess.run([sys.executable, "-m", "stetho", *args], capture_output=True,
                          text=True, timeout=300, cwd=cwd, preexec_fn=cap_memory,
                          env={**os.environ, "STETHO_GATE_OUT": "gate-runs"})


@pytest.mark.parametrize("var, value", [
    ("stetho_timeout", "abc"), ("stetho_timeout", -5), ("stetho_timeout", 10**30),
    ("stetho_timeout", ".nan"), ("stetho_deadline", [1, 2]), ("stetho_venv", "a\nb"),
])
def test_a_bad_inventory_value_is_named_with_file_and_line(tmp_path, var, value):
    inv = tmp_path / "inventory.yml"
    text = yaml.safe_dump({"all": {"hosts": {"node01": {"ansible_connection": "local"},
                                             "node02": {"ansible_connection": "local",
                                                        var: value}}}})
    if value == ".nan":
        text = text.replace("'.nan'", ".nan")
    inv.write_text(text)
    line = next(i for i, ln in enumerate(text.splitlines(), 1) if var in ln)
    proc = stetho("sweep", "-i", str(inv), "--out", str(tmp_path / "runs"), "--no-history")
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"{inv}:{line}: host node02: {var} must be" in proc.stderr, proc.stderr
    assert not list((tmp_path / "runs").glob("2*/ansible/artifacts"))  # nothing ran


_BOMB = "".join([
    'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n',
    *(f"{n}: &{n} [{','.join(['*' + p] * 9)}]\n"
      for p, n in zip("abcdefgh", "bcdefghi", strict=True)),
])


@pytest.mark.parametrize("text, why", [
    ("policy: ops\nchecks: [gpu_count]\n" + _BOMB, "expands to more than"),
    ("policy: 'x\"y'\nchecks: [gpu_count]\n", "policy name 'x\"y' must be"),
    ("policy: \"a\\nb\"\nchecks: [gpu_count]\n", "policy name 'a\\nb' must be"),
    ("policy: '{{ $labels.node }}'\nchecks: [gpu_count]\n", "policy name"),
    ("policy: ops\ndescription: 'see {{ $value }}'\nchecks: [gpu_count]\n",
     "description must not hold"),
    ("policy: ops\nchecks: " + "[" * 200 + "]" * 200 + "\n", "nested deeper than"),
    ("policy: ops\n? [a, b]\n: 1\nchecks: [gpu_count]\n", "a key must be a plain value"),
])
def test_a_bad_policy_is_a_named_error(tmp_path, text, why):
    policy = tmp_path / "ops.yml"
    policy.write_text(text)
    proc = stetho("gate", "--policy", str(policy), "--nodes", "n1", "--db",
                  str(tmp_path / "h.db"), "--no-reports", cwd=tmp_path)
    assert "Traceback" not in proc.stderr and "MemoryError" not in proc.stderr, proc.stderr
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert str(policy) in proc.stderr and why in proc.stderr, proc.stderr


def test_an_oversized_policy_file_is_not_read(tmp_path):
    policy = tmp_path / "ops.yml"
    policy.write_text("policy: ops\nchecks: [gpu_count]\n" + "# padding\n" * 500_000)
    proc = stetho("gate", "--policy", str(policy), "--nodes", "n1", "--db",
                  str(tmp_path / "h.db"), "--no-reports", cwd=tmp_path)
    assert proc.returncode == 2 and f"{policy}: larger than 4 MiB" in proc.stderr, proc.stderr


def test_a_hostlist_is_bounded_in_total(tmp_path):
    many = ",".join(f"p{i}[1-999999]" for i in range(4))
    proc = stetho("gate", "--policy", "pre-job", "--nodes", many, "--db",
                  str(tmp_path / "h.db"), "--no-reports", cwd=tmp_path)
    assert "Traceback" not in proc.stderr and "MemoryError" not in proc.stderr, proc.stderr
    assert proc.returncode == 2 and "expands to more than 1000000 names" in proc.stderr, \
        proc.stderr


def test_an_inventory_alias_bomb_is_refused_before_ansible_reads_it(tmp_path):
    inv = tmp_path / "inventory.yml"
    inv.write_text("all:\n  hosts:\n    node01:\n      ansible_connection: local\n  vars:\n"
                   + "".join("    " + line + "\n" for line in _BOMB.splitlines()))
    proc = stetho("sweep", "-i", str(inv), "--out", str(tmp_path / "runs"), "--no-history")
    assert "Traceback" not in proc.stderr and "MemoryError" not in proc.stderr, proc.stderr
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"{inv}: expands to more than 200000 values" in proc.stderr, proc.stderr
