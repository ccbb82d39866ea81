"""Each GPU's NIC on its own PCIe switch (PIX/PXB), from `nvidia-smi topo -m`.

GPUDirect RDMA moves data between a GPU and its NIC through the PCIe switch they share; a
GPU whose NIC sits behind the host bridge (PHB), another bridge of its socket (NODE) or the
other socket (SYS) sends every inter-node byte through the CPU, at a fraction of the rate.
The profile may pair each GPU with its NIC (`gpu.nic_pairs: {gpu0: mlx5_0}`); without pairs,
each GPU needs some NIC at PIX or PXB.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from stetho.facts.node import Unavailable
from stetho.facts.topology import PROBE, topology

if TYPE_CHECKING:
    from stetho.checking.verdict import Verdict
    from stetho.facts.node import NodeFacts
    from stetho.parsers.gpu_model import Gpu
    from stetho.profiles import Profile

_NEAR = ("PIX", "PXB")
_FIX = ("the NIC is not on this GPU's PCIe switch: check that the HCA sits in the slot the "
        "platform pairs with GPU {i} (and the cabling to it), the BIOS PCIe/ACS settings and "
        "`nvidia-smi topo -m`; until then NCCL crosses the host bridge or the CPU interconnect "
        "for this GPU")


def test_gpu_nic_affinity(gpu: Gpu, facts: NodeFacts, profile: Profile,
                          verdict: Verdict) -> None:
    i = gpu.index
    try:
        topo = topology(facts)
    except Unavailable as u:
        if u.status == "skip":
            pytest.skip(f"no GPU/NIC topology: {u.reason}")
        raise
    if not topo.nics:
        pytest.skip("nvidia-smi topo -m lists no NIC on this node")
    g = topo.gpu(i)
    if g is None:
        verdict.error(f"gpu{i}: no row in nvidia-smi topo -m")
    pair = profile.gpu.nic_pairs.get(f"gpu{i}")
    row = ", ".join(f"{n}={p}" for n, p in g.nics.items())
    verdict.cite(f"nvidia-smi topo -m GPU{i}: {row}; CPU affinity {g.cpu_affinity}, NUMA "
                 f"{g.numa_node}", PROBE)
    fix = _FIX.format(i=i)
    if pair:
        path = g.nics.get(pair)
        verdict.measure(f"{pair} {path or 'absent'}", expected=f"{pair} PIX or PXB")
        if path is None:
            verdict.fail(f"gpu{i}: its NIC {pair} (profile {profile.name}) is not in "
                         "nvidia-smi topo -m", remediation=fix)
        if path not in _NEAR:
            verdict.fail(f"gpu{i}: its NIC {pair} is {path} ({_what(path)}), expected PIX or "
                         "PXB", remediation=fix)
        verdict.ok(f"gpu{i}: {pair} at {path}")
    near = g.nearest()
    path = g.nics[near[0]] if near else None
    verdict.measure(f"{', '.join(near) or 'none'} {path or ''}".strip(),
                    expected="a NIC at PIX or PXB")
    if path not in _NEAR:
        verdict.fail(f"gpu{i}: no NIC on its PCIe switch; the nearest, "
                     f"{', '.join(near) or 'none'}, is {path} ({_what(path)})", remediation=fix)
    verdict.ok(f"gpu{i}: {', '.join(near)} at {path}")


def _what(path: str | None) -> str:
    return {"PHB": "through the host bridge", "NODE": "across host bridges of its socket",
            "SYS": "on the other socket"}.get(path or "", "not connected")
