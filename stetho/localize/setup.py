"""From what a user gives (an inventory or a host list, a topology source, a runner name) to
the fleet, its topology and a runner. Errors name the flag and the fix."""

from __future__ import annotations

import fnmatch
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stetho.core import hostlist
from stetho.errors import ConfigError
from stetho.localize import runners, topology
from stetho.localize.fabric import STRAGGLER_P, Fabric
from stetho.localize.runners import Runner

RUNNERS = ("srun", "mpirun", "iperf3", "sim")


@dataclass
class Fleet:
    nodes: list[str]
    groups: dict[str, list[str]] = field(default_factory=dict)
    hostvars: dict[str, dict[str, Any]] = field(default_factory=dict)


def fleet(inventory: Path | None, nodes: str | None) -> Fleet:
    if inventory is None and not nodes:
        raise ConfigError("localize: give the fleet with -i INVENTORY or --nodes 'gpu[01-64]'")
    if inventory is None:
        return Fleet(hostlist.expand(nodes or ""))
    from stetho.fleet import ansible

    hostvars = ansible.inventory_hosts(inventory)
    groups = ansible.inventory_groups(inventory)
    names = list(hostvars)
    if nodes:
        wanted = set(hostlist.expand(nodes))
        names = [n for n in names if n in wanted]
    return Fleet(names, groups, hostvars)


def slurm_topology_text(scontrol: str = "scontrol") -> str:
    """`scontrol show topology`: the switches Slurm's tree plugin knows, in topology.conf's
    own key=value form."""
    try:
        proc = subprocess.run([scontrol, "show", "topology"], capture_output=True, text=True,
                              timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ConfigError(f"--topology slurm: scontrol failed: {exc}") from None
    if proc.returncode != 0 or "SwitchName=" not in proc.stdout:
        raise ConfigError("--topology slurm: Slurm reports no switches (TopologyPlugin="
                          "topology/tree and a topology.conf are needed); give --topology FILE "
                          f"or groups instead ({(proc.stderr or proc.stdout).strip()[:200]})")
    return proc.stdout


def build_topology(spec: str, fl: Fleet) -> topology.Topology:
    """`flat`, `slurm`, `groups[:GLOB]` (inventory groups as leaf switches), `uniform:N`
    (leaves of N nodes in order), or a topology.conf FILE."""
    if spec == "flat":
        return topology.flat(fl.nodes)
    if spec == "slurm":
        return topology.from_slurm(slurm_topology_text(), fl.nodes)
    if spec.startswith("uniform:"):
        try:
            per = int(spec.split(":", 1)[1])
        except ValueError:
            raise ConfigError(f"--topology {spec}: uniform:N takes a number of nodes") from None
        return topology.uniform(fl.nodes, max(1, per))
    if spec == "groups" or spec.startswith("groups:"):
        glob = spec.split(":", 1)[1] if ":" in spec else "*"
        chosen = {g: [n for n in members if n in set(fl.nodes)]
                  for g, members in fl.groups.items() if fnmatch.fnmatch(g, glob)}
        chosen = {g: m for g, m in chosen.items() if m}
        if not chosen:
            raise ConfigError(f"--topology {spec}: no inventory group matches {glob!r}")
        return topology.from_groups(fl.nodes, chosen)
    path = Path(spec)
    if not path.is_file():
        raise ConfigError(f"--topology {spec}: not flat, slurm, groups[:GLOB], uniform:N or a "
                          "topology.conf file")
    return topology.from_slurm(path.read_text(), fl.nodes)


@dataclass(frozen=True)
class RunnerOptions:
    name: str = "srun"
    expect: float | None = None
    command: str = runners.DEFAULT_NCCL
    gpus_per_node: int = 8
    prefix: str = "ssh {node}"
    rate_mbps: float = 40.0
    seconds: float = 1.0
    sim_faults: Sequence[str] = ()
    seed: int = 0
    noise: float = 0.03
    sim_noise: str = "uniform"
    stop_below: float = 0.0  # iperf3: a group's score that fails it alone (Judge.fails_alone)


def build_runner(opts: RunnerOptions, fl: Fleet, topo: topology.Topology) -> Runner:
    if opts.name == "sim":
        return runners.SimRunner(sim_fabric(topo, opts.sim_faults, opts.noise, opts.seed,
                                                    opts.sim_noise))
    if opts.name == "iperf3":
        return runners.Iperf3Runner(addresses(fl), rate_mbps=opts.rate_mbps,
                                    seconds=opts.seconds, prefix=opts.prefix,
                                    stop_below=opts.stop_below)
    if opts.expect is None:
        raise ConfigError(f"--runner {opts.name}: give --expect, the healthy busbw in GB/s of "
                          "this benchmark on a group of good nodes (a baseline run shows it)")
    if opts.name == "srun":
        return runners.SrunRunner(opts.expect, opts.command, opts.gpus_per_node)
    if opts.name == "mpirun":
        return runners.MpirunRunner(opts.expect, opts.command, opts.gpus_per_node)
    raise ConfigError(f"--runner {opts.name}: one of {', '.join(RUNNERS)}")


def addresses(fl: Fleet) -> dict[str, str]:
    """Where each node's iperf3 server listens: `localize_address`, else `ansible_host`,
    else the name."""
    out = {}
    for n in fl.nodes:
        v: Mapping[str, Any] = fl.hostvars.get(n, {})
        out[n] = str(v.get("localize_address") or v.get("ansible_host") or n)
    return out


def sim_fabric(topo: topology.Topology, specs: Sequence[str], noise: float,
               seed: int, model: str = "uniform") -> Fabric:
    """`node=gpu07[:0.5]`, `pair=gpu01,gpu09[:0.6]`, `uplink=leaf002[:0.5]`,
    `switch=leaf003[:0.7]`: the speed factor defaults to 0.5; `straggler=gpu07[:0.75]`: slow
    on 30% of its runs (heavy noise only)."""
    fab = Fabric(topo, noise=noise, seed=seed, model=model)
    switches = {s for p in topo.paths.values() for s in p}
    for spec in specs:
        kind, _, rest = spec.partition("=")
        what, _, factor_text = rest.partition(":")
        try:
            factor = float(factor_text) if factor_text else 0.5
        except ValueError:
            raise ConfigError(f"--sim-fault {spec}: the factor after ':' is a number") from None
        if kind == "node" and what in topo.paths:
            fab.nodes[what] = factor
        elif kind == "pair" and len(ends := what.split(",")) == 2 and \
                all(e in topo.paths for e in ends):
            fab.pairs[frozenset(ends)] = factor
        elif kind == "straggler" and what in topo.paths:
            if model != "heavy":
                raise ConfigError(f"--sim-fault {spec}: a straggler needs --sim-noise heavy")
            fab.stragglers[what] = (STRAGGLER_P, factor if factor_text else 0.75)
        elif kind in ("uplink", "switch") and what in switches:
            (fab.uplinks if kind == "uplink" else fab.switches)[what] = factor
        else:
            raise ConfigError(f"--sim-fault {spec}: node=NODE, pair=A,B, uplink=SWITCH, "
                              "switch=SWITCH or straggler=NODE, with names from this fleet and "
                              "topology")
    return fab
