"""Node profiles: what a class of node should be, and the healthy values measured on it.

A profile is `baselines/<name>.yml`. It may `extends:` another (the shipped `generic` holds the
universal thresholds); the child's keys override the parent's, section by section. Everything
a cluster would tune lives here, never in check code. A malformed profile raises ConfigError
naming the file and line.

Long because every section's schema lives here with its defaults and validation, so a key's
type, default and error message are read in one place.
"""

from __future__ import annotations

import re
from dataclasses import field
from pathlib import Path
from typing import Any

from stetho.core import yamlconf
from stetho.core.record import record
from stetho.core.resources import shipped
from stetho.errors import ConfigError

DEFAULT_PROFILE = "generic"
VERSION_COMPONENTS = ("driver", "vbios", "cuda", "nccl", "hca_firmware", "kernel", "ofed")


@record
class ClockTarget:
    sm_mhz: int
    mem_mhz: int
    tolerance_mhz: int = 15


#: The compute modes nvidia-smi prints (and `nvidia-smi -c` sets).
COMPUTE_MODES = ("Default", "Exclusive_Process", "Prohibited")


@record
class GpuSpec:
    count: int | None = None
    model: str | None = None
    clocks: ClockTarget | None = None
    pcie_gen: int | None = None
    pcie_width: int | None = None
    nvlink_links: int | None = None
    temp_warn_c: float = 83.0
    temp_fail_c: float = 90.0
    memory_temp_warn_c: float = 85.0  # HBM: where the GPU reports its memory temperature
    memory_temp_fail_c: float = 95.0
    nvlink_error_max: dict[str, int] = field(default_factory=dict)
    pcie_replay_max: int | None = None
    ecc: str = "any"  # required: ECC disabled fails; any: the mode is reported, not judged
    #: required: GPUDirect RDMA through nvidia_peermem or DMA-BUF (the open kernel module on
    #: kernel >= 5.12); peermem / dmabuf: that path; any: not judged
    gpudirect_rdma: str = "any"
    #: gpu0 -> mlx5_0 ...: the NIC each GPU must reach at PIX/PXB; empty: any NIC will do
    nic_pairs: dict[str, str] = field(default_factory=dict)
    #: How far back a kernel-log Xid (or bus loss) since the GPU's last reset still counts as
    #: present (judged by its severity); older ones in the same epoch only warn.
    xid_window_h: float = 24.0
    #: The GPUs reach each other through NVSwitches that the Fabric Manager must bring up
    #: (HGX/DGX): gpu_fabric then requires the fabric Completed/Success on every GPU.
    nvswitch: bool = False
    #: NVSwitches the board puts on the PCI bus (HGX H100: 4, HGX A100: 6); None: not judged
    nvswitch_count: int | None = None
    #: Settings pinned per GPU (None: not pinned), judged by gpu_settings.
    persistence_mode: bool | None = None
    mig: bool | None = None
    compute_mode: str | None = None
    power_limit: str | None = None  # "default": the enforced cap at least the default limit


#: gpu.gpudirect_rdma: either path, only nvidia_peermem, only DMA-BUF, or not judged
GPUDIRECT_PATHS = ("required", "peermem", "dmabuf", "any")


@record
class FsLimit:
    """A filesystem the profile names (`host.filesystems`): the one holding `path` keeps at
    least these percentages free (None: not judged)."""

    path: str
    min_free_pct: float | None = None
    min_free_inodes_pct: float | None = None


@record
class HostSpec:
    governor: str | None = None
    rotational_devices: tuple[str, ...] = ("nvme*",)
    filesystems: tuple[FsLimit, ...] = ()
    mounts: tuple[str, ...] = ()  # mount points that must be mounted, read-write
    services: tuple[str, ...] = ()  # systemd units that must be active
    time_sync: bool = False  # chronyd must have synchronised the clock (host_time_sync)
    time_offset_max_ms: float = 100.0
    hugepages_min: int | None = None  # /proc/sys/vm/nr_hugepages at least this
    memlock: str | None = None  # "unlimited", or a number of bytes: the least RLIMIT_MEMLOCK
    nvme_devices: tuple[str, ...] = ("nvme*",)  # NVMe controllers whose SMART log is judged
    nvme_used_warn_pct: float = 90.0  # percentage_used (rated endurance) from which to warn
    nvme_err_log_max: int = 10  # error-log entries added within the counter window: above, warn
    #: PCIe peer-to-peer (pcie_p2p_settings): "disabled" holds every bridge's ACS redirect off
    pcie_acs: str | None = None
    iommu: str | None = None  # "passthrough" (iommu=pt or none), "off" (no IOMMU), "any"


@record
class PortGroup:
    """RDMA devices (name globs) that carry one link layer: the compute fabric on InfiniBand,
    a front-end bond on Ethernet (RoCE)."""

    name: str
    devices: tuple[str, ...]
    link_layer: str
    rate_gbps: float | None = None  # the group's own port rate, where not `ib.rate_gbps`


#: FEC modes a pre-FEC BER row can name (stetho.parsers.mlxlink_model.FEC_MODES).
FEC_MODES = ("rs544", "rs528", "rs272", "firecode", "none")


@record
class BerRow:
    """Pre-FEC BER limits for links running one of `fec` modes at one of `lane_gbps` (Gb/s per
    lane; empty: any speed). A link warns from `warn` and fails from `fail`."""

    name: str
    fec: tuple[str, ...]
    warn: float
    fail: float
    lane_gbps: tuple[float, ...] = ()

    def matches(self, fec: str | None, lane_gbps: float | None) -> bool:
        if fec is None or fec not in self.fec:
            return False
        return not self.lane_gbps or (lane_gbps is not None and any(
            abs(lane_gbps - g) < 0.5 for g in self.lane_gbps))


@record
class BerChoice:
    """The row that judges a link; `exact` is False when no row is for the link's FEC mode
    and speed, so the strictest row judges it (unknown is never judged leniently)."""

    row: BerRow
    exact: bool


#: generic.yml's table (the code's default when a profile has no `ib` section at all).
DEFAULT_BER_ROWS = (
    BerRow("rs544", ("rs544",), warn=1e-5, fail=1e-4, lane_gbps=(50.0, 100.0, 200.0)),
    BerRow("rs528", ("rs528",), warn=1e-6, fail=1e-5),
    BerRow("rs272", ("rs272",), warn=1e-6, fail=1e-5),
    BerRow("no-fec", ("none", "firecode"), warn=1e-15, fail=1e-12),
)


@record
class OpticsSpec:
    """Transceiver limits for modules that print no thresholds of their own (ib_optics), and
    how close to a module's own low/high threshold a reading warns."""

    rx_power_fail_dbm: float = -11.0
    rx_power_warn_dbm: float = -7.0
    temperature_fail_c: float = 75.0
    temperature_warn_c: float = 70.0
    warn_margin_db: float = 1.0
    warn_margin_c: float = 5.0


@record
class IbSpec:
    ports: int | None = None
    rate_gbps: float | None = None
    link_layer: str = "InfiniBand"
    state: str = "ACTIVE"
    phys_state: str = "LinkUp"
    counter_max: dict[str, int] = field(default_factory=dict)
    #: LinkDownedCounter growth within the counter window above which a port flapped
    #: (ib_link_flaps); None: the counter is judged among ib_counters' counter_max instead
    link_flaps_max: int | None = None
    pre_fec_ber: tuple[BerRow, ...] = DEFAULT_BER_ROWS
    port_groups: tuple[PortGroup, ...] = ()
    optics: OpticsSpec = OpticsSpec()
    #: a rail-optimised fabric: each HCA's cable lands on a leaf switch of its own
    #: (ib_rail_cabling, from iblinkinfo's far end)
    rail_optimized: bool = False
    #: HCA device -> a glob on the node description of the switch its cable must reach
    rail_leaf: dict[str, str] = field(default_factory=dict)

    def ber_limits(self, fec: str | None, lane_gbps: float | None) -> BerChoice:
        """The first row for this FEC mode and lane speed; else the strictest row (lowest
        fail, then lowest warn), marked inexact: an unknown FEC fails closed."""
        for row in self.pre_fec_ber:
            if row.matches(fec, lane_gbps):
                return BerChoice(row, exact=True)
        return BerChoice(min(self.pre_fec_ber, key=lambda r: (r.fail, r.warn)), exact=False)

    @property
    def ber_trend_threshold(self) -> float:
        """drift_trend's threshold for pre_fec_ber where drift.thresholds sets none: history
        keeps no FEC mode per port, so the loosest row's fail limit, the BER no link passes."""
        return max(r.fail for r in self.pre_fec_ber)

    def group_of(self, device: str) -> PortGroup | None:
        """The first port group whose globs match the device, or None."""
        import fnmatch

        return next((g for g in self.port_groups
                     if any(fnmatch.fnmatchcase(device, pat) for pat in g.devices)), None)

    def link_layer_of(self, device: str) -> str:
        """The link layer the profile expects on a device: its group's, else `link_layer`."""
        group = self.group_of(device)
        return group.link_layer if group else self.link_layer


@record
class VersionRule:
    minimum: str | None = None
    allowed: tuple[str, ...] = ()


@record
class BaselineShape:
    """The run shape a busbw baseline was measured on (stetho.parsers.nccl_shape.RunShape): a
    2-node 16-rank all_reduce is not comparable with an 8-GPU single-node one. A field left
    None matches any value."""

    collective: str = "all_reduce"
    ranks: int | None = None
    nodes: int | None = None
    gpus_per_node: int | None = None

    def matches(self, collective: str | None, ranks: int | None, nodes: int | None,
                gpus_per_node: int | None) -> bool:
        """Whether a run of this shape may be judged against this baseline: every field the
        baseline sets must be known in the run and equal."""
        pairs = ((self.collective, collective), (self.ranks, ranks), (self.nodes, nodes),
                 (self.gpus_per_node, gpus_per_node))
        return all(want is None or want == got for want, got in pairs)

    def describe(self) -> str:
        """'all_reduce 8 ranks / 1 node / 8 GPUs per node' (unset parts left out)."""
        parts = [self.collective]
        if self.ranks is not None:
            parts.append(f"{self.ranks} ranks")
        if self.nodes is not None:
            parts.append(f"/ {self.nodes} node{'' if self.nodes == 1 else 's'}")
        if self.gpus_per_node is not None:
            parts.append(f"/ {self.gpus_per_node} GPUs per node")
        return " ".join(parts)


@record
class NcclBaseline:
    busbw_gbps: dict[int, float]
    measured_with: dict[str, str]
    source: str = ""
    measured_on: str = ""
    shape: BaselineShape = field(default_factory=BaselineShape)
    name: str = "baseline"  # its key in the profile: `baseline`, or `baselines.<name>`


@record
class BusbwPoint:
    """One subject of nccl_busbw: a message size of one baseline."""

    baseline: NcclBaseline
    size_bytes: int


@record
class NcclSpec:
    run: bool = False
    argv: tuple[str, ...] = ()
    timeout_s: float = 600.0
    saved_output: str | None = None
    min_size_bytes: int = 0
    tolerance_pct: float = 5.0
    baselines: tuple[NcclBaseline, ...] = ()
    #: The collective the configured run performs, for output that does not say (older
    #: nccl-tests, a wrapper script): None lets the output (marker, binary, table) tell.
    collective: str | None = None
    #: The job's environment, where its NCCL may differ from the host's (nccl_env_version):
    #: a container image (`pytorch:24.05-py3`, asked with `docker image inspect`) and/or an
    #: environment module (`nccl/2.21.5`, asked with `module show`).
    container_image: str | None = None
    env_module: str | None = None
    #: how close the job's NCCL must be: "minor" (same major.minor; another patch warns) or
    #: "exact" (any other version fails)
    env_match: str = "minor"

    @property
    def enabled(self) -> bool:
        return self.run or self.saved_output is not None

    @property
    def baseline(self) -> NcclBaseline | None:
        """The first baseline (the profile's own node shape, by convention), or None."""
        return self.baselines[0] if self.baselines else None

    def baseline_for(self, collective: str | None, ranks: int | None, nodes: int | None,
                     gpus_per_node: int | None) -> NcclBaseline | None:
        """The baseline recorded for a run of this shape; the one that pins the most fields
        wins; None when none matches (then the run is not judged: no regression without a
        baseline of its own shape)."""
        fits = [b for b in self.baselines
                if b.shape.matches(collective, ranks, nodes, gpus_per_node)]
        if not fits:
            return None
        return max(fits, key=lambda b: sum(v is not None for v in (
            b.shape.ranks, b.shape.nodes, b.shape.gpus_per_node)))


@record
class DriftSpec:
    """How a node's latest values are judged against its own history (stetho.history.drift)."""

    window_days: float = 7.0
    min_samples: int = 5
    min_span_days: float = 3.0  # ...and the samples must reach this far back
    z_bound: float = 4.0
    ks_min_samples: int = 5  # on each side (recent and older)
    ks_alpha: float = 0.01
    trend_days: float = 14.0
    horizon_days: float = 7.0
    trend_r2: float = 0.8  # a gauge's sustained slope must explain this much of its variance
    hour_band_h: float = 2.0  # daily rhythm: runs within this many hours of the time of day
    weekly_weeks: float = 6.0  # weekly rhythm: same weekday and hour over this many weeks
    counter_rate_max: dict[str, float] = field(default_factory=dict)
    thresholds: dict[str, float] = field(default_factory=dict)
    #: Overrides of stetho.facts.kinds' table: metric -> the fields it changes.
    metrics: dict[str, dict[str, str | float | bool]] = field(default_factory=dict)


@record
class CounterSpec:
    """How cumulative error counters are given a time base (stetho.facts.window): their growth
    within the window, from the node's own history. The limits themselves stay with their
    hardware (`ib.counter_max`, `gpu.nvlink.error_max`) and here for the host-wide ones."""

    window_h: float = 24.0
    #: Corrected PCIe AER lines in the kernel log within the window: above this, a marginal link.
    aer_corrected_max: int = 100
    #: Correctable (single-bit) GPU memory ECC errors within the window: above this, warn.
    ecc_correctable_max: int = 1000
    #: Seconds of hardware (thermal, power brake) clock slowdown within the window that fail.
    hw_throttle_max_s: float = 1.0
    #: Corrected memory errors (EDAC, all memory controllers) within the window: above, warn.
    edac_corrected_max: int = 100
    #: Corrected machine-check events (kernel log) within the window: above, host_mce warns.
    mce_corrected_max: int = 10


@record
class FleetSpec:
    """How a node is compared with its peers of the same profile (stetho.checking.fleet)."""

    #: Fewer nodes of the profile in a run than this: no fleet comparison, a `skip` per node
    #: (a median and MAD over a handful of nodes say little).
    min_peers: int = 8
    busbw_z: float = -3.5  # robust z-score (0.6745 (x - median) / MAD) of an outlier
    busbw_min_drop_pct: float = 3.0  # ...that must also be this far under the fleet median
    #: Version drift in these fails (collectives mix code paths or hang); in others it warns.
    blocking: tuple[str, ...] = ("driver", "cuda", "nccl", "hca_firmware")


@record
class BaselineSpec:
    """The healthy values measured on this node class, and the environment they were measured
    on (`stetho baseline record` writes it; a person reviews and commits it)."""

    fingerprint: dict[str, str] = field(default_factory=dict)
    measured: dict[str, float] = field(default_factory=dict)
    measured_on: str = ""
    stetho_version: str = ""
    source: str = ""
    on_stale: str = "warn"  # warn | fail: a baseline whose fingerprint differs from the node's


@record
class BenchBaseline:
    """One benchmark metric's healthy value (`stetho bench baseline` writes it): the median of
    the nodes' medians, on the run shape and versions it was measured with."""

    value: float
    unit: str
    shape: str
    cv_pct: float = 0.0
    nodes: int = 0
    fingerprint: dict[str, str] = field(default_factory=dict)
    measured_on: str = ""


@record
class BenchSpec:
    """How `bench_*` checks judge a metric: its baseline (key `<bench>[:<device>].<metric>`)
    and the tolerance in percent (per `<bench>.<metric>`, else `tolerance_pct`)."""

    tolerance_pct: float = 10.0
    tolerance: dict[str, float] = field(default_factory=dict)
    baseline: dict[str, BenchBaseline] = field(default_factory=dict)

    def tolerance_for(self, bench: str, metric: str) -> float:
        return self.tolerance.get(f"{bench}.{metric}", self.tolerance_pct)


@record
class RoceSpec:
    """What a RoCE (Ethernet RDMA) port's lossless configuration and congestion should be:
    the `roce` section. `congestion_max` counters (CNPs, ECN marks, PFC pauses) over their
    limit within the counter window warn; `error_max` ones (out-of-sequence, sequence-error
    NAKs, discards) fail. The checks judge only ports in a profile's Ethernet port groups."""

    trust: str = "dscp"
    pfc_priority: int = 3
    ecn: bool = True
    congestion_max: dict[str, int] = field(default_factory=dict)
    error_max: dict[str, int] = field(default_factory=dict)


@record
class Profile:
    name: str
    description: str
    source: str
    gpu: GpuSpec
    host: HostSpec
    ib: IbSpec
    versions: dict[str, VersionRule]
    nccl: NcclSpec
    drift: DriftSpec = field(default_factory=DriftSpec)
    counters: CounterSpec = field(default_factory=CounterSpec)
    baseline: BaselineSpec = field(default_factory=BaselineSpec)
    fleet: FleetSpec = field(default_factory=FleetSpec)
    bench: BenchSpec = field(default_factory=BenchSpec)
    #: None: the profile has no `roce` section, and the RoCE checks do not apply
    roce: RoceSpec | None = None

    def reference_fingerprint(self) -> dict[str, str]:
        """What the baseline was measured on: the recorded fingerprint, else the versions the
        NCCL baseline names."""
        if self.baseline.fingerprint:
            return self.baseline.fingerprint
        return dict(self.nccl.baseline.measured_with) if self.nccl.baseline else {}


def search_path() -> list[Path]:
    """Folders searched for `<name>.yml`: the configured ones (STETHO_BASELINES), ./baselines,
    then the shipped baselines. A site's own profiles win over shipped ones of the same name."""
    from stetho import config

    dirs = list(config.active().baselines)
    dirs.append(Path.cwd() / "baselines")
    dirs.append(shipped("baselines"))
    return dirs


#: What a profile *name* may be (a bundle's `profile`, an inventory's): letters, digits, '.',
#: '_' and '-', never a path and never `<x>.yml` (which find() would read as a file).
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


def check_name(name: object) -> str:
    """`name` if it is a profile name, else ConfigError: a name from evidence is resolved only
    in the search path, so a path in it is refused, never read or echoed."""
    if not isinstance(name, str) or not _NAME.fullmatch(name) or \
            name.endswith((".yml", ".yaml")):
        raise ConfigError("profile must be a name (letters, digits, '.', '_', '-'; at most "
                          "100), not a path")
    return name


def find(name: str) -> Path:
    """A profile by name, or by path to a YAML file."""
    return yamlconf.find_named(name, search_path(), "profile",
                               "profiles are baselines/<name>.yml")


def load(name: str = DEFAULT_PROFILE) -> Profile:
    """Load (once per process: collection and the checks share it) and validate a profile."""
    path = find(name)
    key = (str(path.resolve()), path.stat().st_mtime_ns)
    if key not in _LOADED:
        _LOADED[key] = _build(_chain(path, seen=()))
    return _LOADED[key]


_LOADED: dict[tuple[str, int], Profile] = {}


def _chain(path: Path, seen: tuple[Path, ...]) -> list[yamlconf.Doc]:
    """The profile and its `extends:` ancestors, most general first."""
    doc = yamlconf.load(path)
    if not isinstance(doc.data, dict):
        raise ConfigError(f"{path}:1: a profile must be a mapping")
    parent = doc.data.get("extends")
    if parent is None:
        return [doc]
    if not isinstance(parent, str):
        raise ConfigError(f"{path}:{doc.line(('extends',))}: extends must be a profile name")
    parent_path = find(parent)
    if parent_path.resolve() in seen or parent_path.resolve() == path.resolve():
        raise ConfigError(f"{path}:{doc.line(('extends',))}: profiles extend each other in a loop")
    return _chain(parent_path, seen + (path.resolve(),)) + [doc]


_SECTIONS = ("gpu", "host", "ib", "versions", "nccl", "drift", "counters", "baseline", "fleet",
             "bench", "roce")
_TOP = {"profile", "extends", "description", *_SECTIONS}


def _build(docs: list[yamlconf.Doc]) -> Profile:
    for doc in docs:
        yamlconf.Section(doc).check_unknown(_TOP)
    top = yamlconf.Section(yamlconf.merge(docs, _SECTIONS))
    name = yamlconf.Section(docs[-1]).require("profile", str)
    return Profile(
        name=name,
        description=yamlconf.Section(docs[-1]).get("description", str, ""),
        source=docs[-1].file,
        gpu=_gpu(top.section("gpu")),
        host=_host(top.section("host")),
        ib=_ib(top.section("ib")),
        versions=_versions(top.section("versions")),
        nccl=_nccl(top.section("nccl"), top.section("gpu").get("count", int)),
        drift=_drift(top.section("drift")),
        counters=_counters(top.section("counters")),
        baseline=_baseline(top.section("baseline")),
        fleet=_fleet(top.section("fleet")),
        bench=_bench(top.section("bench")),
        roce=_roce(top.section("roce")) if top.has("roce") else None,
    )


def _roce(s: yamlconf.Section) -> RoceSpec:
    spec = RoceSpec(trust=s.get("trust", str, RoceSpec.trust),
                    pfc_priority=s.get("pfc_priority", int, RoceSpec.pfc_priority,
                                       within=(0, 7)),
                    ecn=s.get("ecn", bool, RoceSpec.ecn),
                    congestion_max=_counter_map(s, "congestion_max"),
                    error_max=_counter_map(s, "error_max"))
    if spec.trust not in ("dscp", "pcp"):
        s.fail(f"roce.trust must be dscp or pcp, got {spec.trust!r}", "trust")
    s.check_unknown()
    return spec


#: The defaults, once: every loader below reads its fallbacks from these.
_GPU, _HOST, _IB, _NCCL, _DRIFT, _FLEET = (GpuSpec(), HostSpec(), IbSpec(), NcclSpec(),
                                           DriftSpec(), FleetSpec())


def _fleet(s: yamlconf.Section) -> FleetSpec:
    spec = FleetSpec(min_peers=s.get("min_peers", int, _FLEET.min_peers, within=(2, None)),
                     busbw_z=s.get("busbw_z", float, _FLEET.busbw_z, within=(None, 0)),
                     busbw_min_drop_pct=s.get("busbw_min_drop_pct", float,
                                              _FLEET.busbw_min_drop_pct, within=(0, 100)),
                     blocking=s.str_list("blocking", _FLEET.blocking))
    if spec.busbw_z >= 0:
        s.fail("busbw_z must be negative (how far under the median an outlier is)", "busbw_z")
    _positive(s, "busbw_min_drop_pct", spec.busbw_min_drop_pct)
    for comp in spec.blocking:
        if comp not in VERSION_COMPONENTS:
            s.fail(f"unknown version component {comp!r} (known: "
                   f"{', '.join(VERSION_COMPONENTS)})", "blocking")
    s.check_unknown()
    return spec


def _counters(s: yamlconf.Section) -> CounterSpec:
    d = CounterSpec()
    spec = CounterSpec(
        window_h=s.get("window_h", float, d.window_h, above=0),
        aer_corrected_max=s.get("aer_corrected_max", int, d.aer_corrected_max, within=(0, None)),
        ecc_correctable_max=s.get("ecc_correctable_max", int, d.ecc_correctable_max,
                                  within=(0, None)),
        hw_throttle_max_s=s.get("hw_throttle_max_s", float, d.hw_throttle_max_s,
                                within=(0, None)),
        edac_corrected_max=s.get("edac_corrected_max", int, d.edac_corrected_max,
                                 within=(0, None)),
        mce_corrected_max=s.get("mce_corrected_max", int, d.mce_corrected_max,
                                within=(0, None)))
    s.check_unknown()
    return spec


def _drift(s: yamlconf.Section) -> DriftSpec:
    def floats(key: str) -> dict[str, float]:
        sec = s.section(key)
        out = {}
        for k in sec.data:
            v = sec.get(k, float)
            _positive(sec, k, v)
            out[str(k)] = v
        return out

    d = _DRIFT
    spec = DriftSpec(
        window_days=s.get("window_days", float, d.window_days, above=0),
        min_samples=s.get("min_samples", int, d.min_samples, within=(1, None)),
        min_span_days=s.get("min_span_days", float, d.min_span_days, within=(0, None)),
        z_bound=s.get("z_bound", float, d.z_bound, above=0),
        ks_min_samples=s.get("ks_min_samples", int, d.ks_min_samples, within=(1, None)),
        ks_alpha=s.get("ks_alpha", float, d.ks_alpha, within=(0, 1)),
        trend_days=s.get("trend_days", float, d.trend_days, above=0),
        horizon_days=s.get("horizon_days", float, d.horizon_days, above=0),
        trend_r2=s.get("trend_r2", float, d.trend_r2, within=(0, None)),
        hour_band_h=s.get("hour_band_h", float, d.hour_band_h, within=(0, None)),
        weekly_weeks=s.get("weekly_weeks", float, d.weekly_weeks, within=(0, None)),
        counter_rate_max=floats("counter_rate_max_per_day"), thresholds=floats("thresholds"),
        metrics=_metric_kinds(s.section("metrics")))
    if spec.min_samples < 2:
        s.fail("min_samples must be at least 2", "min_samples")
    s.check_unknown()
    return spec


def _metric_kinds(s: yamlconf.Section) -> dict[str, dict[str, str | float | bool]]:
    """`drift.metrics`: per metric, the fields of stetho.facts.kinds' table a profile changes,
    checked here so a typo fails at load with its line, not silently at night."""
    out: dict[str, dict[str, str | float | bool]] = {}
    choices = {"kind": ("counter", "gauge"), "rhythm": ("none", "daily", "weekly")}
    for metric in s.data:
        m = s.section(metric)
        if not isinstance(m.data, dict):
            s.fail(f"{metric} must map kind-table fields to values", metric)
        entry: dict[str, str | float | bool] = {}
        for key in ("resolution", "min_change", "min_change_pct"):
            if key in m.data:
                entry[key] = v = m.get(key, float)
                _positive(m, key, v)
        for key, allowed in choices.items():
            if key in m.data:
                entry[key] = v = m.get(key, str)
                if v not in allowed:
                    m.fail(f"{key} must be one of {', '.join(allowed)}, got {v!r}", key)
        if "trend" in m.data:
            entry["trend"] = m.get("trend", bool)
        m.check_unknown({"resolution", "min_change", "min_change_pct", "trend", *choices})
        out[str(metric)] = entry
    return out


def _baseline(s: yamlconf.Section) -> BaselineSpec:
    value = s.get("on_stale", str, "warn")
    if value not in ("warn", "fail"):
        s.fail(f"baseline.on_stale must be warn or fail, got {value!r}", "on_stale")
    fp = s.section("fingerprint")
    measured = s.section("measured")
    spec = BaselineSpec(
        fingerprint={str(k): str(fp.get(k, (str, int, float))) for k in fp.data},
        measured={str(k): measured.get(k, float) for k in measured.data},
        measured_on=str(s.get("measured_on", object, "")),
        stetho_version=str(s.get("stetho_version", object, "")),
        source=str(s.get("source", str, "")), on_stale=str(value))
    s.check_unknown({"on_stale", "fingerprint", "measured", "source", "measured_on",
                     "stetho_version", "nodes"})
    return spec


def _bench(s: yamlconf.Section) -> BenchSpec:
    tol = s.section("tolerance")
    base = s.section("baseline")
    out: dict[str, BenchBaseline] = {}
    for key in base.data:
        b = base.section(str(key))
        fp = b.section("fingerprint")
        b.check_unknown({"value", "unit", "shape", "cv_pct", "nodes", "fingerprint",
                         "measured_on", "min", "max", "stetho_version", "source"})
        out[str(key)] = BenchBaseline(
            value=b.require("value", float), unit=b.require("unit", str),
            shape=b.require("shape", str), cv_pct=b.get("cv_pct", float, 0.0),
            nodes=b.get("nodes", int, 0), measured_on=str(b.get("measured_on", object, "")),
            fingerprint={str(k): str(fp.get(k, (str, int, float))) for k in fp.data})
    spec = BenchSpec(tolerance_pct=s.get("tolerance_pct", float, 10.0),
                     tolerance={str(k): tol.get(k, float) for k in tol.data}, baseline=out)
    for sec, key, v in [(s, "tolerance_pct", spec.tolerance_pct),
                        *((tol, k, v) for k, v in spec.tolerance.items())]:
        if not 0 <= v < 100:
            sec.fail(f"{key} must be a percentage from 0 to 100, got {v}", key)
    s.check_unknown({"tolerance_pct", "tolerance", "baseline"})
    return spec


def _positive(s: yamlconf.Section, key: str, value: float | None) -> None:
    if value is not None and value < 0:
        s.fail(f"{key} must not be negative, got {value}", key)


def _counter_map(s: yamlconf.Section, key: str) -> dict[str, int]:
    raw = s.section(key)
    out: dict[str, int] = {}
    for k in raw.data:
        v = raw.get(k, int)
        _positive(raw, k, v)
        out[str(k)] = v
    return out


def _gpu(s: yamlconf.Section) -> GpuSpec:
    clocks = None
    if s.has("clocks"):
        c = s.section("clocks")
        clocks = ClockTarget(c.require("sm_mhz", int), c.require("mem_mhz", int),
                             c.get("tolerance_mhz", int, ClockTarget.tolerance_mhz))
        c.check_unknown()
    pcie = s.section("pcie")
    temp = s.section("temperature")
    nvlink = s.section("nvlink")
    spec = GpuSpec(
        count=s.get("count", int, within=(0, None)), model=s.get("model", str), clocks=clocks,
        pcie_gen=pcie.get("gen", int), pcie_width=pcie.get("width", int),
        nvlink_links=nvlink.get("links", int),
        temp_warn_c=temp.get("warn_c", float, _GPU.temp_warn_c, within=(0, 150)),
        temp_fail_c=temp.get("fail_c", float, _GPU.temp_fail_c, within=(0, 150)),
        memory_temp_warn_c=temp.get("memory_warn_c", float, _GPU.memory_temp_warn_c,
                                    within=(0, 150)),
        memory_temp_fail_c=temp.get("memory_fail_c", float, _GPU.memory_temp_fail_c,
                                    within=(0, 150)),
        nvlink_error_max=_counter_map(nvlink, "error_max"),
        pcie_replay_max=pcie.get("replay_max", int),
        ecc=s.get("ecc", str, _GPU.ecc),
        gpudirect_rdma=s.get("gpudirect_rdma", str, _GPU.gpudirect_rdma),
        nic_pairs={str(k): str(v) for k, v in (s.get("nic_pairs", dict) or {}).items()},
        xid_window_h=s.get("xid_window_h", float, _GPU.xid_window_h, above=0),
        nvswitch=s.get("nvswitch", bool, False),
        nvswitch_count=s.get("nvswitch_count", int, within=(0, None)),
        persistence_mode=s.get("persistence_mode", bool),
        mig=s.get("mig", bool),
        compute_mode=s.get("compute_mode", str),
        power_limit=s.get("power_limit", str),
    )
    if spec.power_limit not in (None, "default"):
        s.fail(f"gpu.power_limit must be default, got {spec.power_limit!r}", "power_limit")
    if spec.compute_mode not in (None, *COMPUTE_MODES):
        s.fail(f"gpu.compute_mode must be one of {', '.join(COMPUTE_MODES)}, "
               f"got {spec.compute_mode!r}", "compute_mode")
    if spec.ecc not in ("required", "any"):
        s.fail(f"gpu.ecc must be required or any, got {spec.ecc!r}", "ecc")
    if spec.gpudirect_rdma not in GPUDIRECT_PATHS:
        s.fail(f"gpu.gpudirect_rdma must be one of {', '.join(GPUDIRECT_PATHS)}, got "
               f"{spec.gpudirect_rdma!r}",
               "gpudirect_rdma")
    for sub in (pcie, temp, nvlink):
        sub.check_unknown()
    _positive(s, "count", spec.count)
    if spec.temp_warn_c > spec.temp_fail_c:
        temp.fail("warn_c must not exceed fail_c", "warn_c")
    if spec.memory_temp_warn_c > spec.memory_temp_fail_c:
        temp.fail("memory_warn_c must not exceed memory_fail_c", "memory_warn_c")
    s.check_unknown()
    return spec


def _host(s: yamlconf.Section) -> HostSpec:
    spec = HostSpec(governor=s.get("governor", str),
                    rotational_devices=s.str_list("rotational_devices", _HOST.rotational_devices),
                    filesystems=_filesystems(s.section("filesystems")),
                    mounts=s.str_list("mounts"), services=s.str_list("services"),
                    time_sync=s.get("time_sync", bool, _HOST.time_sync),
                    time_offset_max_ms=s.get("time_offset_max_ms", (int, float),
                                             _HOST.time_offset_max_ms, above=0),
                    hugepages_min=s.get("hugepages_min", int, within=(0, None)),
                    memlock=_memlock(s),
                    nvme_devices=s.str_list("nvme_devices", _HOST.nvme_devices),
                    nvme_used_warn_pct=s.get("nvme_used_warn_pct", (int, float),
                                             _HOST.nvme_used_warn_pct, above=0),
                    nvme_err_log_max=s.get("nvme_err_log_max", int, _HOST.nvme_err_log_max,
                                           within=(0, None)),
                    pcie_acs=s.get("pcie_acs", str), iommu=s.get("iommu", str))
    if spec.pcie_acs not in (None, "disabled", "any"):
        s.fail(f"pcie_acs must be disabled or any, not {spec.pcie_acs!r}", "pcie_acs")
    if spec.iommu not in (None, "passthrough", "off", "any"):
        s.fail(f"iommu must be passthrough, off or any, not {spec.iommu!r}", "iommu")
    for path in (*spec.mounts, *(f.path for f in spec.filesystems)):
        if not path.startswith("/"):
            s.fail(f"{path!r} is not an absolute path", "mounts" if path in spec.mounts
                   else "filesystems")
    s.check_unknown()
    return spec


def _memlock(s: yamlconf.Section) -> str | None:
    value = s.get("memlock", (str, int))
    if value is None:
        return None
    text = str(value)
    if text != "unlimited" and not text.isdigit():
        s.fail(f"memlock must be unlimited or a number of bytes, not {text!r}", "memlock")
    return text


def _filesystems(s: yamlconf.Section) -> tuple[FsLimit, ...]:
    out = []
    for path in s.data:
        f = s.section(str(path))
        out.append(FsLimit(str(path), f.get("min_free_pct", (int, float), within=(0, 100)),
                           f.get("min_free_inodes_pct", (int, float), within=(0, 100))))
        f.check_unknown()
    return tuple(out)


def _ib(s: yamlconf.Section) -> IbSpec:
    spec = IbSpec(
        ports=s.get("ports", int, within=(0, None)), rate_gbps=s.get("rate_gbps", float, above=0),
        link_layer=s.get("link_layer", str, _IB.link_layer), state=s.get("state", str, _IB.state),
        phys_state=s.get("phys_state", str, _IB.phys_state),
        counter_max=_counter_map(s, "counter_max"),
        link_flaps_max=s.get("link_flaps_max", int, within=(0, None)),
        pre_fec_ber=_ber_rows(s),
        port_groups=_port_groups(s.section("port_groups")),
        optics=_optics(s.section("optics")),
        rail_optimized=s.get("rail_optimized", bool, False),
        rail_leaf={str(k): str(v) for k, v in (s.get("rail_leaf", dict) or {}).items()},
    )
    for layer, key in ((spec.link_layer, "link_layer"),
                       *((g.link_layer, "port_groups") for g in spec.port_groups)):
        if layer not in _LINK_LAYERS:
            s.fail(f"link layer must be one of {', '.join(_LINK_LAYERS)}, got {layer!r}", key)
    s.check_unknown()
    return spec


_LINK_LAYERS = ("InfiniBand", "Ethernet")


def _optics(s: yamlconf.Section) -> OpticsSpec:
    d = OpticsSpec()
    spec = OpticsSpec(**{k: s.get(k, float, getattr(d, k)) for k in (
        "rx_power_fail_dbm", "rx_power_warn_dbm", "temperature_fail_c", "temperature_warn_c")},
        warn_margin_db=s.get("warn_margin_db", float, d.warn_margin_db, within=(0, None)),
        warn_margin_c=s.get("warn_margin_c", float, d.warn_margin_c, within=(0, None)))
    if spec.rx_power_warn_dbm < spec.rx_power_fail_dbm:
        s.fail("rx_power_warn_dbm must not be below rx_power_fail_dbm", "rx_power_warn_dbm")
    if spec.temperature_warn_c > spec.temperature_fail_c:
        s.fail("temperature_warn_c must not be above temperature_fail_c", "temperature_warn_c")
    s.check_unknown()
    return spec


def _ber_rows(ib: yamlconf.Section) -> tuple[BerRow, ...]:
    """`ib.pre_fec_ber`: named rows {fec, lane_gbps, warn, fail}, first match wins. A child
    profile's table replaces its parent's whole."""
    for old in ("pre_fec_ber_warn", "pre_fec_ber_fail"):
        if ib.has(old):
            ib.fail(f"ib.{old} is replaced by the table ib.pre_fec_ber (rows per FEC mode and "
                    "lane speed, each with warn and fail: see baselines/generic.yml)", old)
    if not ib.has("pre_fec_ber"):
        return _IB.pre_fec_ber
    s = ib.section("pre_fec_ber")  # not a mapping: ConfigError naming the line
    if not s.data:
        ib.fail("ib.pre_fec_ber needs at least one row {fec, lane_gbps, warn, fail}",
                "pre_fec_ber")
    rows = []
    for name in s.data:
        r = s.section(str(name))
        fec = r.str_list("fec")
        if not fec:
            r.fail("a row needs fec: one of " + ", ".join(FEC_MODES), "fec")
        for mode in fec:
            if mode not in FEC_MODES:
                r.fail(f"unknown FEC mode {mode!r} (known: {', '.join(FEC_MODES)})", "fec")
        lanes = r.get("lane_gbps", (list, int, float), [])
        lanes = lanes if isinstance(lanes, list) else [lanes]
        for g in lanes:
            if isinstance(g, bool) or not isinstance(g, (int, float)) or g <= 0:
                r.fail(f"lane_gbps must be positive numbers (Gb/s per lane), got {g!r}",
                       "lane_gbps")
        warn = r.require("warn", float)
        fail = r.require("fail", float)
        for key, v in (("warn", warn), ("fail", fail)):
            if not 0 < v < 1:
                r.fail(f"ib.pre_fec_ber.{name}.{key} must be a BER between 0 and 1, not "
                       f"{v:g}", key)
        if warn > fail:
            r.fail(f"warn {warn:g} must not exceed fail {fail:g}", "warn")
        r.check_unknown({"fec", "lane_gbps", "warn", "fail"})
        rows.append(BerRow(str(name), fec, warn, fail, tuple(float(g) for g in lanes)))
    return tuple(rows)


def _port_groups(s: yamlconf.Section) -> tuple[PortGroup, ...]:
    out = []
    for name in s.data:
        g = s.section(str(name))
        devices = g.str_list("devices")
        if not devices:
            g.fail("a port group needs devices: [glob, ...]", "devices")
        out.append(PortGroup(str(name), devices, g.require("link_layer", str),
                             g.get("rate_gbps", float, above=0)))
        g.check_unknown()
    return tuple(out)


def _versions(s: yamlconf.Section) -> dict[str, VersionRule]:
    from stetho.core.versioning import Version

    out: dict[str, VersionRule] = {}
    for comp in s.data:
        if comp not in VERSION_COMPONENTS:
            s.fail(f"unknown version component {comp!r} (known: {', '.join(VERSION_COMPONENTS)})",
                   comp)
        c = s.section(comp)
        minimum = c.get("min", (str, int, float))
        allowed = c.str_list("allowed")
        for v in ([str(minimum)] if minimum is not None else []) + list(allowed):
            try:
                Version(v)
            except ValueError:
                c.fail(f"{v!r} is not a version", "min" if minimum is not None else "allowed")
        c.check_unknown()
        out[comp] = VersionRule(str(minimum) if minimum is not None else None, allowed)
    return out


def _nccl(s: yamlconf.Section, default_gpus: int | None) -> NcclSpec:
    from stetho.parsers.nccl_tests import parse_size

    def size(sec: yamlconf.Section, key: str, raw: Any) -> int:
        try:
            return parse_size(str(raw))
        except ValueError:
            sec.fail(f"{raw!r} is not a message size (e.g. 64M, 8G)", key)
            raise  # unreachable: fail raises

    def one(b: yamlconf.Section, name: str) -> NcclBaseline:
        sizes = b.section("busbw_gbps")
        busbw: dict[int, float] = {}
        for k in sizes.data:
            v = sizes.get(k, float)
            _positive(sizes, str(k), v)
            busbw[size(sizes, str(k), k)] = v
        mw = b.section("measured_with")
        out = NcclBaseline(
            busbw_gbps=busbw,
            measured_with={str(k): str(mw.get(k, (str, int, float))) for k in mw.data},
            source=b.get("source", str, ""), measured_on=str(b.get("measured_on", object, "")),
            shape=_shape(b.section("shape"), default_gpus), name=name,
        )
        b.check_unknown()
        return out

    baselines = []
    if s.has("baseline"):
        baselines.append(one(s.section("baseline"), "baseline"))
    many = s.section("baselines")
    for key in many.data:
        baselines.append(one(many.section(str(key)), f"baselines.{key}"))
    spec = NcclSpec(
        run=s.get("run", bool, False), argv=s.str_list("argv"),
        timeout_s=s.get("timeout_s", float, _NCCL.timeout_s, above=0),
        saved_output=s.get("saved_output", str),
        min_size_bytes=size(s, "min_size", s.get("min_size", (str, int), "0")),
        tolerance_pct=s.get("tolerance_pct", float, _NCCL.tolerance_pct,
                            within=(0, 100)),
        baselines=tuple(baselines), collective=s.get("collective", str),
        container_image=s.get("container_image", str), env_module=s.get("env_module", str),
        env_match=s.get("env_match", str, "minor"),
    )
    if spec.env_match not in ("minor", "exact"):
        s.fail(f"env_match must be minor or exact, not {spec.env_match!r}", "env_match")
    from stetho.parsers.nccl_shape import COLLECTIVES

    if spec.collective is not None and spec.collective not in COLLECTIVES:
        s.fail(f"unknown collective {spec.collective!r} (known: {', '.join(COLLECTIVES)})",
               "collective")
    if spec.run and not spec.argv:
        s.fail("nccl.run is true but nccl.argv is empty", "run")
    s.check_unknown()
    return spec


def _shape(s: yamlconf.Section, default_gpus: int | None) -> BaselineShape:
    """A baseline's `shape:`; without one, the profile's own node: all_reduce over its
    gpu.count GPUs on one node (what the shipped profiles' single `baseline:` measured)."""
    from stetho.parsers.nccl_shape import COLLECTIVES

    if not s.data:
        return BaselineShape("all_reduce", default_gpus, 1 if default_gpus else None,
                             default_gpus)
    shape = BaselineShape(collective=s.require("collective", str), ranks=s.get("ranks", int),
                          nodes=s.get("nodes", int), gpus_per_node=s.get("gpus_per_node", int))
    if shape.collective not in COLLECTIVES:
        s.fail(f"unknown collective {shape.collective!r} (known: {', '.join(COLLECTIVES)})",
               "collective")
    for key in ("ranks", "nodes", "gpus_per_node"):
        value = getattr(shape, key)
        if value is not None and value < 1:
            s.fail(f"{key} must be at least 1, got {value}", key)
    s.check_unknown()
    return shape
