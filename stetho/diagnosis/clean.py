"""Clean signals: evidence that a part is healthy, which rules cite to falsify a hypothesis
("IB link ruled out: all 8 ports at 400 Gb/s, NCCL on NET/IB").

Each one is seen only when the part was measured and every measurement passed: an unmeasured
or unknown part proves nothing, so it never rules a cause out.
"""

from __future__ import annotations

from stetho.diagnosis import limits
from stetho.diagnosis.context import NodeContext, facts_of, fmt
from stetho.diagnosis.model import Evidence


def _all_pass(ctx: NodeContext, check: str) -> list[str] | None:
    """The subjects of `check` when it ran and every result passed; None otherwise."""
    rows = [r for r in ctx.results if r.check == check]
    if not rows or any(r.status not in ("pass", "skip") for r in rows):
        return None
    passed = [r.subject for r in rows if r.status == "pass"]
    return passed or None


def ib_links_healthy(ctx: NodeContext) -> list[Evidence]:
    ports = _all_pass(ctx, "ib_port_state")
    if ports is None or any(r.status == "fail" for r in ctx.results
                            if r.check in ("ib_counters", "ib_link_flaps")):
        return []
    rates = sorted({v for _, v in ctx.metric("ib", "rate_gbps")})
    rate = f" at {'/'.join(f'{r:g}' for r in rates)} Gb/s" if rates else ""
    log = facts_of(ctx, "nccl_log")
    transport = f", NCCL on NET/{log.transport}" if log is not None and log.transport else ""
    if log is not None and log.transport not in (None, "IB"):
        return []  # the link may be fine, but NCCL is not on it: no alibi for the IB rule
    return [Evidence("ib_links_healthy", f"all {len(ports)} IB ports ACTIVE{rate}, error "
                     f"counters under their thresholds{transport}", 1.0, check="ib_port_state",
                     value=f"{len(ports)} ports{rate}", expected="every port at its rate",
                     command="ibstat | grep -E 'CA |State|Rate'", status="pass")]


def nvlinks_healthy(ctx: NodeContext) -> list[Evidence]:
    """Every GPU's NVLinks measured up with counters under their limits (gpu_nvlink passed on
    each GPU): the alibi that rules the NVLink rule out by a measurement."""
    gpus = _all_pass(ctx, "gpu_nvlink")
    if gpus is None:
        return []
    return [Evidence("nvlinks_healthy", f"the NVLinks of all {len(gpus)} GPUs up, replay, CRC "
                     "and recovery counters under their limits", 1.0, check="gpu_nvlink",
                     value=f"{len(gpus)} GPUs, every link up", expected="every link up",
                     command="nvidia-smi nvlink -s; nvidia-smi nvlink -e", status="pass")]


def pcie_clean(ctx: NodeContext) -> list[Evidence]:
    links = _all_pass(ctx, "pcie_link")
    log = facts_of(ctx, "kernel_log")
    if links is None or log is None or log.aer:
        return []
    return [Evidence("pcie_clean", f"no PCIe AER error in the kernel log and all {len(links)} "
                     "GPU/HCA links at their full width and speed", 1.0, check="pcie_link",
                     value="0 AER errors", expected="0 AER errors",
                     command="dmesg -T | grep -ci AER; lspci -vvv | grep -E 'LnkSta:'",
                     status="pass")]


def gpus_present(ctx: NodeContext) -> list[Evidence]:
    if _all_pass(ctx, "gpu_count") is None or _all_pass(ctx, "gpu_bus_loss") is None:
        return []
    n = len(facts_of(ctx, "gpus") or ())
    return [Evidence("gpus_present", f"every GPU answers ({n} listed), no Xid 79 or 'fallen off "
                     "the bus' in the kernel log", 1.0, check="gpu_count",
                     value=f"{n} GPUs" if n else "all GPUs", expected="all GPUs",
                     command="nvidia-smi -L", status="pass")]


def no_hw_slowdown(ctx: NodeContext) -> list[Evidence]:
    """No clock held back by hardware; no alibi for the thermal rule where an HBM stack is
    over its limit (hbm_hot): the clocks do not show that yet."""
    gpus = _all_pass(ctx, "gpu_throttle")
    if gpus is None or limits.hbm_hot(ctx):
        return []
    return [Evidence("no_hw_slowdown", f"none of the {len(gpus)} GPUs reports HW slowdown, "
                     "thermal slowdown or power brake", 1.0, check="gpu_throttle",
                     value="no HW slowdown", expected="no HW slowdown",
                     command="nvidia-smi -q -d PERFORMANCE | grep -A8 'Clocks Event Reasons'",
                     status="pass")]


def ber_normal(ctx: NodeContext) -> list[Evidence]:
    ports = _all_pass(ctx, "ib_link_ber")
    bers = [v for _, v in ctx.metric("ib", "pre_fec_ber")]
    if ports is None or not bers:
        return []
    from stetho.diagnosis.trends import ber_rising

    if ber_rising(ctx) or limits.rx_power_low(ctx):
        return []  # under the threshold, but rising, or a lane's light low: no alibi (FEC
        # still corrects what a dim lane corrupts)
    return [Evidence("ber_normal", f"pre-FEC BER on all {len(ports)} ports under the threshold "
                     f"(worst {fmt(max(bers))})", 1.0, check="ib_link_ber",
                     value=f"worst {fmt(max(bers))}", expected="under the threshold",
                     command="for d in $(ls /sys/class/infiniband); do mlxlink -d $d -p 1 -c "
                             "| grep -i 'BER'; done", status="pass")]


def ecc_clean(ctx: NodeContext) -> list[Evidence]:
    gpus = _all_pass(ctx, "gpu_ecc")
    if gpus is None:
        return []
    return [Evidence("ecc_clean", f"no uncorrectable ECC error, pending or failed row remap on "
                     f"any of the {len(gpus)} GPUs", 1.0, check="gpu_ecc", value="0 DBE",
                     expected="0 DBE", command="nvidia-smi -q -d ECC,ROW_REMAPPER",
                     status="pass")]


SIGNALS = (ib_links_healthy, nvlinks_healthy, pcie_clean, gpus_present, no_hw_slowdown,
           ber_normal, ecc_clean)
