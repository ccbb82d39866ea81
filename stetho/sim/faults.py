"""Named faults the simulator injects into a node's copies of the real recorded outputs.

Each fault is one small edit a real failure makes: a field of the real H100 `nvidia-smi -q`
output, a sysfs file of the real ConnectX-7 tree, real Xid/AER lines from the recorded kernel
logs re-addressed to one of the node's GPUs, or the nccl-tests table. `stetho sim faults`
lists them; `--fault NODE=NAME[=ARG]` applies one.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from stetho.errors import ConfigError
from stetho.sim import faults_fabric as fb
from stetho.sim import faults_facts as ff
from stetho.sim import faults_host as fh
from stetho.sim import faults_tools as ft
from stetho.sim.draft import IDLE_SM_MHZ, REASONS, NodeDraft


@dataclass(frozen=True)
class Fault:
    name: str
    description: str
    apply: Callable[[NodeDraft, str | None], None]
    arg: str | None = None  # the argument's meaning, when it takes one


def _gpu_arg(arg: str | None, default: int, draft: NodeDraft) -> int:
    if arg is None:
        return default
    m = re.fullmatch(r"(?:gpu)?(\d+)", arg)
    if not m or int(m.group(1)) >= draft.gpu_count:
        raise ConfigError(f"fault argument {arg!r}: expected gpu0..gpu{draft.gpu_count - 1}")
    return int(m.group(1))


def _sys(draft: NodeDraft, path: str, value: str) -> None:
    p = draft.sysroot / path.lstrip("/")
    if not p.exists():
        raise ConfigError(f"simulated node has no {path}")
    p.write_text(value)


def governor_powersave(d: NodeDraft, arg: str | None) -> None:
    for cpu in range(8, 16):
        _sys(d, f"/sys/devices/system/cpu/cpu{cpu}/cpufreq/scaling_governor", "powersave\n")


def nvme_rotational(d: NodeDraft, arg: str | None) -> None:
    _sys(d, f"/sys/block/{arg or 'nvme3n1'}/queue/rotational", "1\n")
    # what it costs: I/O queued behind the rotational path
    _sys(d, "/proc/pressure/io", "some avg10=41.20 avg60=37.85 avg300=30.11 total=981227331\n"
         "full avg10=22.40 avg60=19.02 avg300=14.87 total=512344012\n")


def nccl_socket(d: NodeDraft, arg: str | None) -> None:
    """NCCL fell back to TCP sockets (the recorded NET/Socket lines). A multi-node job's busbw
    collapses; the node's own single-node run never uses the NET transport: unchanged."""
    d.nccl_transport = "socket"


def host_oom(d: NodeDraft, arg: str | None) -> None:
    """The data loader starved: the OOM killer ran and the node swaps. No OOM line is among
    the recordings: the line below follows the kernel's format (mm/oom_kill.c)."""
    d.kernel_message(
        "Out of memory: Killed process 48213 (pt_data_worker) "
        "total-vm:98311204kB, anon-rss:61311980kB, file-rss:1024kB, shmem-rss:0kB, UID:1000 "
        "pgtables:121808kB oom_score_adj:0")
    meminfo = d.sysroot / "proc/meminfo"
    text = re.sub(r"^SwapTotal:\s+\d+ kB", "SwapTotal:       8388604 kB",
                  meminfo.read_text(), flags=re.M)
    text = re.sub(r"^SwapFree:\s+\d+ kB", "SwapFree:         412316 kB", text, flags=re.M)
    meminfo.write_text(text)
    _sys(d, "/proc/pressure/memory", "some avg10=38.02 avg60=44.51 avg300=29.70 "
         "total=771230119\nfull avg10=21.13 avg60=25.98 avg300=17.42 total=401998231\n")


def riser(d: NodeDraft, arg: str | None) -> None:
    """A marginal PCIe path to one GPU: recorded correctable AER lines on the GPU's root port
    and the GPU, that GPU hot. The node's single-node run goes over NVLink, not this link."""
    g = _gpu_arg(arg, 4, d)
    lines = d.real("05-kernel-log/journal-aer-correctable-badtlp-baddllp-EXCERPT.log")
    pci = d.gpu_pci(g)
    d.add_kernel_lines([ln.replace("0000:07:00.0", pci + ".0") for ln in lines.splitlines()]
                       * 3, gpu=g)
    d.smi.set(g, ("Temperature", "GPU Current Temp"), "84 C")


def clocks_unlocked(d: NodeDraft, arg: str | None) -> None:
    """A GPU whose clocks were never locked (the boot service that runs `-lgc`/`-lmc` did not):
    application clocks at their defaults (as recorded: 1980/2619 MHz, equal to the target),
    the GPU idling low. What the healthy node was before it was locked."""
    d.idle_unlocked(_gpu_arg(arg, 3, d))


def busbw_drop(d: NodeDraft, arg: str | None) -> None:
    try:
        pct = float(arg or "20")
    except ValueError:
        raise ConfigError(f"busbw-drop={arg}: expected a percentage") from None
    if not 0 < pct < 100:
        raise ConfigError(f"busbw-drop={arg}: expected a percentage between 0 and 100")
    d.nccl_scale = 1 - pct / 100


def nic_busbw_drop(d: NodeDraft, arg: str | None) -> None:
    """The node's NICs (or their cables) carry PCT percent less: a multi-node all-reduce
    through them drops, the single-node one over NVLink does not (stetho.sim.nccl_step)."""
    try:
        pct = float(arg or "30")
    except ValueError:
        raise ConfigError(f"nic-busbw-drop={arg}: expected a percentage") from None
    if not 0 < pct < 100:
        raise ConfigError(f"nic-busbw-drop={arg}: expected a percentage between 0 and 100")
    d.nic_scale = 1 - pct / 100


def nccl_wrong(d: NodeDraft, arg: str | None) -> None:
    d.nccl_wrong_from = 1 << 20


def nccl_fail(d: NodeDraft, arg: str | None) -> None:
    d.nccl_output = d.real("03-nccl/nccl-tests-cuda-init-failure-8xH100.txt")


def nccl_truncated(d: NodeDraft, arg: str | None) -> None:
    d.nccl_truncate = True


def ib_rate_downgrade(d: NodeDraft, arg: str | None) -> None:
    _sys(d, f"/sys/class/infiniband/{arg or 'mlx5_4'}/ports/1/rate", "200 Gb/sec (2X NDR)")


def ib_symbol_errors(d: NodeDraft, arg: str | None) -> None:
    dev = arg or "mlx5_5"
    _sys(d, f"/sys/class/infiniband/{dev}/ports/1/counters/symbol_error", "4096")
    _sys(d, f"/sys/class/infiniband/{dev}/ports/1/counters/link_error_recovery", "3")


def ib_port_down(d: NodeDraft, arg: str | None) -> None:
    dev = arg or "mlx5_7"
    _sys(d, f"/sys/class/infiniband/{dev}/ports/1/state", "1: DOWN")
    _sys(d, f"/sys/class/infiniband/{dev}/ports/1/phys_state", "2: Polling")
    _sys(d, f"/sys/class/infiniband/{dev}/ports/1/rate", "10 Gb/sec (4X SDR)")


def optics_degrading(d: NodeDraft, arg: str | None) -> None:
    d.mlxlink_ber[arg or "mlx5_8"] = "4E-5"


def hca_fw_old(d: NodeDraft, arg: str | None) -> None:
    _sys(d, f"/sys/class/infiniband/{arg or 'mlx5_6'}/fw_ver", "28.36.1010")


def xid(d: NodeDraft, arg: str | None) -> None:
    if arg is None or not arg.isdigit():
        raise ConfigError("xid=CODE: give the Xid code, e.g. xid=79")
    code = int(arg)
    g = 2
    if code == 79:
        # The recorded loss: AER corrected + fatal 'Surprise Down' on the root port, then Xid 79.
        lines = d.real("05-kernel-log/dmesg-aer-fatal-surprise-down-then-xid79-EXCERPT.log")
        d.add_kernel_lines(lines.splitlines(), gpu=g, source_pci="0000:02:00")
        d.lost_gpus.add(g)
        return
    d.add_kernel_lines([d.real_xid_line(code)], gpu=g)


def xid_before_reset(d: NodeDraft, arg: str | None) -> None:
    """An Xid 48 on a GPU 3 h before collection, then the driver reloaded 2 h before (the
    recorded NVRM load line, as at boot): the reset NVIDIA's catalog asks for already happened,
    so the Xid is history. The GPU's counters read clean (a reset clears the volatile ones)."""
    g = _gpu_arg(arg, 5, d)
    d.add_kernel_lines([d.real_xid_line(48)], gpu=g, ago_s=3 * 3600.0)
    load = next(m for _, m in d.kernel_lines if m.startswith("NVRM: loading NVIDIA UNIX"))
    d.kernel_message(load, ago_s=2 * 3600.0)


def xid_old(d: NodeDraft, arg: str | None) -> None:
    """An Xid 48 on a GPU 3 days before collection, no reset since: older than the default
    24 h window, so it warns rather than fails."""
    g = _gpu_arg(arg, 5, d)
    d.add_kernel_lines([d.real_xid_line(48)], gpu=g, ago_s=3 * 86400.0)


def ecc_dbe(d: NodeDraft, arg: str | None) -> None:
    g = _gpu_arg(arg, 5, d)
    for scope in ("Volatile", "Aggregate"):
        d.smi.set(g, ("ECC Errors", scope, "DRAM Uncorrectable"), "2")
    d.add_kernel_lines([d.real_xid_line(48)], gpu=g)


def ecc_dbe_remapped(d: NodeDraft, arg: str | None) -> None:
    """A GPU after a DBE that was handled: the row remapped, the GPU reset and the node rebooted.
    The lifetime (aggregate) count keeps the 2 errors and the remapper records the row; the
    volatile count and the kernel log start clean after the reset and reboot, nothing pending
    or failed (the recording's own values for those)."""
    g = _gpu_arg(arg, 5, d)
    d.smi.set(g, ("ECC Errors", "Aggregate", "DRAM Uncorrectable"), "2")
    d.smi.set(g, ("Remapped Rows", "Uncorrectable Error"), "1")


def ecc_sbe(d: NodeDraft, arg: str | None) -> None:
    """Correctable (single-bit) DRAM ECC errors on a GPU, no uncorrectable one: alone it is
    within limits; against a lower count in the node's history it is the SBE-rising trend."""
    g = _gpu_arg(arg, 3, d)
    for scope, n in (("Volatile", "240"), ("Aggregate", "1312")):
        d.smi.set(g, ("ECC Errors", scope, "DRAM Correctable"), n)


def rowremap_pending(d: NodeDraft, arg: str | None) -> None:
    g = _gpu_arg(arg, 6, d)
    d.smi.set(g, ("Remapped Rows", "Uncorrectable Error"), "1")
    d.smi.set(g, ("Remapped Rows", "Pending"), "Yes")
    d.add_kernel_lines([d.real_xid_line(63)], gpu=g)


def pcie_width_downgrade(d: NodeDraft, arg: str | None) -> None:
    g = _gpu_arg(arg, 1, d)
    d.smi.set(g, ("PCI", "GPU Link Info", "Link Width", "Current"), "8x")
    d.lspci_widths[g] = 8


def thermal_slowdown(d: NodeDraft, arg: str | None) -> None:
    g = _gpu_arg(arg, 4, d)
    d.smi.set(g, (REASONS, "HW Slowdown"), "Active")
    d.smi.set(g, (REASONS, "HW Slowdown", "HW Thermal Slowdown"), "Active")
    d.smi.set(g, ("Temperature", "GPU Current Temp"), "91 C")


def power_brake(d: NodeDraft, arg: str | None) -> None:
    """The state the H100 output was actually recorded in: power brake on all 8 GPUs, which
    holds their SM clocks at the recorded 86 MHz whatever they are locked to (P0, not idle)."""
    for g in range(d.gpu_count):
        d.smi.set(g, (REASONS, "HW Slowdown"), "Active")
        d.smi.set(g, (REASONS, "HW Slowdown", "HW Power Brake Slowdown"), "Active")
        for name in ("Graphics", "SM"):
            d.smi.set(g, ("Clocks", name), f"{IDLE_SM_MHZ} MHz")


def hbm_hot(d: NodeDraft, arg: str | None) -> None:
    """A GPU whose HBM runs at 97 C while the die reads as recorded (about 30 C): a memory stack
    losing its thermal contact (the recording's HBM reads 39 C)."""
    d.smi.set(_gpu_arg(arg, 6, d), ("Temperature", "Memory Current Temp"), "97 C")


def reboot(d: NodeDraft, arg: str | None) -> None:
    """The node booted again: a new boot id (every counter since boot starts a new epoch)."""
    import hashlib

    h = hashlib.sha256(f"{d.name}/boot/{arg or '2'}".encode()).hexdigest()
    _sys(d, "/proc/sys/kernel/random/boot_id",
         f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}\n")


FAULTS: dict[str, Fault] = {f.name: f for f in (
    Fault("governor-powersave", "CPUs 8-15 on the powersave governor", governor_powersave),
    Fault("nvme-rotational", "an NVMe disk reports rotational=1 (default nvme3n1); I/O PSI high",
          nvme_rotational, "device"),
    Fault("clocks-unlocked", "a GPU never locked: default application clocks (1980/2619 MHz), "
          "idling at 86 MHz SM, P8, GPU idle Active (default gpu3)", clocks_unlocked, "gpuN"),
    Fault("busbw-drop", "all_reduce busbw from 1 MiB up drops by PCT percent (default 20)",
          busbw_drop, "PCT"),
    Fault("nic-busbw-drop", "inter-node all_reduce busbw through this node's NICs drops by "
          "PCT percent (default 30); single-node NVLink runs unchanged", nic_busbw_drop, "PCT"),
    Fault("nccl-wrong", "nccl-tests reports #wrong elements from 1 MiB up, run FAILED",
          nccl_wrong),
    Fault("nccl-fail", "nccl-tests aborts at CUDA init (the recorded 8x H100 failure)", nccl_fail),
    Fault("nccl-truncated", "nccl-tests output cut off mid-table", nccl_truncated),
    Fault("nccl-socket", "NCCL falls back to TCP sockets (recorded NET/Socket lines); the "
          "single-node run's busbw (NVLink) unchanged", nccl_socket),
    Fault("host-oom", "OOM-killer line, swap in use and memory PSI high", host_oom),
    Fault("disk-full", "a filesystem at 99% of its usable space (default /)", fh.disk_full,
          "mountpoint"),
    Fault("fs-readonly", "ext4 remounted read-only after a journal abort (default /raid)",
          fh.fs_readonly, "mountpoint"),
    Fault("service-down", "a systemd unit failed (default nvidia-fabricmanager)",
          fh.service_down, "unit"),
    Fault("clock-unsynced", "chronyd has no source: not synchronised, 2.5 s slow",
          fh.clock_unsynced),
    Fault("memlock-limited", "the collecting process's locked-memory limit at 8 MiB (as "
          "recorded on a VM)", fh.memlock_limited),
    Fault("nccl-env-skew", "the job's container image brings NCCL 2.20.5 (the real recorded "
          "image environment) against the host's 2.21.5; VERSION sets the image's, "
          "module:VERSION the environment module's", fh.nccl_env_skew, "VERSION"),
    Fault("acs-enabled", "ACS redirect (SrcValid+ ReqRedir+ CmpltRedir+) on a PCIe switch "
          "port: the recorded PEX890xx port at 17:00.0 (or ADDRESS)", fh.acs_enabled,
          "ADDRESS"),
    Fault("iommu-translated", "booted with intel_iommu=on and no iommu=pt: every IOMMU "
          "group translates DMA (DMA-FQ)", fh.iommu_translated),
    Fault("edac-ue", "an uncorrected memory error (EDAC ue_count 1, 12 corrected; default mc1)",
          fh.edac_ue, "mcN"),
    Fault("nvme-media-errors", "an NVMe drive counting unrecovered reads: media_errors and "
          "error-log entries +24 (default nvme3)", fh.nvme_media_errors, "nvmeN"),
    Fault("nvme-critical-warning", "an NVMe drive out of spare blocks: available_spare under "
          "its threshold, critical warning bit 0 set (default nvme5)", fh.nvme_critical_warning,
          "nvmeN"),
    Fault("mce-corrected-storm", "12 corrected machine checks on one CPU bank within the last "
          "hour (the recorded AMD bank 17 record)", fh.mce_corrected_storm),
    Fault("mce-uncorrected", "an uncorrected machine check, processor context corrupt (the "
          "recorded bank 4 UC/PCC record)", fh.mce_uncorrected),
    Fault("riser", "correctable AER errors on a GPU's PCIe link, that GPU at 84 C (default "
          "gpu4)", riser, "gpuN"),
    Fault("ib-rate-downgrade", "an IB port renegotiated to 200 Gb/s (default mlx5_4)",
          ib_rate_downgrade, "device"),
    Fault("ib-symbol-errors", "an IB port with 4096 symbol errors (default mlx5_5)",
          ib_symbol_errors, "device"),
    Fault("ib-port-down", "an IB port DOWN/Polling (default mlx5_7)", ib_port_down, "device"),
    Fault("optics-degrading", "an IB port's pre-FEC BER at 4E-5 in mlxlink (default mlx5_8; "
          "the recording reads 5E-10)", optics_degrading, "device"),
    Fault("hca-fw-old", "an HCA on firmware 28.36.1010 (default mlx5_6)", hca_fw_old, "device"),
    Fault("xid", "real Xid CODE lines for gpu2 in the kernel log (79 also drops the GPU and "
          "adds the recorded AER fatal lines)", xid, "CODE"),
    Fault("xid-before-reset", "an Xid 48 3 h ago, then the driver reloaded 2 h ago: history, "
          "not a present fault (default gpu5)", xid_before_reset, "gpuN"),
    Fault("xid-old", "an Xid 48 3 days ago, no reset since: older than the 24 h window "
          "(default gpu5)", xid_old, "gpuN"),
    Fault("ecc-dbe", "2 uncorrectable DRAM ECC errors since the last reset (volatile and "
          "aggregate) and an Xid 48 (default gpu5)", ecc_dbe,
          "gpuN"),
    Fault("ecc-dbe-remapped", "a GPU after a DBE, its row remapped and the GPU reset: 2 "
          "uncorrectable DRAM errors in the lifetime count, none volatile, 1 row remapped, "
          "nothing pending, no Xid (default gpu5)", ecc_dbe_remapped, "gpuN"),
    Fault("ecc-sbe", "240 correctable DRAM ECC errors, no uncorrectable (default gpu3)",
          ecc_sbe, "gpuN"),
    Fault("rowremap-pending", "a row remap pending (1 row, no volatile DBE, as the recorded "
          "A10/A100 outputs read) and an Xid 63: reset due (default gpu6)",
          rowremap_pending, "gpuN"),
    Fault("pcie-width-downgrade", "a GPU's PCIe link trained at x8 (default gpu1)",
          pcie_width_downgrade, "gpuN"),
    Fault("thermal-slowdown", "HW thermal slowdown active at 91 C (default gpu4)",
          thermal_slowdown, "gpuN"),
    Fault("power-brake", "HW power brake slowdown on all GPUs, SM clocks held at 86 MHz (the "
          "H100 output's recorded state)", power_brake),
    Fault("hbm-hot", "a GPU's HBM at 97 C, the die cool (default gpu6)", hbm_hot, "gpuN"),
    Fault("nvlink-down", "NVLink 7 of a GPU inactive, busbw -1/18 (default gpu0)",
          fb.nvlink_down, "gpuN"),
    Fault("nvlink-errors", "NVLink 3 of a GPU with 2400 replay, 12 recovery and 1800 CRC "
          "errors, still up (default gpu2)", fb.nvlink_errors, "gpuN"),
    Fault("reboot", "the node booted again: another boot id (`=N`: the Nth boot)", reboot, "N"),
    Fault("hang", "a tool hangs until killed (default nvidia-smi)", ft.hang, "tool"),
    Fault("garbage", "a tool prints binary garbage (default nvidia-smi)", ft.garbage, "tool"),
    Fault("gpu-job", "a job's process holds a GPU (a real recorded compute process): nothing "
          "invasive may run (default gpu0)", ft.gpu_job, "gpuN"),
    Fault("corrupt-xml", "nvidia-smi -q -x output cut off mid-document", ft.corrupt_xml),
    Fault("dcgm-diag-fail", "dcgmi diag -r N -j answers the recorded failing DCGM JSON (test "
          "software: persistence mode off) and exits 226, as dcgmi did", ft.dcgm_diag_fail),
    Fault("appclocks-deprecated", "application clocks printed as deprecated (CUDA 13 drivers); "
          "current clocks locked at the target; `=unlocked`: every GPU idling at 86 MHz, P8",
          ff.appclocks_deprecated,
          "unlocked"),
    Fault("wrong-model", "every GPU is another model (default NVIDIA A100-SXM4-80GB): a node on "
          "the wrong profile", ff.wrong_model, "name"),
    Fault("ecc-unknown", "a GPU's ECC mode, counters and remapped rows read N/A (default gpu2)",
          ff.ecc_unknown, "gpuN"),
    Fault("gpu-unreadable", "one GPU's nvidia-smi -q -x section carries a value no driver "
          "prints (default gpu4)", ff.gpu_unreadable, "gpuN"),
    Fault("disk-unreadable", "one disk's queue/rotational reads -EIO (default nvme5n1)",
          ff.disk_unreadable, "device"),
    Fault("throttle-unknown", "a GPU's clock event reasons read N/A (default gpu5)",
          ff.throttle_unknown, "gpuN"),
    Fault("psi-missing", "no /proc/pressure/memory (a kernel without PSI)", ff.psi_missing),
    Fault("nccl-multinode", "the run is a healthy 2-node x 8 GPU all_reduce (recorded, 16 ranks)",
          ff.nccl_multinode),
    Fault("nccl-version", "the run reports NCCL VERSION (default 2.23.4) over the library's "
          "2.21.5; `=none`: no version anywhere", ff.nccl_version, "VERSION|none"),
    Fault("mlxlink-garbage", "one HCA's mlxlink output is unreadable (default mlx5_1)",
          ff.mlxlink_garbage, "device"),
    Fault("perfquery-garbage", "one HCA's perfquery -x output is unreadable (default mlx5_4)",
          ff.perfquery_garbage, "device"),
    Fault("no-ib-sysfs", "no /sys/class/infiniband (a container): ibstat and perfquery only",
          ff.no_ib_sysfs),
    Fault("roce", "every ConnectX-7 port runs Ethernet (RoCE): a RoCE node (healthy under "
          "h100-roce-8gpu, a wrong link layer under the InfiniBand profile)", ff.roce),
    Fault("roce-pfc-storm", "a RoCE node whose port's PFC pause counters climb by the million "
          "(default mlx5_4)", ff.roce_pfc_storm, "device"),
    Fault("roce-out-of-sequence", "a RoCE node losing packets: out_of_sequence and "
          "packet_seq_err on a port (default mlx5_4)", ff.roce_out_of_sequence, "device"),
    Fault("roce-trust-pcp", "a RoCE node whose ports trust pcp instead of dscp",
          ff.roce_trust_pcp),
    Fault("roce-ecn-off", "a RoCE node with ECN off on priority 3", ff.roce_ecn_off),
    Fault("ibstat-disagrees", "ibstat says a port is Down/Polling, sysfs says Active (default "
          "mlx5_5)", ff.ibstat_disagrees, "device"),
    Fault("rcv-errors", "512 PortRcvErrors, perfquery -E names them malformed packets (default "
          "mlx5_6)", ff.rcv_errors, "device"),
    Fault("pre-fec-ber", "one port's raw (pre-FEC) BER in mlxlink (default mlx5_9:5E-6)",
          ff.pre_fec_ber, "DEVICE:BER"),
    Fault("link-edr-no-fec", "mlxlink reports a port as 4x EDR without FEC (default mlx5_9)",
          ff.link_edr_no_fec, "device"),
    Fault("fec-unreported", "mlxlink prints N/A for a port's FEC mode (default mlx5_9)",
          ff.fec_unreported, "device"),
    Fault("fabric-not-started", "every GPU's NVSwitch fabric State Not Started (no fabric "
          "manager)", fb.fabric_not_started),
    Fault("fabric-manager-down", "nvidia-fabricmanager failed (systemctl is-active: failed) "
          "after training the fabric (GPUs still Completed)", fb.fabric_manager_down),
    Fault("sxid-fatal", "an NVSwitch link down: the recorded SXid 20034 Fatal lines, 10 min "
          "before collection", fb.sxid_fatal),
    Fault("reset-required", "the driver says Reset Required and Drain and Reset Recommended "
          "on a GPU (default gpu2)", fb.reset_required, "gpuN"),
    Fault("persistence-off", "persistence mode disabled on a GPU (default gpu1)",
          fb.persistence_off, "gpuN"),
    Fault("ecc-pending-off", "ECC disabled pending the next reset on a GPU, still enabled now "
          "(default gpu4)", fb.ecc_pending_off, "gpuN"),
    Fault("power-capped", "a GPU's power cap at 500 W, below its 700 W default (default gpu6)",
          fb.power_capped, "gpuN"),
    Fault("ib-link-flap", "an IB port's link went down 3 times: link_downed 3 (default mlx5_1)",
          ff.ib_link_flap, "device"),
    Fault("optics-rx-low", "one lane of an IB port's transceiver receives -12 dBm, under the "
          "module's -9.914 dBm threshold (default mlx5_4)", ff.optics_rx_low, "device"),
    Fault("peermem-missing", "nvidia_peermem not loaded on the proprietary kernel module: no "
          "GPUDirect RDMA", ff.peermem_missing),
    Fault("gpudirect-none", "no nvidia_peermem, open kernel module on kernel 5.4: neither "
          "GPUDirect RDMA path (DMA-BUF needs >= 5.12)", fb.gpudirect_none),
    Fault("dmabuf-only", "no nvidia_peermem, open kernel module: GPUDirect RDMA through DMA-BUF "
          "only (fails a profile with gpu.gpudirect_rdma: peermem)", fb.dmabuf_only),
    Fault("nvswitch-missing", "an NVSwitch fell off the PCI bus (default the 4th): the fabric "
          "manager fails, no GPU's fabric completes", fb.nvswitch_missing, "N"),
    Fault("nic-wrong-socket", "a GPU's NICs sit on the other socket (SYS in nvidia-smi topo -m; "
          "default gpu3)", ff.nic_wrong_socket, "gpuN"),
    Fault("cable-crossed", "two HCAs' cables swapped between rails: iblinkinfo names the "
          "other rail's leaf for each (default mlx5_1,mlx5_4)", ff.cable_crossed, "DEV1,DEV2"),
    Fault("perfquery-higher", "perfquery -x reads 5000 SymbolErrorCounter on one HCA while sysfs "
          "reads 0 (default mlx5_0)", ff.perfquery_higher, "device"),
)}


def parse(spec: str) -> tuple[str, str | None]:
    """'busbw-drop=20' -> ('busbw-drop', '20'); unknown names are a usage error."""
    name, _, arg = spec.partition("=")
    if name not in FAULTS:
        raise ConfigError(f"unknown fault {name!r}; known: {', '.join(sorted(FAULTS))}")
    return name, (arg or None)
