"""One simulated node while it is built: the edited copies of the real recorded outputs,
then `finish()` writes the folder (sysroot, data, shims). Faults (stetho.sim.faults) edit a
draft; the builder (stetho.sim.builder) makes one per node and applies them."""

from __future__ import annotations

import hashlib
import json
import random
import re
from dataclasses import replace
from pathlib import Path

from stetho.core.resources import shipped
from stetho.sim import hostfs, jobenv, nvme, pcibus, render, roce, shims, topo
from stetho.sim.qtext import SmiText

H100_Q = "02-nvidia-smi-q/h100x8-drv535-hw-power-brake-slowdown.txt"
IB_TREE = "04-infiniband/sysfs-class-infiniband-h100"
IBSTAT = "04-infiniband/ibstat-h100-node-some-ports-down.txt"
LSPCI = "09-lspci/lspci-vvv-h100-gpu-gen5x16-ok.txt"
MLXLINK = "07-mlxlink-ethtool/mlxlink-json-400g-osfp-dr4-mft4.34.1.json"
NCCL_IB_LOG = "03-nccl/nccl-debug-info-net-ib-sharp-2node-h100-EXCERPT.log"
NCCL_SOCKET_LOG = "03-nccl/nccl-debug-info-net-socket-1node-2xA100-80GB.log"
#: Benchmark tools the simulated node has, each printing one real recorded output (dcgmi:
#: stetho.sim.shims).
GPU_BURN = "12-gpu-bench/gpu_burn-8xA100-80GB-doubles-tensorcores-all-ok-EXCERPT.txt"
NVBANDWIDTH = "12-gpu-bench/nvbandwidth-v0.2-8xH800-drv525-all-testcases.txt"
#: A real compute process from a recorded `nvidia-smi -q -x` (<process_info> of a T4 node),
#: as `--query-compute-apps=pid,process_name,used_memory --format=csv,noheader` prints it.
GPU_JOB = "100477, /root/src/llama.cpp/build/bin/llama-server, 22430 MiB"
PROC = "proc-debian12-vm"  # fixtures/recorded: this project's own recordings
KERNEL = "5.15.0-105-generic"
NCCL_VERSION = "2.21.5"
CPUS = 112
NVME = 8
#: The section of `nvidia-smi -q` that lists clock event (throttle) reasons.
REASONS = "Clocks Event Reasons"
#: The H100 SXM clock target (max SM clock, HBM3 clock) a healthy node is locked to, and the
#: SM clock the recording's GPUs read while not running at it.
LOCKED_SM_MHZ, LOCKED_MEM_MHZ, IDLE_SM_MHZ = 1980, 2619, 86

#: When a fault's kernel lines happen by default: minutes before collection.
FAULT_AGO_S = 300.0
_ISO_PREFIX = re.compile(r"^(?:kern\s*:\s*\w+\s*:\s*)?\d{4}-\d\d-\d\dT[\d:,.]+[+-]\d\d:?\d\d\s+")
_UPTIME_PREFIX = re.compile(r"^\[\s*\d+\.\d+\]\s*")
_SYSLOG_PREFIX = re.compile(r"^\w{3}\s+\d+\s+[\d:]+\s+\S+\s+kernel:\s*(?:\[\s*\d+\.\d+\]\s*)?")


class NodeDraft:
    """One node while it is built: the edited copies, then `finish()` writes them out."""

    def __init__(self, root: Path, name: str) -> None:
        self.root, self.name = root, name
        self.fixtures = shipped("fixtures/real")
        self.sysroot = root / "sysroot"
        self.seed = int(hashlib.sha256(name.encode()).hexdigest()[:8], 16)
        self.smi = SmiText(self.real(H100_Q))
        self.gpu_count = len(self.smi.gpu_spans())
        self.bus_ids = self.smi.bus_ids()
        #: (seconds before collection, message): the dmesg shim stamps them when it runs.
        self.kernel_lines: list[tuple[float, str]] = render.healthy_kernel_log(self.driver)
        self.nccl_scale = 1.0
        self.nic_scale = 1.0  # inter-node busbw factor (nic-busbw-drop), stetho.sim.nccl_step
        self.nccl_wrong_from: int | None = None
        self.nccl_output: str | None = None
        self.nccl_truncate = False
        self.lspci_widths: dict[int, int] = {}
        self.lost_gpus: set[int] = set()
        self.nvlink_down: set[tuple[int, int]] = set()
        #: (gpu, link) -> `nvlink -e` counter name -> count (the nvlink-errors fault)
        self.nvlink_counters: dict[tuple[int, int], dict[str, int]] = {}
        self.hang: set[str] = set()
        self.garbage: set[str] = set()
        self.truncate_xml = False
        self.mlxlink_ber: dict[str, str] = {}  # device -> raw physical BER text
        #: device -> mlxlink field ("Speed", "Width", "FEC") -> the text it prints instead
        self.mlxlink_fields: dict[str, dict[str, str]] = {}
        #: device -> perfquery -x counter -> the value it reads (sysfs keeps its own)
        self.perfquery_counters: dict[str, dict[str, int]] = {}
        self.nccl_transport = "ib"  # which recorded NCCL_DEBUG=INFO lines the run prints
        self.hide_ib_sysfs = False  # a container: no /sys/class/infiniband, ibstat still works
        self.ibstat_overrides: dict[str, dict[str, str]] = {}  # device -> ibstat field -> text
        self.nccl_version_line: str | None = None  # an NCCL_DEBUG=INFO `NCCL version` line
        self.tool_garbage: set[str] = set()  # per-device garbage outputs: "mlxlink:mlx5_3"
        self.rcv_error_details: dict[str, dict[str, int]] = {}  # device -> perfquery -E counters
        self.cable_swaps: list[tuple[str, str]] = []  # HCAs whose cables are crossed (iblinkinfo)
        self.unreadable_gpus: set[int] = set()  # GPUs whose XML section carries a bad value
        self.wrong_socket: set[int] = set()  # GPUs whose NICs sit on the other socket
        self.compute_apps: list[str] = []  # GPU processes: a job running (the gpu-job fault)
        self.compute_app_gpus: list[int] = []  # the GPU each of those processes holds
        #: `dcgmi diag -j`: the recorded document it prints and the exit code dcgmi gave with
        #: it (stetho.sim.shims; the dcgm-diag-fail fault sets the failing one)
        self.dcgmi_diag: tuple[str, int] = (shims.DCGMI_PASS, 0)
        #: A RoCE node (the roce faults): its Ethernet ports get RoCE outputs (stetho.sim.roce),
        #: with device -> counter -> value, the trust state and ECN off as faults set them
        self.roce_node = False
        self.roce_counters: dict[str, dict[str, int]] = {}
        self.roce_trust, self.roce_ecn_off = "dscp", False
        self.filesystems = hostfs.healthy()  # /proc/mounts and df (stetho.sim.hostfs)
        #: systemd units and their ActiveState: the h100 profile's units all running (healthy)
        self.services = {u: "active" for u in hostfs.UNITS}
        #: healthy: the recorded chronyd, synchronised at stratum 3, 34 ns fast
        self.chrony_tracking = self.real(hostfs.CHRONY_TRACKING)
        self.nvme_smart = nvme.healthy(self.real(nvme.RECORDING), NVME)  # nvme0.. -> its log
        #: the NCCL of the job's container image and environment module (healthy: the host's)
        self.image_nccl = self.module_nccl = NCCL_VERSION
        #: bridges in lspci -vvv: the recorded PEX890xx switch port, ACS off (stetho.sim.hostfs)
        self.lspci_extra = [self.real(hostfs.PEX_SWITCH)]
        self.faults: list[str] = []
        self._healthy()

    @property
    def driver(self) -> str:
        m = re.search(r"Driver Version\s*:\s*(\S+)", str(self.smi))
        return m.group(1) if m else "?"

    def real(self, rel: str) -> str:
        return (self.fixtures / rel).read_text(encoding="utf-8")

    def _healthy(self) -> None:
        """A correctly configured node: no power brake, and clocks locked to the H100 target.

        The recording was taken under power brake, which held every GPU at 86 MHz SM. A GPU
        locked with `-lgc 1980,1980 -lmc 2619,2619` holds the target at idle: its current SM
        clock reads 1980 MHz, memory 2619 MHz (HBM3 already reads 2619 in the recording), P0,
        and "Idle" Not Active, since the driver reports GPU idle only when it has lowered the
        clocks for idleness. The recorded T4 and A100 XML outputs (fixtures/real/01-*) show
        exactly that for GPUs held at their clocks with no work: P0, current clock equal to
        the held one, gpu_idle Not Active; the idle A10G/A5000/Ada ones that were not held
        read P8, gpu_idle Active, 210 MHz. P-state and the Idle reason are already P0 / Not
        Active in the recording; only the SM and graphics clocks change."""
        for g in range(self.gpu_count):
            self.smi.set(g, (REASONS, "HW Slowdown"), "Not Active")
            self.smi.set(g, (REASONS, "HW Slowdown", "HW Power Brake Slowdown"), "Not Active")
            self.smi.set(g, ("Clocks", "Graphics"), f"{LOCKED_SM_MHZ} MHz")
            self.smi.set(g, ("Clocks", "SM"), f"{LOCKED_SM_MHZ} MHz")
            self.smi.set(g, ("Clocks", "Memory"), f"{LOCKED_MEM_MHZ} MHz")
            self.smi.set(g, ("Serial Number",), f"SIM{self.seed % 10**6:06d}{g:02d}")
            self.smi.set(g, ("GPU UUID",), _uuid(f"{self.name}/gpu{g}"))
        self._sysroot()

    def _sysroot(self) -> None:
        s = self.sysroot
        for cpu in range(CPUS):
            _write(s / f"sys/devices/system/cpu/cpu{cpu}/cpufreq/scaling_governor", "performance\n")
        for n in range(NVME):
            q = s / f"sys/block/nvme{n}n1/queue"
            _write(q / "rotational", "0\n")
            _write(q / "scheduler", "[none] mq-deadline kyber bfq\n")
        _write(s / "proc/sys/kernel/osrelease", KERNEL + "\n")
        # one boot for the node's life; the `reboot` fault gives it another
        _write(s / "proc/sys/kernel/random/boot_id", _uuid(f"{self.name}/boot")[4:] + "\n")
        rec = shipped("fixtures/recorded") / PROC
        _write(s / "proc/meminfo", (rec / "meminfo").read_text())
        hostfs.limits(s)
        hostfs.iommu(s, "identity")
        for mc in range(2):  # two sockets' memory controllers, no error since boot (healthy)
            for count in ("ce_count", "ue_count"):
                _write(s / f"sys/devices/system/edac/mc/mc{mc}/{count}", "0\n")
        for res in ("io", "memory", "cpu"):
            # the recording was taken under load: a healthy idle node reads near zero
            _write(s / f"proc/pressure/{res}", "some avg10=0.00 avg60=0.02 avg300=0.05 "
                   "total=18731\nfull avg10=0.00 avg60=0.00 avg300=0.01 total=4417\n")
        _write(s / f"usr/lib/x86_64-linux-gnu/libnccl.so.{NCCL_VERSION}", "")
        # GPUDirect RDMA's peer memory module loaded: what the kernel's sysfs-module ABI prints
        _write(s / "sys/module/nvidia_peermem/initstate", "live\n")
        pcibus.write_nvswitches(s, self.real)  # the HGX board's 4 NVSwitches on the bus
        pcibus.write_version(s, self.real, self.driver)  # the proprietary kernel module
        src = self.fixtures / IB_TREE
        dst = s / "sys/class/infiniband"
        for f in sorted(src.rglob("*")):
            if f.is_file():
                text = f.read_text(encoding="utf-8")
                rel = f.relative_to(src).as_posix()
                if rel.endswith("counters/link_downed") and text.strip() == "255":
                    text = "0"  # the recording's mlx5_1 reads a saturated 255: not healthy
                _write(dst / rel, text)

    # -- helpers for faults -------------------------------------------------------------------
    def idle_unlocked(self, g: int) -> None:
        """GPU `g` never locked, idling: the recorded idle SM clock (86 MHz; HBM3 stays at
        2619 MHz as recorded), and the P-state and reason every recorded idle, unheld GPU
        reports (P8, "Idle" Active: the A10G, A5000 and Ada outputs in fixtures/real/01-*)."""
        self.smi.set(g, ("Clocks", "Graphics"), f"{IDLE_SM_MHZ} MHz")
        self.smi.set(g, ("Clocks", "SM"), f"{IDLE_SM_MHZ} MHz")
        self.smi.set(g, ("Clocks", "Memory"), f"{LOCKED_MEM_MHZ} MHz")
        self.smi.set(g, ("Performance State",), "P8")
        self.smi.set(g, (REASONS, "Idle"), "Active")

    def gpu_pci(self, g: int) -> str:
        """'00000000:4C:00.0' -> '0000:4c:00', as the kernel prints it."""
        _, bus, devfn = self.bus_ids[g].lower().split(":")
        return f"0000:{bus}:{devfn.split('.')[0]}"

    def real_xid_line(self, code: int) -> str:
        line = recorded_xid_line(self.fixtures, code)
        if line is not None:
            return line
        from stetho.facts import xid

        # No recording of this code: the NVRM line format of the recorded ones, catalog text.
        return f"NVRM: Xid (PCI:0000:00:00): {code}, pid='<unknown>', name=<unknown>, " \
               f"{xid.lookup(code).name}"

    def add_kernel_lines(self, lines: list[str], gpu: int, source_pci: str | None = None,
                         ago_s: float = FAULT_AGO_S) -> None:
        """Recorded kernel lines re-addressed to one GPU, their stamps replaced: they happen
        `ago_s` seconds before collection (default: minutes before), a millisecond apart."""
        pci = self.gpu_pci(gpu)
        for i, raw in enumerate(lines):
            line = _SYSLOG_PREFIX.sub("", _UPTIME_PREFIX.sub("", _ISO_PREFIX.sub("", raw)))
            if source_pci:
                line = line.replace(source_pci, pci)
            line = re.sub(r"PCI:[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}", f"PCI:{pci}", line)
            self.kernel_lines.append((ago_s - i * 0.001, line))

    def kernel_message(self, message: str, ago_s: float = FAULT_AGO_S) -> None:
        """One kernel message, as is, `ago_s` seconds before collection."""
        self.kernel_lines.append((ago_s, message))

    def _dmesg_data(self) -> str:
        """The kernel log as the shim reads it: 'SECONDS_AGO<TAB>MICROSECONDS<TAB>message',
        oldest first (dmesg prints in time order)."""
        ordered = sorted(enumerate(self.kernel_lines), key=lambda x: (-x[1][0], x[0]))
        out = []
        for _, (ago, msg) in ordered:
            whole = int(ago) + (1 if ago % 1 else 0)  # stamp = now - whole + fraction
            micros = round((whole - ago) * 1e6) % 10**6
            out.append(f"{whole}\t{micros:06d}\t{msg}")
        return "\n".join(out) + "\n"

    # -- output -----------------------------------------------------------------------------------
    def finish(self) -> None:
        from stetho.parsers import nvidia_smi_text
        from stetho.sim import smi_xml

        data = self.root / "data"
        smi = SmiText(str(self.smi))
        for g in sorted(self.lost_gpus, reverse=True):
            smi.drop_gpu(g)
        remaining = len(smi.gpu_spans())
        smi.lines = [re.sub(r"^(Attached GPUs\s*:\s*)\d+", rf"\g<1>{remaining}", x)
                     for x in smi.lines]
        text = str(smi)
        report = nvidia_smi_text.parse(text)
        xml = smi_xml.render(report)
        for g in self.unreadable_gpus:  # the g-th <gpu> section: a value no parser reads
            start = [m.start() for m in re.finditer(r"<gpu id=", xml)][g]
            xml = xml[:start] + xml[start:].replace("<current_ecc>Enabled</current_ecc>",
                                                    "<current_ecc>En#bled</current_ecc>", 1)
        if self.truncate_xml:
            xml = xml[: len(xml) // 2]
        gpus = [(g.product_name or "?", g.uuid or "?") for g in report.gpus]
        status = render.nvlink_status(gpus)
        for g, link in self.nvlink_down:
            status = re.sub(rf"(GPU {g}: .*\n(?:\t .*\n)*?\t Link {link}): [\d.]+ GB/s",
                            r"\1: <inactive>", status)
        live_bus = [b for i, b in enumerate(self.bus_ids) if i not in self.lost_gpus]
        nccl = self.nccl_output
        if nccl is None and self.lost_gpus:
            nccl = ("# nThread 1 nGpus 8 minBytes 8 maxBytes 8589934592 step: 2(factor) warmup "
                    "iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0\n#\n# Using devices\n"
                    f"{self.name}: Test CUDA failure common.cu:892 'invalid device ordinal'\n"
                    f" .. {self.name} pid 4100: Test failure common.cu:1025\n")
        if nccl is None:
            nccl = render.nccl_allreduce(self.name, live_bus, gpus[0][0], self.seed,
                                         scale=self.nccl_scale, wrong_from=self.nccl_wrong_from,
                                         info_lines=self._nccl_info())
            if self.nccl_truncate:
                nccl = "\n".join(nccl.splitlines()[:35]) + "\n"
        files = {
            "nvidia-smi-q.txt": text,
            "nvidia-smi-q-x.xml": xml,
            "nvlink-s.txt": status,
            "nvlink-e.txt": render.nvlink_errors(gpus, self.nvlink_counters),
            "dmesg.tsv": self._dmesg_data(),
            **self._ib_tools(),
            **(roce.write(self.sysroot, self.real, self.roce_counters, self.roce_trust,
                          self.roce_ecn_off) if self.roce_node else {}),
            "lspci.txt": render.lspci_gpus(self.real(LSPCI), self.bus_ids, self.lspci_widths)
            + "".join("\n" + b for b in self.lspci_extra),
            "all_reduce_perf.txt": nccl,
            "nic-busbw-scale.txt": f"{self.nic_scale:g}\n",
            "compute-apps.csv": "".join(f"{line}\n" for line in self.compute_apps),
            "compute-apps-gpu.csv": "".join(
                f"{line.split(',')[0]}, {_uuid(f'{self.name}/gpu{g}')}\n"
                for line, g in zip(self.compute_apps, self.compute_app_gpus, strict=True)),
            "dcgmi-diag.json": self.real(self.dcgmi_diag[0]),
            "gpu_burn.txt": self.real(GPU_BURN),
            "nvbandwidth.txt": self.real(NVBANDWIDTH),
            "nvidia-topo.txt": topo.render(self.real(topo.TOPO), self.wrong_socket),
            "df-B1.txt": hostfs.df_bytes(self.filesystems),
            "df-i.txt": hostfs.df_inodes(self.filesystems),
            "chronyc-tracking.txt": self.chrony_tracking,
            "units.tsv": "".join(f"{u}\t{st}\n" for u, st in self.services.items()),
            **nvme.files(self.nvme_smart),
            **jobenv.files(self.real, self.image_nccl, self.module_nccl),
        }
        _write(self.sysroot / "proc/mounts", hostfs.mounts(self.filesystems))
        real_mlx = self.real(MLXLINK)
        for dev in sorted({*self.mlxlink_ber, *self.mlxlink_fields}):
            edits = {"Raw Physical BER": self.mlxlink_ber.get(dev),
                     **self.mlxlink_fields.get(dev, {})}
            files[f"mlxlink-{dev}.json"] = render.mlxlink_edit(real_mlx, edits)
        files["mlxlink.json"] = real_mlx
        for dev in sorted(t.split(":", 1)[1] for t in self.tool_garbage
                          if t.startswith("mlxlink:")):
            files[f"mlxlink-{dev}.json"] = '-W- unexpected reply\n{"result": [1, 2\n'
        for name, content in files.items():
            _write(data / name, content)
        if self.hide_ib_sysfs:
            import shutil

            shutil.rmtree(self.sysroot / "sys/class/infiniband")
        _write(data / "garbage.bin", "")
        (data / "garbage.bin").write_bytes(random.Random(self.seed).randbytes(4096))
        shims.write(self.root / "bin", self.hang, self.garbage, self.dcgmi_diag[1])
        meta = {"name": self.name, "faults": self.faults, "built_by": "stetho sim build",
                "gpus": remaining, "sources": {"nvidia-smi -q": H100_Q, "sysfs": IB_TREE,
                                               "ibstat": "rendered from sysfs", "lspci": LSPCI,
                                               "mlxlink": MLXLINK}}
        _write(self.root / "node.json", json.dumps(meta, indent=1) + "\n")

    def _ib_tools(self) -> dict[str, str]:
        """ibstat and perfquery -x/-E outputs rendered from the node's sysfs IB tree."""
        from stetho.sim import iblinks, ibtools

        devices = ibtools.read_tree(self.sysroot)
        files = {"ibstat.txt": ibtools.ibstat(devices, self.ibstat_overrides),
                 **iblinks.render(self.real(iblinks.RECORDING), self.name, devices,
                                  1 + self.seed % 32, self.cable_swaps)}
        for d in devices:
            over = self.perfquery_counters.get(d.name)
            seen = d if not over else replace(d, ports=(
                replace(d.ports[0], counters={**d.ports[0].counters, **over}), *d.ports[1:]))
            files[f"perfquery-x-{d.name}.txt"] = ibtools.perfquery_x(seen)
            files[f"perfquery-E-{d.name}.txt"] = ibtools.perfquery_e(
                d, self.rcv_error_details.get(d.name))
            if f"perfquery:{d.name}" in self.tool_garbage:
                files[f"perfquery-x-{d.name}.txt"] = "# Port weird counters: Lid ?\n~~~\n"
        return files

    def _nccl_info(self) -> list[str]:
        """Recorded NCCL_DEBUG=INFO lines naming the transport, re-hosted on this node."""
        keep: tuple[str, ...]
        if self.nccl_transport == "socket":
            text = self.real(NCCL_SOCKET_LOG)
            keep = ("Bootstrap", "Plugin Path", "P2P plugin", "NET/IB", "NET/Socket",
                    "Using network")
        else:
            text = self.real(NCCL_IB_LOG)
            keep = ("NET/IB : Using", "Using network", "NET/Plugin", "P2P plugin")
        lines = [ln for ln in text.splitlines() if "NCCL INFO" in ln and any(k in ln for k in keep)]
        version = [self.nccl_version_line] if self.nccl_version_line else []
        return version + [re.sub(r"^[\w.-]+:", f"{self.name}:", ln, count=1) for ln in lines]


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def _uuid(key: str) -> str:
    h = hashlib.sha256(key.encode()).hexdigest()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def recorded_xid_line(fixtures: Path, code: int) -> str | None:
    """The first recorded kernel log line carrying Xid `code`, if any fixture has one."""
    pattern = re.compile(r"NVRM: Xid \(PCI:[0-9a-fA-F:]+\): %d," % code)
    for path in sorted((fixtures / "05-kernel-log").glob("*")):
        for line in path.read_text(errors="replace").splitlines():
            if pattern.search(line):
                return line
    return None
