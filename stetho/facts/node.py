"""Node facts: a bundle's raw evidence turned into typed facts, parsed lazily and once.

Every accessor either returns parsed facts or raises `Unavailable` with a status:
`skip` when the thing is simply not on this node (no nvidia-smi, no /sys/class/infiniband) and
`error` when it should be and could not be read or parsed. Which one depends on the profile: a
node whose profile expects 8 GPUs and has no nvidia-smi is an error, a generic node a skip.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from stetho.evidence.bundle import Bundle, ProbeRecord
from stetho.parsers import ParseError
from stetho.profiles import Profile

T = TypeVar("T")


class Unavailable(Exception):
    """The facts a check needs are not there. `status` is "skip" or "error"."""

    def __init__(self, status: str, reason: str, probe: str | None = None) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason
        self.probe = probe


_ABSENT_MEANS = {
    "nvidia_smi": "no NVIDIA GPU driver on this node",
    "nvlink_status": "no NVIDIA GPU driver on this node",
    "nvlink_errors": "no NVIDIA GPU driver on this node",
    "ib_sysfs": "no InfiniBand/RDMA devices on this node",
    "ibstat": "infiniband-diags is not installed",
    "perfquery": "infiniband-diags is not installed",
    "cpu_governor": "cpufreq is not exposed (a VM, or the driver is not loaded)",
    "block_queue": "no block devices",
    "lspci": "pciutils is not installed",
    "ofed": "MLNX_OFED/DOCA-OFED is not installed",
    "nccl_library": "no NCCL library found in the standard library folders",
    "nccl_tests": "nccl-tests is not installed",
}


class NodeFacts:
    def __init__(self, bundle: Bundle, profile: Profile) -> None:
        self.bundle = bundle
        self.profile = profile
        self.name = bundle.node
        self._cache: dict[str, Any] = {}

    def summary(self) -> dict[str, Any]:
        return summary(self)

    def fingerprint(self) -> dict[str, str]:
        return self._fp if hasattr(self, "_fp") else self._fingerprint()

    def _fingerprint(self) -> dict[str, str]:
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
        """Parse once; a ParseError becomes an `error` Unavailable naming the probe."""
        if key in self._cache:
            cached = self._cache[key]
            if isinstance(cached, Unavailable):
                raise cached
            return cached  # type: ignore[no-any-return]
        value: Any
        try:
            value = load()
        except ParseError as exc:
            value = Unavailable("error", f"cannot parse {exc.tool} output: {exc.reason}", key)
        except Unavailable as exc:
            value = exc
        self._cache[key] = value
        if isinstance(value, Unavailable):
            raise value
        return value  # type: ignore[no-any-return]

    # -- GPUs ---------------------------------------------------------------------------------
    def smi(self) -> Any:
        from stetho.parsers import nvidia_smi_xml

        return self.parsed("nvidia_smi", lambda: nvidia_smi_xml.parse(self._gpu_text()))

    def _gpu_text(self) -> str:
        try:
            return self.text("nvidia_smi")
        except Unavailable as u:
            expected = self.profile.gpu.count
            if u.status == "skip" and expected:
                raise Unavailable("error", f"{u.reason}, but profile {self.profile.name} "
                                  f"expects {expected} GPUs", u.probe) from None
            raise

    def gpus(self) -> tuple[Any, ...]:
        report = self.smi()
        if not report.gpus and not self.profile.gpu.count:
            raise Unavailable("skip", "nvidia-smi lists no GPUs on this node", "nvidia_smi")
        return tuple(report.gpus)

    def kernel_log(self) -> Any:
        from stetho.parsers import kernel_log

        return self.parsed("kernel_log", lambda: kernel_log.parse(self.text("kernel_log")))

    def nvlink_status(self) -> Any:
        from stetho.parsers import nvlink

        return self.parsed("nvlink_status", lambda: nvlink.parse_status(self.text("nvlink_status")))

    def nvlink_errors(self) -> Any:
        from stetho.parsers import nvlink

        return self.parsed("nvlink_errors", lambda: nvlink.parse_errors(self.text("nvlink_errors")))

    def lspci(self) -> Any:
        from stetho.parsers import lspci

        return self.parsed("lspci", lambda: lspci.parse(self.text("lspci")))

    # -- InfiniBand ---------------------------------------------------------------------------
    def ib_devices(self) -> Any:
        from stetho.parsers import ib_sysfs

        def load() -> Any:
            try:
                files = self.files("ib_sysfs")
            except Unavailable as u:
                if u.status == "skip" and self.profile.ib.ports:
                    raise Unavailable("error", f"{u.reason}, but profile {self.profile.name} "
                                      f"expects {self.profile.ib.ports} InfiniBand ports",
                                      "ib_sysfs") from None
                raise
            devices = ib_sysfs.parse(files)
            if not devices:
                raise Unavailable("skip", "no InfiniBand/RDMA devices on this node", "ib_sysfs")
            return devices

        return self.parsed("ib_sysfs", load)

    def ib_ports(self) -> tuple[Any, ...]:
        return tuple(p for d in self.ib_devices() for p in d.ports)

    def ibstat(self) -> Any:
        from stetho.parsers import ibstat

        return self.parsed("ibstat", lambda: ibstat.parse(self.text("ibstat")))

    def mlxlink(self) -> tuple[Any, ...]:
        """Per-port mlxlink reports (pre-FEC BER, module power); () when MFT is absent."""
        from stetho.parsers import mlxlink

        def load() -> tuple[Any, ...]:
            out = []
            for name, rec in sorted(self.bundle.probes.items()):
                if not name.startswith("mlxlink:") or rec.status in ("missing", "skipped"):
                    continue
                out.append(mlxlink.parse(self.text(name), device=name.split(":", 1)[1], port=1))
            return tuple(out)

        return self.parsed("mlxlink", load)

    # -- host -----------------------------------------------------------------------------------
    def governors(self) -> Any:
        from stetho.parsers import sysfs_host

        return self.parsed("cpu_governor",
                           lambda: sysfs_host.parse_governors(self.files("cpu_governor")))

    def block_devices(self) -> Any:
        from stetho.parsers import sysfs_host

        return self.parsed("block_queue", lambda: sysfs_host.parse_block(self.files("block_queue")))

    def pressure(self) -> dict[str, Any]:
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

    # -- NCCL ---------------------------------------------------------------------------------
    def nccl_run(self) -> Any:
        from stetho.parsers import nccl_tests

        def load() -> Any:
            rec = self.record("nccl_tests")
            if rec.kind == "files":
                files = self.files("nccl_tests")
                return nccl_tests.parse(next(iter(files.values())))
            return nccl_tests.parse(self.text("nccl_tests"))

        if not self.profile.nccl.enabled:
            raise Unavailable("skip", f"profile {self.profile.name} does not enable nccl-tests")
        return self.parsed("nccl_tests", load)

    def nccl_log(self) -> Any:
        """What NCCL said about itself (NCCL_DEBUG=INFO lines in the nccl-tests output):
        its version and the transport it chose, IB or sockets."""
        from stetho.parsers import nccl_log

        def load() -> Any:
            rec = self.record("nccl_tests")
            text = next(iter(self.files("nccl_tests").values())) if rec.kind == "files" \
                else self.text("nccl_tests")
            return nccl_log.parse(text)

        if not self.profile.nccl.enabled:
            raise Unavailable("skip", f"profile {self.profile.name} does not enable nccl-tests")
        return self.parsed("nccl_log", load)

    # -- versions -------------------------------------------------------------------------------
    def version(self, component: str) -> tuple[tuple[str, ...], str]:
        """The distinct versions of a component on this node (several VBIOS or HCA firmware
        versions can coexist), and the probe they came from."""
        return self.parsed(f"version:{component}", lambda: self._version(component))

    def _version(self, component: str) -> tuple[tuple[str, ...], str]:
        from stetho.parsers import versions

        if component == "driver":
            return _one(self.smi().driver_version), "nvidia-smi -q -x"
        if component == "cuda":
            return _one(self.smi().cuda_version), "nvidia-smi -q -x"
        if component == "vbios":
            return _distinct(g.vbios_version for g in self.gpus()), "nvidia-smi -q -x"
        if component == "hca_firmware":
            ib = [d for d in self.ib_devices()
                  if any(p.link_layer == self.profile.ib.link_layer for p in d.ports)]
            return _distinct(d.fw_ver for d in ib), "/sys/class/infiniband/*/fw_ver"
        if component == "kernel":
            files = self.files("kernel_release")
            return _one(versions.kernel_release(next(iter(files.values())))), "kernel_release"
        if component == "ofed":
            return _one(versions.ofed_version(self.text("ofed"))), "ofed_info -s"
        if component == "nccl":
            return self._nccl_version()
        raise Unavailable("error", f"unknown version component {component}")

    def _nccl_version(self) -> tuple[tuple[str, ...], str]:
        from stetho.parsers import versions

        try:
            lib = versions.nccl_from_library(self.files("nccl_library"))
        except Unavailable:
            lib = None
        if lib:
            return (lib,), "libnccl.so.* file name"
        try:
            run = self.nccl_run()
        except Unavailable:
            run = None
        if run is not None and run.nccl_version:
            return (run.nccl_version,), "nccl-tests output"
        raise Unavailable("skip", "NCCL not found: no libnccl.so.<version> in the standard "
                          "library folders and no version in nccl-tests output", "nccl_library")


def fingerprint(facts: NodeFacts) -> dict[str, str]:
    """The environment a measurement depends on: versions, GPU model, and a hash of the PCI
    topology of GPUs and HCAs (slot addresses and link capabilities)."""
    import hashlib

    fp: dict[str, str] = {}
    for comp in FLEET_COMPONENTS:
        try:
            found, _ = facts.version(comp)
        except Unavailable:
            continue
        if found:
            fp[comp] = ", ".join(found)
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


def summary(facts: NodeFacts) -> dict[str, Any]:
    """What fleet checks compare across nodes: versions, and busbw per message size.

    Small and JSON-ready; built from facts the node checks parse anyway. Anything the node
    cannot tell is simply absent (its own checks already report why)."""
    versions: dict[str, list[str]] = {}
    for comp in FLEET_COMPONENTS:
        try:
            found, _ = facts.version(comp)
        except Unavailable:
            continue
        if found:
            versions[comp] = list(found)
    busbw: dict[str, float] = {}
    try:
        run = facts.nccl_run()
        if not run.failed and not run.truncated:
            for row in run.rows:
                if row.oop_busbw_gbps is not None and row.size_bytes >= (1 << 20):
                    busbw[str(row.size_bytes)] = row.oop_busbw_gbps
    except Unavailable:
        pass
    from stetho.facts import metrics

    return {"node": facts.name, "profile": facts.profile.name, "versions": versions,
            "busbw": busbw, "metrics": [m.to_row() for m in metrics.extract(facts)]}


def _one(value: str | None) -> tuple[str, ...]:
    return (value,) if value else ()


def _distinct(values: Any) -> tuple[str, ...]:
    from stetho.core.versioning import Version

    seen = sorted({v for v in values if v}, key=lambda v: _safe_version(v, Version))
    return tuple(seen)


def _safe_version(v: str, cls: Any) -> Any:
    try:
        return (0, cls(v))
    except ValueError:
        return (1, v)
