"""Every number a node's checks measure, in long form, for the history database.

One Metric per (check, subject, metric): GPU temperatures, power, clocks and ECC counts, PCIe
replays, NVLink and InfiniBand error counters, NCCL busbw per message size, kernel-log event
counts. stetho.facts.kinds declares how drift treats each: a counter is cumulative (delta and
rate since the previous run, resets handled), a flat metric should stay flat (trend toward its
threshold; a metric can be both), a gauge is compared with the node's own recent history.
"""

from __future__ import annotations

from stetho.core.record import record
from stetho.facts import kinds, window
from stetho.facts.node import NodeFacts, Unavailable


@record
class Metric:
    check: str
    subject: str
    metric: str
    value: float
    unit: str = ""

    def to_row(self) -> MetricRow:
        return [self.check, self.subject, self.metric, self.value, self.unit]


#: A metric as it travels in a node summary and into history: [check, subject, metric, value,
#: unit] (a list, the shape JSON gives it back in).
MetricRow = list[str | float]


#: Cumulative counters and metrics that should stay flat: the kinds table says which
#: (stetho.facts.kinds, with each metric's resolution and minimum meaningful change).
COUNTERS = kinds.COUNTERS
FLAT = kinds.FLAT
IB_COUNTERS = ("SymbolErrorCounter", "LinkErrorRecoveryCounter", "LinkDownedCounter",
               "PortRcvErrors", "PortRcvRemotePhysicalErrors", "LocalLinkIntegrityErrors",
               "ExcessiveBufferOverrunErrors", "PortXmitDiscards",
               # perfquery -E (PortRcvErrorDetails), where collected
               "PortLocalPhysicalErrors", "PortMalformedPktErrors", "PortBufferOverrunErrors")


def is_counter(metric: str) -> bool:
    return metric in COUNTERS


def is_flat(metric: str) -> bool:
    return metric in FLAT


def is_gauge(metric: str) -> bool:
    """A declared level: compared with the node's own recent values (z-score, KS)."""
    k = kinds.TABLE.get(metric)
    return k is not None and k.kind == "gauge"


#: The clock-event counters (microseconds held back since the driver loaded), by metric name.
THROTTLE_COUNTERS = {"throttle_hw_thermal_us": "hw_thermal_slowdown_us",
                     "throttle_hw_power_brake_us": "hw_power_brake_us",
                     "throttle_sw_thermal_us": "sw_thermal_slowdown_us"}


def extract(facts: NodeFacts) -> list[Metric]:
    out: list[Metric] = []
    boot = window.boot_id(facts)
    if boot is not None:  # marks the epoch of every counter below (stetho.facts.window)
        out.append(Metric("host", "", "boot_id", boot))
    for part in (_gpus, _nvlink, _ib, _roce, _nccl, _kernel, _edac, _nvme):
        try:
            out.extend(part(facts))
        except Unavailable:
            continue
    return out


def _gpus(f: NodeFacts) -> list[Metric]:
    out = []
    for g in f.gpus():
        s = f"gpu{g.index}"
        agg = g.ecc_aggregate
        rows = g.remapped_rows
        for name, value, unit in (
            ("temperature_c", g.gpu_temp_c, "C"), ("memory_temperature_c", g.memory_temp_c, "C"),
            ("power_w", g.power_draw_w, "W"), ("sm_clock_mhz", g.sm_mhz, "MHz"),
            ("app_sm_clock_mhz", g.app_graphics_mhz, "MHz"),
            ("app_mem_clock_mhz", g.app_mem_mhz, "MHz"),
            ("ecc_correctable", _sum(agg.dram_correctable, agg.sram_correctable), ""),
            ("ecc_uncorrectable", _sum(agg.dram_uncorrectable, agg.sram_uncorrectable), ""),
            ("remapped_rows_correctable", rows.correctable if rows else None, ""),
            ("remapped_rows_uncorrectable", rows.uncorrectable if rows else None, ""),
            ("pcie_replays", g.pcie_replays, ""),
        ):
            if value is not None:
                out.append(Metric("gpu", s, name, float(value), unit))
        for name, attr in THROTTLE_COUNTERS.items():
            us = getattr(g.clock_event_counters, attr)
            if us is not None:
                out.append(Metric("gpu", s, name, float(us), "us"))
    return out


def _sum(*xs: int | None) -> int | None:
    vals = [x for x in xs if x is not None]
    return sum(vals) if vals else None


#: `nvidia-smi nvlink -e` counter names -> the per-GPU totals history keeps of them.
NVLINK_METRICS = {"Replay Errors": "nvlink_replay", "Recovery Errors": "nvlink_recovery",
                  "CRC Errors": "nvlink_crc"}


def _nvlink(f: NodeFacts) -> list[Metric]:
    out = []
    names = NVLINK_METRICS
    for g in f.nvlink_errors():
        totals: dict[str, int] = {}
        for link in g.links:
            for k, v in link.counters.items():
                if k in names:
                    totals[names[k]] = totals.get(names[k], 0) + v
        out += [Metric("gpu_nvlink", f"gpu{g.index}", k, float(v)) for k, v in totals.items()]
    return out


def _ib(f: NodeFacts) -> list[Metric]:
    from stetho.facts.ib import port_counters

    out = []
    for p in f.ib_ports():
        # the merged reading ib_counters judged (the higher of sysfs and perfquery)
        for name, value in port_counters(f, p).values().items():
            if name in IB_COUNTERS:
                out.append(Metric("ib", p.id, name, float(value)))
        if p.rate_gbps is not None:
            out.append(Metric("ib", p.id, "rate_gbps", float(p.rate_gbps), "Gb/s"))
    try:
        ports = f.mlxlink()
    except Unavailable:  # no MFT on the node: the counters above still count
        ports = ()
    for d in ports:
        if d.pre_fec_ber is not None:
            out.append(Metric("ib", f"{d.device}:{d.port}", "pre_fec_ber", d.pre_fec_ber))
    return out


def _roce(f: NodeFacts) -> list[Metric]:
    """The RoCE counters roce_congestion judges, for its window: Ethernet ports only, where
    the RoCE probes were collected (a profile with a `roce` section)."""
    from stetho.facts import roce

    if "roce_sysfs" not in f.bundle.probes:
        return []
    out = []
    for p in f.ib_ports():
        if p.link_layer != "Ethernet":
            continue
        try:
            values = roce.counters(f, p)
        except Unavailable:  # the check names why; history keeps what could be read
            continue
        out += [Metric("roce", p.id, k, float(values[k])) for k in kinds.ROCE_COUNTERS
                if k in values]
    return out


def _nccl(f: NodeFacts) -> list[Metric]:
    run = f.nccl_run()
    if run.failed or run.truncated:
        return []
    return [Metric("nccl", f"allreduce@{r.size_bytes}", "busbw_gbps", r.oop_busbw_gbps, "GB/s")
            for r in run.rows if r.oop_busbw_gbps is not None and r.size_bytes >= (1 << 20)]


def _kernel(f: NodeFacts) -> list[Metric]:
    log = f.kernel_log()
    return [Metric("kernel", "", "xid_events", float(len(log.xids))),
            Metric("kernel", "", "aer_corrected",
                   float(sum(1 for e in log.aer if e.severity == "corrected")))]


def _edac(f: NodeFacts) -> list[Metric]:
    from stetho.facts import hygiene

    mcs = hygiene.edac(f)
    return [Metric("host", "", "edac_ce", float(sum(m.ce for m in mcs))),
            Metric("host", "", "edac_ue", float(sum(m.ue for m in mcs)))]


def _nvme(f: NodeFacts) -> list[Metric]:
    """Each NVMe controller's lifetime error counters (a controller whose log did not parse
    is left out: host_nvme_health errors on it)."""
    from stetho.facts import nvme

    out = []
    for c in nvme.controllers(f):
        try:
            log = nvme.smart(f, c)
        except Unavailable:
            continue
        out += [Metric("host", c, "nvme_media_errors", float(log.media_errors)),
                Metric("host", c, "nvme_err_log_entries", float(log.err_log_entries))]
    return out
