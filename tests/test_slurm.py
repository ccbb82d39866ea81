"""stetho.gate.slurm: drain what the gate blocks, resume only stetho's own drains.

Three layers: the pure helpers and the parser (on lines recorded from a real slurmctld 22.05),
the Slurm class against a recording stand-in `scontrol` (runs everywhere; asserts the exact
argv), and the same class against a real slurmctld on localhost (skips, saying why, where
Slurm cannot be started).
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from stetho.errors import ConfigError, StethoError
from stetho.gate import slurm as S
from tests import slurm_testbed as testbed

# the session fixtures, under their own names (pytest finds them in this module's namespace)
slurm_testbed = testbed.slurm_testbed
slurm = testbed.slurm

# -- lines recorded from a real slurmctld 22.05.8 (tests/slurm_testbed.py), `show node -o` ------

_COMMON = ("CoresPerSocket=1  CPUAlloc=0 CPUEfctv=8 CPUTot=8 CPULoad=N/A AvailableFeatures=(null) "
           "ActiveFeatures=(null) Gres=(null) NodeAddr=127.0.0.2 NodeHostName={n} Port=6899  "
           "RealMemory=64000 AllocMem=0 FreeMem=N/A Sockets=8 Boards=1 State={s} "
           "ThreadsPerCore=1 TmpDisk=0 Weight=10 Owner=N/A MCS_label=N/A Partitions=fake  "
           "BootTime=None SlurmdStartTime=None LastBusyTime=Unknown "
           "CfgTRES=cpu=8,mem=62.50G,billing=8 AllocTRES= CapWatts=n/a CurrentWatts=0 AveWatts=0 "
           "ExtSensorsJoules=n/s ExtSensorsWatts=0 ExtSensorsTemp=n/s")


def _fake_line(name: str, state: str) -> str:
    return f"NodeName={name} " + _COMMON.format(n=name, s=state)


REAL_DOWN = _fake_line("gpu02", "DOWN")
REAL_STETHO = (_fake_line("gpu01", "DOWN+DRAIN")
               + ' Reason=stetho: gpu-xid: Xid 79 "fell off" bus [root@2026-12-02T12:14:32]')
REAL_MULTILINE_REASON = (_fake_line("gpu03", "DOWN+DRAIN")
                         + " Reason=RMA 4711 [root@2026-12-02T12:14:32]        waiting\tfor parts")
REAL_LIVE_PERSON = (
    "NodeName=vm Arch=x86_64 CoresPerSocket=2  CPUAlloc=0 CPUEfctv=2 CPUTot=2 CPULoad=1.78 "
    "AvailableFeatures=(null) ActiveFeatures=(null) Gres=(null) NodeAddr=127.0.0.1 "
    "NodeHostName=vm Version=22.05.8 OS=Linux 6.18.44-fc-v1045 #1 SMP PREEMPT_DYNAMIC @0  "
    "RealMemory=1000 AllocMem=0 FreeMem=23206 Sockets=1 Boards=1 State=IDLE+DRAIN "
    "ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A Partitions=local  "
    "BootTime=2026-12-02T11:00:31 SlurmdStartTime=2026-12-02T12:14:32 "
    "LastBusyTime=2026-12-02T12:14:32 CfgTRES=cpu=2,mem=1000M,billing=2 AllocTRES= "
    "CapWatts=n/a CurrentWatts=0 AveWatts=0 ExtSensorsJoules=n/s ExtSensorsWatts=0 "
    "ExtSensorsTemp=n/s Reason=person maintenance Key=Value [x] [root@2026-12-02T12:14:32]")
REAL_MULTI_FORMAT = """NodeName=gpu03 CoresPerSocket=1 
   CPUAlloc=0 CPUEfctv=8 CPUTot=8 CPULoad=N/A
   NodeAddr=127.0.0.2 NodeHostName=gpu03 Port=6899 
   State=DOWN+DRAIN ThreadsPerCore=1 TmpDisk=0 Weight=10 Owner=N/A MCS_label=N/A
   ExtSensorsJoules=n/s ExtSensorsWatts=0 ExtSensorsTemp=n/s
   Reason=RMA 4711 [root@2026-12-02T12:14:32]
          waiting\tfor parts

NodeName=gpu04 CoresPerSocket=1 
   State=DOWN ThreadsPerCore=1 TmpDisk=0 Weight=10 Owner=N/A MCS_label=N/A

"""  # noqa: W291 (scontrol's own trailing spaces)


# -- reasons and argv ----------------------------------------------------------------------------


def test_drain_reason_is_one_clean_capped_line() -> None:
    assert S.drain_reason("gpu-xid", "Xid 79 on GPU 3") == "stetho: gpu-xid: Xid 79 on GPU 3"
    r = S.drain_reason("nccl\n", 'busbw 310 "GB/s"\nbelow\t\x1b[31m 400\r')
    assert r == "stetho: nccl: busbw 310 'GB/s' below [31m 400"
    assert S.drain_reason("ib", "") == "stetho: ib"
    assert S.drain_reason("x", "\u201csmart\u201d `tick`") == "stetho: x: 'smart' 'tick'"
    long = S.drain_reason("ecc", "word " * 100)
    assert len(long) <= S.MAX_REASON and long.endswith("...") and long.startswith("stetho: ecc: ")


def test_argv() -> None:
    assert S.drain_argv("gpu01", "stetho: a: b c") == [
        "scontrol", "update", "NodeName=gpu01", "State=DRAIN", "Reason=stetho: a: b c"]
    assert S.resume_argv("gpu01") == ["scontrol", "update", "NodeName=gpu01", "State=RESUME"]


@pytest.mark.parametrize("bad", ["gpu01;reboot", "$(reboot)", "gpu`id`", "gpu01 gpu02",
                                 "gpu01|x", "../x", "", "-gpu01", "gpu01\n"])
def test_argv_refuses_shell_metacharacters(bad: str) -> None:
    with pytest.raises(ConfigError, match="invalid node name"):
        S.drain_argv(bad, "stetho: x")
    with pytest.raises(ConfigError, match="invalid node name"):
        S.resume_argv(bad)


# -- parsing -------------------------------------------------------------------------------------


def test_parse_real_lines() -> None:
    text = "\n".join([REAL_STETHO, REAL_DOWN, REAL_MULTILINE_REASON, REAL_LIVE_PERSON,
                      "Node gpu99 not found"]) + "\n"
    got = S.parse_show_node(text)
    assert list(got) == ["gpu01", "gpu02", "gpu03", "vm"]
    assert got["gpu01"] == S.NodeInfo("gpu01", "DOWN+DRAIN",
                                      'stetho: gpu-xid: Xid 79 "fell off" bus', True)
    assert got["gpu01"].drained_by_stetho
    assert got["gpu02"] == S.NodeInfo("gpu02", "DOWN", "", False)
    assert got["gpu03"] == S.NodeInfo("gpu03", "DOWN+DRAIN", "RMA 4711\nwaiting\tfor parts",
                                      True)
    assert got["vm"] == S.NodeInfo("vm", "IDLE+DRAIN", "person maintenance Key=Value [x]", True)
    assert not got["vm"].drained_by_stetho


def test_parse_multi_line_format_and_states() -> None:
    got = S.parse_show_node(REAL_MULTI_FORMAT)
    assert got["gpu03"] == S.NodeInfo("gpu03", "DOWN+DRAIN", "RMA 4711\nwaiting\tfor parts",
                                      True)
    assert got["gpu04"] == S.NodeInfo("gpu04", "DOWN", "", False)
    for state, drained in [("MIXED", False), ("MIXED+DRAIN", True), ("ALLOCATED+DRAIN", True),
                           ("IDLE+NOT_RESPONDING", False), ("DRAINED", True), ("IDLE", False),
                           ("IDLE+DRAIN+NOT_RESPONDING", True), ("DOWN*", False)]:
        assert S.parse_show_node(_fake_line("n1", state))["n1"].drained is drained, state


def test_parse_keys_after_the_reason_stamp() -> None:
    """Later Slurm versions may print keys after the reason: the stamp ends the reason."""
    line = (_fake_line("n1", "MIXED+DRAIN")
            + " Reason=stetho: x: y Z=1 [slurm@2026-01-01T00:00:00] Comment=hello world "
            "Extra=(null)")
    assert S.parse_show_node(line)["n1"].reason == "stetho: x: y Z=1"
    no_stamp = _fake_line("n2", "IDLE+DRAIN") + " Reason=Kill task failed"
    assert S.parse_show_node(no_stamp)["n2"].reason == "Kill task failed"
    assert S.parse_show_node("") == {}
    assert S.parse_show_node("Node gpu99 not found\n") == {}


# -- against the recording stand-in (always runs) ------------------------------------------------


@pytest.fixture
def fake(tmp_path: Path) -> testbed.FakeScontrol:
    return testbed.fake_scontrol(tmp_path / "fake")


def _update(node: str, *rest: str) -> list[str]:
    return ["update", f"NodeName={node}", *rest]


def test_fake_drain_runs_exact_argv(fake: testbed.FakeScontrol) -> None:
    reason = S.drain_reason("gpu-xid", "Xid 79 on GPU 3")
    actions = S.Slurm(act=True, env=fake.env).drain({"gpu01": reason})
    assert fake.calls() == [["show", "node", "-o", "gpu01"],
                            _update("gpu01", "State=DRAIN", f"Reason={reason}")]
    (a,) = actions
    assert a == S.Action("gpu01", "drain",
                         ("scontrol", "update", "NodeName=gpu01", "State=DRAIN",
                          "Reason=stetho: gpu-xid: Xid 79 on GPU 3"),
                         True, a.message)
    assert not a.failed and "drained" in a.message
    assert fake.nodes()["gpu01"] == {"state": "DOWN+DRAIN", "reason": reason}


def test_fake_dry_run_changes_nothing(fake: testbed.FakeScontrol) -> None:
    fake.set_node("gpu02", "IDLE+DRAIN", "stetho: old: reason")
    before = fake.nodes()
    sl = S.Slurm(act=False, env=fake.env)
    drains = sl.drain({"gpu01": "stetho: a: b"})
    resumes = sl.resume(["gpu02"])
    assert fake.nodes() == before
    # only the read-only look at the current state ran
    assert fake.calls() == [["show", "node", "-o", "gpu01"], ["show", "node", "-o", "gpu02"]]
    assert [(a.kind, a.argv, a.done, a.failed) for a in drains + resumes] == [
        ("drain", ("scontrol", *_update("gpu01", "State=DRAIN", "Reason=stetho: a: b")),
         False, False),
        ("resume", ("scontrol", *_update("gpu02", "State=RESUME")), False, False)]
    assert "dry run, would run: scontrol update NodeName=gpu01 State=DRAIN " \
           "'Reason=stetho: a: b'" in drains[0].message


def test_fake_person_drain_left_alone(fake: testbed.FakeScontrol) -> None:
    fake.set_node("gpu02", "DOWN+DRAIN", "RMA ticket 4711 (alice)")
    fake.set_node("gpu03", "DOWN", "cable pulled")  # a person's DOWN, not drained
    sl = S.Slurm(act=True, env=fake.env)
    drains = sl.drain({"gpu02": "stetho: xid: 79", "gpu03": "stetho: xid: 79"})
    resumes = sl.resume(["gpu02"])
    assert [(a.kind, a.argv, a.done, a.failed) for a in drains + resumes] == [
        ("skip", (), False, False)] * 3
    assert "someone else" in drains[0].message and "RMA ticket 4711" in drains[0].message
    assert "left drained" in resumes[0].message
    assert all(c[0] == "show" for c in fake.calls())
    assert fake.nodes()["gpu02"] == {"state": "DOWN+DRAIN", "reason": "RMA ticket 4711 (alice)"}


def test_fake_stetho_redrain_keeps_the_first_reason(fake: testbed.FakeScontrol) -> None:
    """Rewriting the reason would stamp it "now": an old drain would look recent for good."""
    fake.set_node("gpu01", "IDLE+DRAIN", "stetho: old: reason")
    (a,) = S.Slurm(act=True, env=fake.env).drain({"gpu01": "stetho: new: reason"})
    assert (a.kind, a.done, a.failed, a.argv) == ("skip", False, False, ())
    assert "already drained by stetho since 2026-01-02T03:04:05" in a.message
    assert "first reason kept" in a.message
    assert [c for c in fake.calls() if c[0] == "update"] == []
    assert fake.nodes()["gpu01"]["reason"] == "stetho: old: reason"


def test_fake_reason_made_stetho(fake: testbed.FakeScontrol) -> None:
    """A caller's bare reason still gets the prefix (or stetho could never resume it)."""
    (a,) = S.Slurm(act=True, env=fake.env).drain({"gpu01": "bad\nnode"})
    assert a.argv[-1] == "Reason=stetho: bad node"


def test_fake_resume_only_stetho(fake: testbed.FakeScontrol) -> None:
    fake.set_node("gpu01", "DOWN+DRAIN", "stetho: gpu-xid: Xid 79")
    fake.set_node("gpu02", "IDLE+DRAIN", "person's drain")
    fake.set_node("gpu03", "IDLE")
    actions = S.Slurm(act=True, env=fake.env).resume(["gpu01", "gpu02", "gpu03", "gpu01"])
    assert fake.calls() == [["show", "node", "-o", "gpu01,gpu02,gpu03"],
                            _update("gpu01", "State=RESUME")]
    assert [(a.node, a.kind, a.done) for a in actions] == [
        ("gpu01", "resume", True), ("gpu02", "skip", False), ("gpu03", "skip", False)]
    assert "not drained" in actions[2].message
    assert fake.nodes()["gpu01"] == {"state": "IDLE", "reason": ""}
    assert fake.nodes()["gpu02"]["reason"] == "person's drain"


def test_fake_bad_names_refused_before_anything_runs(fake: testbed.FakeScontrol) -> None:
    sl = S.Slurm(act=True, env=fake.env)
    for bad in ["gpu01;reboot", "$(touch /tmp/x)", "gpu01 gpu02", "gpu`id`", "a,b", "gpu01\n"]:
        with pytest.raises(ConfigError, match="invalid node name"):
            sl.drain({"gpu01": "stetho: a", bad: "stetho: b"})
        with pytest.raises(ConfigError, match="invalid node name"):
            sl.resume(["gpu01", bad])
        with pytest.raises(ConfigError, match="invalid node name"):
            sl.show([bad])
    assert fake.calls() == []


def test_fake_unknown_node(fake: testbed.FakeScontrol) -> None:
    sl = S.Slurm(act=True, env=fake.env)
    d = sl.drain({"gpu99": "stetho: a", "gpu01": "stetho: a"})
    r = sl.resume(["gpu99"])
    assert [(a.node, a.failed, a.done) for a in d + r] == [
        ("gpu99", True, False), ("gpu01", False, True), ("gpu99", True, False)]
    assert "does not know" in d[0].message and "gpu99" in d[0].message
    assert fake.calls()[0] == ["show", "node", "-o", "gpu99,gpu01"]


def test_fake_controller_down(fake: testbed.FakeScontrol) -> None:
    sl = S.Slurm(act=True, env={**fake.env, "FAKE_SLURMCTLD_DOWN": "1"})
    for a in sl.drain({"gpu01": "stetho: a", "gpu02": "stetho: a"}) + sl.resume(["gpu01"]):
        assert (a.done, a.failed, a.argv) == (False, True, ())
        assert a.message.startswith(f"{a.node}: not ")
        assert "Unable to contact slurm controller" in a.message
        assert "scontrol show node -o" in a.message
    with pytest.raises(S.SlurmError, match="Unable to contact"):
        sl.show(["gpu01"])
    assert issubclass(S.SlurmError, StethoError)


def test_fake_controller_down_dry_run_still_plans(fake: testbed.FakeScontrol) -> None:
    """A dry run cannot fail anything: it shows its plan and says the state is unknown."""
    sl = S.Slurm(act=False, env={**fake.env, "FAKE_SLURMCTLD_DOWN": "1"})
    (d,) = sl.drain({"gpu01": "stetho: a"})
    (r,) = sl.resume(["gpu01"])
    assert (d.kind, d.done, d.failed) == ("drain", False, False)
    assert d.argv == ("scontrol", *_update("gpu01", "State=DRAIN", "Reason=stetho: a"))
    assert r.argv == ("scontrol", *_update("gpu01", "State=RESUME"))
    assert "unless someone else drained it" in d.message and "if stetho drained" in r.message
    assert "Unable to contact slurm controller" in d.message
    assert [c[0] for c in fake.calls()] == ["show", "show"]


def test_fake_update_refused(fake: testbed.FakeScontrol) -> None:
    sl = S.Slurm(act=True, env={**fake.env, "FAKE_SCONTROL_REFUSE": "1"})
    (a,) = sl.drain({"gpu01": "stetho: a"})
    assert (a.kind, a.done, a.failed) == ("drain", False, True)
    assert "exited 1" in a.message and "Access/permission denied" in a.message
    assert "gpu01" in a.message and "scontrol update NodeName=gpu01" in a.message


def test_fake_timeout(fake: testbed.FakeScontrol) -> None:
    sl = S.Slurm(act=True, env={**fake.env, "FAKE_SCONTROL_SLEEP": "5"}, timeout_s=0.5)
    (a,) = sl.drain({"gpu01": "stetho: a"})
    assert a.failed and "timed out after 0.5s" in a.message


def test_missing_scontrol(tmp_path: Path) -> None:
    sl = S.Slurm(act=True, env={"PATH": str(tmp_path)})
    (a,) = sl.drain({"gpu01": "stetho: a"})
    assert (a.done, a.failed) == (False, True)
    assert "'scontrol' not found on PATH" in a.message and a.message.startswith("gpu01: ")
    (b,) = S.Slurm(act=True, scontrol=str(tmp_path / "nope")).resume(["gpu01"])
    assert b.failed and "does not exist" in b.message
    assert S.Slurm(act=True, env={"PATH": str(tmp_path)}).drain({}) == []
    (c,) = S.Slurm(act=False, env={"PATH": str(tmp_path)}).drain({"gpu01": "stetho: a"})
    assert not c.failed and c.argv[:3] == ("scontrol", "update", "NodeName=gpu01")
    assert "not found on PATH" in c.message


def test_fake_scontrol_path_in_argv(fake: testbed.FakeScontrol) -> None:
    exe = str(fake.folder / "bin" / "scontrol")
    (a,) = S.Slurm(act=True, scontrol=exe).drain({"gpu01": "stetho: a"})
    assert a.done and a.argv[0] == exe


# -- against a real slurmctld on localhost -------------------------------------------------------

real = pytest.mark.xdist_group("slurm")


def _show(env: dict[str, str], node: str) -> str:
    r = subprocess.run(["scontrol", "show", "node", "-o", node], env={**os.environ, **env},
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    return r.stdout


@real
def test_real_testbed_started(slurm_testbed: testbed.Testbed,
                              record_property: pytest.RecordProperty) -> None:
    record_property("slurm_startup_s", round(slurm_testbed.startup_s, 3))
    print(f"real Slurm started in {slurm_testbed.startup_s:.2f}s")
    got = S.Slurm(act=False, env=slurm_testbed.env).show(testbed.FAKE_NODES)
    assert sorted(got) == testbed.FAKE_NODES


@real
def test_real_drain_then_resume(slurm: dict[str, str]) -> None:
    sl = S.Slurm(act=True, env=slurm)
    reason = S.drain_reason("gpu-xid", 'Xid 79 "fallen off the bus"\non GPU 3')
    (a,) = sl.drain({"gpu01": reason})
    assert a.done and not a.failed, a.message
    line = _show(slurm, "gpu01")
    assert re.search(r"\bState=\S*DRAIN\b", line), line
    assert f"Reason={reason} [" in line
    assert sl.show(["gpu01"])["gpu01"] == S.NodeInfo("gpu01", "DOWN+DRAIN", reason, True)

    (r,) = sl.resume(["gpu01"])
    assert (r.kind, r.done, r.failed) == ("resume", True, False), r.message
    info = sl.show(["gpu01"])["gpu01"]
    assert not info.drained and "DRAIN" not in _show(slurm, "gpu01").split("State=")[1].split()[0]
    (again,) = sl.resume(["gpu01"])
    assert again.kind == "skip" and "not drained" in again.message


@real
def test_real_person_drain_left_alone(slurm: dict[str, str]) -> None:
    person = "RMA ticket 4711 - alice"
    subprocess.run(["scontrol", "update", "NodeName=gpu02", "State=DRAIN", f"Reason={person}"],
                   env={**os.environ, **slurm}, check=True, timeout=30)
    sl = S.Slurm(act=True, env=slurm)
    (d,) = sl.drain({"gpu02": S.drain_reason("ib", "port down")})
    (r,) = sl.resume(["gpu02"])
    assert (d.kind, d.done, r.kind, r.done) == ("skip", False, "skip", False)
    assert person in d.message and person in r.message
    assert sl.show(["gpu02"])["gpu02"] == S.NodeInfo("gpu02", "DOWN+DRAIN", person, True)
    assert f"Reason={person} [" in _show(slurm, "gpu02")


@real
def test_real_dry_run_changes_nothing(slurm: dict[str, str]) -> None:
    def state(line: str) -> str:
        return line.split("State=")[1].split()[0] + "|" + line.partition(" Reason=")[2]

    before = state(_show(slurm, "gpu03"))
    sl = S.Slurm(act=False, env=slurm)
    (d,) = sl.drain({"gpu03": "stetho: x: y"})
    assert (d.kind, d.done, d.failed) == ("drain", False, False)
    assert d.argv == ("scontrol", "update", "NodeName=gpu03", "State=DRAIN", "Reason=stetho: x: y")
    assert state(_show(slurm, "gpu03")) == before
    # and a dry resume of a stetho drain leaves it drained
    S.Slurm(act=True, env=slurm).drain({"gpu03": "stetho: x: y"})
    (r,) = sl.resume(["gpu03"])
    assert (r.kind, r.done) == ("resume", False) and "would run" in r.message
    assert sl.show(["gpu03"])["gpu03"].drained_by_stetho
    S.Slurm(act=True, env=slurm).resume(["gpu03"])


@real
def test_real_bad_name_refused(slurm: dict[str, str]) -> None:
    sl = S.Slurm(act=True, env=slurm)
    with pytest.raises(ConfigError, match="invalid node name"):
        sl.drain({"gpu04;scontrol update NodeName=gpu04 State=DRAIN Reason=pwned": "x"})
    with pytest.raises(ConfigError):
        sl.resume(["$(scontrol update NodeName=gpu04 State=RESUME)"])
    assert "Reason=" not in _show(slurm, "gpu04")


@real
def test_real_live_node_idle_drain(slurm_testbed: testbed.Testbed) -> None:
    """The local node runs a real slurmd: its drain reads IDLE+DRAIN (or MIXED+DRAIN)."""
    env, node = slurm_testbed.env, slurm_testbed.hostname
    sl = S.Slurm(act=True, env=env)
    (a,) = sl.drain({node: S.drain_reason("thermal", "slowdown")})
    assert a.done, a.message
    info = sl.show([node])[node]
    assert info.drained_by_stetho and info.state.endswith("+DRAIN"), info
    (r,) = sl.resume([node])
    assert r.done, r.message
    assert not sl.show([node])[node].drained


@real
def test_real_unknown_node_and_unreachable_controller(slurm_testbed: testbed.Testbed,
                                                      tmp_path: Path) -> None:
    sl = S.Slurm(act=True, env=slurm_testbed.env)
    (u,) = sl.drain({"gpu99": "stetho: a"})
    assert u.failed and "does not know" in u.message
    conf = Path(slurm_testbed.env["SLURM_CONF"]).read_text()
    dead = tmp_path / "slurm.conf"
    dead.write_text(re.sub(r"SlurmctldPort=\d+", f"SlurmctldPort={testbed.free_port()}", conf)
                    + "MessageTimeout=2\n")
    down = S.Slurm(act=True, env={"SLURM_CONF": str(dead)}, timeout_s=20)
    (d,) = down.drain({"gpu04": "stetho: a"})
    assert (d.done, d.failed) == (False, True)
    assert "gpu04" in d.message and (
        "Unable to contact slurm controller" in d.message or "timed out" in d.message), d.message


def test_scontrol_is_found_as_shutil_which_finds_it(tmp_path):
    """The gate's own lookup (no shutil on its path): the first executable file on PATH,
    never a directory or a file without the execute bit; an empty PATH finds nothing."""
    import shutil

    from stetho.gate.slurm import _which

    a, b, c = (tmp_path / x for x in "abc")
    for d in (a, b, c):
        d.mkdir()
    (a / "scontrol").mkdir()  # a directory of that name
    (b / "scontrol").write_text("#!/bin/sh\n")  # not executable
    (c / "scontrol").write_text("#!/bin/sh\n")
    (c / "scontrol").chmod(0o755)
    path = os.pathsep.join(map(str, (a, b, c)))
    assert _which("scontrol", path) == str(c / "scontrol") == shutil.which("scontrol", path=path)
    assert _which("scontrol", str(a)) is None is shutil.which("scontrol", path=str(a))
    assert _which("scontrol", "") is None is shutil.which("scontrol", path="")


# -- read ahead: the gate asks scontrol while it reads history ------------------------------------


def test_read_ahead_answers_a_dry_runs_drains_and_resumes_with_one_call(
        fake: testbed.FakeScontrol) -> None:
    """A dry run's drains and resumes, each answered from one `show` started before: the
    same actions as asking at each step, one scontrol call instead of two."""
    fake.set_node("gpu02", "IDLE+DRAIN", "stetho: old: reason")
    fake.set_node("gpu03", "DOWN+DRAIN", "RMA 4711 (alice)")
    asked = S.Slurm(act=False, env=fake.env)
    want = asked.drain({"gpu01": "stetho: a: b", "gpu03": "stetho: a: b"}) + asked.resume(
        ["gpu02", "gpu04"])
    fake.clear_calls()
    ahead = S.Slurm(act=False, env=fake.env)
    ahead.read_ahead(["gpu01", "gpu02", "gpu03", "gpu04"])
    got = ahead.drain({"gpu01": "stetho: a: b", "gpu03": "stetho: a: b"}) + ahead.resume(
        ["gpu02", "gpu04"])
    ahead.close()
    assert got == want and fake.calls() == [["show", "node", "-o", "gpu01,gpu02,gpu03,gpu04"]]
    # a node it did not ask about: scontrol is asked, as without it
    ahead.read_ahead(["gpu01"])
    assert set(ahead.show(["gpu01"])) == {"gpu01"}
    ahead.resume(["gpu01", "gpu02"])
    ahead.close()
    assert fake.calls()[1:] == [["show", "node", "-o", "gpu01"],
                                ["show", "node", "-o", "gpu01,gpu02"]]


def test_read_ahead_is_asked_again_after_stetho_acts_or_once_it_is_old(
        fake: testbed.FakeScontrol, monkeypatch: pytest.MonkeyPatch) -> None:
    """What was read ahead says how things stood: after a drain ran, or past AHEAD_FRESH_S
    (a gate's live checks ran for minutes; a person may have drained a node since), the
    next read asks scontrol again."""
    fake.set_node("gpu02", "IDLE+DRAIN", "stetho: old: reason")
    sl = S.Slurm(act=True, env=fake.env)
    sl.read_ahead(["gpu01", "gpu02"])
    (d,) = sl.drain({"gpu01": "stetho: a: b"})
    (r,) = sl.resume(["gpu02"])
    assert d.done and r.done
    assert [c if c[0] == "show" else c[:3] for c in fake.calls()] == [
        ["show", "node", "-o", "gpu01,gpu02"], ["update", "NodeName=gpu01", "State=DRAIN"],
        ["show", "node", "-o", "gpu02"], ["update", "NodeName=gpu02", "State=RESUME"]]
    fake.clear_calls()
    fake.set_node("gpu03", "DOWN", "")
    dry = S.Slurm(act=False, env=fake.env)
    dry.read_ahead(["gpu03"])
    assert dry.show(["gpu03"])["gpu03"].reason == ""  # what it read ahead
    monkeypatch.setattr(S, "AHEAD_FRESH_S", 0.0)
    fake.set_node("gpu03", "DOWN+DRAIN", "a person, meanwhile")
    (skip,) = dry.drain({"gpu03": "stetho: a: b"})
    assert skip.kind == "skip" and "a person, meanwhile" in skip.message
    assert fake.calls() == [["show", "node", "-o", "gpu03"]] * 2


def test_read_ahead_fails_where_asking_would(fake: testbed.FakeScontrol, tmp_path: Path
                                             ) -> None:
    """scontrol missing, a controller down, a timeout: read_ahead starts and raises nothing;
    the read that uses it fails with the same words as asking then (a drain fails, a dry
    run shows its plan saying the state is unknown)."""
    for env, timeout in (({"PATH": str(tmp_path)}, 30.0),
                         ({**fake.env, "FAKE_SLURMCTLD_DOWN": "1"}, 30.0),
                         ({**fake.env, "FAKE_SCONTROL_SLEEP": "5"}, 0.5)):
        for act in (True, False):
            plain = S.Slurm(act=act, env=env, timeout_s=timeout).drain({"gpu01": "stetho: a"})
            sl = S.Slurm(act=act, env=env, timeout_s=timeout)
            sl.read_ahead(["gpu01"])
            got = sl.drain({"gpu01": "stetho: a"})
            sl.close()
            assert got == plain and got[0].failed is act, (env, act, got)
            with pytest.raises(S.SlurmError):
                sl.read_ahead(["gpu01"])
                sl.show(["gpu01"])


def test_close_ends_an_answer_nobody_read(fake: testbed.FakeScontrol) -> None:
    sl = S.Slurm(act=False, env={**fake.env, "FAKE_SCONTROL_SLEEP": "60"})
    sl.read_ahead(["gpu01"])
    assert sl._ahead is not None
    (_, _, proc), = sl._ahead[1]
    sl.close()
    assert isinstance(proc, subprocess.Popen) and proc.returncode is not None
    assert sl._ahead is None


def test_a_gate_from_history_asks_scontrol_once_for_all_its_nodes(fake: testbed.FakeScontrol,
                                                                  tmp_path: Path) -> None:
    """`stetho gate --nodes` reads its nodes' state ahead, while it reads history: one
    `show` for the dry run's resumes, and the lines it prints are the state's."""
    import sys

    from tests.test_gate_imports import _history

    fake.set_node("gpu02", "IDLE+DRAIN", "stetho: gpu_xid: old")
    fake.set_node("gpu03", "IDLE+DRAIN", "RMA 4711 (alice)")
    db = tmp_path / "h.db"
    _history(db, S.hostlist.expand("gpu[01-04]"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("STETHO_")}
    env.update(PATH=fake.env["PATH"], HOME=str(tmp_path), XDG_CONFIG_HOME=str(tmp_path / "c"),
               STETHO_CACHE=str(tmp_path / "cache"))
    proc = subprocess.run([sys.executable, "-m", "stetho", "gate", "--policy", "pre-job",
                           "--nodes", "gpu[01-04]", "--db", str(db), "--out",
                           str(tmp_path / "runs")], capture_output=True, text=True, env=env,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert fake.calls() == [["show", "node", "-o", "gpu01,gpu02,gpu03,gpu04"]]
    assert "DRY RUN resume gpu02: gpu02: dry run, would run: scontrol update NodeName=gpu02 " \
           "State=RESUME" in proc.stdout
    assert re.search(r"gpu03: .*RMA 4711", proc.stdout), proc.stdout
