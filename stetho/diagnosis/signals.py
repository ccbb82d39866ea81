"""Signals: the observations root-cause rules are written in, computed from a node's results,
its evidence (kernel log, NCCL log, PSI, meminfo) and its history.

Each signal is a function returning the Evidence that shows it (empty: not seen). Evidence
names the part it points at (`where`) and a command that looks at that part, never at every
device. Rules name signals; adding a signal is adding a function here (or in a module
beside it: `ib`, `memory`, `nvlink`, `clean`, `trends`) and naming it in a rule.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace

from stetho.diagnosis import clean, datapath, ib, limits, memory, nvlink, platform, trends
from stetho.diagnosis.context import (
    NodeContext,
    facts_of,
    from_results,
    gpu_where,
    quantity_of,
    short_pci,
)
from stetho.diagnosis.model import Evidence
from stetho.results import Result

__all__ = ["SIGNALS", "NodeContext"]

_facts = facts_of


def _gpu_flag(where: dict[str, str]) -> str:
    return f" -i {where['gpu']}" if "gpu" in where else ""


# -- the signals ---------------------------------------------------------------------------

def busbw_drop(ctx: NodeContext) -> list[Evidence]:
    """busbw under its baseline, whatever the run crossed; rules cite the per-path signals
    below (stetho.diagnosis.datapath), which see it only where the traffic went."""
    rows = ctx.results_of("nccl_busbw", ("fail",)) + ctx.results_of("fleet_busbw", ("fail",))
    worst = sorted(rows, key=lambda r: -(r.reference or 0))[:2]
    return from_results(ctx, worst, "busbw_drop",
                        "NCCL_DEBUG=INFO all_reduce_perf -b 64M -e 8G -f 2 -g 8",
                        quantity=quantity_of("busbw_gbps"))


#: busbw down / falling, split by the data path the nccl-tests run crossed
_PATHED = tuple(datapath.on_path(path, f"{base.__name__}_{path}", base)
                for base in (busbw_drop, trends.busbw_falling)
                for path in (datapath.NVLINK, datapath.PCIE, datapath.NET))


def aer_corrected(ctx: NodeContext) -> list[Evidence]:
    log = _facts(ctx, "kernel_log")
    if log is None:
        return []
    events = [e for e in log.aer if e.severity == "corrected"]
    if not events:
        return []
    devices = sorted({e.device for e in events})
    kinds = ", ".join(sorted({x for e in events for x in e.errors})) or "no detail"
    # name the GPU whose link it is when one of the reporting devices is a GPU (the root
    # port above it reports too)
    on_gpu = [d for d in devices if "gpu" in dict(gpu_where(ctx, pci=d))]
    dev = on_gpu[0] if on_gpu else devices[0]
    where = gpu_where(ctx, pci=dev) + datapath.carrier(ctx)
    bdf = dev.split(":", 1)[1] if dev.count(":") == 2 else dev
    return [Evidence("aer_corrected", f"{len(events)} corrected PCIe AER errors on "
                     f"{', '.join(devices)} ({kinds})",
                     1.0, check="pcie_aer", subject=dev, value=f"{len(events)} corrected",
                     expected="0", log_line=events[-1].line,
                     command=f"dmesg -T | grep -i 'AER' | grep {dev}; "
                             f"lspci -vvv -s {bdf} | grep -E 'LnkCap|LnkSta|CESta'",
                     status="fail", where=where, quantity=quantity_of("aer_corrected"))]


def aer_fatal(ctx: NodeContext) -> list[Evidence]:
    rows = ctx.results_of("pcie_aer", ("fail",))
    log = _facts(ctx, "kernel_log")
    fatal = [e for e in log.aer if e.severity != "corrected"] if log is not None else []
    out = []
    for r in rows:
        e = fatal[-1] if fatal else None
        out.append(Evidence(
            "aer_fatal", r.message, 1.0, check=r.check, subject=e.device if e else None,
            value=f"{len(fatal)} uncorrected" if fatal else "uncorrected", expected="0",
            log_line=e.line if e else None,
            command=f"dmesg -T | grep -iE 'AER|Surprise Down' | grep {e.device}" if e
            else "dmesg -T | grep -iE 'AER|Surprise Down'",
            where=gpu_where(ctx, pci=e.device) if e else ()))
    return out


def gpu_hot(ctx: NodeContext) -> list[Evidence]:
    """The die hot, or 8 C over the node's median; only the HBM over its limit is hbm_hot."""
    hot = ctx.results_of("gpu_temperature", ("fail", "warn"))
    rows = [r for r in hot if limits.die_hot(ctx, r)]
    out = from_results(ctx, rows, "gpu_hot",
                       commands=lambda w: f"nvidia-smi -q -d TEMPERATURE{_gpu_flag(w)}",
                       quantity=quantity_of("temperature_c"))
    temps = ctx.metric("gpu", "temperature_c")
    if len(temps) >= 4 and not out:
        med = sorted(v for _, v in temps)[len(temps) // 2]
        for subject, v in temps:
            if v - med >= 8:
                idx = re.sub(r"\D", "", subject)
                where = gpu_where(ctx, index=int(idx)) if idx else ()
                out.append(Evidence("gpu_hot", f"{subject} runs {v - med:.0f} C hotter than the "
                                    f"node's other GPUs", 1.0, check="gpu_temperature",
                                    subject=subject, value=f"{v:g} C", expected=f"~{med:g} C",
                                    command="nvidia-smi -q -d TEMPERATURE"
                                    + _gpu_flag(dict(where)), status="warn", where=where,
                                    quantity=quantity_of("temperature_c")))
    return out


def _lspci_cmd(w: dict[str, str]) -> str:
    if "pci" in w:
        return f"lspci -vvv -s {w['pci'].split(':', 1)[1]} | grep -E 'LnkCap|LnkSta'"
    return "lspci -vvv | grep -E 'LnkCap|LnkSta'"


def pcie_downgraded(ctx: NodeContext) -> list[Evidence]:
    return [replace(e, where=e.where + datapath.carrier(ctx)) for e in
            from_results(ctx, ctx.results_of("pcie_link"), "pcie_downgraded",
                         commands=_lspci_cmd)]


def nvme_rotational(ctx: NodeContext) -> list[Evidence]:
    return from_results(ctx, ctx.results_of("disk_rotational", ("fail",)), "nvme_rotational",
                        commands=lambda w: f"cat /sys/block/{w.get('disk', 'nvme*')}"
                                           "/queue/rotational")


def io_pressure(ctx: NodeContext) -> list[Evidence]:
    psi = _facts(ctx, "pressure")
    io = psi.get("io") if psi else None
    if io is None or io.some_avg60 < 10:
        return []
    return [Evidence("io_pressure", f"tasks stalled on I/O {io.some_avg60:g}% of the last "
                     "minute (PSI)", 1.0, value=f"{io.some_avg60:g}%", expected="< 10%",
                     log_line=f"/proc/pressure/io: some avg10={io.some_avg10} "
                     f"avg60={io.some_avg60} avg300={io.some_avg300}",
                     command="cat /proc/pressure/io; iostat -x 5 3", quantity="gauge")]


def nccl_socket(ctx: NodeContext) -> list[Evidence]:
    log = _facts(ctx, "nccl_log")
    if log is None or log.transport != "Socket":
        return []
    text = ctx.facts.text("nccl_tests") if ctx.facts is not None else ""
    lines = text.splitlines()
    line = next((ln for ln in lines if "NET/Socket : Using" in ln),
                next((ln for ln in lines if "No device found" in ln), None))
    ifaces = ", ".join(log.socket_interfaces) or "a TCP interface"
    return [Evidence("nccl_socket", f"NCCL uses TCP sockets (NET/Socket on {ifaces}), not "
                     "InfiniBand" + (" after finding no IB device" if log.fell_back_to_socket
                                     else ""), 1.0,
                     value="NET/Socket", expected="NET/IB", log_line=line,
                     command="NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET all_reduce_perf -g 8 "
                             "2>&1 | grep -E 'NET/|NCCL_IB'; ls /sys/class/infiniband")]


def nccl_ib(ctx: NodeContext) -> list[Evidence]:
    log = _facts(ctx, "nccl_log")
    if log is None or log.transport != "IB":
        return []
    return [Evidence("nccl_ib", f"NCCL uses InfiniBand ({', '.join(log.ib_devices[:4])}"
                     f"{', ...' if len(log.ib_devices) > 4 else ''})", 1.0, value="NET/IB",
                     expected="NET/IB", status="pass")]


def host_memory_ue(ctx: NodeContext) -> list[Evidence]:
    """Uncorrected host DRAM errors (EDAC ue_count, host_memory_errors' value)."""
    rows = [r for r in ctx.results_of("host_memory_errors", ("fail",))
            if not isinstance(r.value, (int, float)) or r.value > 0]
    return from_results(ctx, rows, "host_memory_ue", "ras-mc-ctl --errors; edac-util -v; "
                        "grep . /sys/devices/system/edac/mc/mc*/ue_count",
                        quantity=quantity_of("edac_ue"))


def xid_79(ctx: NodeContext) -> list[Evidence]:
    rows = ctx.results_of("gpu_bus_loss", ("fail",))
    log = _facts(ctx, "kernel_log")
    loss = log.fallen_off_bus[-1] if log is not None and log.fallen_off_bus else None
    lost = next((x for x in reversed(log.xids) if x.code == 79), None) if log else None
    pci = loss.pci_id if loss else (lost.pci_id if lost else None)
    out = []
    for r in rows:
        where = gpu_where(ctx, pci=pci) if pci else ()
        bdf = short_pci(pci).split(":", 1)[1] if pci else ""
        out.append(Evidence(
            "xid_79", r.message, 1.0, check=r.check, subject=pci or r.subject or None,
            value=f"{r.value} GPU lost" if r.value is not None else "GPU lost",
            expected="every GPU on the bus",
            log_line=(loss.line if loss else lost.line if lost else None),
            command=f"dmesg -T | grep -iE 'Xid|fallen off' | grep -i {short_pci(pci)}; "
                    f"lspci -s {bdf} -vv | head -5" if pci
            else "dmesg -T | grep -iE 'Xid|fallen off'", where=where))
    return out


def gpu_missing(ctx: NodeContext) -> list[Evidence]:
    return from_results(ctx, ctx.results_of("gpu_count", ("fail",)), "gpu_missing",
                        "nvidia-smi -L; lspci -d 10de: | grep -ciE '3D controller'")


def _perf_cmd(extra: str) -> Callable[[dict[str, str]], str]:
    return lambda w: f"nvidia-smi -q -d PERFORMANCE{extra}{_gpu_flag(w)}"


def _throttled(ctx: NodeContext, r: Result, kind: str) -> bool:
    """gpu_throttle's value lists the active clock event reasons (hw_thermal_slowdown,
    sw_power_cap, ...); a failure on held-back time names none, its counters (the node's
    throttle_hw_*_us metrics) do."""
    reasons = str(r.value or "")
    if kind in reasons:
        return True
    metric = "throttle_hw_thermal_us" if kind == "thermal" else "throttle_hw_power_brake_us"
    return any(s == r.subject and v > 0 for s, v in ctx.metric("gpu", metric))


def throttle_thermal(ctx: NodeContext) -> list[Evidence]:
    rows = [r for r in ctx.results_of("gpu_throttle", ("fail",))
            if _throttled(ctx, r, "thermal")]
    return from_results(ctx, rows, "throttle_thermal", commands=_perf_cmd(",TEMPERATURE"))


def throttle_power(ctx: NodeContext) -> list[Evidence]:
    rows = [r for r in ctx.results_of("gpu_throttle", ("fail", "warn"))
            if _throttled(ctx, r, "power")]
    return from_results(ctx, rows, "throttle_power", commands=_perf_cmd(",POWER"))


def clocks_unlocked(ctx: NodeContext) -> list[Evidence]:
    # A clock held below target on a GPU that throttles is throttling (gpu_throttle's signals).
    throttled = {r.subject for r in ctx.results_of("gpu_throttle", ("fail", "warn"))}
    rows = [r for r in ctx.results_of("gpu_clocks", ("fail",)) if r.subject not in throttled]
    return from_results(ctx, rows, "clocks_unlocked",
                        commands=lambda w: f"nvidia-smi -q -d CLOCK{_gpu_flag(w)}",
                        quantity=quantity_of("app_sm_clock_mhz"))


def governor_wrong(ctx: NodeContext) -> list[Evidence]:
    out = []
    for e in from_results(ctx, ctx.results_of("cpu_governor", ("fail",)), "governor_wrong"):
        # the CPUs off the expected governor, from the node's own governor readings
        wrong = sorted(g.cpu for g in _facts(ctx, "governors") or ()
                       if e.expected and g.governor != e.expected)
        first = str(wrong[0]) if wrong else "0"
        cpus = _ranges(wrong) or first
        out.append(Evidence(
            e.signal, e.description, e.weight, e.check, e.subject, e.value, e.expected,
            None, f"cat /sys/devices/system/cpu/cpu{first}/cpufreq/scaling_governor; "
            "cat /sys/devices/system/cpu/cpu*/cpufreq/scaling_governor | sort | uniq -c",
            e.status, (("cpus", cpus),)))
    return out


def _ranges(cpus: list[int]) -> str:
    """[8, 9, 10, 12] -> '8-10,12'."""
    out: list[list[int]] = []
    for c in cpus:
        if out and c == out[-1][1] + 1:
            out[-1][1] = c
        else:
            out.append([c, c])
    return ",".join(f"{a}-{b}" if b > a else str(a) for a, b in out)


def oom_kills(ctx: NodeContext) -> list[Evidence]:
    log = _facts(ctx, "kernel_log")
    if log is None or not log.oom_kills:
        return []
    k = log.oom_kills[-1]
    return [Evidence("oom_kills", f"the OOM killer ran {len(log.oom_kills)} time(s), last on "
                     f"{k.process} (pid {k.pid})", 1.0, value=str(len(log.oom_kills)),
                     expected="0", log_line=k.line,
                     command="dmesg -T | grep -i 'out of memory'", where=(("process",
                                                                         str(k.process)),),
                     quantity="counter")]


def swap_used(ctx: NodeContext) -> list[Evidence]:
    info = _facts(ctx, "meminfo")
    if not info or not info.get("SwapTotal"):
        return []
    used = info["SwapTotal"] - info.get("SwapFree", 0)
    if used < 0.1 * info["SwapTotal"]:
        return []
    return [Evidence("swap_used", f"{used / 2**20:.1f} GiB of swap in use "
                     f"({used / info['SwapTotal']:.0%})", 1.0, value=f"{used / 2**20:.1f} GiB",
                     expected="< 10% of swap", command="free -g; vmstat 5 3", quantity="gauge")]


def memory_pressure(ctx: NodeContext) -> list[Evidence]:
    psi = _facts(ctx, "pressure")
    mem = psi.get("memory") if psi else None
    if mem is None or mem.some_avg60 < 10:
        return []
    return [Evidence("memory_pressure", f"tasks stalled on memory {mem.some_avg60:g}% of the "
                     "last minute (PSI)", 1.0, value=f"{mem.some_avg60:g}%", expected="< 10%",
                     log_line=f"/proc/pressure/memory: some avg60={mem.some_avg60}",
                     command="cat /proc/pressure/memory", quantity="gauge")]


_VERSION_CMD = {
    "driver": "nvidia-smi --query-gpu=driver_version --format=csv,noheader",
    "vbios": "nvidia-smi --query-gpu=index,vbios_version --format=csv,noheader",
    "hca_firmware": "cat /sys/class/infiniband/*/fw_ver",
    "ofed": "ofed_info -s", "kernel": "uname -r", "cuda": "nvidia-smi | head -4",
    "nccl": "NCCL_DEBUG=VERSION all_reduce_perf -g 1 -b 8 -e 8 2>&1 | grep 'NCCL version'",
}


def version_drift(ctx: NodeContext) -> list[Evidence]:
    rows = ctx.results_of("fleet_versions", ("fail", "warn")) + \
        ctx.results_of("versions", ("fail", "warn"))
    out = []
    for e in from_results(ctx, rows, "version_drift"):
        comp = (e.subject or "").split(":")[0]
        out.append(Evidence(e.signal, e.description, e.weight, e.check, e.subject, e.value,
                            e.expected, None, _VERSION_CMD.get(comp, "nvidia-smi; ofed_info -s"),
                            e.status, (("component", comp),) if comp else ()))
    return out


def fabric_not_ready(ctx: NodeContext) -> list[Evidence]:
    return from_results(ctx, ctx.results_of("gpu_fabric", ("fail", "error")), "fabric_not_ready",
                        commands=lambda w: f"nvidia-smi -q{_gpu_flag(w)} | grep -A6 Fabric")


def fabric_manager_down(ctx: NodeContext) -> list[Evidence]:
    return from_results(ctx, ctx.results_of("fabric_manager", ("fail",)), "fabric_manager_down",
                        "systemctl status nvidia-fabricmanager; "
                        "journalctl -u nvidia-fabricmanager -n 50 --no-pager")


def nvswitch_fatal(ctx: NodeContext) -> list[Evidence]:
    return from_results(ctx, ctx.results_of("nvswitch_sxid", ("fail",)), "nvswitch_fatal",
                        "dmesg --time-format=iso | grep -i sxid")


def driver_reset_required(ctx: NodeContext) -> list[Evidence]:
    return from_results(ctx, ctx.results_of("gpu_driver_verdict", ("fail",)),
                        "driver_reset_required",
                        commands=lambda w: f"nvidia-smi -q{_gpu_flag(w)} | grep -iA3 reset")


def roce_congestion(ctx: NodeContext) -> list[Evidence]:
    return from_results(ctx, ctx.results_of("roce_congestion", ("fail", "warn")),
                        "roce_congestion", commands=lambda w: "cat /sys/class/infiniband/"
                        f"{w.get('device', '*')}/ports/{w.get('port', '1')}/hw_counters/*",
                        quantity="counter")


def roce_qos_wrong(ctx: NodeContext) -> list[Evidence]:
    return from_results(ctx, ctx.results_of("roce_qos", ("fail",)), "roce_qos_wrong",
                        commands=lambda w: "mlnx_qos -i $(ls /sys/class/infiniband/"
                        f"{w.get('device', '*')}/device/net)")


def nic_affinity_wrong(ctx: NodeContext) -> list[Evidence]:
    return from_results(ctx, ctx.results_of("gpu_nic_affinity", ("fail",)), "nic_affinity_wrong",
                        "nvidia-smi topo -m")


SIGNALS: dict[str, Callable[[NodeContext], list[Evidence]]] = {
    f.__name__: f for f in (
        busbw_drop, aer_corrected, aer_fatal, gpu_hot, pcie_downgraded,
        nvme_rotational, io_pressure, nccl_socket, nccl_ib, *ib.SIGNALS, host_memory_ue,
        *memory.SIGNALS, *limits.SIGNALS, xid_79,
        gpu_missing, throttle_thermal, throttle_power, clocks_unlocked, governor_wrong,
        oom_kills, swap_used, memory_pressure, version_drift, *nvlink.SIGNALS, *_PATHED,
        fabric_not_ready, fabric_manager_down, nvswitch_fatal, driver_reset_required,
        roce_congestion, roce_qos_wrong, nic_affinity_wrong, *platform.SIGNALS,
        *trends.SIGNALS, *clean.SIGNALS)
}
