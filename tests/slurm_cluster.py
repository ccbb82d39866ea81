"""A multi-node Slurm on this machine: one slurmctld and N slurmd, each slurmd in its own
network namespace with its own address (shared TESTBED.md, "A multi-node Slurm on one machine").

Why: a drain budget, a prolog that requeues a job elsewhere and HealthCheckPrograms running at
the same moment can only be shown on a cluster where Slurm itself runs the hooks on many nodes.
Every node has a simulated hardware root (stetho.sim) behind a symlink the tests flip between a
healthy and a failing node, and slurm.conf runs stetho's shipped hooks (contrib/slurm/) through
a wrapper that points them at that root, the node's own history, the shared drain ledger and
the shared result spool.

Names carry a random tag and the subnet is one no other bridge here uses, so two test sessions
never collide; munged, slurmctld and the slurmds are stopped by the PIDs they wrote, then the
namespaces and the bridge are deleted and the folder removed.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests import slurm_testbed as tb

REPO = Path(__file__).resolve().parent.parent
HOOKS = REPO / "contrib" / "slurm"
NODES = 16
PARTITION = "gpu"  # the configured partition; reset() deletes any other a test created
START_TIMEOUT_S = 180.0  # 16 slurmds on a loaded 2-core machine: 60 s was not always enough

#: The simulated nodes a cluster node's hardware can be: healthy, failing the pre-job gate
#: (clocks unlocked), with an nvidia-smi that hangs (the watchdog's case), or with slow NICs.
HARDWARE = {"healthy": [], "failing": ["clocks-unlocked"], "hanging": ["hang=nvidia-smi"],
            # NICs 40% slow: multi-node all-reduce drops, single-node does not (release gate)
            "nic-slow": ["nic-busbw-drop=40"]}

WRAPPERS = {"Prolog": "stetho-prolog", "HealthCheckProgram": "stetho-healthcheck"}


#: With CYCLE, slurmctld starts one node's check every HealthCheckInterval / nodes seconds
#: (600 / 16: every 37 s). A check nobody asked for would drain a node or spool a verdict in
#: the middle of a test; so the interval is Slurm's largest here (65535 s: 68 min a node) and
#: the tests run the program themselves, as slurmd does. slurmd still runs it as it starts.
TEST_INTERVAL = {"HealthCheckInterval": "65535"}


def hook_lines(bin_dir: Path) -> list[str]:
    """contrib/slurm/slurm.conf, the lines the README recommends, with the two programs this
    cluster's wrappers (which run contrib/slurm's scripts on the node's simulated hardware)
    and TEST_INTERVAL."""
    out = []
    for k, v in tb.hook_settings():
        value = bin_dir / WRAPPERS[k] if k in WRAPPERS else TEST_INTERVAL.get(k, v)
        out.append(f"{k}={value}")
    return out


_WRAPPER = """#!/bin/sh
# {what} for node $SLURMD_NODENAME of this test cluster: its simulated hardware, its own
# history, the shared drain ledger and result spool; then stetho's shipped hook.
root={nodes}/$SLURMD_NODENAME
export STETHO_SYSROOT="$root/sysroot" PATH="$root/bin:/usr/sbin:/usr/bin:/sbin:/bin"
export STETHO={stetho} STETHO_POLICY={policy} STETHO_PROFILE=h100-sxm-8gpu
export STETHO_DB={folder}/db/$SLURMD_NODENAME.db STETHO_CACHE={folder}/cache
export STETHO_RESULT_SPOOL={folder}/results STETHO_DRAIN_LEDGER={folder}/ledger.db
export SLURM_CONF={folder}/slurm.conf STETHO_CONFIG={folder}/stetho.toml HOME={folder}
exec /bin/sh {script}
"""


class ClusterError(RuntimeError):
    """The cluster could not be started here; the message carries the daemons' logs."""


def missing() -> list[str]:
    """What this machine lacks for the cluster (Debian: slurm-wlm, munge, iproute2)."""
    out = list(tb.missing())
    out += [p for p in ("ip", "nsenter", "sinfo", "sbatch") if tb._which(p) is None]
    if os.geteuid() != 0:
        out.append("root (network namespaces, SlurmUser=root)")
    return out


def sh(*argv: str, check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise ClusterError(f"{' '.join(argv)}: {proc.stderr.strip()}")
    return proc


def free_subnet() -> int:
    """A third octet k with no 198.18.k.0/24 address on this machine (198.18.5 if free)."""
    used = sh("ip", "-o", "-4", "addr", "show").stdout
    for k in range(5, 255):
        if f" 198.18.{k}." not in used:
            return k
    raise ClusterError("no free 198.18.k.0/24 subnet for the cluster's bridge")


@dataclass
class Cluster:
    folder: Path
    tag: str
    subnet: int
    nodes: list[str]
    env: dict[str, str] = field(default_factory=dict)
    pids: dict[str, int] = field(default_factory=dict)
    netns: dict[str, str] = field(default_factory=dict)
    startup_s: float = 0.0
    #: (node, exit code) of the health check each slurmd ran as it started
    startup_verdicts: list[tuple[str, int]] = field(default_factory=list)
    #: each simulated node's tree as built (reset() rebuilds one a test changed)
    sim_prints: dict[str, str] = field(default_factory=dict)

    # -- names ------------------------------------------------------------------------------
    @property
    def bridge(self) -> str:
        return f"sc{self.tag}br"

    def veth(self, i: int) -> str:
        return f"sc{self.tag}v{i:02d}"

    def address(self, i: int) -> str:
        return f"198.18.{self.subnet}.{i}"

    @property
    def results(self) -> Path:
        """The shared result spool every hook writes its verdict into."""
        return self.folder / "results"

    @property
    def startup_results(self) -> Path:
        """A copy of the verdicts the slurmds' start-up health checks (all at once) spooled."""
        return self.folder / "startup-results"

    @property
    def ledger(self) -> Path:
        return self.folder / "ledger.db"

    def node_db(self, node: str) -> Path:
        return self.folder / "db" / f"{node}.db"

    # -- the nodes' hardware ----------------------------------------------------------------
    def set_hardware(self, node: str, kind: str) -> None:
        """Point node's hardware at one of HARDWARE's simulated nodes: a symlink replaced
        atomically, so a hook running now sees one or the other."""
        if kind not in HARDWARE:
            raise ValueError(f"{kind}: not one of {', '.join(HARDWARE)}")
        link = self.folder / "nodes" / node
        tmp = link.with_name(f".{node}.tmp")
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(self.folder / "sim" / kind)
        os.replace(tmp, link)

    def set_failing(self, node: str, failing: bool = True) -> None:
        self.set_hardware(node, "failing" if failing else "healthy")

    # -- Slurm ------------------------------------------------------------------------------
    def full_env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        return {**os.environ, **self.env, **(extra or {})}

    def scontrol(self, *args: str, check: bool = True) -> str:
        r = subprocess.run(["scontrol", *args], env=self.full_env(), capture_output=True,
                           text=True, timeout=30)
        if check and r.returncode != 0:
            raise ClusterError(f"scontrol {' '.join(args)}: {r.stderr.strip()}")
        return r.stdout

    def states(self) -> dict[str, str]:
        """node -> sinfo's long state (idle, drained, draining, allocated, mixed, ...)."""
        out = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %T"], env=self.full_env(),
                             capture_output=True, text=True, timeout=30).stdout
        return dict(line.split(None, 1) for line in out.splitlines() if line.strip())

    def jobs(self) -> list[str]:
        """Every job Slurm still knows (pending, running or completing), by id."""
        out = subprocess.run(["squeue", "-h", "-o", "%i"], env=self.full_env(),
                             capture_output=True, text=True, timeout=30).stdout
        return out.split()

    def reservations(self) -> list[str]:
        out = self.scontrol("show", "reservation", check=False)
        return [w.split("=", 1)[1] for w in out.split() if w.startswith("ReservationName=")]

    def partitions(self) -> list[str]:
        out = self.scontrol("show", "partition", "-o", check=False)
        return [w.split("=", 1)[1] for w in out.split() if w.startswith("PartitionName=")]

    def reset(self) -> None:
        """The state each test starts from, whatever the test before it (any module) left:
        no job, no reservation, only the configured partition, every node's hardware the
        healthy simulated node (the simulated trees as built), no hang marker, every node
        idle and undrained, an empty ledger, result spool and per-node history. One cluster
        serves the whole session (tests/conftest.py), so this is what isolates the tests."""
        jobs = self.jobs()
        if jobs:
            subprocess.run(["scancel", *jobs], env=self.full_env(), capture_output=True,
                           timeout=30)
        for name in self.reservations():
            self.scontrol("delete", f"ReservationName={name}", check=False)
        for name in self.partitions():
            if name != PARTITION:
                self.scontrol("delete", f"PartitionName={name}", check=False)
        for kind in HARDWARE:
            if _fingerprint(self.folder / "sim" / kind) != self.sim_prints.get(kind):
                _build_sim(self, kind)
        for marker in self.folder.glob("hang-*"):
            marker.unlink()
        nodes = self.folder / "nodes"
        for entry in nodes.iterdir():
            if entry.name not in self.nodes:
                _remove(entry)
        for node in self.nodes:
            if not (nodes / node).is_symlink():
                _remove(nodes / node)
            self.set_failing(node, False)
        wait_for(lambda: not self.jobs(), 60, "every job gone", self)
        for node, state in self.states().items():
            if "drain" in state or "down" in state or "fail" in state:
                self.scontrol("update", f"NodeName={node}", "State=RESUME", check=False)
        for p in (self.ledger, self.ledger.with_name("ledger.db-wal"),
                  self.ledger.with_name("ledger.db-shm")):
            p.unlink(missing_ok=True)
        for folder in (self.results, self.folder / "db"):
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
        wait_for(lambda: (set(s := self.states()) == set(self.nodes)
                          and all(v.rstrip("*") == "idle" for v in s.values())),
                 60, "every node idle again", self)
        left = (self.reservations(), [p for p in self.partitions() if p != PARTITION])
        if any(left):
            raise ClusterError(f"reset left reservations {left[0]} and partitions {left[1]}")

    # -- the hooks, as slurmd runs them -----------------------------------------------------
    def hook_argv(self, node: str, mode: str) -> list[str]:
        """The wrapper run inside node's namespace, as slurmd would (nsenter, not `ip netns
        exec`: that remounts /sys)."""
        wrapper = self.folder / "bin" / ("stetho-prolog" if mode == "prolog"
                                         else "stetho-healthcheck")
        return ["nsenter", f"--net=/run/netns/{self.netns[node]}", "/bin/sh", str(wrapper)]

    def hook_env(self, node: str, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """slurmd's environment for a hook: SLURMD_NODENAME and little else."""
        return {"SLURMD_NODENAME": node, "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
                **(extra or {})}

    def run_hook(self, node: str, mode: str, extra: Mapping[str, str] | None = None,
                 timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.hook_argv(node, mode), env=self.hook_env(node, extra),
                              capture_output=True, text=True, timeout=timeout)

    def logs(self) -> str:
        parts = []
        for p in sorted(self.folder.glob("*.log")):
            parts.append(f"--- {p.name} ---\n{p.read_text(errors='replace')[-2000:]}")
        return "\n".join(parts)


def spooled(spool: Path, where: str = "") -> list[dict[str, Any]]:
    """The hooks' verdicts in the result spool (`<spool>/<node>/<where>/*.json`; where=
    "ingested" once taken), each as the gate wrote it: its detail (blocked, job, policy),
    node, kind, run id and exit code. Read as a test reads it, not judged."""
    out = []
    for path in sorted(spool.glob(f"*/{where + '/' if where else ''}*.json")):
        body = json.loads(path.read_bytes().partition(b"\n")[0])
        out.append({**body.get("detail", {}), "node": body["node"], "kind": body["kind"],
                    "run_id": body["run_id"], "exit_code": body["outcome"]["exit_code"],
                    "results": body["outcome"]["results"]["results"], "path": path})
    return out


def wait_for(ready: object, timeout: float, what: str, cluster: Cluster | None = None) -> None:
    """Poll `ready()` until true; ClusterError (with the logs) after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ready():  # type: ignore[operator]
            return
        time.sleep(0.1)
    raise ClusterError(f"not ready within {timeout:g} s: {what}\n"
                       + (cluster.logs() if cluster else ""))


def _slurm_conf(c: Cluster, ctld_port: int, slurmd_port: int, sock: Path) -> str:
    hostname = socket.gethostname().split(".")[0]
    d = c.folder
    return "\n".join([
        f"ClusterName=stetho{c.tag}",
        f"SlurmctldHost={hostname}({c.address(254)})",
        f"SlurmctldPort={ctld_port}", f"SlurmdPort={slurmd_port}",
        "SlurmUser=root", "SlurmdUser=root",
        "AuthType=auth/munge", "CredType=cred/munge",
        # cred_expire is also how long a requeued job waits before it may start again
        # (120 s by default): a prolog's requeue then takes 10 s, not two minutes
        f"AuthInfo=socket={sock},cred_expire=10",
        f"StateSaveLocation={d / 'state'}", f"SlurmdSpoolDir={d / 'spool' / '%n'}",
        f"SlurmctldPidFile={d / 'slurmctld.pid'}", f"SlurmdPidFile={d / 'slurmd.%n.pid'}",
        f"SlurmctldLogFile={d / 'slurmctld.log'}", f"SlurmdLogFile={d / 'slurmd.%n.log'}",
        "SchedulerType=sched/backfill", "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core", "MpiDefault=none", "ReturnToService=2",
        "SlurmdTimeout=300", "MailProg=/bin/true",
        "AccountingStorageType=accounting_storage/none", "JobCompType=jobcomp/none",
        "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none",
        *hook_lines(d / "bin"),
        f"NodeName=n[01-{len(c.nodes):02d}] NodeAddr={c.address(1).rsplit('.', 1)[0]}."
        f"[1-{len(c.nodes)}] CPUs=1 RealMemory=1000 State=UNKNOWN",
        f"PartitionName={PARTITION} Nodes=n[01-{len(c.nodes):02d}] Default=YES MaxTime=INFINITE "
        "State=UP",
    ]) + "\n"


def _fingerprint(root: Path) -> str:
    """Every path under root with its kind, size and modification time: changes when a test
    writes, deletes or replaces anything in a simulated node."""
    import hashlib

    h = hashlib.sha1()
    for dirpath, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(dirs + files):
            st = os.lstat(os.path.join(dirpath, name))
            h.update(f"{dirpath}/{name} {st.st_mode} {st.st_size} {st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def _build_sim(c: Cluster, kind: str) -> None:
    from stetho.sim.builder import build_node

    root = c.folder / "sim" / kind
    if root.exists() or root.is_symlink():
        _remove(root)
    build_node(root, kind, HARDWARE[kind])
    c.sim_prints[kind] = _fingerprint(root)


def _wrappers(c: Cluster) -> None:
    for kind in HARDWARE:
        _build_sim(c, kind)
    (c.folder / "nodes").mkdir()
    for node in c.nodes:
        c.set_failing(node, False)
    for sub in ("db", "cache", "results", "bin"):
        (c.folder / sub).mkdir(exist_ok=True)
    (c.folder / "stetho.toml").write_text("")
    stetho = Path(sys.executable).parent / "stetho"
    for name, script in (("stetho-healthcheck", "healthcheck.sh"), ("stetho-prolog",
                                                                     "prolog.sh")):
        p = c.folder / "bin" / name
        p.write_text(_WRAPPER.format(what=script, nodes=c.folder / "nodes", stetho=stetho,
                                     policy="pre-job", folder=c.folder,
                                     script=HOOKS / script))
        p.chmod(0o755)


def _fabric(c: Cluster) -> None:
    sh("ip", "link", "add", c.bridge, "type", "bridge")
    sh("ip", "addr", "add", f"{c.address(254)}/24", "dev", c.bridge)
    sh("ip", "link", "set", c.bridge, "up")
    for i, node in enumerate(c.nodes, start=1):
        ns = f"sc{c.tag}-{node}"
        sh("ip", "netns", "add", ns)
        c.netns[node] = ns
        sh("ip", "link", "add", c.veth(i), "type", "veth", "peer", "name", "eth0", "netns", ns)
        sh("ip", "link", "set", c.veth(i), "master", c.bridge, "up")
        sh("ip", "-n", ns, "addr", "add", f"{c.address(i)}/24", "dev", "eth0")
        sh("ip", "-n", ns, "link", "set", "eth0", "up")
        sh("ip", "-n", ns, "link", "set", "lo", "up")


def start(folder: Path, count: int = NODES) -> Cluster:
    """munged, the fabric, slurmctld and one slurmd per node; returns once every node is idle.
    Raises ClusterError (logs included) after stopping whatever it had started."""
    t0 = time.monotonic()
    lacking = missing()
    if lacking:
        raise ClusterError(f"not available: {', '.join(lacking)} "
                           "(apt-get install -y slurm-wlm munge, and run as root)")
    c = Cluster(folder, secrets.token_hex(3), free_subnet(),
                [f"n{i:02d}" for i in range(1, count + 1)])
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o755)  # munged refuses a socket folder others cannot read
    for sub in ("state", "spool"):
        (folder / sub).mkdir(exist_ok=True)
    for node in c.nodes:
        (folder / "spool" / node).mkdir()
    sock = folder / "munge.socket.2"
    key = folder / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o600)
    c.env = {"SLURM_CONF": str(folder / "slurm.conf")}
    try:
        _fabric(c)
        _wrappers(c)
        r = sh(tb._which("munged") or "munged", f"--key-file={key}", f"--socket={sock}",
               f"--pid-file={folder / 'munged.pid'}", f"--log-file={folder / 'munged.log'}",
               f"--seed-file={folder / 'munged.seed'}", "--force", check=False)
        if r.returncode != 0:
            raise ClusterError(f"munged exited {r.returncode}: {r.stderr}")
        deadline = t0 + START_TIMEOUT_S
        c.pids["munged"] = tb._wait_pidfile(folder / "munged.pid", folder, "munged", deadline)
        (folder / "slurm.conf").write_text(_slurm_conf(c, tb.free_port(), tb.free_port(), sock))
        r = subprocess.run([tb._which("slurmctld") or "slurmctld", "-f", c.env["SLURM_CONF"]],
                           env=c.full_env(), capture_output=True, text=True, timeout=30)
        if r.returncode != 0:
            raise ClusterError(f"slurmctld exited {r.returncode}: {r.stderr}\n{c.logs()}")
        c.pids["slurmctld"] = tb._wait_pidfile(folder / "slurmctld.pid", folder, "slurmctld",
                                               deadline)
        for node in c.nodes:
            r = subprocess.run(["nsenter", f"--net=/run/netns/{c.netns[node]}",
                                tb._which("slurmd") or "slurmd", "-N", node, "-f",
                                c.env["SLURM_CONF"]], env=c.full_env(), capture_output=True,
                               text=True, timeout=30)
            if r.returncode != 0:
                raise ClusterError(f"slurmd -N {node} exited {r.returncode}: {r.stderr}\n"
                                   f"{c.logs()}")
        for node in c.nodes:
            c.pids[f"slurmd-{node}"] = tb._wait_pidfile(folder / f"slurmd.{node}.pid", folder,
                                                        f"slurmd {node}", deadline)
        wait_for(lambda: (len(s := c.states()) == count
                          and all(v.rstrip("*") == "idle" for v in s.values())),
                 max(1.0, deadline - time.monotonic()), f"all {count} nodes idle", c)
        # slurmd runs HealthCheckProgram once as it starts: wait for every node's verdict, so
        # no start-up check is still running when a test begins
        wait_for(lambda: len(spooled(c.results)) >= count,
                 max(1.0, t0 + 2 * START_TIMEOUT_S - time.monotonic()),
                 f"the start-up health check's verdict from all {count} nodes", c)
        c.startup_verdicts = sorted((d["node"], d["exit_code"]) for d in spooled(c.results))
        shutil.copytree(c.results, c.startup_results)
        c.startup_s = time.monotonic() - t0
        return c
    except BaseException:
        stop(c)
        raise


def stop(c: Cluster) -> None:
    """Stop every daemon by its PID (newest first), then delete the namespaces and bridge."""
    for name, pid_file in (("slurmctld", "slurmctld.pid"), ("munged", "munged.pid"),
                           *((f"slurmd-{n}", f"slurmd.{n}.pid") for n in c.nodes)):
        if name not in c.pids:  # started but not yet recorded: its pid file says who
            try:
                c.pids[name] = int((c.folder / pid_file).read_text().strip())
            except (OSError, ValueError):
                pass
    order = {k: c.pids[k] for k in sorted(c.pids, key=lambda k: (k != "munged",
                                                                  k != "slurmctld"))}
    tb._stop_pids(c.folder, order)
    for ns in c.netns.values():
        sh("ip", "netns", "del", ns, check=False)
    sh("ip", "link", "del", c.bridge, check=False)


def for_session() -> Iterator[Cluster]:
    """A started cluster for the whole session (the `slurm_cluster` fixture in
    tests/conftest.py: one per xdist worker, and the modules that use it share one worker
    through xdist_group "slurm-cluster"), or a skip saying why it could not start here."""
    folder = Path(tempfile.mkdtemp(prefix="stetho-cluster-"))
    try:
        c = start(folder)
    except ClusterError as e:
        shutil.rmtree(folder, ignore_errors=True)
        if missing():
            pytest.skip(f"a multi-node Slurm cannot run here: {e}")
        raise
    try:
        yield c
    finally:
        stop(c)
        shutil.rmtree(folder, ignore_errors=True)
