"""Fleet checks, on the controller, over every node of a profile at once.

A node can pass every check of its own and still be the odd one out: a driver, NCCL or HCA
firmware version its peers do not run (collectives mix code paths, or hang), or an NCCL busbw
well under the fleet's while above the profile's floor. These compare each node with its peers
of the same profile, robustly: the majority version, and the median/MAD of busbw.

A median and MAD over a handful of nodes say little (over 3, one slow node moves the median
itself), so a profile with fewer nodes in the run than its `fleet.min_peers` (default 8) is
not compared: each of its nodes gets a `skip` per fleet check that says how many there were.
A skip is not a pass: a gate policy that lists a fleet check cannot call such a node GO.
"""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import replace

from stetho.checking.nodes import NodeSummary
from stetho.profiles import FleetSpec
from stetho.results import Result

_DEFAULT = FleetSpec()
#: The fleet checks' names (what `check -k` can also select in a run of several nodes).
NAMES = ("fleet_busbw", "fleet_versions")


def evaluate(summaries: list[NodeSummary]) -> list[Result]:
    """Fleet results for every profile: a verdict per node where the profile has enough nodes,
    else a `skip` saying how many; the limits are the profile's `fleet:` section
    (stetho.profiles.FleetSpec)."""
    by_profile: dict[str, list[NodeSummary]] = {}
    for s in summaries:
        by_profile.setdefault(s["profile"], []).append(s)
    out: list[Result] = []
    for profile, nodes in sorted(by_profile.items()):
        spec = _spec(profile)
        out += versions(profile, nodes, spec)
        out += busbw(profile, nodes, spec)
    return out


def _spec(profile: str) -> FleetSpec:
    from stetho import profiles
    from stetho.errors import ConfigError

    try:
        return profiles.load(profile).fleet
    except ConfigError:  # a node on a profile this controller lacks: its own checks say so
        return _DEFAULT


def versions(profile: str, nodes: list[NodeSummary], spec: FleetSpec = _DEFAULT
             ) -> list[Result]:
    if len(nodes) < spec.min_peers:
        return _too_few("fleet_versions", "versions", profile, [n["node"] for n in nodes],
                        spec, "")
    comps = sorted({c for n in nodes for c in n["versions"]})
    majority: dict[str, tuple[str, int]] = {}
    for comp in comps:
        seen = Counter(tuple(n["versions"][comp]) for n in nodes if comp in n["versions"])
        if seen:
            top, count = seen.most_common(1)[0]
            majority[comp] = (", ".join(top), count)
    out = []
    for n in sorted(nodes, key=lambda x: x["node"]):
        diffs = []
        for comp, (value, count) in majority.items():
            mine = ", ".join(n["versions"].get(comp, []))
            if mine and mine != value:
                diffs.append((comp, mine, value, count))
        if not diffs:
            out.append(Result(n["node"], "fleet_versions", "versions", "pass",
                              f"same versions as its {len(nodes) - 1} {profile} peers",
                              expected="the fleet majority"))
            continue
        blocking = any(c in spec.blocking for c, *_ in diffs)
        text = "; ".join(f"{c} {mine} (peers: {value} on {count} of {len(nodes)})"
                         for c, mine, value, count in diffs)
        out.append(Result(
            n["node"], "fleet_versions", "versions", "fail" if blocking else "warn",
            f"differs from its {profile} peers: {text}",
            value="; ".join(f"{c} {mine}" for c, mine, *_ in diffs),
            expected="; ".join(f"{c} {value}" for c, _, value, _ in diffs),
            remediation="bring the node to the fleet's versions (or the fleet to the node's, "
                        "through a reviewed rollout); mixed NCCL/driver versions in one job "
                        "can hang collectives", probe="fleet"))
    return out


def busbw(profile: str, nodes: list[NodeSummary], spec: FleetSpec = _DEFAULT
          ) -> list[Result]:
    largest = Counter(max(n["busbw"], key=int) for n in nodes if n["busbw"])
    if not largest:
        return []
    size = largest.most_common(1)[0][0]  # the size most nodes ran up to
    values = {n["node"]: n["busbw"][size] for n in nodes if size in n["busbw"]}
    label = f"allreduce@{_size(int(size))}"
    if len(values) < spec.min_peers:
        return _too_few("fleet_busbw", label, profile, list(values), spec,
                        "" if len(values) == len(nodes) else f" with busbw at {label}")
    med = statistics.median(values.values())
    mad = statistics.median(abs(v - med) for v in values.values())
    out = []
    for node, v in sorted(values.items()):
        drop = (med - v) / med if med else 0.0
        z = 0.6745 * (v - med) / mad if mad > 1e-9 * max(med, 1.0) else float("-inf")
        min_drop = spec.busbw_min_drop_pct / 100
        outlier = z < spec.busbw_z and drop > min_drop
        how = (f"{drop * 100:.1f}% under the median" +
               (f", robust z {z:.1f}" if z != float("-inf") else "") +
               f" (limits: z < {spec.busbw_z:g}, drop > {min_drop:.0%})")
        base = Result(node, "fleet_busbw", label, "pass",
                      f"busbw {v:g} GB/s, fleet median {med:.1f} GB/s", value=v, unit="GB/s",
                      expected=f"{med:.1f} GB/s (fleet median)",
                      threshold=f"MAD {mad:.2f} GB/s", probe="fleet")
        if outlier:
            base = replace(base, status="fail",
                           message=f"busbw {v:g} GB/s is an outlier among {len(values)} "
                           f"{profile} nodes: median {med:.1f} GB/s, {how}",
                           remediation="this node slows every job it joins: drain it, rerun "
                           "nccl-tests, check its NVLink, clocks, PCIe and NCCL transport")
        out.append(base)
    return out


def _too_few(check: str, subject: str, profile: str, names: list[str], spec: FleetSpec,
             which: str) -> list[Result]:
    """A `skip` per node: too few peers to compare with, and how many there were."""
    why = (f"{len(names)} {profile} node{'s' if len(names) != 1 else ''}{which} in this run; "
           f"fleet comparison needs at least {spec.min_peers} (profile fleet.min_peers)")
    return [Result(n, check, subject, "skip", why, value=len(names), unit="nodes",
                   expected=f">= {spec.min_peers} nodes", probe="fleet")
            for n in sorted(names)]


def _size(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift}{unit}"
    return f"{n}B"
