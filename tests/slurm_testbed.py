"""A real Slurm controller on localhost for the drain/resume tests (shared TESTBED.md recipe).

munged with its own key and socket, then slurmctld and slurmd with a slurm.conf under a temp
folder: /etc/slurm, /etc/munge and any system daemons are never touched. Sixteen fake nodes,
gpu[01-16], exist only in the config (State=DOWN, their address answers nothing) so that they
can be drained and resumed for real without any machine behind them; they sit in their own
partition so that no job can land on them. The local node is a real slurmd, so that the states
of a live node (IDLE, IDLE+DRAIN) are seen too.

Ports are picked free so that two test sessions on one machine do not collide. Everything is
stopped by the PIDs we started and the folder (StateSaveLocation included: node state survives
a restart otherwise) is removed at the end.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

FAKE_NODES = ["gpu01", "gpu02", "gpu03", "gpu04"]
#: Every config-only node: enough for 16 health checks at once (the drain budget's tests).
ALL_FAKE_NODES = [f"gpu{i:02d}" for i in range(1, 17)]
DAEMONS = ("munged", "slurmctld", "slurmd", "scontrol", "munge", "unmunge")
START_TIMEOUT_S = 30.0


class TestbedError(RuntimeError):
    """Slurm could not be started here; the message carries the daemons' logs."""


@dataclass(frozen=True)
class Testbed:
    folder: Path
    env: dict[str, str]
    hostname: str
    startup_s: float
    pids: dict[str, int] = field(default_factory=dict)


def missing() -> list[str]:
    """The programs this testbed needs and this machine lacks (Debian: slurm-wlm, munge)."""
    return [p for p in DAEMONS if _which(p) is None]


def _which(prog: str) -> str | None:
    return shutil.which(prog) or next(
        (f"{d}/{prog}" for d in ("/usr/sbin", "/usr/bin") if os.access(f"{d}/{prog}", os.X_OK)),
        None)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def logs(folder: Path) -> str:
    """The tails of every daemon log, for failure messages."""
    parts = []
    for name in ("munged.log", "slurmctld.log", "slurmd.log"):
        p = folder / name
        text = p.read_text(errors="replace") if p.exists() else "(no log)"
        parts.append(f"--- {name} ---\n{text[-3000:]}")
    return "\n".join(parts)


def _run(argv: list[str], env: dict[str, str], folder: Path, timeout: float = 15,
         stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout,
                              input=stdin)
    except subprocess.TimeoutExpired as e:
        raise TestbedError(f"{argv} timed out after {timeout}s\n{logs(folder)}") from e


#: The slurm.conf lines the README documents (and quotes from this file).
HOOK_LINES = Path(__file__).resolve().parent.parent / "contrib" / "slurm" / "slurm.conf"


def hook_settings() -> list[tuple[str, str]]:
    """contrib/slurm/slurm.conf as (key, value) pairs, comments dropped."""
    pairs = []
    for line in HOOK_LINES.read_text().splitlines():
        text = line.split("#", 1)[0].strip()
        if text:
            key, _, value = text.partition("=")
            pairs.append((key, value))
    return pairs


def _hook_lines() -> list[str]:
    """The documented hook lines, so this slurmctld and slurmd parse and accept exactly them.
    The programs become /bin/true: the testbed node has no /opt/stetho for the hooks to run
    (tests run `stetho gate --local --slurm ...` themselves, as the hooks would)."""
    programs = ("Prolog", "HealthCheckProgram")
    return [f"{k}={'/bin/true' if k in programs else v}" for k, v in hook_settings()]


def _local_node_line(hostname: str, slurmd_port: int) -> str:
    """The local node as `slurmd -C` sees it, so that slurmd's registration matches exactly
    (a config claiming more than the hardware has gets the node drained)."""
    out = subprocess.run([_which("slurmd") or "slurmd", "-C"], capture_output=True, text=True,
                         timeout=15).stdout
    line = next((x for x in out.splitlines() if x.startswith("NodeName=")), "")
    words = [w for w in line.split() if not w.startswith(("NodeName=", "RealMemory="))]
    if not words:
        words = [f"CPUs={os.cpu_count() or 1}"]
    return (f"NodeName={hostname} NodeAddr=127.0.0.1 Port={slurmd_port} {' '.join(words)} "
            "RealMemory=1000 State=UNKNOWN")


def _wait_pidfile(path: Path, folder: Path, what: str, deadline: float) -> int:
    while time.monotonic() < deadline:
        try:
            text = path.read_text().strip()
            if text:
                return int(text)
        except (FileNotFoundError, ValueError):
            pass
        time.sleep(0.05)
    raise TestbedError(f"{what} wrote no pid file {path} within {START_TIMEOUT_S}s\n"
                       f"{logs(folder)}")


def start(folder: Path) -> Testbed:
    """munged, slurmctld and slurmd under folder; returns once `scontrol ping` says UP and the
    fake nodes are listed. Raises TestbedError (logs included) otherwise, after stopping
    whatever it had started."""
    t0 = time.monotonic()
    deadline = t0 + START_TIMEOUT_S
    if os.geteuid() != 0:
        raise TestbedError("needs root (SlurmUser=root, and slurmd runs as root)")
    lacking = missing()
    if lacking:
        raise TestbedError(f"not installed: {', '.join(lacking)} "
                           "(apt-get install -y slurm-wlm munge)")
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o755)  # munged refuses a socket folder others cannot read
    for sub in ("state", "spool"):
        (folder / sub).mkdir(exist_ok=True)
    hostname = socket.gethostname().split(".")[0]
    sock = folder / "munge.socket.2"
    key = folder / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o600)
    pids: dict[str, int] = {}
    env = {"SLURM_CONF": str(folder / "slurm.conf")}
    full_env = {**os.environ, **env}
    try:
        r = _run([_which("munged") or "munged", f"--key-file={key}", f"--socket={sock}",
                  f"--pid-file={folder / 'munged.pid'}", f"--log-file={folder / 'munged.log'}",
                  f"--seed-file={folder / 'munged.seed'}", "--force"], full_env, folder)
        if r.returncode != 0:
            raise TestbedError(f"munged exited {r.returncode}: {r.stderr}\n{logs(folder)}")
        pids["munged"] = _wait_pidfile(folder / "munged.pid", folder, "munged", deadline)
        cred = _run([_which("munge") or "munge", "-S", str(sock), "-n"], full_env, folder)
        back = _run([_which("unmunge") or "unmunge", "-S", str(sock)], full_env, folder,
                    stdin=cred.stdout)
        if cred.returncode != 0 or back.returncode != 0:
            raise TestbedError(f"munge round trip failed: {cred.stderr}{back.stderr}\n"
                               f"{logs(folder)}")

        ctld_port, slurmd_port = free_port(), free_port()
        (folder / "slurm.conf").write_text("\n".join([
            "ClusterName=stethotest",
            f"SlurmctldHost={hostname}(127.0.0.1)",
            f"SlurmctldPort={ctld_port}",
            f"SlurmdPort={slurmd_port}",
            "SlurmUser=root", "SlurmdUser=root",
            "AuthType=auth/munge", f"AuthInfo=socket={sock}", "CredType=cred/munge",
            f"StateSaveLocation={folder / 'state'}",
            f"SlurmdSpoolDir={folder / 'spool'}",
            f"SlurmctldPidFile={folder / 'slurmctld.pid'}",
            f"SlurmdPidFile={folder / 'slurmd.pid'}",
            f"SlurmctldLogFile={folder / 'slurmctld.log'}",
            f"SlurmdLogFile={folder / 'slurmd.log'}",
            "SchedulerType=sched/backfill", "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core", "MpiDefault=none", "ReturnToService=2",
            "SlurmdTimeout=300", "MailProg=/bin/true", "RebootProgram=/bin/true",
            "AccountingStorageType=accounting_storage/none",
            "JobCompType=jobcomp/none", "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none", "JobAcctGatherType=jobacct_gather/none",
            *_hook_lines(),
            _local_node_line(hostname, slurmd_port),
            "NodeName=gpu[01-16] NodeAddr=127.0.0.2 Port=6899 CPUs=8 RealMemory=64000 "
            "Weight=10 State=DOWN",
            f"PartitionName=local Nodes={hostname} Default=YES MaxTime=INFINITE State=UP",
            "PartitionName=fake Nodes=gpu[01-16] Default=NO MaxTime=INFINITE State=UP",
        ]) + "\n")

        for daemon in ("slurmctld", "slurmd"):
            r = _run([_which(daemon) or daemon, "-f", env["SLURM_CONF"]], full_env, folder)
            if r.returncode != 0:
                raise TestbedError(f"{daemon} exited {r.returncode}: {r.stderr}\n"
                                   f"{logs(folder)}")
            pids[daemon] = _wait_pidfile(folder / f"{daemon}.pid", folder, daemon, deadline)

        scontrol = _which("scontrol") or "scontrol"
        last = ""
        while time.monotonic() < deadline:
            ping = _run([scontrol, "ping"], full_env, folder, timeout=10)
            show = _run([scontrol, "show", "node", "-o", "gpu01"], full_env, folder, timeout=10)
            # The live node must have registered (its slurmd answered): until then it reads
            # UNKNOWN, a drain makes it UNKNOWN+DRAIN, and RESUME from that is refused.
            live = _run([scontrol, "show", "node", "-o", hostname], full_env, folder, timeout=10)
            last = ping.stdout + ping.stderr + show.stdout + show.stderr + live.stdout
            registered = "State=" in live.stdout and "State=UNKNOWN" not in live.stdout
            if (ping.returncode == 0 and "UP" in ping.stdout and "NodeName=gpu01" in show.stdout
                    and registered):
                return Testbed(folder, env, hostname, time.monotonic() - t0, pids)
            time.sleep(0.2)
        raise TestbedError(f"slurmctld did not answer `scontrol ping`, or the live node did not "
                           f"register, within {START_TIMEOUT_S}s: {last}\n{logs(folder)}")
    except BaseException:
        _stop_pids(folder, pids)
        raise


def _stop_pids(folder: Path, pids: dict[str, int]) -> None:
    """SIGTERM each daemon we started (by PID, newest first), wait, then SIGKILL stragglers."""
    for name in reversed(list(pids)):
        try:
            os.kill(pids[name], signal.SIGTERM)
        except ProcessLookupError:
            continue
    deadline = time.monotonic() + 10
    for name in reversed(list(pids)):
        while time.monotonic() < deadline and _alive(pids[name]):
            time.sleep(0.05)
        if _alive(pids[name]):
            try:
                os.kill(pids[name], signal.SIGKILL)
            except ProcessLookupError:
                pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie is dead for our purposes (the daemons were double-forked: init reaps them)
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def stop(bed: Testbed) -> None:
    """Stop the daemons by PID and wipe the folder, StateSaveLocation included."""
    _stop_pids(bed.folder, bed.pids)
    shutil.rmtree(bed.folder, ignore_errors=True)


@pytest.fixture(scope="session")
def slurm_testbed() -> Iterator[Testbed]:
    """A started testbed, or a skip that says why Slurm could not start. Each module that
    re-exports it gets its own (a few seconds): unlike tests/slurm_cluster.py's, it is not
    shared, because its fake nodes turn NOT_RESPONDING once slurmctld has pinged them for a
    while, which no reset can undo, and tests/test_slurm.py expects them plain DOWN."""
    folder = Path(tempfile.mkdtemp(prefix="stetho-slurm-"))
    try:
        bed = start(folder)
    except TestbedError as e:
        shutil.rmtree(folder, ignore_errors=True)
        pytest.skip(f"real Slurm could not be started here: {e}")
    try:
        yield bed
    finally:
        stop(bed)


@pytest.fixture(scope="session")
def slurm(slurm_testbed: Testbed) -> dict[str, str]:
    """The environment to give Slurm(env=...): SLURM_CONF pointing at the testbed's config."""
    return dict(slurm_testbed.env)


# -- a recording stand-in for scontrol, for machines where Slurm cannot start ---------------------

#: Modelled on real 22.05 output (see tests/test_slurm.py REAL_* lines): the same keys, the
#: same ` [user@time]` stamp after the reason, the same messages and exit codes.
_FAKE = r"""#!__PYTHON__
import json, os, sys, time
HERE = __HERE__
argv = sys.argv[1:]
with open(os.path.join(HERE, "calls.jsonl"), "a") as f:
    f.write(json.dumps(argv) + "\n")
if os.environ.get("FAKE_SCONTROL_SLEEP"):
    time.sleep(float(os.environ["FAKE_SCONTROL_SLEEP"]))
if os.environ.get("FAKE_SLURMCTLD_DOWN"):
    what = "slurm_load_node" if argv[:1] == ["show"] else "slurm_update"
    sys.stderr.write(what + " error: Unable to contact slurm controller (connect failure)\n")
    sys.exit(1)
path = os.path.join(HERE, "state.json")
with open(path) as f:
    nodes = json.load(f)

def line(name, n):
    out = ("NodeName=%s CoresPerSocket=1  CPUAlloc=0 CPUEfctv=8 CPUTot=8 CPULoad=N/A "
           "AvailableFeatures=(null) ActiveFeatures=(null) Gres=(null) NodeAddr=127.0.0.2 "
           "NodeHostName=%s Port=6899  RealMemory=64000 AllocMem=0 FreeMem=N/A Sockets=8 "
           "Boards=1 State=%s ThreadsPerCore=1 TmpDisk=0 Weight=10 Owner=N/A MCS_label=N/A "
           "Partitions=fake  BootTime=None SlurmdStartTime=None LastBusyTime=Unknown "
           "CfgTRES=cpu=8,mem=62.50G,billing=8 AllocTRES= CapWatts=n/a CurrentWatts=0 "
           "AveWatts=0 ExtSensorsJoules=n/s ExtSensorsWatts=0 ExtSensorsTemp=n/s"
           % (name, name, n["state"]))
    if n["reason"]:
        out += " Reason=%s [root@2026-01-02T03:04:05]" % n["reason"]
    return out

if argv[:2] == ["show", "config"]:
    print("Configuration data as of 2026-01-02T03:04:05")
    print("ClusterName             = fake")
    sys.exit(0)
if argv[:1] == ["ping"]:
    print("Slurmctld(primary) at fake is UP")
    sys.exit(0)
if argv[:3] == ["show", "node", "-o"]:
    names = argv[3].split(",") if len(argv) > 3 else sorted(nodes)
    rc = 0
    for name in names:
        if name in nodes:
            print(line(name, nodes[name]))
        else:
            print("Node %s not found" % name)
            rc = 1
    sys.exit(rc)
if argv[:1] == ["update"]:
    kv = dict(a.split("=", 1) for a in argv[1:])
    name = kv.get("NodeName", "")
    if name not in nodes:
        sys.stderr.write("slurm_update error: Invalid node name specified\n")
        sys.exit(1)
    if os.environ.get("FAKE_SCONTROL_REFUSE"):
        sys.stderr.write("slurm_update error: Access/permission denied\n")
        sys.exit(1)
    n = nodes[name]
    flags = n["state"].split("+")
    if kv.get("State") == "DRAIN":
        if not kv.get("Reason"):
            sys.stderr.write("You must specify a reason when DOWNING or DRAINING a node. "
                             "Request denied\n")
            sys.exit(1)
        if "DRAIN" not in flags:
            flags.append("DRAIN")
        n["reason"] = kv["Reason"]
    elif kv.get("State") == "RESUME":
        if "DRAIN" not in flags and flags[0] != "DOWN":
            sys.stderr.write("slurm_update error: Invalid node state specified\n")
            sys.exit(1)
        flags = ["IDLE" if flags[0] == "DOWN" else flags[0]]
        n["reason"] = ""
    else:
        sys.stderr.write("fake scontrol: unsupported update %r\n" % argv)
        sys.exit(2)
    n["state"] = "+".join(flags)
    with open(path, "w") as f:
        json.dump(nodes, f)
    sys.exit(0)
sys.stderr.write("fake scontrol: unsupported command %r\n" % argv)
sys.exit(2)
"""


@dataclass(frozen=True)
class FakeScontrol:
    """An executable `scontrol` in folder/bin that records each call's argv (one JSON line in
    folder/calls.jsonl) and answers from folder/state.json, which `update` changes."""

    folder: Path

    @property
    def env(self) -> dict[str, str]:
        """For Slurm(env=...): the stand-in's bin folder first on PATH."""
        return {"PATH": f"{self.folder / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"}

    def calls(self) -> list[list[str]]:
        log = self.folder / "calls.jsonl"
        if not log.exists():
            return []
        return [json.loads(x) for x in log.read_text().splitlines() if x.strip()]

    def clear_calls(self) -> None:
        (self.folder / "calls.jsonl").unlink(missing_ok=True)

    def nodes(self) -> dict[str, dict[str, str]]:
        data: dict[str, dict[str, str]] = json.loads((self.folder / "state.json").read_text())
        return data

    def set_node(self, name: str, state: str, reason: str = "") -> None:
        data = self.nodes()
        data[name] = {"state": state, "reason": reason}
        (self.folder / "state.json").write_text(json.dumps(data))


def fake_scontrol(folder: Path, nodes: dict[str, str] | None = None) -> FakeScontrol:
    """Write the stand-in; nodes: name -> state (default gpu[01-04] DOWN, like the testbed)."""
    (folder / "bin").mkdir(parents=True, exist_ok=True)
    script = folder / "bin" / "scontrol"
    script.write_text(_FAKE.replace("__PYTHON__", sys.executable)
                      .replace("__HERE__", repr(str(folder))))
    script.chmod(0o755)
    states = nodes if nodes is not None else {n: "DOWN" for n in FAKE_NODES}
    (folder / "state.json").write_text(
        json.dumps({n: {"state": s, "reason": ""} for n, s in states.items()}))
    return FakeScontrol(folder)
