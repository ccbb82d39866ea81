"""`stetho sweep` of 32 loopback hosts against `ansible all -m ping` on the same inventory and
settings, both cold, interleaved; with each playbook step's share of the sweep.

A real sshd serves every host on a loopback address of its own (127.0.0.2, .3, ...; one sshd
per 16 addresses, Debian's limit), so each host gets its own SSH connection as a fleet's nodes
do; each host is its own simulated 8x H100 node (sysroot and shims through host vars) with
its own venv, stetho already installed (the untimed first round installs it). Both sides use
the sweep's Ansible settings (stetho.fleet.ansible.FAST_ENV: pipelining, ControlMaster with
ControlPersist 60 s, explicit gathering, the linear strategy) and the same forks, and both
start **cold**: every run gets a fresh ControlPath folder, so no SSH master survives from the
run before. The connections each run opened are counted in sshd's logs and printed: a sweep
opens about as many as the ping. Controller and all "nodes" share this machine's cores.

    python bench/sweep.py [--hosts 32] [--runs 3] [--before REF] [--smoke]
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import harness  # noqa: E402
from stetho.fleet import steps as steps_mod  # noqa: E402
from stetho.fleet.ansible import FAST_ENV  # noqa: E402
from stetho.sim.builder import build_node  # noqa: E402
from tests import sshd as sshd_mod  # noqa: E402

GOAL = 2.0  # issue 32: a sweep of 32 hosts <= 2x `ansible all -m ping`


@dataclass
class Cold(harness.Side):
    """A side whose every run starts without an SSH master: `control_env` names the env var
    given a fresh ControlPath folder per run, and `stale` folders (an older checkout's fixed
    control folder) are emptied first. Counts each run's connections in sshd's logs."""

    server: sshd_mod.Sshd | None = None
    control_env: str | None = None
    stale: tuple[Path, ...] = ()
    out: Path | None = None  # a sweep's --out: its runs' step shares are read from there
    connections: list[int] = field(default_factory=list)

    def __call__(self) -> float:
        for folder in self.stale:
            shutil.rmtree(folder, ignore_errors=True)
        control = Path(tempfile.mkdtemp(prefix="bcp-"))  # short: sun_path is 108 bytes
        if self.control_env:
            self.env = {**(self.env or os.environ), self.control_env: str(control)}
        before = self.server.connections() if self.server else 0
        try:
            return super().__call__()
        finally:
            if self.server:
                self.connections.append(self.server.connections() - before)
            shutil.rmtree(control, ignore_errors=True)


def inventory(tmp: Path, server: sshd_mod.Sshd, n: int) -> Path:
    hosts = {}
    for i in range(1, n + 1):
        name = f"node{i:02d}"
        node = build_node(tmp / "sim" / name, name)
        hosts[name] = {
            "ansible_host": f"127.0.0.{i + 1}", "ansible_port": server.port,
            "ansible_user": "root", "ansible_ssh_private_key_file": str(server.client_key),
            "ansible_python_interpreter": "/usr/bin/python3",
            "stetho_profile": "h100-sxm-8gpu", "stetho_sysroot": str(node / "sysroot"),
            "stetho_path": f"{node / 'bin'}:/usr/local/bin:/usr/bin:/bin",
            "stetho_venv": str(tmp / "venvs" / name), "stetho_python": "/usr/bin/python3",
            # named: a checkout before issue 32 (--before) defaults to the controller's /etc
            "stetho_etc": str(tmp / "etc" / name)}
    path = tmp / "inventory.yml"
    path.write_text(yaml.safe_dump({"all": {"hosts": hosts}}))
    return path


def step_shares(out: Path, walls: list[float]) -> dict[str, list[float]]:
    """Each step's share of each timed sweep's wall time (the runs after the untimed first),
    from ansible-runner's job events, plus the controller's time outside ansible-playbook."""
    runs = sorted(p for p in out.glob("2*") if p.is_dir())[-len(walls):]
    shares: dict[str, list[float]] = {}
    for run, wall in zip(runs, walls, strict=True):
        events = [json.loads(f.read_text()) for f in
                  (run / "ansible" / "artifacts" / "sweep" / "job_events").glob("*.json")]
        got = steps_mod.of_events(events)
        for st in got.steps:
            shares.setdefault(st.task, []).append(st.span_s / wall)
        shares.setdefault("(controller outside ansible-playbook: wheelhouse, inventory, "
                          "evaluation, run folder)", []).append(max(wall - got.wall_s, 0) / wall)
    return shares


def main() -> None:
    ap = harness.parser(__doc__, runs=3)
    ap.add_argument("--hosts", type=int, default=32)
    ap.add_argument("--forks", type=int, help="Ansible forks, both sides (default: --hosts)")
    args = ap.parse_args()
    n, runs = (2, 1) if args.smoke else (args.hosts, args.runs)
    forks = args.forks or n
    bindir = Path(sys.executable).parent
    with tempfile.TemporaryDirectory() as tmp_s:
        tmp = Path(tmp_s)
        server = sshd_mod.start(tmp / "sshd", addresses=n + 1)
        try:
            inv = inventory(tmp, server, n)
            base = {**os.environ, "STETHO_CACHE": str(tmp / "cache")}
            sides: dict[str, Cold] = {}
            for k, tree in enumerate(harness.trees(args.before)):
                out = tmp / f"runs-{k}"
                sides[f"stetho sweep ({tree.label})"] = Cold(
                    tree.stetho("sweep", "-i", str(inv), "--out", str(out), "--forks",
                                str(forks), "--no-history", "-q"),
                    env=tree.env(base), cwd=tree.root, server=server, out=out,
                    # a checkout before issue 32 kept one control folder for every sweep
                    stale=(Path(tempfile.gettempdir()) / "stetho-cp-sweep",))
            ping_env = {**base, **FAST_ENV, "ANSIBLE_HOME": str(tmp / "ansible-home")}
            sides["ansible all -m ping"] = Cold(
                [str(bindir / "ansible"), "all", "-i", str(inv), "-m", "ping", "-f",
                 str(forks)], env=ping_env, server=server,
                control_env="ANSIBLE_SSH_CONTROL_PATH_DIR")
            print(f"installing stetho on {n} hosts (the untimed first round)...", flush=True)
            times = harness.interleave(sides, runs)
            report(sides, times, n, forks)
        finally:
            sshd_mod.stop(server)


def report(sides: Mapping[str, Cold], times: Mapping[str, list[float]], n: int,
           forks: int) -> None:
    harness.header(f"sweep of {n} loopback hosts, {forks} forks, against `ansible all -m "
                   "ping` with the same settings, interleaved, both cold")
    print("settings (both sides): pipelining, ControlMaster auto + ControlPersist 60s with a "
          "fresh ControlPath folder per run, gathering explicit, strategy linear, "
          f"forks {forks}")
    for name, side in sides.items():
        if side.codes - {0}:
            print(f"WARNING: {name} exited {sorted(side.codes)}: {side.last_output[-800:]}")
        print(harness.line(name, times[name], side.cpu[-len(times[name]):]))
        timed = side.connections[-len(times[name]):]
        print(f"  connections per run (sshd's log): {', '.join(map(str, timed))} "
              f"for {n} hosts (median {statistics.median(timed):g})")
    ping = times["ansible all -m ping"]
    for name, side in sides.items():
        if side.out is None:
            continue
        harness.judge(name, times[name], ping, goal=GOAL, floor_name="ansible all -m ping")
        shares = step_shares(side.out, times[name])
        print(f"  steps of {name}, share of the sweep's wall time (median of "
              f"{len(times[name])}):")
        for task, got in sorted(shares.items(), key=lambda kv: -statistics.median(kv[1])):
            print(f"    {statistics.median(got) * 100:5.1f}%  {task}")
    print(harness.load())


if __name__ == "__main__":
    main()
