"""The probes: what to run or read on a node, as data.

A probe is either a command (argv, found on PATH) or a set of file globs (read under
STETHO_SYSROOT). Adding a probe is adding a row here; the runner needs no change.
"""

from __future__ import annotations

from dataclasses import field

from stetho.core.record import record


@record
class Probe:
    """One thing to collect. Exactly one of `argv` and `globs` is set.

    `fallbacks` are tried in order when the main command is missing or refused (dmesg may be
    denied to non-root users while `journalctl -k` works). `read` is False for globs whose
    contents are binary (shared libraries): then only the matching paths are recorded.
    """

    name: str
    argv: tuple[str, ...] = ()
    globs: tuple[str, ...] = ()
    timeout_s: float = 20.0
    fallbacks: tuple[tuple[str, ...], ...] = ()
    read: bool = True
    max_bytes: int = 4 * 1024 * 1024
    per_device: bool = False  # argv has "{device}": run once per RDMA device found
    per_nvme: bool = False  # argv has "{device}": run once per NVMe controller (nvme0, ...)
    env: tuple[tuple[str, str], ...] = ()  # extra environment for the command
    invasive: bool = False  # disturbs a job beside it: only on an idle node (evidence.busy)
    description: str = field(default="", compare=False)

    @property
    def kind(self) -> str:
        return "command" if self.argv else "files"


IB = "/sys/class/infiniband"

NVIDIA_SMI = Probe("nvidia_smi", ("nvidia-smi", "-q", "-x"), timeout_s=60,
                   description="GPU inventory, clocks, ECC, remapped rows, temperatures")
NVLINK_STATUS = Probe("nvlink_status", ("nvidia-smi", "nvlink", "-s"), timeout_s=30,
                      description="NVLink link state and speed")
NVLINK_ERRORS = Probe("nvlink_errors", ("nvidia-smi", "nvlink", "-e"), timeout_s=30,
                      description="NVLink replay, recovery and CRC counters")
KERNEL_LOG = Probe("kernel_log", ("dmesg", "--time-format=iso"), timeout_s=20,
                   fallbacks=(("journalctl", "-k", "-b", "--no-pager", "-o", "short-iso"),),
                   description="Xid, AER, fallen-off-the-bus and OOM lines")
IB_SYSFS = Probe("ib_sysfs", globs=(
    f"{IB}/*/fw_ver", f"{IB}/*/hca_type", f"{IB}/*/board_id",
    f"{IB}/*/ports/*/state", f"{IB}/*/ports/*/phys_state", f"{IB}/*/ports/*/rate",
    f"{IB}/*/ports/*/link_layer", f"{IB}/*/ports/*/counters/*",
), description="HCA firmware, port state, rate and error counters")
IBSTAT = Probe("ibstat", ("ibstat",), timeout_s=20,
               description="HCA firmware, port state, rate and link layer: the source where "
               "sysfs is absent, a cross-check where it is not")
PERFQUERY = Probe("perfquery", ("perfquery", "-x", "-C", "{device}", "-P", "1"), timeout_s=20,
                  per_device=True, fallbacks=(("perfquery", "-C", "{device}", "-P", "1"),),
                  description="per-HCA port error counters, 64-bit (-x; the basic set where "
                  "-x is refused): the counters' source where sysfs is absent")
PERFQUERY_RCV_ERRORS = Probe("perfquery_rcv_errors",
                             ("perfquery", "-E", "-C", "{device}", "-P", "1"), timeout_s=20,
                             per_device=True,
                             description="PortRcvErrorDetails: what made PortRcvErrors count")
IBLINKINFO = Probe("iblinkinfo", ("iblinkinfo", "-C", "{device}", "-P", "1", "-D", "0",
                                   "-n", "1", "-l"), timeout_s=20, per_device=True,
                   description="the switch and port at the far end of the HCA's cable: a "
                   "partial scan from this port one hop out (-D 0 -n 1), never the fabric")
CPU_GOVERNOR = Probe("cpu_governor", globs=(
    "/sys/devices/system/cpu/cpu[0-9]*/cpufreq/scaling_governor",
), description="cpufreq governor per CPU")
BLOCK_QUEUE = Probe("block_queue", globs=(
    "/sys/block/*/queue/rotational", "/sys/block/*/queue/scheduler",
), description="rotational flag and I/O scheduler per block device")
LSPCI = Probe("lspci", ("lspci", "-vvv"), timeout_s=30,
              description="PCIe link capability and status of GPUs and HCAs")
KERNEL_RELEASE = Probe("kernel_release", globs=("/proc/sys/kernel/osrelease",
                                                "/proc/sys/kernel/random/boot_id"),
                       description="running kernel version, and this boot's id (a reboot "
                       "starts a new epoch for every counter)")
OFED = Probe("ofed", ("ofed_info", "-s"), timeout_s=20, description="MLNX_OFED / DOCA-OFED")
NCCL_LIBRARY = Probe("nccl_library", globs=(
    "/usr/lib/x86_64-linux-gnu/libnccl.so.*", "/usr/lib/aarch64-linux-gnu/libnccl.so.*",
    "/usr/lib64/libnccl.so.*", "/usr/local/lib/libnccl.so.*", "/usr/local/nccl/lib/libnccl.so.*",
), read=False, description="installed NCCL version, from the library file name")

MLXLINK = Probe("mlxlink", ("mlxlink", "-d", "{device}", "-m", "-c", "--json"), timeout_s=30,
                per_device=True, fallbacks=(("mlxlink", "-d", "{device}", "-m", "-c"),),
                description="per-HCA link diagnostics: pre-FEC BER, module power (MFT; the "
                "text format where --json is refused)")

FABRIC_MANAGER = Probe("fabric_manager", ("systemctl", "is-active", "nvidia-fabricmanager"),
                       timeout_s=10, fallbacks=(("pgrep", "-l", "-x", "nv-fabricmanager"),),
                       description="whether nvidia-fabricmanager runs (NVSwitch systems; "
                       "pgrep for the process where there is no systemd)")

HOST_PRESSURE = Probe("host_pressure", globs=("/proc/pressure/io", "/proc/pressure/memory",
                                             "/proc/pressure/cpu", "/proc/meminfo"),
                      description="I/O and memory stall (PSI), swap use")

#: RoCE (Ethernet RDMA): collected where the profile has a `roce` section. `{netdev}` is the
#: RDMA device's network interface, from /sys/class/infiniband/<dev>/device/net/<netdev>.
ROCE_SYSFS = Probe("roce_sysfs", globs=(
    f"{IB}/*/device/net/*/ifindex", f"{IB}/*/ports/*/hw_counters/*",
    "/sys/class/net/*/ecn/roce_np/enable/*", "/sys/class/net/*/ecn/roce_rp/enable/*",
), description="RoCE: each RDMA device's netdev, its CNP/ECN/sequence-error hw_counters, and "
   "ECN (DCQCN) enabled per priority as notification and reaction point")
ETHTOOL_STATS = Probe("ethtool_stats", ("ethtool", "-S", "{netdev}"), timeout_s=20,
                      per_device=True, description="RoCE: the netdev's PFC pause frames and "
                      "physical discards (mlx5 `ethtool -S`)")
MLNX_QOS = Probe("mlnx_qos", ("mlnx_qos", "-i", "{netdev}"), timeout_s=20, per_device=True,
                 description="RoCE: trust state (dscp/pcp) and PFC-enabled priorities "
                 "(MLNX_OFED/DOCA mlnx_qos)")
ROCE_PROBES: tuple[Probe, ...] = (ROCE_SYSFS, ETHTOOL_STATS, MLNX_QOS)
GPUDIRECT = Probe("gpudirect", globs=("/sys/module/nvidia_peermem/initstate",
                                      "/sys/module/nv_peer_mem/initstate"),
                  description="GPUDirect RDMA peer memory module loaded (nvidia_peermem, or "
                  "Mellanox's older nv_peer_mem): the kernel's `live` in its initstate")

NVIDIA_TOPO = Probe("nvidia_topo", ("nvidia-smi", "topo", "-m"), timeout_s=30,
                    description="PCIe paths between GPUs and NICs (PIX/PXB/NODE/SYS), with each "
                    "GPU's CPU and NUMA affinity")

MOUNTS = Probe("mounts", globs=("/proc/mounts",),
               description="mounted filesystems and their options (read-only or not)")
DF_BYTES = Probe("df_bytes", ("df", "-P", "-B1"), timeout_s=20,
                 description="free space per mounted filesystem, in bytes")
DF_INODES = Probe("df_inodes", ("df", "-P", "-i"), timeout_s=20,
                  description="free inodes per mounted filesystem")

CHRONY = Probe("chrony", ("chronyc", "tracking"), timeout_s=10,
               description="whether chronyd has synchronised the clock, and its offset")

HOST_LIMITS = Probe("host_limits", globs=("/proc/sys/vm/nr_hugepages", "/proc/self/limits"),
                    description="hugepages reserved, and the collecting process's resource "
                    "limits (memlock: what a job started the same way inherits)")

EDAC = Probe("edac", globs=("/sys/devices/system/edac/mc/mc*/ce_count",
                           "/sys/devices/system/edac/mc/mc*/ue_count"),
             description="corrected and uncorrected memory errors per memory controller")

PCI_DEVICES = Probe("pci_devices", globs=("/sys/bus/pci/devices/*/vendor",
                                          "/sys/bus/pci/devices/*/device",
                                          "/sys/bus/pci/devices/*/class"),
                    description="PCI vendor, device and class ids from sysfs (no binary): the "
                    "NVSwitches on the bus (NVIDIA bridges 22a3 on HGX H100, 1af1 on HGX A100)")
NVIDIA_VERSION = Probe("nvidia_version", globs=("/proc/driver/nvidia/version",),
                       description="the loaded NVIDIA kernel module: open or proprietary (DMA-BUF "
                       "GPUDirect RDMA needs the open one), and its version")
NVME_SMART = Probe("nvme_smart", ("nvme", "smart-log", "/dev/{device}", "-o", "json"),
                   timeout_s=20, per_nvme=True,
                   fallbacks=(("smartctl", "-j", "-a", "/dev/{device}"),),
                   description="per NVMe controller: SMART critical warnings, spare capacity, "
                   "wear and media errors (nvme-cli; smartctl -j where nvme-cli is missing)")
IOMMU = Probe("iommu", globs=("/proc/cmdline", "/sys/kernel/iommu_groups/*/type"),
              description="the kernel command line (iommu=pt) and each IOMMU group's DMA "
              "mode (identity: passthrough; DMA, DMA-FQ: translated, slowing peer-to-peer)")

#: Collected on every node, in this order (per-device probes after the devices are known).
BASE_PROBES: tuple[Probe, ...] = (
    NVIDIA_SMI, NVLINK_STATUS, NVLINK_ERRORS, KERNEL_LOG, IB_SYSFS, IBSTAT, CPU_GOVERNOR,
    BLOCK_QUEUE, LSPCI, KERNEL_RELEASE, OFED, NCCL_LIBRARY, HOST_PRESSURE, FABRIC_MANAGER,
    MLXLINK, PERFQUERY, PERFQUERY_RCV_ERRORS, IBLINKINFO, GPUDIRECT, NVIDIA_TOPO, MOUNTS,
    DF_BYTES, DF_INODES, CHRONY, HOST_LIMITS, EDAC, PCI_DEVICES, NVIDIA_VERSION, NVME_SMART,
    IOMMU,
)


def for_device(probe: Probe, device: str, netdev: str = "") -> Probe:
    """A per-device probe bound to one device (and its netdev, for `{netdev}`): its record is
    named 'mlxlink:mlx5_0'."""
    from dataclasses import replace

    def bind(argv: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(a.replace("{device}", device).replace("{netdev}", netdev) for a in argv)

    return replace(probe, name=f"{probe.name}:{device}", per_device=False, per_nvme=False,
                   argv=bind(probe.argv), fallbacks=tuple(bind(a) for a in probe.fallbacks))


def nccl_probe(argv: tuple[str, ...], timeout_s: float) -> Probe:
    """The live nccl-tests run a profile enables (argv from the profile)."""
    return Probe("nccl_tests", argv, timeout_s=timeout_s, env=(("NCCL_DEBUG", "INFO"),),
                 invasive=True,
                 description="nccl-tests all_reduce_perf on this node's GPUs (NCCL_DEBUG=INFO: "
                 "the transport NCCL chose is in the output)")


def nccl_saved_probe(path: str) -> Probe:
    """A saved nccl-tests output named in the profile, read instead of a live run."""
    return Probe("nccl_tests", globs=(path,), description="saved nccl-tests output")


#: `module` is a shell function the init script defines, not a program, and `bash -c` is no
#: login shell: the script sources Environment Modules' or Lmod's init where `module` is not
#: already a command (the simulator's is on PATH). `module show` writes to stderr: folded in.
_MODULE_SHOW = ('command -v module >/dev/null 2>&1 || for f in /etc/profile.d/modules.sh '
                '/etc/profile.d/z00_lmod.sh /etc/profile.d/lmod.sh; do [ -f "$f" ] && . "$f" '
                '&& break; done; module show "$0" 2>&1')


def nccl_image_probe(image: str) -> Probe:
    """The environment of the container image a profile's jobs run in (`nccl.container_image`):
    NVIDIA's images set NCCL_VERSION there. Podman's inspect where docker is absent."""
    fmt = "{{json .Config.Env}}"
    return Probe("nccl_image", ("docker", "image", "inspect", "--format", fmt, image),
                 timeout_s=20,
                 fallbacks=(("podman", "image", "inspect", "--format", fmt, image),),
                 description="the job's container image environment (its NCCL_VERSION)")


def nccl_module_probe(module: str) -> Probe:
    """`module show` of the environment module a profile's jobs load (`nccl.env_module`)."""
    return Probe("nccl_module", ("bash", "-c", _MODULE_SHOW, module), timeout_s=20,
                 description="the job's environment module (its NCCL_VERSION, libnccl path)")


def services_probe(units: tuple[str, ...]) -> Probe:
    """The systemd units a profile needs running (`host.services`), asked in one call."""
    return Probe("services", ("systemctl", "is-active", *units), timeout_s=20,
                 description="whether the profile's systemd units are active")
