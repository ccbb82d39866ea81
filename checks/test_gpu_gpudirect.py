"""GPUDirect RDMA: the HCAs read and write GPU memory directly.

NCCL registers GPU buffers with the HCA through one of two paths: the peer memory module
(nvidia_peermem, or Mellanox's older nv_peer_mem), whose /sys/module/<name>/initstate reads
`live` once loaded (the kernel's sysfs-module ABI); or DMA-BUF, which needs the NVIDIA *open*
kernel module (/proc/driver/nvidia/version: "Open Kernel Module") and a kernel of 5.12 or
later. Without either NCCL stages every inter-node transfer through host memory: jobs run, just
slower, so nothing else on the node says so. The profile says which path it needs:
`gpu.gpudirect_rdma: required` (either), `peermem` or `dmabuf`.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import pytest

from stetho.facts import fabric
from stetho.facts.base import Unavailable

if TYPE_CHECKING:
    from stetho.checking.verdict import Verdict
    from stetho.facts.node import NodeFacts
    from stetho.profiles import Profile

_FIX = ("load it: `modprobe nvidia_peermem` (it ships with the NVIDIA driver and needs the "
        "MLNX_OFED/DOCA or upstream RDMA peer memory support), and keep it across reboots: "
        "`echo nvidia_peermem > /etc/modules-load.d/nvidia-peermem.conf`; `dmesg | grep -i "
        "peermem` says why a load failed")
_FIX_DMABUF = ("DMA-BUF needs the NVIDIA open kernel module (the driver's -open packages) on "
               "a kernel >= 5.12; NCCL uses it by itself (NCCL_DMABUF_ENABLE)")
DMABUF_KERNEL = (5, 12)


def _kernel(node: NodeFacts) -> tuple[int, int] | None:
    text = node.files("kernel_release").get("/proc/sys/kernel/osrelease", "")
    m = re.match(r"\s*(\d+)\.(\d+)", text)
    return (int(m.group(1)), int(m.group(2))) if m else None


def test_gpudirect_rdma(node: NodeFacts, facts: NodeFacts, profile: Profile,
                        verdict: Verdict) -> None:
    need = profile.gpu.gpudirect_rdma
    if need == "any":
        pytest.skip(f"profile {profile.name} does not require GPUDirect RDMA")
    rec = facts.record("gpudirect")
    files = {} if rec.status == "absent" else facts.files("gpudirect")
    states = {path.split("/")[3]: text.strip() for path, text in files.items()}
    live = [name for name, state in states.items() if state == "live"]
    try:
        module = fabric.kernel_module(node)
        kernel = _kernel(node)
    except Unavailable as u:
        verdict.error(f"cannot tell which NVIDIA kernel module is loaded ({u.reason}), which "
                      "decides whether DMA-BUF is a GPUDirect RDMA path", _FIX)
    flavour = f"{'open' if module.open else 'proprietary'} kernel module {module.version}"
    dmabuf = module.open and kernel is not None and kernel >= DMABUF_KERNEL
    kernel_words = "kernel " + (".".join(map(str, kernel)) if kernel else "unknown")
    paths = ([f"{live[0]} live"] if live else []) + (["DMA-BUF"] if dmabuf else [])
    verdict.measure(", ".join(paths) or "none",
                    expected={"required": "nvidia_peermem live or DMA-BUF",
                              "peermem": "nvidia_peermem live", "dmabuf": "DMA-BUF"}[need])
    verdict.cite("; ".join([*(f"{p}: {t.strip()}" for p, t in files.items()),
                            f"/proc/driver/nvidia/version: {flavour}", kernel_words])
                 if files else "no /sys/module/nvidia_peermem or /sys/module/nv_peer_mem; "
                 f"/proc/driver/nvidia/version: {flavour}; {kernel_words}", "gpudirect")
    why_no_dmabuf = ("the proprietary kernel module has no DMA-BUF" if not module.open else
                     f"DMA-BUF needs kernel >= 5.12, this is {kernel_words}")
    peermem_words = "nvidia_peermem is not loaded" + (
        f" ({', '.join(f'{n} is {s}' for n, s in states.items())})" if states else "")
    if need == "peermem" and not live:
        verdict.fail(f"GPUDirect RDMA through nvidia_peermem unavailable: {peermem_words}"
                     + (" (DMA-BUF is available, but the profile asks for peermem)"
                        if dmabuf else ""), _FIX)
    if need == "dmabuf" and not dmabuf:
        verdict.fail(f"GPUDirect RDMA through DMA-BUF unavailable: {why_no_dmabuf}", _FIX_DMABUF)
    if not paths:
        verdict.fail(f"GPUDirect RDMA unavailable: {peermem_words}, and {why_no_dmabuf}",
                     f"{_FIX}; or {_FIX_DMABUF}")
    if need == "dmabuf" or (not live):
        verdict.ok(f"GPUDirect RDMA: DMA-BUF ({flavour}, {kernel_words})")
        return
    verdict.ok(f"GPUDirect RDMA: {live[0]} loaded"
               + (f" (DMA-BUF also available: {flavour})" if dmabuf else ""))
