"""Wall time of `stetho sweep` over 8 and 32 simulated hosts (stetho already installed), and
in the same run the Ansible floor: `ansible all -m ping` on the same inventory and settings.

A real sshd on a loopback port serves every host, each on a loopback address of its own
(127.0.0.2, .3, ...), so each host gets its own SSH connection as a fleet's nodes do; each
host is its own simulated 8x H100 node (sysroot and shims through host vars) with its own
venv. Every timed run starts cold: no SSH master connection left from the run before.
Controller and all "nodes" share this machine's cores, as in the tests. Prints medians and
the sweep/ping ratio.

    python bench/sweep.py [--hosts 8 32] [--runs 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from stetho.fleet.ansible import FAST_ENV  # noqa: E402
from stetho.sim.builder import build_node  # noqa: E402
from tests import sshd as sshd_mod  # noqa: E402


def timed(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    proc = subprocess.run(argv, env=env, capture_output=True, text=True)
    if proc.returncode not in (0, 1):
        sys.exit(f"{argv[:4]} exited {proc.returncode}:\n{proc.stdout[-1500:]}"
                 f"\n{proc.stderr[-1500:]}")
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hosts", type=int, nargs="+", default=[8, 32])
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    most = max(args.hosts)
    with tempfile.TemporaryDirectory() as tmp_s:
        tmp = Path(tmp_s)
        server = sshd_mod.start(tmp / "sshd", addresses=most + 1)
        try:
            hosts = {}
            for i in range(1, most + 1):
                name = f"node{i:02d}"
                node = build_node(tmp / "sim" / name, name)
                hosts[name] = {
                    "ansible_host": f"127.0.0.{i + 1}", "ansible_port": server.port,
                    "ansible_user": "root",
                    "ansible_ssh_private_key_file": str(server.client_key),
                    "ansible_python_interpreter": "/usr/bin/python3",
                    "stetho_profile": "h100-sxm-8gpu", "stetho_sysroot": str(node / "sysroot"),
                    "stetho_path": f"{node / 'bin'}:/usr/local/bin:/usr/bin:/bin",
                    "stetho_venv": str(tmp / "venvs" / name),
                    "stetho_python": "/usr/bin/python3"}
            inv = tmp / "inventory.yml"
            inv.write_text(yaml.safe_dump({"all": {"hosts": hosts}}))
            env = {**os.environ, "STETHO_CACHE": str(tmp / "cache")}
            bindir = Path(sys.executable).parent
            sweep = [sys.executable, "-m", "stetho", "sweep", "-i", str(inv), "--out",
                     str(tmp / "runs"), "--forks", str(most)]
            print(f"installing stetho on {most} hosts (not timed)...", flush=True)
            t = timed(sweep, env)
            print(f"  first sweep with install: {t:.1f} s")
            ping_env = {**env, **FAST_ENV, "ANSIBLE_HOME": str(tmp / "ah")}
            for n in args.hosts:
                limit = f"node[01-{n:02d}]"
                names = ",".join(f"node{i:02d}" for i in range(1, n + 1))
                s_t, p_t = [], []
                for r in range(args.runs):  # interleaved: noise hits both alike
                    s_t.append(timed(sweep + ["--limit", limit], env))  # own control dir
                    cold = {**ping_env, "ANSIBLE_SSH_CONTROL_PATH_DIR": str(tmp / f"cp{n}-{r}")}
                    p_t.append(timed([str(bindir / "ansible"), "all", "-i", str(inv),
                                      "--limit", names, "-m", "ping", "-f", str(most)], cold))
                ms, mp = statistics.median(s_t), statistics.median(p_t)
                print(f"{n:3d} hosts: sweep median {ms:6.1f} s ({ms / n * 1000:5.0f} ms/host)"
                      f"   ansible -m ping median {mp:5.1f} s   ratio {ms / mp:.2f}x"
                      f"   (runs {', '.join(f'{x:.1f}' for x in s_t)})")
        finally:
            sshd_mod.stop(server)


if __name__ == "__main__":
    main()
