"""`nvidia-smi topo -m`: how each GPU reaches each NIC (and each other GPU), and its CPU/NUMA
affinity.

The matrix is tab-separated: a header row of column names (GPU0.., NIC0.. or mlx5_0.. on older
drivers, then "CPU Affinity", "NUMA Affinity" and, on newer drivers, "GPU NUMA ID"), one row per
GPU and per NIC, the diagonal " X ". A cell is one of X, SYS, NODE, PHB, PXB, PIX or NV<n>.
Newer drivers name NICs NIC<n> and map them in a "NIC Legend:" block ("NIC0: mlx5_0"); the
parser resolves those names, so a link always names the RDMA device. NIC rows carry no
affinity (empty cells). The header may start with a tab (as printed) or not (as pasted).
"""

from __future__ import annotations

import re

from stetho.core.record import record
from stetho.parsers import ParseError

TOOL = "nvidia-smi topo -m"
#: Nearest first: PIX (at most one PCIe bridge) .. SYS (across the CPU interconnect).
PATHS = ("PIX", "PXB", "PHB", "NODE", "SYS")
_CELL = re.compile(r"^(X|SYS|NODE|PHB|PXB|PIX|NV\d+)$")
_AFFINITY = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")


@record
class GpuTopo:
    """One GPU's row: its path to each NIC (by RDMA device name) and its affinity."""

    index: int
    nics: dict[str, str]
    cpu_affinity: str | None
    numa_node: int | None

    def nearest(self) -> tuple[str, ...]:
        """The NICs at this GPU's closest PCIe path (PIX before PXB ...), or ()."""
        for path in PATHS:
            hit = tuple(n for n, p in self.nics.items() if p == path)
            if hit:
                return hit
        return ()


@record
class Topology:
    gpus: tuple[GpuTopo, ...]
    nics: tuple[str, ...]  # RDMA device names, in column order

    def gpu(self, index: int) -> GpuTopo | None:
        return next((g for g in self.gpus if g.index == index), None)


def parse(text: str) -> Topology:
    if "\x00" in text:
        raise ParseError(TOOL, "binary data, not text")
    lines = text.splitlines()
    head = next((i for i, ln in enumerate(lines) if ln.strip().startswith("GPU0\t")), None)
    if head is None:
        raise ParseError(TOOL, "no matrix header (a row starting with GPU0)")
    cols = [c.strip() for c in lines[head].strip("\n").split("\t")]
    if cols and cols[0] == "":
        cols = cols[1:]
    legend = dict(re.findall(r"^\s*(NIC\d+):\s*(\S+)\s*$", text, re.M))
    names = [legend.get(c, c) for c in cols]
    device_cols = [i for i, c in enumerate(cols) if c not in _AFFINITY]
    gpus: list[GpuTopo] = []
    nics = tuple(names[i] for i in device_cols if not cols[i].startswith("GPU"))
    for ln in lines[head + 1:]:
        if not ln.strip():
            break
        cells = ln.split("\t")
        label, values = cells[0].strip(), [c.strip() for c in cells[1:]]
        if len(values) < len(device_cols):
            raise ParseError(TOOL, f"row {label!r} has {len(values)} cells, the header "
                             f"{len(device_cols)} devices")
        for i in device_cols:
            if not _CELL.match(values[i]):
                raise ParseError(TOOL, f"row {label!r}, column {cols[i]}: unknown path "
                                 f"{values[i]!r}")
        m = re.fullmatch(r"GPU(\d+)", label)
        if m is None:
            continue  # a NIC's row: its paths mirror the GPU rows' columns
        extra = dict(zip(cols, values, strict=False))
        numa = extra.get("NUMA Affinity", "")
        gpus.append(GpuTopo(
            int(m.group(1)),
            {names[i]: values[i] for i in device_cols if not cols[i].startswith("GPU")},
            extra.get("CPU Affinity") or None,
            int(numa) if numa.isdigit() else None))
    if not gpus:
        raise ParseError(TOOL, "no GPU rows under the header")
    return Topology(tuple(gpus), nics)
