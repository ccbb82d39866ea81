"""PCIe peer-to-peer settings: ACS redirect on the bridges between GPUs and NICs, and the
IOMMU's DMA mode. With ACS Source Validation / P2P Request or Completion Redirect enabled on a
switch port, a GPU's write to its NIC (GPUDirect RDMA) or to another GPU under the same switch
goes up to the root complex and back instead of across the switch; an IOMMU translating DMA
(not `iommu=pt`) costs the same path and an IOTLB lookup per transfer. NCCL runs, slower."""

from __future__ import annotations

from typing import TYPE_CHECKING

from stetho.facts.base import Unavailable

if TYPE_CHECKING:
    from stetho.facts.node import NodeFacts
    from stetho.parsers.iommu import IommuState
    from stetho.parsers.lspci import PciDevice

#: ACS controls that send peer-to-peer traffic to the root complex (UpstreamFwd, TransBlk,
#: EgressCtrl and DirectTrans alone do not redirect it)
REDIRECTING = ("SrcValid", "ReqRedir", "CmpltRedir")


def iommu(facts: NodeFacts) -> IommuState:
    from stetho.parsers import iommu as parser

    def load() -> IommuState:
        try:
            files = facts.files("iommu")
        except Unavailable as u:
            raise Unavailable("error", u.reason, "iommu") from None
        return parser.parse(files)

    return facts.parsed("iommu", load)


def bridges(facts: NodeFacts) -> tuple[PciDevice, ...]:
    """The PCI bridges (switch ports, root ports) lspci -vvv lists."""
    return tuple(d for d in facts.lspci() if (d.class_name or "").startswith("PCI bridge"))


def acs_redirecting(devices: tuple[PciDevice, ...]) -> dict[str, tuple[str, ...]]:
    """Bridge address -> the redirecting ACS controls it has enabled."""
    out = {}
    for d in devices:
        on = tuple(f for f in REDIRECTING if d.acs_ctl and f in d.acs_ctl)
        if on:
            out[d.address or "?"] = on
    return out
