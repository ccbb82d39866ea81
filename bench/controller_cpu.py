"""Controller CPU per node: the Ansible sweep vs `sweep --via slurm` vs `stetho ingest` alone,
over simulated nodes, extrapolated to 10,240 nodes (issue 31).

What is counted: the CPU of the command's own process tree on the controller (python, srun,
ansible-playbook and its forks, ssh clients), from the kernel's child rusage. The nodes' work
is not: on the Slurm side it runs under slurmd (tests/slurm_cluster.py: one slurmd per network
namespace), on the Ansible side under sshd (tests/sshd.py, each host on a loopback address of
its own). slurmctld's own CPU is not counted either (a site's Slurm controller is another
machine); nor are Ansible's ControlPersist ssh masters, which outlive the command (so Ansible
is, if anything, undercounted).

Model: controller CPU = fixed + per_node x nodes, fitted through two sizes measured in the
same interleaved run (the small and the large partition / --limit / spool); extrapolated to
10,240 nodes. The floor: a fresh python reading and JSON-parsing every node's spool file (the
least any controller must do with what the nodes send). Ansible is measured at 16 hosts
at most: Debian's sshd refuses more than 16 ListenAddress lines, and hosts sharing one
address would share one ssh master (cheaper than a real fleet).

    python bench/controller_cpu.py [--nodes 32] [--ansible 16] [--small 8] [--runs 3]
    python bench/controller_cpu.py --smoke      # 2 nodes, 1 run: proves it works
"""

from __future__ import annotations

import shutil
import statistics
import sys
import tempfile
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import harness  # noqa: E402

FLEET = 10_240
GOAL = "none numeric in issue 31 for this figure: measured and extrapolated, model stated"
_NODE_STETHO = """#!/bin/sh
root={nodes}/$SLURMD_NODENAME
export STETHO_SYSROOT="$root/sysroot" PATH="$root/bin:/usr/local/bin:/usr/bin:/bin"
export STETHO_CONFIG={folder}/stetho.toml HOME={folder} STETHO_CACHE={folder}/cache
exec {stetho} "$@"
"""
_FLOOR = ("import json, pathlib, sys\n"
          "n = sum(1 for p in pathlib.Path(sys.argv[1]).glob('*/*.json')"
          " if json.loads(p.read_bytes()))\nprint(n, 'files')")


def main() -> None:
    ap = harness.parser(__doc__, runs=3)
    ap.add_argument("--nodes", type=int, default=32, help="Slurm nodes (and ingest spool)")
    ap.add_argument("--ansible", type=int, default=16, help="Ansible hosts (at most 16)")
    ap.add_argument("--small", type=int, default=8, help="the small size of the fit")
    args = ap.parse_args()
    if args.smoke:
        args.nodes, args.ansible, args.small, args.runs = 2, 2, 1, 1
    args.ansible = min(args.ansible, 16, args.nodes)
    from tests import slurm_cluster as sc

    # 32 slurmds and their start-up health checks on a loaded 2-core machine take longer
    # than a test's cluster is given
    sc.START_TIMEOUT_S = sc.tb.START_TIMEOUT_S = 600.0
    with tempfile.TemporaryDirectory(prefix="stetho-ctlcpu-", ignore_cleanup_errors=True
                                     ) as tmp_s:
        tmp = Path(tmp_s)
        try:
            cluster = sc.start(tmp / "cluster", args.nodes)
        except (sc.ClusterError, sc.tb.TestbedError) as exc:
            sys.exit(f"cannot start the multi-node Slurm here: {str(exc)[:500]}")
        try:
            _measure(args, cluster, tmp)
        finally:
            sc.stop(cluster)


def _measure(args: object, c: object, tmp: Path) -> None:
    from tests import slurm_cluster as sc
    from tests import sshd as sshd_mod

    assert isinstance(c, sc.Cluster)
    big, small, ans = args.nodes, args.small, args.ansible  # type: ignore[attr-defined]
    runs = args.runs  # type: ignore[attr-defined]
    c.scontrol("create", "PartitionName=small", f"Nodes={','.join(c.nodes[:small])}",
               "State=UP")
    wrapper = tmp / "node-stetho"
    wrapper.write_text(_NODE_STETHO.format(nodes=c.folder / "nodes", folder=c.folder,
                                           stetho=Path(sys.executable).parent / "stetho"))
    wrapper.chmod(0o755)
    env = c.full_env({"STETHO_CACHE": str(tmp / "cache"), "STETHO_PROFILE": "h100-sxm-8gpu"})
    py = [sys.executable, "-m", "stetho"]

    def slurm(partition: str, spool: Path) -> harness.Side:
        return harness.Side([*py, "sweep", "--via", "slurm", "--partition", partition,
                             "--spool", str(spool), "--out", str(tmp / "runs-slurm"),
                             "--node-stetho", str(wrapper), "--no-history", "-q"], env=env,
                            cwd=harness.REPO)

    # the spool ingest reads: the nodes' own files from one Slurm sweep, copied per run
    first = slurm("gpu", tmp / "spool-first")
    first()
    if not first.codes <= {0, 1}:
        sys.exit(f"the first Slurm sweep exited {sorted(first.codes)}:\n"
                 f"{first.last_output[-3000:]}")
    prep = {n: tmp / f"prep-{n}" for n in (big, small)}
    for size, folder in prep.items():
        for node in c.nodes[:size]:
            (src,) = (tmp / "spool-first" / node / "ingested").glob("*.json")
            (folder / node).mkdir(parents=True)
            shutil.copy(src, folder / node / src.name)
        for k in range(runs + 1):
            shutil.copytree(folder, tmp / f"copies-{size}" / f"{k:03d}")
        (tmp / f"used-{size}").mkdir()

    def ingest(size: int) -> harness.Side:
        script = (f'd=$(ls -d {tmp}/copies-{size}/* | head -1) && mv "$d" {tmp}/used-{size}/ '
                  f'&& exec "$@" {tmp}/used-{size}/$(basename "$d")')
        return harness.Side(["sh", "-c", script, "ingest", *py, "ingest", "--out",
                             str(tmp / "runs-ingest"), "--no-history", "-q"], env=env,
                            cwd=harness.REPO)

    server = sshd_mod.start(tmp / "sshd", addresses=ans)
    try:
        inventory = _inventory(c, server, ans, tmp)
        sides = {
            f"ansible sweep x{ans}": harness.Side(
                [*py, "sweep", "-i", str(inventory), "--out", str(tmp / "runs-ansible"),
                 "--no-history", "-q"], env=env, cwd=harness.REPO),
            f"ansible sweep x{small}": harness.Side(
                [*py, "sweep", "-i", str(inventory), "--limit", ",".join(c.nodes[:small]),
                 "--out", str(tmp / "runs-ansible"), "--no-history", "-q"], env=env,
                cwd=harness.REPO),
            f"slurm sweep x{big}": slurm("gpu", tmp / "spool-big"),
            f"slurm sweep x{small}": slurm("small", tmp / "spool-small"),
            f"ingest x{big}": ingest(big),
            f"ingest x{small}": ingest(small),
            f"floor x{big}": harness.Side([sys.executable, "-c", _FLOOR, str(prep[big])]),
        }
        harness.header(f"controller CPU per node: Ansible sweep (x{small}, x{ans}) vs Slurm "
                       f"sweep (x{small}, x{big}) vs ingest alone (x{small}, x{big}), "
                       f"{runs} interleaved runs")
        # warm-up, untimed: the Ansible sides install stetho into the hosts' venv once (as a
        # fleet's nodes have it installed); the other sides start no colder than a night's
        for name, side in sides.items():
            if name.startswith("ansible"):
                side()
        for side in sides.values():
            side.cpu.clear()
            side.codes.clear()
        times = harness.interleave(sides, runs, warm=False)
    finally:
        sshd_mod.stop(server)
    for name, side in sides.items():
        print(harness.line(name, times[name], side.cpu) + f"; exit {sorted(side.codes)}")
    cpu = {name: statistics.median(side.cpu) for name, side in sides.items()}
    print(f"goal: {GOAL}")
    floor = cpu[f"floor x{big}"]
    for what, n_small, n_big in (("ansible sweep", small, ans), ("slurm sweep", small, big),
                                 ("ingest", small, big)):
        lo, hi = cpu[f"{what} x{n_small}"], cpu[f"{what} x{n_big}"]
        per = max((hi - lo) / (n_big - n_small), 0.0) if n_big > n_small else hi / n_big
        fixed = max(lo - per * n_small, 0.0)
        fleet = fixed + per * FLEET
        print(f"model: {what}: {per * 1000:.1f} ms CPU per node + {fixed:.2f} s fixed -> "
              f"{FLEET} nodes: {fleet / 60:.1f} CPU-minutes on the controller "
              f"({fleet / 60 / 2:.1f} min on 2 cores at best); x{n_big} is "
              f"{hi / floor:.1f}x the floor ({floor:.2f} s CPU)")
    print(f"floor: a fresh python reading and JSON-parsing {big} spool files: CPU median "
          f"{harness.ms(floor)}")
    print(harness.load())


def _inventory(c: object, server: object, count: int, tmp: Path) -> Path:
    """Ansible hosts n01.. on loopback addresses of their own, each on its cluster node's
    simulated hardware, all sharing one venv (installed once, in the warm-up run)."""
    hosts = {}
    for i, node in enumerate(c.nodes[:count], start=1):  # type: ignore[attr-defined]
        root = c.folder / "nodes" / node  # type: ignore[attr-defined]
        hosts[node] = {
            "ansible_host": f"127.0.0.{i}", "ansible_port": server.port,  # type: ignore
            "ansible_user": "root",
            "ansible_ssh_private_key_file": str(server.client_key),  # type: ignore
            "ansible_python_interpreter": "/usr/bin/python3",
            "stetho_profile": "h100-sxm-8gpu", "stetho_sysroot": str(root / "sysroot"),
            "stetho_path": f"{root / 'bin'}:/usr/local/bin:/usr/bin:/bin",
            "stetho_venv": str(tmp / "venv"), "stetho_python": "/usr/bin/python3",
            "stetho_etc": str(tmp / "etc")}
    path = tmp / "inventory.yml"
    path.write_text(yaml.safe_dump({"all": {"hosts": hosts}}))
    return path


if __name__ == "__main__":
    main()
