"""NVLink signals, read from gpu_nvlink's structured result (links up against the links
expected) and the per-GPU NVLink counters the node's metrics carry, never from its message.

A link down: the GPU trained fewer links than its profile expects (`value` < `expected`). The
counters: replay (a flit resent), CRC (a corrupted flit) and recovery (the link retrained)
errors over the per-link limits while every link is up; what precedes a link loss.
"""

from __future__ import annotations

from dataclasses import replace

from stetho.diagnosis.context import NodeContext, from_results
from stetho.diagnosis.model import Evidence
from stetho.results import Result

#: The per-GPU totals history keeps of `nvidia-smi nvlink -e` (stetho.facts.metrics).
COUNTERS = ("nvlink_replay", "nvlink_recovery", "nvlink_crc")


def _num(v: object) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _links_short(r: Result) -> bool:
    up, want = _num(r.value), _num(r.expected)
    return up is not None and want is not None and up < want


def _cmd(w: dict[str, str]) -> str:
    flag = f" -i {w['gpu']}" if "gpu" in w else ""
    return f"nvidia-smi nvlink -s{flag}; nvidia-smi nvlink -e{flag}"


def nvlink_down(ctx: NodeContext) -> list[Evidence]:
    """A GPU with fewer NVLinks up than expected (or none read where some are expected)."""
    rows = [r for r in ctx.results_of("gpu_nvlink", ("fail",))
            if _links_short(r) or _num(r.value) is None]
    return from_results(ctx, rows, "nvlink_down", commands=_cmd)


def nvlink_errors(ctx: NodeContext) -> list[Evidence]:
    """Every link up, but the GPU's replay/CRC/recovery counters over their limits: the link
    still carries traffic (warn-level: reset the GPU at the next window), unless one went down
    on the same GPU (then nvlink_down drains it)."""
    counts = {(s, m): v for m in COUNTERS for s, v in ctx.metric("gpu_nvlink", m)}
    out = []
    for r in ctx.results_of("gpu_nvlink", ("fail", "warn")):
        if _links_short(r) or _num(r.value) is None:
            continue
        seen = {m: counts[(r.subject, m)] for m in COUNTERS if counts.get((r.subject, m))}
        value = ", ".join(f"{m.split('_')[1]} {v:g}" for m, v in seen.items())
        for e in from_results(ctx, [r], "nvlink_errors", commands=_cmd, quantity="counter"):
            out.append(replace(e, status="warn", value=value or e.value,
                               expected="under the per-link limits"))
    return out


SIGNALS = (nvlink_down, nvlink_errors)
