"""Which groups run which benchmark: every node alone (single-node all-reduce, NVLink inside
the node), and pairs whose two nodes sit under different leaf switches (multi-node all-reduce
through the NICs, the leaves and their uplinks), canaries only with canaries and controls only
with controls, so a slow pair belongs to one side."""

from __future__ import annotations

from stetho.localize.topology import Topology


def cross_leaf_pairs(nodes: list[str], topo: Topology) -> tuple[list[tuple[str, str]], bool]:
    """Disjoint pairs, each across two leaves where the nodes allow; (pairs, spans_leaves).
    Nodes all under one leaf pair within it (spans_leaves False: the report says so)."""
    by_leaf: dict[str, list[str]] = {}
    for n in topo.order(nodes):
        by_leaf.setdefault(topo.leaf(n), []).append(n)
    pairs: list[tuple[str, str]] = []
    while True:
        full = sorted((leaf for leaf in by_leaf if by_leaf[leaf]),
                      key=lambda leaf: -len(by_leaf[leaf]))
        if len(full) < 2:
            break
        pairs.append((by_leaf[full[0]].pop(0), by_leaf[full[1]].pop(0)))
    if pairs:
        return pairs, True
    rest = [n for members in by_leaf.values() for n in members]
    return [(rest[i], rest[i + 1]) for i in range(0, len(rest) - 1, 2)], False
