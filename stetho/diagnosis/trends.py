"""Trend signals: this run against the node's own past runs (never against itself).

The run being diagnosed is already in the history when the sweep diagnoses it, so every
comparison reads `NodeContext.past`, which leaves the current run out. They are warn-level
evidence: the part still works, and the point is to act before it fails.
"""

from __future__ import annotations

from itertools import pairwise
from statistics import median

from stetho.diagnosis.context import NodeContext, fmt, gpu_where, quantity_of
from stetho.diagnosis.model import Evidence

#: busbw under the node's own median of earlier runs by more than this share.
BUSBW_FALL = 0.05
#: Correctable ECC (SBE) count growth since the previous run that counts as rising.
SBE_RISE_MIN = 10
#: Pre-FEC BER growth factor over the previous run's value that counts as rising.
BER_RISE_FACTOR = 3.0


def _gpu_index(subject: str) -> int | None:
    digits = "".join(c for c in subject if c.isdigit())
    return int(digits) if digits else None


def aer_rising(ctx: NodeContext) -> list[Evidence]:
    """Corrected AER errors more than at the previous run: a link getting worse."""
    now = ctx.metric("kernel", "aer_corrected")
    past = ctx.past("kernel", "aer_corrected").get("", [])
    if not now or now[0][1] <= 0 or not past or now[0][1] <= past[-1]:
        return []
    prev = past[-1]
    return [Evidence("aer_rising", f"corrected AER errors rose from {prev:g} to {now[0][1]:g} "
                     "since the previous run", 1.0, check="pcie_aer", value=f"{now[0][1]:g}",
                     expected=f"{prev:g} (previous run)", command="stetho history "
                     f"{ctx.node} --check kernel --metric aer_corrected", status="warn",
                     quantity=quantity_of("aer_corrected"))]


#: the earlier runs a passing node's trends are looked for in (stetho.diagnosis.runs.
#: trending_nodes): a rise since the previous run needs one, growth faster at each of the
#: last runs (ib_errors_rising, busbw_declining) two, and one more leaves a reset between
#: them out without losing the growth before it
TREND_RUNS = 3


def sbe_rising(ctx: NodeContext) -> list[Evidence]:
    """Correctable (single-bit) ECC errors or correctable row remaps growing on a GPU since
    the previous run: the classic precursor of an uncorrectable (DBE) error."""
    out = []
    for metric, what in (("ecc_correctable", "correctable ECC errors"),
                         ("remapped_rows_correctable", "rows remapped for correctable errors")):
        past = ctx.past("gpu", metric)
        for subject, value in ctx.metric("gpu", metric):
            before = past.get(subject, [])
            if not before:
                continue
            growth = value - before[-1]
            if growth < (SBE_RISE_MIN if metric == "ecc_correctable" else 1):
                continue
            idx = _gpu_index(subject)
            where = gpu_where(ctx, index=idx) if idx is not None else ()
            flag = f" -i {idx}" if idx is not None else ""
            out.append(Evidence(
                "sbe_rising", f"{subject}: {what} rose from {before[-1]:g} to {value:g} since "
                f"the previous run ({len(before)} earlier runs)", 1.0, check="gpu_ecc",
                subject=subject, value=f"{value:g}", expected=f"{before[-1]:g} (previous run)",
                command=f"nvidia-smi -q -d ECC,ROW_REMAPPER{flag}; stetho history {ctx.node} "
                        f"--check gpu --metric {metric}", status="warn", where=where,
                quantity=quantity_of(metric)))
    return out


def ber_rising(ctx: NodeContext) -> list[Evidence]:
    """Pre-FEC BER on a port several times its value at the previous run, even under the
    threshold: optics degrading."""
    past = ctx.past("ib", "pre_fec_ber")
    out = []
    for subject, value in ctx.metric("ib", "pre_fec_ber"):
        before = [v for v in past.get(subject, []) if v > 0]
        if not before or value < before[-1] * BER_RISE_FACTOR:
            continue
        dev, _, port = subject.partition(":")
        out.append(Evidence(
            "ber_rising", f"{subject}: pre-FEC BER rose from {fmt(before[-1])} to {fmt(value)} "
            f"since the previous run", 1.0, check="ib_link_ber", subject=subject,
            value=fmt(value), expected=f"{fmt(before[-1])} (previous run)",
            command=f"mlxlink -d {dev} -p {port or 1} -m -c; stetho history {ctx.node} "
                    "--metric pre_fec_ber", status="warn",
            where=(("device", dev), ("port", port or "1")), quantity=quantity_of("pre_fec_ber")))
    return out


def busbw_falling(ctx: NodeContext) -> list[Evidence]:
    """NCCL busbw at the largest message size under the node's own median of earlier runs."""
    now = ctx.metric("nccl", "busbw_gbps")
    if not now:
        return []
    subject, value = max(now, key=lambda sv: _size(sv[0]))
    before = ctx.past("nccl", "busbw_gbps").get(subject, [])
    if len(before) < 2:
        return []
    med = median(before)
    if med <= 0 or value >= med * (1 - BUSBW_FALL):
        return []
    return [Evidence("busbw_falling", f"busbw {subject} {value:g} GB/s is "
                     f"{(1 - value / med):.0%} under this node's median of {len(before)} "
                     "earlier runs", 1.0, check="nccl_busbw", subject=subject,
                     value=f"{value:g} GB/s", expected=f"{med:g} GB/s (own median)",
                     command=f"stetho history {ctx.node} --check nccl --metric busbw_gbps",
                     status="warn", quantity=quantity_of("busbw_gbps"))]


#: Physical-layer IB counters whose growth, faster run after run, says a link degrades
#: before ib_counters' window limit fails it.
IB_ERROR_COUNTERS = ("SymbolErrorCounter", "LinkErrorRecoveryCounter")


def _growths(readings: list[float]) -> list[float]:
    """Growth between consecutive readings of a counter; a drop (a reset) is left out."""
    return [b - a for a, b in pairwise(readings) if b >= a]


def ib_errors_rising(ctx: NodeContext) -> list[Evidence]:
    """A port's symbol (or link recovery) errors growing faster at each of the last runs,
    while ib_counters still passes the port: the raw bit errors FEC could not hide are
    climbing, the cable or transceiver is degrading. Read from the history only for a
    counter that is not zero (a zero counter cannot be rising)."""
    failing = {r.subject for r in ctx.results_of("ib_counters", ("fail", "error"))}
    out = []
    for metric in IB_ERROR_COUNTERS:
        now = [(s, v) for s, v in ctx.metric("ib", metric) if v > 0 and s not in failing]
        if not now:
            continue
        past = ctx.past("ib", metric)
        for subject, value in now:
            before = past.get(subject, [])
            g = _growths([*before, value])
            if len(g) < 2 or not 0 < g[-2] < g[-1]:
                continue
            dev, _, port = subject.partition(":")
            out.append(Evidence(
                "ib_errors_rising", f"{subject}: {metric} grew "
                f"{', '.join(f'{x:g}' for x in g[-3:])} at the last runs, faster each time "
                f"({value:g} now)", 1.0, check="ib_counters", subject=subject,
                value=f"{metric} {value:g}", expected=f"{before[-1]:g} (previous run)",
                command=f"perfquery -x {dev} {port or 1}; stetho history {ctx.node} --check ib "
                        f"--metric {metric}", status="warn",
                where=(("device", dev), ("port", port or "1")), quantity=quantity_of(metric)))
    return out


#: Words for the data path an nccl-tests run crossed (stetho.diagnosis.datapath), for a
#: busbw trend's part.
_PATH_WORDS = {"nvlink": "the NVLink/NVSwitch fabric", "pcie": "the GPUs' PCIe path",
               "net": "the network (NCCL's NET transport)"}


def busbw_declining(ctx: NodeContext) -> list[Evidence]:
    """NCCL busbw at the largest message size lower at each of the last two runs, BUSBW_FALL
    under where it was, while nccl_busbw still passes: falling toward its threshold. A step
    (one bad night after a flat history) or jitter around a level is not a decline."""
    if not ctx.results_of("nccl_busbw", ("pass",)) or ctx.results_of("nccl_busbw"):
        return []
    now = ctx.metric("nccl", "busbw_gbps")
    if not now:
        return []
    subject, value = max(now, key=lambda sv: _size(sv[0]))
    before = ctx.past("nccl", "busbw_gbps").get(subject, [])
    seq = [*before[-2:], value]
    if len(seq) < 3 or not seq[0] > seq[1] > seq[2] or value > seq[0] * (1 - BUSBW_FALL):
        return []
    from stetho.diagnosis import datapath

    path = " and ".join(_PATH_WORDS[p] for p in sorted(datapath.crossed(ctx)))
    return [Evidence("busbw_declining", f"busbw {subject} fell at each of the last runs: "
                     f"{', '.join(f'{v:g}' for v in seq)} GB/s", 1.0, check="nccl_busbw",
                     subject=subject, value=f"{value:g} GB/s",
                     expected=f"{seq[0]:g} GB/s (two runs before)",
                     command=f"stetho history {ctx.node} --check nccl --metric busbw_gbps",
                     status="warn", where=(("component", path),),
                     quantity=quantity_of("busbw_gbps"))]


def _size(subject: str) -> int:
    tail = subject.split("@")[-1]
    units = {"KiB": 2**10, "MiB": 2**20, "GiB": 2**30}
    for u, mult in units.items():
        if tail.endswith(u) and tail[:-3].isdigit():
            return int(tail[:-3]) * mult
    return int(tail) if tail.isdigit() else 0


SIGNALS = (aer_rising, sbe_rising, ber_rising, busbw_falling, ib_errors_rising, busbw_declining)
