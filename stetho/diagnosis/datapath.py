"""What a measurement crossed: the data path of the node's nccl-tests run, so a busbw drop is
evidence only for the causes whose part that traffic went through.

A single-node all-reduce on an HGX/DGX board (SXM GPUs on a baseboard with NVSwitches) runs
GPU to GPU over NVLink/NVSwitch (NCCL's P2P and NVLS transports): it never touches a GPU's PCIe
link or the NET transport (InfiniBand, RoCE or TCP sockets). On PCIe-card GPUs without NVLink
the same run goes over PCIe (P2P through the switch or the root complex). Only a run across
nodes uses the NET transport, and with GPUDirect RDMA it crosses each GPU's PCIe link to its
NIC. So: socket fallback or an IB link can only explain a multi-node busbw drop; a riser or a
PCIe slot only a PCIe-card node's or a multi-node one; NVLink only where the GPUs have it.

Unknown (no nccl-tests shape, no GPU inventory) excludes nothing: a drop then stays evidence
for every path, as before this module.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace
from functools import lru_cache

from stetho.diagnosis.context import NodeContext, facts_of
from stetho.diagnosis.model import Evidence

NVLINK, PCIE, NET = "nvlink", "pcie", "net"
ALL = frozenset({NVLINK, PCIE, NET})

#: Words for the part a technician handles on the GPU's PCIe path, by form factor.
CARRIER = {
    "sxm": "the HGX baseboard tray holding the SXM GPU (its PCIe cables and retimers to the "
           "CPU board; an SXM GPU has no riser)",
    "pcie": "the riser card and the GPU card in its slot",
}


def paths(nodes: int | None, form: str | None) -> frozenset[str]:
    """The paths an nccl-tests run over `nodes` nodes of GPUs of form factor `form` ("sxm",
    "pcie", None: unknown) crossed."""
    if nodes is None:
        return ALL
    if nodes > 1:  # NET transport, GPUDirect RDMA over each GPU's PCIe link to its NIC
        return frozenset({NET, PCIE} | ({NVLINK} if form != "pcie" else set()))
    if form == "sxm":
        return frozenset({NVLINK})
    if form == "pcie":
        return frozenset({PCIE})
    return frozenset({NVLINK, PCIE})


def run_nodes(ctx: NodeContext) -> int | None:
    """How many nodes the nccl-tests run spanned (its `#  Rank` lines' hosts), None unknown."""
    if ctx.facts is None:
        return None
    from stetho.facts.node import Unavailable
    from stetho.parsers import ParseError

    try:
        return ctx.facts.nccl_run().shape.nodes  # type: ignore[no-any-return]
    except (Unavailable, ParseError):
        return None


def classify(names: list[str], fabric: bool, nvlinks: int | None) -> str | None:
    """"sxm", "pcie" or None from what nvidia-smi says: the GPUs' product names ("A100-SXM4",
    "H100 PCIe", "H100 NVL"), whether an NVSwitch fabric state is reported (only baseboards
    have one) and how many NVLinks the GPUs have (None: not read; 0: no NVLink at all, which
    no SXM GPU lacks)."""
    text = " ".join(names)
    if re.search(r"(?i)\bSXM|HGX|DGX", text):
        return "sxm"
    if re.search(r"(?i)PCIe|\bNVL\b", text) or nvlinks == 0:
        return "pcie"
    return "sxm" if fabric else None


def form_factor(ctx: NodeContext) -> str | None:
    """"sxm" (a baseboard with NVLink/NVSwitch), "pcie" (cards in slots) or None (unknown):
    from nvidia-smi (`classify`), else the node's profile (`gpu.nvswitch`: a baseboard)."""
    gpus = facts_of(ctx, "gpus") or ()
    links = facts_of(ctx, "nvlink_status")
    form = classify([g.product_name or "" for g in gpus],
                    any(g.fabric_state not in (None, "N/A") for g in gpus),
                    sum(len(g.links) for g in links) if links else None)
    if form is not None:
        return form
    name = ctx.summary.get("profile")
    return _profile_form(str(name)) if name else None


@lru_cache(maxsize=64)
def _profile_form(name: str) -> str | None:
    """A profile whose GPUs sit behind NVSwitches (`gpu.nvswitch`) is a baseboard's; loaded
    once per name (every busbw signal of every node asks)."""
    from stetho import profiles
    from stetho.errors import ConfigError

    try:
        return "sxm" if profiles.load(name).gpu.nvswitch else None
    except ConfigError:
        return None


def crossed(ctx: NodeContext) -> frozenset[str]:
    return paths(run_nodes(ctx), form_factor(ctx))


def carrier(ctx: NodeContext) -> tuple[tuple[str, str], ...]:
    """The ("carrier", words) pair naming what holds the GPU, when the form factor is known."""
    form = form_factor(ctx)
    return (("carrier", CARRIER[form]),) if form in CARRIER else ()


def on_path(path: str, name: str, base: Callable[[NodeContext], list[Evidence]]
            ) -> Callable[[NodeContext], list[Evidence]]:
    """A busbw signal seen only when the run crossed `path`, renamed `name`."""
    def signal(ctx: NodeContext) -> list[Evidence]:
        if path not in crossed(ctx):
            return []
        return [replace(e, signal=name) for e in base(ctx)]
    signal.__name__ = name
    signal.__doc__ = f"{base.__name__}, where the nccl-tests run crossed {path}."
    return signal
