"""Signals: the observations root-cause rules are written in, computed from a node's results,
its evidence (kernel log, NCCL log, PSI, meminfo) and its history.

Each signal is a function returning the Evidence that shows it (empty: not seen). Rules name
signals; adding a signal is adding a function here and naming it in a rule.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from stetho.checking.nodes import NodeSummary
from stetho.diagnosis.model import Evidence
from stetho.results import Result, format_value


@dataclass
class NodeContext:
    """Everything known about one node at diagnosis time."""

    node: str
    results: list[Result]
    facts: Any = None  # NodeFacts when the evidence bundle is at hand
    history: Any = None  # stetho.history.store.History, when there is one
    summary: NodeSummary | dict[str, Any] = field(default_factory=dict)
    fleet: list[NodeSummary] = field(default_factory=list)  # peers' summaries

    def results_of(self, check: str, statuses: tuple[str, ...] = ("fail", "warn", "error")
                   ) -> list[Result]:
        return [r for r in self.results if r.check == check and r.status in statuses]

    def metric(self, check: str, metric: str) -> list[tuple[str, float]]:
        return [(str(s), float(v)) for c, s, m, v, _ in self.summary.get("metrics", [])
                if c == check and m == metric]


def _from_results(rows: list[Result], signal: str, weight: float = 1.0,
                  command: str | None = None) -> list[Evidence]:
    return [Evidence(signal=signal, description=r.message, weight=weight, check=r.check,
                     subject=r.subject or None, value=format_value(r.value, r.unit) or None,
                     expected=None if r.expected is None else str(r.expected),
                     log_line=_first_line(r.evidence) if r.probe == "kernel_log" else None,
                     command=command) for r in rows]


def _first_line(text: str | None) -> str | None:
    return text.splitlines()[-1] if text else None


def _facts(ctx: NodeContext, name: str) -> Any:
    if ctx.facts is None:
        return None
    from stetho.facts.node import Unavailable

    try:
        return getattr(ctx.facts, name)()
    except Unavailable:
        return None


# -- the signals ---------------------------------------------------------------------------

def busbw_drop(ctx: NodeContext) -> list[Evidence]:
    rows = ctx.results_of("nccl_busbw", ("fail",)) + ctx.results_of("fleet_busbw", ("fail",))
    worst = sorted(rows, key=lambda r: -(r.reference or 0))[:2]
    return _from_results(worst, "busbw_drop",
                         command="all_reduce_perf -b 64M -e 8G -f 2 -g 8")


def aer_corrected(ctx: NodeContext) -> list[Evidence]:
    log = _facts(ctx, "kernel_log")
    if log is None:
        return []
    events = [e for e in log.aer if e.severity == "corrected"]
    if not events:
        return []
    devices = sorted({e.device for e in events})
    kinds = ", ".join(sorted({x for e in events for x in e.errors}))
    return [Evidence("aer_corrected", f"{len(events)} corrected PCIe AER errors on "
                     f"{', '.join(devices)} ({kinds})",
                     1.0, check="pcie_aer", subject=devices[0], value=str(len(events)),
                     expected="0", log_line=events[-1].line,
                     command=f"dmesg -T | grep -i 'AER' | grep {devices[0]}")]


def aer_rising(ctx: NodeContext) -> list[Evidence]:
    """Corrected AER errors more than at the previous run: a link getting worse."""
    now = ctx.metric("kernel", "aer_corrected")
    if not now or now[0][1] <= 0 or ctx.history is None:
        return []
    prev = _previous(ctx, "kernel", "", "aer_corrected")
    if prev is None or now[0][1] <= prev:
        return []
    return [Evidence("aer_rising", f"corrected AER errors rose from {prev:g} to {now[0][1]:g} "
                     "since the previous run", 1.0, check="pcie_aer", value=f"{now[0][1]:g}",
                     expected=f"{prev:g} (previous run)", command="stetho history "
                     f"{ctx.node} --check kernel --metric aer_corrected")]


def _previous(ctx: NodeContext, check: str, subject: str, metric: str) -> float | None:
    series = [s for s in ctx.history.series_of(ctx.node, check, metric) if s[2] == subject]
    if not series:
        return None
    samples = ctx.history.samples(ctx.node, [series[0][0]], since=0).get(series[0][0], [])
    return samples[-1].value if samples else None


def aer_fatal(ctx: NodeContext) -> list[Evidence]:
    return _from_results(ctx.results_of("pcie_aer", ("fail",)), "aer_fatal",
                         command="dmesg -T | grep -iE 'AER|Surprise Down'")


def gpu_hot(ctx: NodeContext) -> list[Evidence]:
    rows = ctx.results_of("gpu_temperature", ("fail", "warn"))
    out = _from_results(rows, "gpu_hot", command="nvidia-smi -q -d TEMPERATURE")
    temps = ctx.metric("gpu", "temperature_c")
    if len(temps) >= 4 and not out:
        med = sorted(v for _, v in temps)[len(temps) // 2]
        for subject, v in temps:
            if v - med >= 8:
                out.append(Evidence("gpu_hot", f"{subject} runs {v - med:.0f} C hotter than the "
                                    f"node's other GPUs", 1.0, check="gpu_temperature",
                                    subject=subject, value=f"{v:g} C", expected=f"~{med:g} C",
                                    command="nvidia-smi -q -d TEMPERATURE"))
    return out


def pcie_downgraded(ctx: NodeContext) -> list[Evidence]:
    return _from_results(ctx.results_of("pcie_link"), "pcie_downgraded",
                         command="lspci -vvv | grep -E 'LnkCap|LnkSta'")


def nvme_rotational(ctx: NodeContext) -> list[Evidence]:
    return _from_results(ctx.results_of("disk_rotational", ("fail",)), "nvme_rotational",
                         command="cat /sys/block/nvme*/queue/rotational")


def io_pressure(ctx: NodeContext) -> list[Evidence]:
    psi = _facts(ctx, "pressure")
    io = psi.get("io") if psi else None
    if io is None or io.some_avg60 < 10:
        return []
    return [Evidence("io_pressure", f"tasks stalled on I/O {io.some_avg60:g}% of the last "
                     "minute (PSI)", 1.0, value=f"{io.some_avg60:g}%", expected="< 10%",
                     log_line=f"/proc/pressure/io: some avg10={io.some_avg10} "
                     f"avg60={io.some_avg60} avg300={io.some_avg300}",
                     command="cat /proc/pressure/io; iostat -x 5")]


def nccl_socket(ctx: NodeContext) -> list[Evidence]:
    log = _facts(ctx, "nccl_log")
    if log is None or log.transport != "Socket":
        return []
    text = ctx.facts.text("nccl_tests") if ctx.facts is not None else ""
    lines = text.splitlines()
    line = next((ln for ln in lines if "NET/Socket : Using" in ln),
                next((ln for ln in lines if "No device found" in ln), None))
    return [Evidence("nccl_socket", "NCCL uses TCP sockets (NET/Socket), not InfiniBand"
                     + (" after finding no IB device" if log.fell_back_to_socket else ""), 1.0,
                     value="NET/Socket", expected="NET/IB", log_line=line,
                     command="NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET all_reduce_perf -g 8 "
                             "2>&1 | grep NET/")]


def nccl_ib(ctx: NodeContext) -> list[Evidence]:
    log = _facts(ctx, "nccl_log")
    if log is None or log.transport != "IB":
        return []
    return [Evidence("nccl_ib", f"NCCL uses InfiniBand ({', '.join(log.ib_devices[:4])})", 1.0,
                     value="NET/IB")]


def ib_rate_low(ctx: NodeContext) -> list[Evidence]:
    # the check's two failures: "port X is DOWN/Polling, ..." and "port X at 200 Gb/s ..."
    rows = [r for r in ctx.results_of("ib_port_state", ("fail",)) if " at " in r.message]
    return _from_results(rows, "ib_rate_low", command="ibstat; mlxlink -d <dev> -p 1")


def ib_port_down(ctx: NodeContext) -> list[Evidence]:
    rows = [r for r in ctx.results_of("ib_port_state", ("fail",)) if " is " in r.message]
    return _from_results(rows, "ib_port_down", command="ibstat")


def ib_symbol_errors(ctx: NodeContext) -> list[Evidence]:
    rows = [r for r in ctx.results_of("ib_counters", ("fail",))
            if re.search(r"SymbolError|LinkErrorRecovery|LocalLinkIntegrity", r.message)]
    rows += [r for r in ctx.results_of("drift_counter", ("fail",))
             if re.search(r"SymbolError|LinkErrorRecovery", r.subject)]
    return _from_results(rows, "ib_symbol_errors", command="perfquery -x; mlxlink -d <dev> -c")


def ber_high(ctx: NodeContext) -> list[Evidence]:
    return _from_results(ctx.results_of("ib_link_ber"), "ber_high",
                         command="mlxlink -d <dev> -m -c")


def ber_trend(ctx: NodeContext) -> list[Evidence]:
    rows = [r for r in ctx.results_of("drift_trend", ("warn",)) if "pre_fec_ber" in r.subject]
    return _from_results(rows, "ber_trend", command=f"stetho history {ctx.node} --metric "
                                                    "pre_fec_ber")


def xid_memory(ctx: NodeContext) -> list[Evidence]:
    log = _facts(ctx, "kernel_log")
    out = []
    if log is not None:
        for e in log.xids:
            if e.code in (48, 63, 64, 92, 94, 95):
                out.append(Evidence("xid_memory", f"Xid {e.code} on {e.pci_id}: {e.message[:120]}",
                                    1.0, check="gpu_xid", subject=e.pci_id, value=f"Xid {e.code}",
                                    log_line=e.line, command="dmesg -T | grep -i xid"))
    if not out:
        out = [e for e in _from_results(ctx.results_of("gpu_xid", ("fail",)), "xid_memory",
                                        command="dmesg -T | grep -i xid")
               if re.search(r"Xid (48|63|64|92|94|95)\b", e.description)]
    return out[:4]


def ecc_uncorrectable(ctx: NodeContext) -> list[Evidence]:
    rows = [r for r in ctx.results_of("gpu_ecc", ("fail",)) if "uncorrectable" in r.message
            or "remap" in r.message or "retirement" in r.message]
    return _from_results(rows, "ecc_uncorrectable", command="nvidia-smi -q -d ECC,ROW_REMAPPER")


def xid_79(ctx: NodeContext) -> list[Evidence]:
    rows = ctx.results_of("gpu_bus_loss", ("fail",))
    ev = _from_results(rows, "xid_79", command="dmesg -T | grep -iE 'Xid|fallen off'")
    log = _facts(ctx, "kernel_log")
    if log is not None and log.fallen_off_bus and ev:
        ev = [Evidence(e.signal, e.description, e.weight, e.check, e.subject, e.value, e.expected,
                       log.fallen_off_bus[-1].line, e.command) for e in ev]
    return ev


def gpu_missing(ctx: NodeContext) -> list[Evidence]:
    return _from_results(ctx.results_of("gpu_count", ("fail",)), "gpu_missing",
                         command="nvidia-smi -L; lspci | grep -i nvidia")


def throttle_thermal(ctx: NodeContext) -> list[Evidence]:
    rows = [r for r in ctx.results_of("gpu_throttle", ("fail",)) if "thermal" in r.message]
    return _from_results(rows, "throttle_thermal", command="nvidia-smi -q -d PERFORMANCE")


def throttle_power(ctx: NodeContext) -> list[Evidence]:
    rows = [r for r in ctx.results_of("gpu_throttle", ("fail", "warn"))
            if "power" in r.message.lower()]
    return _from_results(rows, "throttle_power", command="nvidia-smi -q -d PERFORMANCE,POWER")


def clocks_unlocked(ctx: NodeContext) -> list[Evidence]:
    return _from_results(ctx.results_of("gpu_clocks", ("fail",)), "clocks_unlocked",
                         command="nvidia-smi -q -d CLOCK")


def governor_wrong(ctx: NodeContext) -> list[Evidence]:
    return _from_results(ctx.results_of("cpu_governor", ("fail",)), "governor_wrong",
                         command="cpupower frequency-info; cat /sys/devices/system/cpu/cpu*/"
                                 "cpufreq/scaling_governor | sort | uniq -c")


def oom_kills(ctx: NodeContext) -> list[Evidence]:
    log = _facts(ctx, "kernel_log")
    if log is None or not log.oom_kills:
        return []
    k = log.oom_kills[-1]
    return [Evidence("oom_kills", f"the OOM killer ran {len(log.oom_kills)} time(s), last on "
                     f"{k.process} (pid {k.pid})", 1.0, value=str(len(log.oom_kills)),
                     expected="0", log_line=k.line, command="dmesg -T | grep -i 'out of memory'")]


def swap_used(ctx: NodeContext) -> list[Evidence]:
    info = _facts(ctx, "meminfo")
    if not info or not info.get("SwapTotal"):
        return []
    used = info["SwapTotal"] - info.get("SwapFree", 0)
    if used < 0.1 * info["SwapTotal"]:
        return []
    return [Evidence("swap_used", f"{used / 2**20:.1f} GiB of swap in use "
                     f"({used / info['SwapTotal']:.0%})", 1.0, value=f"{used} kB",
                     expected="< 10% of swap", command="free -g; vmstat 5")]


def memory_pressure(ctx: NodeContext) -> list[Evidence]:
    psi = _facts(ctx, "pressure")
    mem = psi.get("memory") if psi else None
    if mem is None or mem.some_avg60 < 10:
        return []
    return [Evidence("memory_pressure", f"tasks stalled on memory {mem.some_avg60:g}% of the "
                     "last minute (PSI)", 1.0, value=f"{mem.some_avg60:g}%", expected="< 10%",
                     log_line=f"/proc/pressure/memory: some avg60={mem.some_avg60}",
                     command="cat /proc/pressure/memory")]


def version_drift(ctx: NodeContext) -> list[Evidence]:
    rows = ctx.results_of("fleet_versions", ("fail", "warn")) + \
        ctx.results_of("versions", ("fail", "warn"))
    return _from_results(rows, "version_drift", command="nvidia-smi; cat /sys/class/infiniband/"
                                                        "*/fw_ver; ofed_info -s")


def nvlink_down(ctx: NodeContext) -> list[Evidence]:
    return _from_results(ctx.results_of("gpu_nvlink", ("fail",)), "nvlink_down",
                         command="nvidia-smi nvlink -s; nvidia-smi nvlink -e")


SIGNALS: dict[str, Callable[[NodeContext], list[Evidence]]] = {
    f.__name__: f for f in (
        busbw_drop, aer_corrected, aer_rising, aer_fatal, gpu_hot, pcie_downgraded,
        nvme_rotational, io_pressure, nccl_socket, nccl_ib, ib_rate_low, ib_port_down,
        ib_symbol_errors, ber_high, ber_trend, xid_memory, ecc_uncorrectable, xid_79,
        gpu_missing, throttle_thermal, throttle_power, clocks_unlocked, governor_wrong,
        oom_kills, swap_used, memory_pressure, version_drift, nvlink_down)
}
