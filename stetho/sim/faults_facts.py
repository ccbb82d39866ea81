"""Faults of how a node's tools report, rather than of its hardware (issue 11): a driver that
deprecates application clocks, fields nvidia-smi prints as N/A, a node on the wrong profile, a
RoCE node, a container without the sysfs IB tree, one HCA's unreadable tool output, a run of
another shape or on another NCCL. Each edits the copies of the real recorded outputs, as the
faults in stetho.sim.faults do; that module lists them."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from stetho.errors import ConfigError

if TYPE_CHECKING:
    from stetho.sim.draft import NodeDraft

_NA = "N/A"
_ECC_FIELDS = (("ECC Mode", "Current"), ("ECC Mode", "Pending"),
               *(("ECC Errors", group, name) for group in ("Volatile", "Aggregate")
                  for name in ("SRAM Correctable", "SRAM Uncorrectable Parity",
                               "SRAM Uncorrectable SEC-DED", "DRAM Correctable",
                               "DRAM Uncorrectable")),
               ("Remapped Rows", "Correctable Error"), ("Remapped Rows", "Uncorrectable Error"),
               ("Remapped Rows", "Pending"), ("Remapped Rows", "Remapping Failure Occurred"))
_REASON_FIELDS = (("Idle",), ("Applications Clocks Setting",), ("SW Power Cap",),
                  ("HW Slowdown",), ("HW Slowdown", "HW Thermal Slowdown"),
                  ("HW Slowdown", "HW Power Brake Slowdown"), ("Sync Boost",),
                  ("SW Thermal Slowdown",), ("Display Clock Setting",))


def _gpu(arg: str | None, default: int, d: NodeDraft) -> int:
    m = re.fullmatch(r"(?:gpu)?(\d+)", arg or str(default))
    if not m or int(m.group(1)) >= d.gpu_count:
        raise ConfigError(f"fault argument {arg!r}: expected gpu0..gpu{d.gpu_count - 1}")
    return int(m.group(1))


def _device(arg: str | None, default: str, d: NodeDraft) -> str:
    dev = arg or default
    if not (d.sysroot / "sys/class/infiniband" / dev).is_dir():
        raise ConfigError(f"fault argument {dev!r}: the simulated node has no RDMA device {dev}")
    return dev


def appclocks_deprecated(d: NodeDraft, arg: str | None) -> None:
    """Application clocks printed as deprecated (the sentence of the recorded 590/595
    outputs); the current clocks stay what the healthy node's are, locked at the target.
    `=unlocked`: never locked, every GPU idling as in the clocks-unlocked fault."""
    sentence = "Requested functionality has been deprecated"
    for g in range(d.gpu_count):
        for section in ("Applications Clocks", "Default Applications Clocks"):
            for name in ("Graphics", "Memory"):
                d.smi.set(g, (section, name), sentence)
        if arg == "unlocked":
            d.idle_unlocked(g)


def wrong_model(d: NodeDraft, arg: str | None) -> None:
    for g in range(d.gpu_count):
        d.smi.set(g, ("Product Name",), arg or "NVIDIA A100-SXM4-80GB")


def ecc_unknown(d: NodeDraft, arg: str | None) -> None:
    g = _gpu(arg, 2, d)
    for path in _ECC_FIELDS:
        d.smi.set(g, path, _NA)


def throttle_unknown(d: NodeDraft, arg: str | None) -> None:
    g = _gpu(arg, 5, d)
    for path in _REASON_FIELDS:
        d.smi.set(g, ("Clocks Event Reasons", *path), _NA)


def psi_missing(d: NodeDraft, arg: str | None) -> None:
    (d.sysroot / "proc/pressure/memory").unlink()


def nccl_multinode(d: NodeDraft, arg: str | None) -> None:
    """A healthy 2-node x 8 GPU all_reduce (the recorded OKE run, 16 ranks)."""
    d.nccl_output = d.real("03-nccl/allreduce-2node-16xA100-40GB-roce-oke.txt")


def nccl_version(d: NodeDraft, arg: str | None) -> None:
    """The run reports NCCL VERSION (default 2.23.4) while /usr/lib holds 2.21.5: the job
    loaded another libnccl. `=none`: no version anywhere (no library file, no version line)."""
    if arg == "none":
        for lib in (d.sysroot / "usr/lib/x86_64-linux-gnu").glob("libnccl.so*"):
            lib.unlink()
        return
    d.nccl_version_line = f"{d.name}:4100:4100 [0] NCCL INFO NCCL version {arg or '2.23.4'}" \
        "+cuda12.2"


def mlxlink_garbage(d: NodeDraft, arg: str | None) -> None:
    d.tool_garbage.add(f"mlxlink:{_device(arg, 'mlx5_1', d)}")


def perfquery_garbage(d: NodeDraft, arg: str | None) -> None:
    d.tool_garbage.add(f"perfquery:{_device(arg, 'mlx5_4', d)}")


def no_ib_sysfs(d: NodeDraft, arg: str | None) -> None:
    d.hide_ib_sysfs = True


def roce(d: NodeDraft, arg: str | None) -> None:
    """Every ConnectX-7 port runs Ethernet (RoCE): a RoCE node under an InfiniBand profile."""
    d.roce_node = True  # its Ethernet ports get RoCE counters, QoS and ECN (stetho.sim.roce)
    for layer in (d.sysroot / "sys/class/infiniband").glob("mlx5_[0-9]*/ports/*/link_layer"):
        layer.write_text("Ethernet\n")


def ibstat_disagrees(d: NodeDraft, arg: str | None) -> None:
    d.ibstat_overrides[_device(arg, "mlx5_5", d)] = {"State": "Down",
                                                     "Physical state": "Polling"}


def rcv_errors(d: NodeDraft, arg: str | None) -> None:
    """Malformed packets received: PortRcvErrors in sysfs, the cause in perfquery -E."""
    dev = _device(arg, "mlx5_6", d)
    (d.sysroot / f"sys/class/infiniband/{dev}/ports/1/counters/port_rcv_errors").write_text(
        "512\n")
    d.rcv_error_details[dev] = {"PortMalformedPktErrors": 512}


def gpu_unreadable(d: NodeDraft, arg: str | None) -> None:
    d.unreadable_gpus.add(_gpu(arg, 4, d))


def disk_unreadable(d: NodeDraft, arg: str | None) -> None:
    """One disk's queue/rotational reads something other than 0 or 1."""
    path = d.sysroot / f"sys/block/{arg or 'nvme5n1'}/queue/rotational"
    if not path.exists():
        raise ConfigError(f"fault argument {arg!r}: the simulated node has no such disk")
    path.write_text("-EIO\n")


def pre_fec_ber(d: NodeDraft, arg: str | None) -> None:
    """One port's raw physical BER in mlxlink: `DEVICE:BER` (default mlx5_9:5E-6)."""
    dev, _, ber = (arg or "mlx5_9:5E-6").partition(":")
    if not re.fullmatch(r"\d+(\.\d+)?E-\d+", ber):
        raise ConfigError(f"fault argument {arg!r}: expected DEVICE:BER as mlxlink prints it, "
                          "e.g. mlx5_9:5E-6")
    d.mlxlink_ber[_device(dev, "mlx5_9", d)] = ber


def link_edr_no_fec(d: NodeDraft, arg: str | None) -> None:
    """mlxlink reports one port as a 4x EDR link without FEC (25 Gb/s NRZ lanes)."""
    d.mlxlink_fields.setdefault(_device(arg, "mlx5_9", d), {}).update(
        {"Speed": "IB-EDR", "Width": "4x", "FEC": "No FEC"})


def fec_unreported(d: NodeDraft, arg: str | None) -> None:
    """mlxlink prints N/A for one port's FEC: the mode in use is unknown."""
    d.mlxlink_fields.setdefault(_device(arg, "mlx5_9", d), {})["FEC"] = _NA


def perfquery_higher(d: NodeDraft, arg: str | None) -> None:
    """perfquery -x reads 5000 SymbolErrorCounter on one HCA while its sysfs counter reads 0
    (the two are read moments apart; counters only grow, so the higher one is judged)."""
    d.perfquery_counters.setdefault(_device(arg, "mlx5_0", d), {})["SymbolErrorCounter"] = 5000


def _roce_port(d: NodeDraft, arg: str | None) -> str:
    """A RoCE node (every ConnectX-7 port Ethernet) and the port a fault is on."""
    roce(d, None)
    return _device(arg, "mlx5_4", d)


def roce_pfc_storm(d: NodeDraft, arg: str | None) -> None:
    """PFC pause frames on priority 3 by the million on one port (a receiver that stopped
    draining pauses its peer), with the storm warning the NIC raises."""
    d.roce_counters.setdefault(_roce_port(d, arg), {}).update(
        {"rx_prio3_pause": 4_812_337, "tx_prio3_pause": 2_950_112,
         "rx_prio3_pause_duration": 91_442_000, "tx_pause_storm_warning_events": 3})


def roce_out_of_sequence(d: NodeDraft, arg: str | None) -> None:
    """Packets lost on the lossless priority: out-of-sequence receives and sequence-error
    NAKs on one port."""
    d.roce_counters.setdefault(_roce_port(d, arg), {}).update(
        {"out_of_sequence": 18_244, "packet_seq_err": 9_127})


def roce_trust_pcp(d: NodeDraft, arg: str | None) -> None:
    """mlnx_qos reports `Priority trust state: pcp` (the NIC's default) on every port."""
    roce(d, None)
    d.roce_trust = "pcp"


def roce_ecn_off(d: NodeDraft, arg: str | None) -> None:
    """ECN disabled on priority 3 (roce_np and roce_rp) on every port: no DCQCN."""
    roce(d, None)
    d.roce_ecn_off = True


def ib_link_flap(d: NodeDraft, arg: str | None) -> None:
    """A port whose link went down and came back 3 times (LinkDownedCounter 3, as sysfs's
    counters/link_downed reads it; the recording's mlx5_1 read a saturated 255,
    the healthy node 0): a flapping cable."""
    dev = _device(arg, "mlx5_1", d)
    p = d.sysroot / f"sys/class/infiniband/{dev}/ports/1/counters/link_downed"
    if not p.exists():
        raise ConfigError(f"simulated node has no {p}")
    p.write_text("3\n")


def optics_rx_low(d: NodeDraft, arg: str | None) -> None:
    """One lane's Rx power at -12 dBm in the recorded 400G OSFP DR4's Module Info, the other
    lanes, the module's [-9.914..6.999] thresholds and the BER as recorded: a dirty or
    cracked fibre on one lane of a parallel-fibre DR4 dims that lane only, and the module
    reads it before FEC runs out (the smallest edit that shows it)."""
    dev = _device(arg, "mlx5_4", d)
    d.mlxlink_fields.setdefault(dev, {})["Rx Power Current [dBm]"] = \
        "3.583,-12.000,3.233,2.658 [-9.914..6.999]"


def peermem_missing(d: NodeDraft, arg: str | None) -> None:
    """nvidia_peermem not loaded (never modprobed, or it failed to load): no
    /sys/module/nvidia_peermem, as on a node without it."""
    import shutil

    shutil.rmtree(d.sysroot / "sys/module/nvidia_peermem")


def nic_wrong_socket(d: NodeDraft, arg: str | None) -> None:
    """A GPU's NICs on the other socket: in the recorded topo -m, its PIX/PXB cells read SYS
    (default gpu3)."""
    d.wrong_socket.add(_gpu(arg, 3, d))


def cable_crossed(d: NodeDraft, arg: str | None) -> None:
    """Two HCAs' cables swapped between rails at the node end: each HCA's iblinkinfo names the
    other rail's leaf (same port: the node's slot is the same on every rail), nothing else
    changes (both links train Active at full rate)."""
    a, _, b = (arg or "mlx5_1,mlx5_4").partition(",")
    d.cable_swaps.append((a, b or "mlx5_4"))
