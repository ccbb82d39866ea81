"""Cabling of a rail-optimised InfiniBand fabric: each HCA's cable on a leaf of its own, the
leaf of its own rail.

On a rail-optimised fabric (the DGX/HGX SuperPOD design) HCA n of every node lands on rail n's
leaf, so that rank n of every node talks through one switch. Two cables swapped between rails,
or two HCAs on one leaf, leave every link Active at full rate, pass every port check, and send
NCCL's rings through the spine: a miscabled node. The far end of each cable is what iblinkinfo
names beside the HCA's own port (stetho.facts.iblinks); the profile says what it should be
(`ib.rail_optimized`: no shared leaf; `ib.rail_leaf`: a glob on each HCA's leaf's name).
"""

from __future__ import annotations

import fnmatch
from typing import TYPE_CHECKING

import pytest

from stetho.facts import iblinks
from stetho.facts.node import Unavailable

if TYPE_CHECKING:
    from stetho.checking.verdict import Verdict
    from stetho.facts.node import NodeFacts
    from stetho.parsers.iblinkinfo import FarEnd
    from stetho.profiles import Profile

_FIX = ("put each HCA's cable back on its own rail's leaf (swap the named cables at the node "
        "end, or re-cable as the fabric plan says); confirm with `iblinkinfo -C <device> -P 1 "
        "-D 0 -n 1 -l`, which names the switch and port at the far end")


def _rail_of(profile: Profile, device: str) -> str | None:
    """The leaf glob the profile sets for a device (its name, or a glob matching it)."""
    leaf = profile.ib.rail_leaf
    if device in leaf:
        return leaf[device]
    return next((v for k, v in leaf.items() if fnmatch.fnmatchcase(device, k)), None)


def test_ib_rail_cabling(node: NodeFacts, facts: NodeFacts, profile: Profile,
                         verdict: Verdict) -> None:
    ib = profile.ib
    if not ib.rail_optimized and not ib.rail_leaf:
        pytest.skip(f"profile {profile.name} sets neither ib.rail_optimized nor ib.rail_leaf "
                    "(not a rail-optimised fabric)")
    layer = "InfiniBand"
    if ib.link_layer != layer:
        pytest.skip(f"profile {profile.name} runs {ib.link_layer} ports: the far end is asked "
                    "of an InfiniBand fabric only")
    ports = [p for p in facts.ib_ports() if ib.link_layer_of(p.device) == layer
             and p.link_layer in (None, layer)]
    if not ports:
        verdict.error(f"no {layer} HCA port found, but profile {profile.name} expects a "
                      "rail-optimised fabric")
    far: dict[str, FarEnd] = {}
    unknown: list[str] = []
    for p in ports:
        try:
            own = iblinks.link(facts, p.device, p.port)
        except Unavailable as u:  # the profile calls for the far end: not asked is an error
            unknown.append(f"{p.device} port {p.port}: {u}")
            continue
        if own.far is None:
            unknown.append(iblinks.cable(facts, p.device, p.port))
        else:
            far[p.device] = own.far
    cables = {d: f"{d} port 1 -> cable to {f.describe()}" for d, f in far.items()}
    problems = _shared_leaves(far, cables) if ib.rail_optimized else []
    problems += _wrong_rails(profile, far, cables)
    verdict.measure(len(problems), "miscabled", expected=0)
    verdict.cite("\n".join([*cables.values(), *unknown]), iblinks.PROBE)
    if problems:
        verdict.fail("; ".join(problems), remediation=_FIX)
    if unknown:
        verdict.error(f"far end not known for {len(unknown)} of {len(ports)} HCAs: "
                      + "; ".join(unknown))
    what = "each on a leaf of its own" if ib.rail_optimized else "each on its rail's leaf"
    verdict.ok(f"{len(far)} HCAs {what}" + (", the leaf its rail's" if ib.rail_leaf and
                                             ib.rail_optimized else ""))


def _leaf_key(f: FarEnd) -> str:
    return f.guid or f"{f.desc}/LID {f.lid}"


def _shared_leaves(far: dict[str, FarEnd], cables: dict[str, str]) -> list[str]:
    """Two (or more) HCAs whose cables land on the same switch."""
    by_leaf: dict[str, list[str]] = {}
    for dev, f in far.items():
        by_leaf.setdefault(_leaf_key(f), []).append(dev)
    return [f"{len(devs)} HCAs on one leaf ({far[devs[0]].desc}): "
            + ", ".join(cables[d] for d in devs)
            for devs in by_leaf.values() if len(devs) > 1]


def _wrong_rails(profile: Profile, far: dict[str, FarEnd], cables: dict[str, str]) -> list[str]:
    """An HCA whose leaf is not the one its rail's glob names (and whose rail it is, if any)."""
    out = []
    for dev, f in far.items():
        want = _rail_of(profile, dev)
        if want is None or fnmatch.fnmatchcase(f.desc, want):
            continue
        owner = next((d for d in far if d != dev and (g := _rail_of(profile, d)) is not None
                      and fnmatch.fnmatchcase(f.desc, g)), None)
        whose = f", the leaf of {owner}'s rail" if owner else ""
        out.append(f"{cables[dev]}: expected a leaf matching {want!r}{whose}")
    return out
