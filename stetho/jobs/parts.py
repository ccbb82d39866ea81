"""A part of the cluster, as a person names it, resolved to the nodes behind it.

* a node (`gpu042`) or a hostlist of nodes (`gpu[041-044]`);
* a switch of the topology (`leafA`, or a spine: every node under it);
* a node's port (`gpu042:mlx5_0/1`): that node, since a port serves one node;
* a switch's port (`leafA:17`): topology.conf does not say which node is cabled to which
  port, so every node under that switch counts: an upper bound, said so in `note`. Too many
  jobs named is a nuisance; one left out is a job killed by surprise.

A name that is none of these is a ConfigError naming it and the switches there are: a typo
must not read as "no running jobs".
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from stetho.core import hostlist
from stetho.errors import ConfigError
from stetho.localize.topology import ROOT, Topology, from_slurm

_PORT = re.compile(r"^[A-Za-z0-9_.-]+(?:/\d+)?$")
_NODES = re.compile(r"(?:^|\s)Nodes=\S+")


@dataclass(frozen=True)
class Part:
    """kind: node, nodes, switch, node-port or switch-port; `nodes` in fabric order where a
    topology gives one."""

    spec: str
    kind: str
    nodes: tuple[str, ...]
    note: str = ""

    def describe(self) -> str:
        n = len(self.nodes)
        if self.kind in ("node", "node-port"):
            return f"{self.kind.replace('-', ' ')} {self.spec}"
        return f"{self.kind.replace('-', ' ')} {self.spec} ({n} node{'s' * (n != 1)})"


def load_topology(spec: str | None, slurm_text: Callable[[], str]) -> Topology | None:
    """`--topology`: None (no topology), `slurm` (`slurm_text()`, i.e. scontrol show
    topology) or a topology.conf file."""
    if spec is None:
        return None
    if spec == "slurm":
        text = slurm_text()
        where = "scontrol show topology"
    else:
        path = Path(spec)
        try:
            text = path.read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"--topology {spec}: cannot read it ({exc}); give a "
                              "topology.conf file or `slurm`") from None
        where = str(path)
    # `scontrol show topology` lists an upper switch's Nodes= too (its leaves' nodes, again)
    text = "\n".join(_NODES.sub(" ", line) if "Switches=" in line else line
                     for line in text.splitlines())
    try:
        return from_slurm(text)
    except ConfigError as exc:
        raise ConfigError(f"--topology {where}: {exc}") from None


def switches(topo: Topology) -> list[str]:
    """Every switch of the tree, top down."""
    seen: dict[str, None] = {}
    for n in topo.nodes:
        for s in topo.paths[n]:
            if s != ROOT:
                seen.setdefault(s, None)
    return list(seen)


def under(topo: Topology, switch: str) -> tuple[str, ...]:
    return tuple(n for n in topo.nodes if switch in topo.paths[n])


def resolve(spec: str, topo: Topology | None, known: Callable[[], set[str]]) -> Part:
    """The part `spec` names. `known()` is every node Slurm knows, asked only for names the
    topology does not hold."""
    spec = spec.strip()
    sw = set(switches(topo)) if topo is not None else set()
    if ":" in spec:
        owner, port = spec.split(":", 1)
        if not _PORT.match(port):
            raise ConfigError(f"{spec}: {port!r} is not a port; write NODE:mlx5_0/1 or "
                              "SWITCH:PORT")
        if owner in sw and topo is not None:
            nodes = under(topo, owner)
            return Part(spec, "switch-port", nodes, note=(
                f"topology.conf does not map {owner}'s ports to nodes: every node under "
                f"{owner} is counted (an upper bound)"))
        node = _nodes(owner, topo, known, sw, spec)
        if len(node) != 1:
            raise ConfigError(f"{spec}: a port belongs to one node, not {owner}")
        return Part(spec, "node-port", node)
    if spec in sw and topo is not None:
        return Part(spec, "switch", under(topo, spec))
    nodes = _nodes(spec, topo, known, sw, spec)
    return Part(spec, "node" if len(nodes) == 1 and nodes[0] == spec else "nodes", nodes)


def _nodes(expr: str, topo: Topology | None, known: Callable[[], set[str]], sw: set[str],
           spec: str) -> tuple[str, ...]:
    try:
        names = hostlist.expand(expr)
    except ConfigError:
        names = []
    if not names:
        raise _unknown(spec, sw, topo)
    placed = set(topo.nodes) if topo is not None else set()
    rest = [n for n in names if n not in placed]
    if rest:
        slurm = known()
        missing = [n for n in rest if n not in slurm]
        if missing:
            raise _unknown(spec, sw, topo, missing)
    return tuple(topo.order(names) if topo is not None and not rest else names)


def _unknown(spec: str, sw: set[str], topo: Topology | None,
             missing: list[str] | None = None) -> ConfigError:
    what = f"{hostlist.compress(missing)} " if missing and missing != [spec] else ""
    if topo is None:
        where = ("no switch is known without --topology (give a topology.conf FILE, or "
                 "`slurm` for scontrol show topology)")
    else:
        where = f"known switches: {', '.join(switches(topo))}"
    return ConfigError(f"unknown part {spec!r}: {what}not a node Slurm knows nor a switch; "
                       f"{where}")
