"""What `sweep --via slurm` makes of Slurm's node states (stetho.fleet.slurm_nodes): only a
plain idle node is checked; busy, drained, down and anything unreadable are listed with why,
never checked and never a crash. The lines are the shape `scontrol show node -o` prints
(Slurm 22.05, from the test cluster)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from stetho.fleet import slurm_nodes as sn

LINE = ("NodeName={name} Arch=x86_64 CoresPerSocket=1 CPUAlloc=0 CPUEfctv=1 CPUTot=1 "
        "AvailableFeatures=(null) NodeAddr=198.18.5.2 NodeHostName={name} Version=22.05.8 "
        "OS=Linux 6.18.44 #1 SMP PREEMPT_DYNAMIC @0  RealMemory=1000 State={state} "
        "ThreadsPerCore=1 Partitions=gpu  CfgTRES=cpu=1,mem=1000M{reason}")


def _line(name: str, state: str, reason: str = "") -> str:
    return LINE.format(name=name, state=state,
                       reason=f" Reason={reason} [root@2026-12-06T21:24:41]" if reason else "")


@pytest.mark.parametrize("state,kind", [
    ("IDLE", "check"), ("ALLOCATED", "busy"), ("MIXED", "busy"), ("IDLE+COMPLETING", "busy"),
    ("IDLE+PLANNED", "busy"), ("IDLE+RESERVED", "busy"), ("IDLE+MAINTENANCE+RESERVED", "busy"),
    ("IDLE+DRAIN", "drained"), ("MIXED+DRAIN", "busy"), ("DOWN+DRAIN", "drained"),
    ("IDLE+FAIL", "drained"), ("DOWN*", "down"), ("IDLE*", "down"), ("IDLE~", "down"),
    ("IDLE+POWERED_DOWN", "down"), ("DOWN", "down"), ("FUTURE", "down"),
    ("UNKNOWN", "unknown"), ("IDLE+SOMETHING_NEW", "unknown"), ("BOGUS", "unknown"),
    ("", "unknown"), ("id le", "unknown"), ("IDLE+", "unknown"), ("\x00\x01", "unknown"),
])
def test_each_state_is_classified_and_only_plain_idle_is_checked(state: str, kind: str
                                                                  ) -> None:
    got = sn.classify("n01", state)
    assert got.kind == kind, got
    if kind != "check":
        assert got.why  # listed with Slurm's words


def test_a_maintenance_reservation_checks_its_reserved_idle_nodes() -> None:
    assert sn.classify("n01", "IDLE+MAINTENANCE+RESERVED", reservation="maint").kind == "check"
    assert sn.classify("n01", "MIXED+MAINT", reservation="maint").kind == "busy"
    assert sn.classify("n01", "IDLE+DRAIN+MAINT", reservation="maint").kind == "drained"


def test_the_partitions_nodes_from_scontrol_with_jobs_and_reasons() -> None:
    text = "\n".join([
        _line("n01", "IDLE"), _line("n02", "IDLE+DRAIN", "stetho: gpu_clocks: not locked"),
        _line("n03", "ALLOCATED"), _line("n04", "DOWN*", "Not responding"),
        "Node n09 not found", "garbage line with no key",
        "NodeName=n05 Arch=x86_64 CPUTot=1",  # no State
    ])
    jobs = sn.parse_jobs("17 n03\n18_2 n[03,06]\n")
    nodes = sn.parse_nodes(text, ["n01", "n02", "n03", "n04", "n05", "n06"], jobs=jobs)
    assert {n: s.kind for n, s in nodes.items()} == {
        "n01": "check", "n02": "drained", "n03": "busy", "n04": "down", "n05": "unknown",
        "n06": "unknown"}
    assert nodes["n03"].why == "jobs 17, 18_2 running" and nodes["n03"].jobs == ("17", "18_2")
    assert "stetho: gpu_clocks: not locked" in nodes["n02"].why
    assert "[root@" not in nodes["n02"].why
    assert "did not describe it" in nodes["n06"].why
    assert "no State" in nodes["n05"].why


def test_a_reason_cannot_forge_a_state() -> None:
    """The free-text Reason comes after State: text in it is never read as a field."""
    line = _line("n01", "IDLE+DRAIN", "x State=IDLE NodeName=n02")
    assert sn.parse_nodes(line, ["n01", "n02"])["n01"].kind == "drained"
    assert sn.parse_nodes(line, ["n01", "n02"])["n02"].kind == "unknown"


@pytest.mark.parametrize("text", ["17\n", "abc n01\n", "17 n[01-\n", "17 n01 extra\n"])
def test_squeue_garbage_is_an_error_naming_the_line(text: str) -> None:
    with pytest.raises(sn.SlurmQueryError, match="squeue"):
        sn.parse_jobs(text)


def test_the_cli_refuses_options_of_the_other_way_in(tmp_path) -> None:
    from stetho.cli import cli

    inv = tmp_path / "inv.yml"
    inv.write_text("all: {}\n")
    runner = CliRunner()
    r = runner.invoke(cli, ["sweep", "--via", "slurm", "--partition", "gpu", "-i", str(inv)])
    assert r.exit_code == 2 and "-i/--inventory: Ansible options" in r.output
    r = runner.invoke(cli, ["sweep", "--partition", "gpu"])
    assert r.exit_code == 2 and "--partition: only with --via slurm" in r.output
    r = runner.invoke(cli, ["sweep", "--via", "slurm"])
    assert r.exit_code == 2 and "--via slurm needs --partition" in r.output
