"""GPUDirect RDMA: the peer memory module that lets the HCAs read and write GPU memory.

Without nvidia_peermem (or Mellanox's older nv_peer_mem) loaded, NCCL cannot register GPU
buffers with the HCA and stages every inter-node transfer through host memory: jobs run, just
slower, so nothing else on the node says so. A profile that needs it says
`gpu.gpudirect_rdma: required`; the module's /sys/module/<name>/initstate reads `live` once
loaded (the kernel's sysfs-module ABI).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from stetho.checking.verdict import Verdict
    from stetho.facts.node import NodeFacts
    from stetho.profiles import Profile

_FIX = ("load it: `modprobe nvidia_peermem` (it ships with the NVIDIA driver and needs the "
        "MLNX_OFED/DOCA or upstream RDMA peer memory support), and keep it across reboots: "
        "`echo nvidia_peermem > /etc/modules-load.d/nvidia-peermem.conf`; `dmesg | grep -i "
        "peermem` says why a load failed")


def test_gpudirect_rdma(node: NodeFacts, facts: NodeFacts, profile: Profile,
                        verdict: Verdict) -> None:
    if profile.gpu.gpudirect_rdma != "required":
        pytest.skip(f"profile {profile.name} does not require GPUDirect RDMA")
    rec = facts.record("gpudirect")
    files = {} if rec.status == "absent" else facts.files("gpudirect")
    states = {path.split("/")[3]: text.strip() for path, text in files.items()}
    live = [name for name, state in states.items() if state == "live"]
    verdict.measure(", ".join(f"{n} {s}" for n, s in states.items()) or "not loaded",
                    expected="nvidia_peermem live")
    verdict.cite("; ".join(f"{p}: {t.strip()}" for p, t in files.items())
                 or "no /sys/module/nvidia_peermem or /sys/module/nv_peer_mem", "gpudirect")
    if not live:
        verdict.fail("GPUDirect RDMA unavailable: nvidia_peermem is not loaded"
                     + (f" ({', '.join(f'{n} is {s}' for n, s in states.items())})"
                        if states else ""), remediation=_FIX)
    verdict.ok(f"GPUDirect RDMA: {live[0]} loaded")
