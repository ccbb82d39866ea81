"""What each simulated fault is in the hardware, written from the hardware and never from the
diagnosis rules: the part that is broken, the tool outputs the fault changes (and, as
important, the ones it leaves alone), and what a technician opening the node would find, named
in the diagnosis' cause vocabulary (None: nothing to fix there). The diagnosis catalogue judges
the rules against `found`, so a rule that disagrees with the hardware shows up as a miss
instead of being confirmed by a simulator built to match it.

Paths, for the busbw a fault may or may not change: the simulated node's nccl-tests run is one
node of 8 SXM GPUs on an HGX board, which runs over NVLink/NVSwitch only; no PCIe link, NIC or
NCCL NET transport carries it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Physics:
    part: str  # what is broken, in the hardware's words
    changes: tuple[str, ...]  # the tool outputs the fault changes
    found: str | None  # the cause a technician finds there; None: nothing to fix
    disposition: str | None = None  # "drain": broken now; "watch": works, act in a window
    unchanged: str = ""  # what it leaves alone that a naive model would change


P = Physics
FAULTS: dict[str, Physics] = {
    "riser": P("the PCIe link of one GPU to its root port (riser, slot, or the baseboard's "
               "cable/retimer)", ("dmesg AER corrected lines", "nvidia-smi temperature"),
               "riser-pcie-slot", "drain", "busbw: the single-node run is on NVLink"),
    "pcie-width-downgrade": P("the same link, trained at x8", ("nvidia-smi PCI link width",
                                                               "lspci LnkSta"),
                              "riser-pcie-slot", "drain", "busbw (NVLink)"),
    "busbw-drop": P("something on the NVLink path with no other sign", ("nccl-tests busbw",),
                    None),
    "nccl-socket": P("the job's NCCL configuration or the IB driver (NCCL finds no IB device)",
                     ("NCCL_DEBUG=INFO NET/Socket lines",), "nccl-socket-fallback", "drain",
                     "busbw: a single-node run never uses the NET transport"),
    "nvlink-down": P("one NVLink of a GPU (GPU, baseboard or NVSwitch side)",
                     ("nvidia-smi nvlink -s", "nccl-tests busbw -1/18"), "nvlink-degraded",
                     "drain"),
    "nvlink-errors": P("one NVLink retraining, still up", ("nvidia-smi nvlink -e",),
                       "nvlink-degraded", "watch", "busbw: replays cost little bandwidth"),
    "ib-rate-downgrade": P("an IB cable/transceiver: the port trained at half rate",
                           ("sysfs port rate", "ibstat"), "ib-link-degraded", "drain"),
    "ib-symbol-errors": P("an IB cable/connector corrupting symbols",
                          ("port counters symbol_error, link_error_recovery",),
                          "ib-link-degraded", "drain"),
    "ib-port-down": P("an IB cable or the switch port: link down", ("sysfs port state",),
                      "ib-link-degraded", "drain"),
    "ib-link-flap": P("an IB cable/transceiver: the link went down and came back",
                      ("port counters link_downed",), "ib-link-degraded", "drain"),
    "optics-degrading": P("an IB transceiver: pre-FEC BER high, still up", ("mlxlink BER",),
                          "optics-degrading", "watch"),
    "optics-rx-low": P("an IB transceiver receiving too little light on a lane",
                       ("mlxlink module rx power",), "optics-degrading", "watch"),
    "hca-fw-old": P("the HCA firmware, older than the fleet's", ("sysfs fw_ver",),
                    "version-drift"),
    "ecc-dbe": P("GPU HBM: uncorrectable errors since the last reset",
                 ("nvidia-smi ECC volatile DBE",), "gpu-memory-failing", "drain"),
    "ecc-dbe-remapped": P("nothing now: a past DBE, its row remapped and the GPU reset",
                          ("nvidia-smi ECC aggregate DBE, remapped rows",), None),
    "ecc-sbe": P("GPU HBM correcting single-bit errors, within limits",
                 ("nvidia-smi ECC correctable",), None),
    "rowremap-pending": P("GPU HBM: a row remap recorded, applied at the next reset",
                          ("nvidia-smi Remapped Rows Pending", "dmesg Xid 63"),
                          "gpu-remap-pending", "watch"),
    "xid=48": P("GPU HBM: a double-bit error", ("dmesg Xid 48",), "gpu-memory-failing",
                "drain"),
    "xid=63": P("GPU HBM: a row remap recorded (pending the next reset), no uncorrectable "
                "error", ("dmesg Xid 63",), "gpu-remap-pending", "watch"),
    "xid=64": P("GPU HBM: a row remap failed", ("dmesg Xid 64",), "gpu-memory-failing",
                "drain"),
    "xid=92": P("GPU HBM: a high single-bit error rate, all corrected",
                ("dmesg Xid 92",), "gpu-memory-degrading", "watch"),
    "xid=94": P("GPU HBM: an uncorrectable error contained to one application",
                ("dmesg Xid 94",), "gpu-memory-failing", "watch"),
    "xid=79": P("a GPU fell off the bus", ("dmesg Xid 79, AER fatal", "nvidia-smi, lspci"),
                "gpu-off-bus", "drain"),
    "xid=13": P("nothing: an application's illegal access", ("dmesg Xid 13",), None),
    "hbm-hot": P("a GPU's HBM stack losing thermal contact", ("nvidia-smi memory temperature",),
                 "thermal-power-throttling", "drain"),
    "thermal-slowdown": P("a GPU's cooling", ("nvidia-smi HW thermal slowdown, temperature",),
                          "thermal-power-throttling", "drain"),
    "power-brake": P("the chassis power (PSU, power-brake signal)",
                     ("nvidia-smi HW power brake slowdown",), "thermal-power-throttling",
                     "drain"),
    "clocks-unlocked": P("the boot service that locks GPU clocks", ("nvidia-smi clocks",),
                         "clocks-not-locked"),
    "governor-powersave": P("the CPU governor setting", ("sysfs scaling_governor",),
                            "cpu-governor"),
    "nvme-rotational": P("an NVMe drive's queue setting", ("sysfs queue/rotational", "PSI io"),
                         "nvme-rotational"),
    "host-oom": P("host memory exhausted by the job", ("dmesg OOM", "meminfo swap", "PSI mem"),
                  "host-memory-pressure"),
    "fabric-not-started": P("the NVSwitch fabric never trained", ("nvidia-smi fabric state",),
                            "nvswitch-fabric-down", "drain"),
    "fabric-manager-down": P("nvidia-fabricmanager not running", ("systemctl",),
                             "nvswitch-fabric-down", "drain"),
    "sxid-fatal": P("an NVSwitch: fatal SXid", ("dmesg SXid",), "nvswitch-fabric-down",
                    "drain"),
    "reset-required": P("a GPU the driver wants reset", ("nvidia-smi reset status",),
                        "gpu-reset-required"),
    "nic-wrong-socket": P("the GPU-NIC pairing across sockets", ("nvidia-smi topo -m",),
                          "gpu-nic-affinity"),
    "edac-ue": P("host DRAM: an uncorrected error", ("EDAC ue_count",), "host-memory-failing",
                 "drain"),
    "nvme-media-errors": P("an NVMe drive's flash: reads it could not recover",
                           ("nvme smart-log media_errors", "nvme error-log"), "nvme-failing",
                           unchanged="critical warning: the drive has not flagged itself"),
    "nvme-critical-warning": P("an NVMe drive out of spare blocks (read-only next)",
                               ("nvme smart-log critical_warning, available_spare",),
                               "nvme-failing"),
    "mce-uncorrected": P("a host CPU, its cache or a memory controller: data lost, processor "
                         "context corrupt", ("dmesg/mcelog machine check UC/PCC record",),
                         "host-machine-check", "drain",
                         "EDAC ue_count: the record is the CPU's, not an EDAC DIMM count"),
    "mce-corrected-storm": P("a host CPU bank correcting a storm of errors: a part wearing out, "
                             "still working", ("dmesg/mcelog corrected machine checks",),
                             "host-machine-check", "watch"),
    "acs-enabled": P("a PCIe switch port's ACS redirect (BIOS/boot setting): peer-to-peer "
                     "goes through the root complex", ("lspci ACSCtl",), "pcie-p2p-redirected",
                     unchanged="busbw: the single-node run is on NVLink, never on PCIe P2P"),
    "iommu-translated": P("the kernel's IOMMU mode: DMA translated, so peer-to-peer and "
                          "GPUDirect RDMA detour through the root complex",
                          ("/proc/cmdline", "iommu_groups type"), "pcie-p2p-redirected"),
    "cable-crossed": P("two HCAs' cables swapped between rails at the node end",
                       ("iblinkinfo far ends",), "ib-miscabled",
                       unchanged="port state and rate: both links train ACTIVE at full rate"),
}

#: A history of earlier runs: (check, metric) -> what a technician finds when that metric
#: moves the bad way ("up": a count or BER rising, "down": a rate falling).
TRENDS: dict[tuple[str, str], tuple[str, str | None]] = {
    ("gpu", "ecc_correctable"): ("up", "gpu-memory-degrading"),
    ("ib", "pre_fec_ber"): ("up", "optics-degrading"),
    ("kernel", "aer_corrected"): ("up", "riser-pcie-slot"),
    ("ib", "SymbolErrorCounter"): ("up", "ib-link-degraded"),
    ("ib", "rate_gbps"): ("down", "ib-link-degraded"),
    ("nccl", "busbw_gbps"): ("down", None),  # falling busbw alone names no part
}


def physics(fault: str) -> Physics:
    """A fault spec's physics ("xid=79" has its own; "riser=gpu1" is the riser's)."""
    return FAULTS[fault] if fault in FAULTS else FAULTS[fault.split("=", 1)[0]]


def found(faults: tuple[str, ...], history: tuple[tuple[str, str, float], ...] = ()
          ) -> set[str]:
    """What a technician finds on a node carrying these faults, with earlier runs whose
    metrics were `factor` times this run's (factor < 1: the metric rose since)."""
    out = {c for f in faults if (c := physics(f).found)}
    for check, metric, factor in history:
        way, cause = TRENDS.get((check, metric), ("", None))
        if cause and ((way == "up" and factor < 1) or (way == "down" and factor > 1)):
            out.add(cause)
    return out
