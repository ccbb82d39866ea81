"""The fabric as a tree: switches over switches over nodes, so that groups follow it.

A group test whose members share a leaf switch exercises only that leaf; a group that spans
leaves also crosses their uplinks. Splitting along the tree is what lets a leaf-switch fault
show as one switch instead of a dozen nodes, and an uplink fault show at all. The tree comes
from Slurm's `topology.conf` (tree plugin: `SwitchName=s1 Nodes=gpu[01-16]` / `Switches=...`),
from inventory groups (one group per leaf), or, with neither, one flat switch.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from stetho.core import hostlist
from stetho.errors import ConfigError

ROOT = "(fabric)"
_ASSIGN = re.compile(r"(\w+)=(\S+)")


@dataclass(frozen=True)
class Topology:
    """Nodes in fabric order (depth first, so that a switch's nodes are contiguous) and the
    path of switches from the top down to each node's leaf."""

    nodes: tuple[str, ...]
    paths: Mapping[str, tuple[str, ...]] = field(repr=False)
    _index: dict[str, int] = field(init=False, repr=False, compare=False, default_factory=dict)
    _under: dict[tuple[str, ...], int] = field(init=False, repr=False, compare=False,
                                               default_factory=dict)
    _by_leaf: dict[str, list[str]] = field(init=False, repr=False, compare=False,
                                           default_factory=dict)

    def __post_init__(self) -> None:
        missing = [n for n in self.nodes if n not in self.paths]
        if missing:
            raise ConfigError(f"topology: no switch path for {', '.join(missing[:5])}")
        # Lookups the search makes every round, so that a 4,096-node fleet stays cheap.
        index = {n: i for i, n in enumerate(self.nodes)}
        under: dict[tuple[str, ...], int] = {}
        by_leaf: dict[str, list[str]] = {}
        for n in self.nodes:
            p = self.paths[n]
            for k in range(1, len(p) + 1):
                under[p[:k]] = under.get(p[:k], 0) + 1
            by_leaf.setdefault(p[-1], []).append(n)
        object.__setattr__(self, "_index", index)
        object.__setattr__(self, "_under", under)
        object.__setattr__(self, "_by_leaf", by_leaf)

    def leaf(self, node: str) -> str:
        return self.paths[node][-1]

    def order(self, group: Iterable[str]) -> list[str]:
        """A group's members in fabric order."""
        index: dict[str, int] = self._index
        return sorted(set(group), key=index.__getitem__)

    def leaves(self, group: Iterable[str] | None = None) -> dict[str, list[str]]:
        """Leaf switch -> its members of the group (all nodes when None), in fabric order."""
        if group is None:
            return {k: list(v) for k, v in self._by_leaf.items()}
        out: dict[str, list[str]] = {}
        for n in self.order(group):
            out.setdefault(self.leaf(n), []).append(n)
        return out

    def switch_of(self, group: Sequence[str]) -> str | None:
        """The deepest switch whose subtree holds exactly this group, or None."""
        if not group:
            return None
        distinct = list({self.paths[n] for n in group})
        common = distinct[0]
        for p in distinct[1:]:
            k = 0
            while k < min(len(common), len(p)) and common[k] == p[k]:
                k += 1
            common = common[:k]
        if not common:
            return None
        under: dict[tuple[str, ...], int] = self._under
        return common[-1] if under.get(common) == len(set(group)) else None

    def leaf_members(self, leaf: str) -> list[str]:
        members: list[str] = self._by_leaf.get(leaf, [])
        return members

    def split(self, group: Sequence[str], parts: int) -> list[list[str]]:
        """At most `parts` disjoint parts of a group, along the tree: by the first switch level
        where members differ (whole switches binned, balanced by size), else in contiguous runs
        of nodes. Never splits a switch while whole switches can be binned."""
        members = self.order(group)
        if len(members) <= 1 or parts <= 1:
            return [members]
        depth = 0
        while True:
            keys = {self.paths[n][depth] if depth < len(self.paths[n]) else n for n in members}
            if len(keys) > 1:
                break
            if all(depth >= len(self.paths[n]) for n in members):
                break
            depth += 1
        if all(depth < len(self.paths[n]) for n in members) and len(keys) > 1:
            units: list[list[str]] = []
            for n in members:
                key = self.paths[n][depth]
                if units and self.paths[units[-1][0]][depth] == key:
                    units[-1].append(n)
                else:
                    units.append([n])
            return _bins(units, parts)
        return _bins([[n] for n in members], parts)


def _bins(units: list[list[str]], parts: int) -> list[list[str]]:
    """Contiguous units into at most `parts` bins of about equal size (units stay whole)."""
    if len(units) <= parts:
        return [list(u) for u in units]
    total = sum(len(u) for u in units)
    bins: list[list[str]] = [[]]
    done = 0
    for i, unit in enumerate(units):
        left_units = len(units) - i
        left_bins = parts - len(bins)
        target = total * len(bins) / parts
        if bins[-1] and (done + len(unit) / 2 > target or left_units <= left_bins) \
                and len(bins) < parts:
            bins.append([])
        bins[-1].extend(unit)
        done += len(unit)
    return [b for b in bins if b]


def flat(nodes: Sequence[str], switch: str = "switch0") -> Topology:
    """One switch over every node: no topology known."""
    return Topology(tuple(nodes), {n: (ROOT, switch) for n in nodes})


def uniform(nodes: Sequence[str], per_leaf: int, per_spine: int = 0) -> Topology:
    """Leaves of `per_leaf` nodes in order (and spines of `per_spine` leaves, when set): the
    simulator's fat tree."""
    paths: dict[str, tuple[str, ...]] = {}
    for i, n in enumerate(nodes):
        leaf = i // per_leaf
        path: tuple[str, ...] = (ROOT, f"leaf{leaf:03d}")
        if per_spine:
            path = (ROOT, f"spine{leaf // per_spine:02d}", f"leaf{leaf:03d}")
        paths[n] = path
    return Topology(tuple(nodes), paths)


def from_groups(nodes: Sequence[str], groups: Mapping[str, Sequence[str]]) -> Topology:
    """Inventory groups as leaves (a node's first group that holds it); ungrouped nodes share
    one leaf of their own."""
    paths: dict[str, tuple[str, ...]] = {}
    for name, members in groups.items():
        for n in members:
            paths.setdefault(n, (ROOT, name))
    for n in nodes:
        paths.setdefault(n, (ROOT, "ungrouped"))
    ordered = sorted(nodes, key=lambda n: (list(groups).index(paths[n][1])
                                           if paths[n][1] in groups else len(groups)))
    return Topology(tuple(ordered), paths)


def from_slurm(text: str, nodes: Sequence[str] | None = None) -> Topology:
    """Slurm topology.conf (tree plugin). Nodes the file does not place are an error, since a
    node without a switch cannot be told apart from a switch fault."""
    leaves: dict[str, list[str]] = {}
    children: dict[str, list[str]] = {}
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        kv = dict(_ASSIGN.findall(line))
        name = kv.get("SwitchName")
        if not name:
            raise ConfigError(f"topology.conf line {lineno}: no SwitchName= in {raw.strip()!r}")
        if "Nodes" in kv:
            leaves[name] = hostlist.expand(kv["Nodes"])
        if "Switches" in kv:
            children[name] = hostlist.expand(kv["Switches"])
    if not leaves:
        raise ConfigError("topology.conf: no switch lists Nodes=")
    parent = {c: p for p, cs in children.items() for c in cs}
    paths: dict[str, tuple[str, ...]] = {}
    order: list[str] = []
    for leaf, members in leaves.items():
        chain = [leaf]
        while chain[-1] in parent:
            chain.append(parent[chain[-1]])
            if len(chain) > 64:
                raise ConfigError(f"topology.conf: switch loop through {leaf}")
        for n in members:
            paths.setdefault(n, (ROOT, *reversed(chain)))
            order.append(n)
    order = sorted(dict.fromkeys(order), key=lambda n: paths[n])
    if nodes is not None:
        unplaced = [n for n in nodes if n not in paths]
        if unplaced:
            raise ConfigError(f"topology.conf places no switch over {hostlist.compress(unplaced)}"
                              "; add them to a SwitchName=... Nodes= line")
        wanted = set(nodes)
        order = [n for n in order if n in wanted]
    return Topology(tuple(order), paths)
