"""The simulated node's `nvidia-smi topo -m`: the real 8x H100 recording, with the
nic-wrong-socket fault's edit (a GPU whose NICs moved off its PCIe switch to the other socket:
its PIX/PXB cells, and the NIC rows' cells for it, read SYS)."""

from __future__ import annotations

import re

TOPO = "14-topology/nvidia-smi-topo-m-h100-8gpu-12nic-2socket-drv580.txt"


def render(text: str, wrong_socket: set[int]) -> str:
    if not wrong_socket:
        return text
    lines = text.split("\n")
    header = lines[0].lstrip("\t").split("\t")
    cols = {f"GPU{g}": header.index(f"GPU{g}") for g in wrong_socket}
    out = []
    for ln in lines:
        cells = ln.split("\t")
        label = cells[0]
        if label in cols:  # the GPU's own row: its NICs now across the socket
            cells = [label] + ["SYS" if c in ("PIX", "PXB") and header[k].startswith("NIC")
                               else c for k, c in enumerate(cells[1:])]
        elif re.fullmatch(r"NIC\d+", label):  # a NIC's row (not the legend below)
            for k in cols.values():
                if cells[k + 1] in ("PIX", "PXB"):
                    cells[k + 1] = "SYS"
        out.append("\t".join(cells))
    return "\n".join(out)
