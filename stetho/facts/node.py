"""Node facts: a bundle's raw evidence turned into typed facts, parsed lazily and once.

Every accessor either returns the parsers' own typed data or raises `Unavailable` with a
status: `skip` when the thing is simply not on this node (no nvidia-smi, no
/sys/class/infiniband) and `error` when it should be and could not be read or parsed. Which one
depends on what the node is expected to have (`Expected`, which the checking stage derives from
the node's profile): a node expected to carry 8 GPUs with no nvidia-smi is an error, a generic
node a skip.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, TypeVar

from stetho.evidence.bundle import Bundle, ProbeRecord
from stetho.facts.base import Expected as Expected
from stetho.facts.base import Unavailable as Unavailable
from stetho.parsers import ParseError

if TYPE_CHECKING:
    from stetho.facts.window import CounterWindow, Windows
    from stetho.parsers.gpu_model import Gpu, SmiReport
    from stetho.parsers.ib_common import IbDevice, IbPort
    from stetho.parsers.ibstat import IbstatReport
    from stetho.parsers.kernel_log import KernelLog
    from stetho.parsers.lspci import PciDevice
    from stetho.parsers.mlxlink import MlxlinkReport
    from stetho.parsers.nccl_log import NcclLog
    from stetho.parsers.nccl_tests import NcclRun
    from stetho.parsers.nvlink import NvlinkErrorsGpu, NvlinkGpu
    from stetho.parsers.perfquery import PerfqueryPort
    from stetho.parsers.sysfs_host import BlockDevice, CpuGovernor, Pressure

T = TypeVar("T")


_ABSENT_MEANS = {
    "nvidia_smi": "no NVIDIA GPU driver on this node",
    "nvlink_status": "no NVIDIA GPU driver on this node",
    "nvlink_errors": "no NVIDIA GPU driver on this node",
    "ib_sysfs": "no InfiniBand/RDMA devices on this node",
    "ibstat": "infiniband-diags is not installed",
    "perfquery": "infiniband-diags is not installed",
    "perfquery_rcv_errors": "infiniband-diags is not installed",
    "mlxlink": "NVIDIA MFT (mlxlink) is not installed",
    "cpu_governor": "cpufreq is not exposed (a VM, or the driver is not loaded)",
    "block_queue": "no block devices",
    "lspci": "pciutils is not installed",
    "ofed": "MLNX_OFED/DOCA-OFED is not installed",
    "nccl_library": "no NCCL library found in the standard library folders",
    "nccl_tests": "nccl-tests is not installed",
}


class NodeFacts:
    def __init__(self, bundle: Bundle, expected: Expected | None = None) -> None:
        self.bundle = bundle
        self.expected = expected or Expected()
        self.name = bundle.node
        self._cache: dict[str, object] = {}
        self._fp: dict[str, str] | None = None
        #: Loads its earlier counter readings (stetho.checking.counter_history); None: no history
        self.window_loader: Callable[[NodeFacts], CounterWindow] | None = None

    def fingerprint(self) -> dict[str, str]:
        if self._fp is None:
            self._fp = fingerprint(self)
        return self._fp

    # -- raw access -------------------------------------------------------------------------
    def record(self, name: str) -> ProbeRecord:
        rec = self.bundle.probe(name)
        if rec is None:
            raise Unavailable("error", f"probe {name} was not collected in this bundle", name)
        return rec

    def text(self, name: str) -> str:
        """A command probe's stdout, or Unavailable saying why there is none."""
        rec = self.record(name)
        where = rec.describe()
        if rec.status in ("missing", "absent", "skipped"):
            why = _ABSENT_MEANS.get(name, "")
            raise Unavailable("skip", f"{rec.reason}{': ' + why if why else ''}", where)
        if rec.status in ("timeout", "denied", "error"):
            raise Unavailable("error", f"{where}: {rec.reason}", where)
        if rec.binary:
            raise Unavailable("error", f"{where}: printed binary data, not text", where)
        if rec.status == "failed" and not rec.stdout.strip():
            raise Unavailable("error", f"{where}: {rec.reason}", where)
        return rec.stdout

    def files(self, name: str) -> dict[str, str]:
        rec = self.record(name)
        if rec.status == "absent":
            raise Unavailable("skip", f"{rec.reason}: {_ABSENT_MEANS.get(name, '')}".rstrip(": "),
                              name)
        if rec.status in ("denied", "error", "timeout"):
            raise Unavailable("error", f"{name}: {rec.reason}", name)
        bad = {p: e for p, e in rec.errors.items() if e == "binary content"}
        if bad:
            path = next(iter(bad))
            raise Unavailable("error", f"{path}: binary content, not text", name)
        return rec.files

    def parsed(self, key: str, load: Callable[[], T]) -> T:
        """Parse once; a ParseError becomes an `error` Unavailable naming the probe. What is
        cached for a failure is the reason (kind and message), never a traceback."""
        if key in self._cache:
            cached = self._cache[key]
            if isinstance(cached, Unavailable):
                raise cached.fresh()
            return cached  # type: ignore[return-value]
        try:
            value = load()
        except ParseError as exc:
            failure = Unavailable("error", f"cannot parse {exc.tool} output: {exc.reason}", key)
        except Unavailable as exc:
            failure = exc.fresh()
        else:
            self._cache[key] = value
            return value
        self._cache[key] = failure
        raise failure.fresh() from None

    # -- GPUs ---------------------------------------------------------------------------------
    def smi(self) -> SmiReport:
        from stetho.parsers import nvidia_smi_xml

        return self.parsed("nvidia_smi", lambda: nvidia_smi_xml.parse(self._gpu_text()))

    def _gpu_text(self) -> str:
        try:
            return self.text("nvidia_smi")
        except Unavailable as u:
            expected = self.expected.gpus
            if u.status == "skip" and expected:
                raise Unavailable("error", f"{u.reason}, but profile {self.expected.profile} "
                                  f"expects {expected} GPUs", u.probe) from None
            raise

    def gpus(self) -> tuple[Gpu, ...]:
        report = self.smi()
        if not report.gpus and not self.expected.gpus:
            raise Unavailable("skip", "nvidia-smi lists no GPUs on this node", "nvidia_smi")
        return tuple(report.gpus)

    def kernel_log(self) -> KernelLog:
        from stetho.parsers import kernel_log

        return self.parsed("kernel_log", lambda: kernel_log.parse(self.text("kernel_log")))

    def nvlink_status(self) -> tuple[NvlinkGpu, ...]:
        from stetho.parsers import nvlink

        return self.parsed("nvlink_status", lambda: nvlink.parse_status(self.text("nvlink_status")))

    def nvlink_errors(self) -> tuple[NvlinkErrorsGpu, ...]:
        from stetho.parsers import nvlink

        return self.parsed("nvlink_errors", lambda: nvlink.parse_errors(self.text("nvlink_errors")))

    def lspci(self) -> tuple[PciDevice, ...]:
        from stetho.parsers import lspci

        return self.parsed("lspci", lambda: lspci.parse(self.text("lspci")))

    # -- InfiniBand (stetho.facts.ib) --------------------------------------------------------
    def ib_devices(self) -> tuple[IbDevice, ...]:
        """The HCAs and their ports: /sys/class/infiniband, else ibstat (+ perfquery)."""
        from stetho.facts import ib

        return self.parsed("ib_sysfs", lambda: ib.load_devices(self))

    def ib_ports(self) -> tuple[IbPort, ...]:
        return tuple(p for d in self.ib_devices() for p in d.ports)

    def ib_source(self) -> str:
        """Where port state, rate, link layer and firmware came from: 'sysfs' or 'ibstat'."""
        devices = self.ib_devices()
        return devices[0].source if devices else "sysfs"

    def ibstat(self) -> IbstatReport:
        from stetho.facts import ib

        return self.parsed("ibstat", lambda: ib.load_ibstat(self))

    def ibstat_disagreements(self) -> dict[str, list[str]]:
        """Computed once per node (each port's check asks): callers only read it."""
        cached = self._cache.get("ibstat_disagreements")
        if cached is None:
            from stetho.facts import ib

            cached = self._cache["ibstat_disagreements"] = ib.disagreements(self)
        return cached  # type: ignore[return-value]

    def perfquery(self, device: str) -> PerfqueryPort:
        """Port 1's counters of one HCA from `perfquery -x` (or plain, where -x is refused)."""
        from stetho.facts import ib

        return self.parsed(f"perfquery:{device}", lambda: ib.load_perfquery(self, "perfquery",
                                                                              device))

    def rcv_error_details(self, device: str) -> PerfqueryPort:
        """`perfquery -E` (PortRcvErrorDetails) of one HCA's port 1."""
        from stetho.facts import ib

        return self.parsed(f"perfquery_rcv_errors:{device}",
                           lambda: ib.load_perfquery(self, "perfquery_rcv_errors", device))

    def mlxlink(self) -> tuple[MlxlinkReport, ...]:
        """The per-port mlxlink reports that parsed; () when MFT is absent. A device whose
        output did not parse is left out here: `mlxlink_for` names it."""
        out = []
        for device in self.mlxlink_devices():
            try:
                out.append(self.mlxlink_for(device))
            except Unavailable:
                continue
        return tuple(out)

    def mlxlink_devices(self) -> tuple[str, ...]:
        return tuple(sorted(name.split(":", 1)[1] for name, rec in self.bundle.probes.items()
                            if name.startswith("mlxlink:")
                            and rec.status not in ("missing", "skipped")))

    def mlxlink_for(self, device: str) -> MlxlinkReport:
        """One HCA's mlxlink report; its unparsable output errors that device only."""
        from stetho.facts import ib

        return self.parsed(f"mlxlink:{device}", lambda: ib.load_mlxlink(self, device))

    # -- host -----------------------------------------------------------------------------------
    def governors(self) -> tuple[CpuGovernor, ...]:
        from stetho.parsers import sysfs_host

        return self.parsed("cpu_governor",
                           lambda: sysfs_host.parse_governors(self.files("cpu_governor")))

    def block_devices(self) -> tuple[BlockDevice, ...]:
        return self._block()[0]

    def unreadable_block_devices(self) -> dict[str, str]:
        """Block devices whose queue files did not parse, with why: errors of their own."""
        return self._block()[1]

    def _block(self) -> tuple[tuple[BlockDevice, ...], dict[str, str]]:
        from stetho.facts import host

        return self.parsed("block_queue", lambda: host.load_block(self))

    def pressure(self) -> dict[str, Pressure]:
        from stetho.parsers import sysfs_host

        return self.parsed("pressure", lambda: {
            p.resource: p for p in sysfs_host.parse_pressure(self.files("host_pressure"))})

    def meminfo(self) -> dict[str, int]:
        from stetho.parsers import sysfs_host

        def load() -> dict[str, int]:
            files = self.files("host_pressure")
            text = files.get("/proc/meminfo")
            if text is None:
                raise Unavailable("skip", "/proc/meminfo was not read", "host_pressure")
            return sysfs_host.parse_meminfo(text)

        return self.parsed("meminfo", load)

    def windows(self) -> Windows:
        """This node's counter window (stetho.facts.window): read once, one query."""
        from stetho.facts.window import Windows

        if "counter_window" not in self._cache:
            try:
                if self.window_loader is None:
                    raise Unavailable("skip", "this run reads no history (a replay without "
                                      "--history, or a sweep's node side, where the controller"
                                      " judges the window)", "history")
                self._cache["counter_window"] = self.window_loader(self)
            except Unavailable as u:
                self._cache["counter_window"] = u.reason
        found = self._cache["counter_window"]
        return Windows(None, found) if isinstance(found, str) else Windows(found)  # type: ignore[arg-type]

    # -- NCCL ---------------------------------------------------------------------------------
    def nccl_run(self) -> NcclRun:
        from stetho.parsers import nccl_tests

        def load() -> NcclRun:
            rec = self.record("nccl_tests")
            if rec.kind == "files":
                files = self.files("nccl_tests")
                return nccl_tests.parse(next(iter(files.values())))
            return nccl_tests.parse(self.text("nccl_tests"))

        if not self.expected.nccl:
            raise Unavailable("skip", f"profile {self.expected.profile} does not enable "
                              "nccl-tests")
        return self.parsed("nccl_tests", load)

    def nccl_collective(self) -> tuple[str | None, tuple[str, ...]]:
        """The collective the nccl-tests run performed, and the signals (stetho.facts.nccl)."""
        from stetho.facts import nccl

        return self.parsed("nccl_tests:collective", lambda: nccl.collective(
            self.nccl_run(), self.expected, self.bundle.probes.get("nccl_tests")))

    def nccl_log(self) -> NcclLog:
        """What NCCL said about itself (NCCL_DEBUG=INFO lines in the nccl-tests output):
        its version and the transport it chose, IB or sockets."""
        from stetho.parsers import nccl_log

        def load() -> NcclLog:
            rec = self.record("nccl_tests")
            text = next(iter(self.files("nccl_tests").values())) if rec.kind == "files" \
                else self.text("nccl_tests")
            return nccl_log.parse(text)

        if not self.expected.nccl:
            raise Unavailable("skip", f"profile {self.expected.profile} does not enable "
                              "nccl-tests")
        return self.parsed("nccl_log", load)

    # -- versions -------------------------------------------------------------------------------
    def version(self, component: str) -> tuple[tuple[str, ...], str]:
        """The distinct versions of a component on this node (several VBIOS or HCA firmware
        versions can coexist), and the probe they came from."""
        return self.parsed(f"version:{component}", lambda: self._version(component))

    def versions(self) -> dict[str, tuple[str, ...]]:
        """Every fleet component's versions the node can tell (unknown ones left out: the
        version checks report why)."""
        out: dict[str, tuple[str, ...]] = {}
        for comp in FLEET_COMPONENTS:
            try:
                found, _ = self.version(comp)
            except Unavailable:
                continue
            if found:
                out[comp] = found
        return out

    def _version(self, component: str) -> tuple[tuple[str, ...], str]:
        from stetho.parsers import versions

        if component == "driver":
            return _one(self.smi().driver_version), "nvidia-smi -q -x"
        if component == "cuda":
            return _one(self.smi().cuda_version), "nvidia-smi -q -x"
        if component == "vbios":
            return _distinct(g.vbios_version for g in self.gpus()), "nvidia-smi -q -x"
        if component == "hca_firmware":
            from stetho.facts import ib

            devices, source = ib.firmware_devices(self)
            return _distinct(d.fw_ver for d in devices), source
        if component == "kernel":
            files = self.files("kernel_release")
            text = files.get("/proc/sys/kernel/osrelease")
            if text is None:
                raise Unavailable("error", "/proc/sys/kernel/osrelease was not read",
                                  "kernel_release")
            return _one(versions.kernel_release(text)), "kernel_release"
        if component == "ofed":
            return _one(versions.ofed_version(self.text("ofed"))), "ofed_info -s"
        if component == "nccl":
            return self._nccl_version()
        raise Unavailable("error", f"unknown version component {component}")

    def _nccl_version(self) -> tuple[tuple[str, ...], str]:
        """The NCCL the benchmark reports it ran with wins over the library file: a job may
        load another libnccl (a container's, LD_LIBRARY_PATH) than the one in /usr/lib."""
        from stetho.parsers import versions

        try:
            run = self.nccl_run()
        except Unavailable:
            run = None
        if run is not None and run.nccl_version:
            where = run.nccl_version_source or "version line"
            return (run.nccl_version,), f"nccl-tests output ({where})"
        try:
            files = self.files("nccl_library")
        except Unavailable as u:
            if u.status == "error":
                raise
            files = {}
        lib = versions.nccl_from_library(files)
        if lib:
            return (lib,), "libnccl.so.* file name"
        if files:
            raise Unavailable("error", "NCCL version unknown: no libnccl file names a full "
                              f"version ({', '.join(sorted(files)[:3])})", "nccl_library")
        raise Unavailable("skip", "NCCL not found: no libnccl.so.<version> in the standard "
                          "library folders and no version in nccl-tests output", "nccl_library")


def fingerprint(facts: NodeFacts) -> dict[str, str]:
    """The environment a measurement depends on: versions, GPU model, and a hash of the PCI
    topology of GPUs and HCAs (slot addresses and link capabilities)."""
    import hashlib

    fp = {comp: ", ".join(found) for comp, found in facts.versions().items()}
    try:
        models = sorted({g.product_name for g in facts.gpus() if g.product_name})
        if models:
            fp["gpu_model"] = ", ".join(models)
    except Unavailable:
        pass
    try:
        devs = sorted(f"{d.address}|{d.link_cap.speed_gts if d.link_cap else '?'}|"
                      f"{d.link_cap.width if d.link_cap else '?'}"
                      for d in facts.lspci() if d.is_nvidia_gpu or d.is_hca)
        if devs:
            fp["topology"] = hashlib.sha256("\n".join(devs).encode()).hexdigest()[:12]
    except Unavailable:
        pass
    return fp


FLEET_COMPONENTS = ("driver", "cuda", "vbios", "nccl", "hca_firmware", "kernel", "ofed")


def _one(value: str | None) -> tuple[str, ...]:
    return (value,) if value else ()


def _distinct(values: Iterable[str | None]) -> tuple[str, ...]:
    seen = sorted({v for v in values if v}, key=_version_order)
    return tuple(seen)


def _version_order(v: str) -> tuple[int, object]:
    """Real version order where a version parses; anything else after, by text."""
    from stetho.core.versioning import Version

    try:
        return (0, Version(v))
    except ValueError:
        return (1, v)
