"""Signals read from which of a check's readings crossed its limit: a check that judges two
readings records one as its value, and the other's failure is known from the value holding
its own limit (limit, limit_op) while the result fails. Read from the structured result and
the GPU's own record, never from the check's message.

- hbm_hot: gpu_temperature fails with the die under its limit: the HBM is what is hot.
- rx_power_low: ib_optics' value (the lowest lane's Rx power, dBm) under its low threshold.
"""

from __future__ import annotations

import operator
from functools import lru_cache

from stetho.diagnosis.context import (
    NodeContext,
    facts_of,
    fmt,
    from_results,
    subject_where,
)
from stetho.diagnosis.model import Evidence
from stetho.results import Result

_OPS = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge,
        "==": operator.eq}


def holds(r: Result) -> bool | None:
    """Whether the result's value satisfies its own numeric limit; None: it has none."""
    op = _OPS.get(r.limit_op or "")
    if op is None or r.limit is None or not isinstance(r.value, (int, float)) \
            or isinstance(r.value, bool):
        return None
    return bool(op(r.value, r.limit))


def _gpu(ctx: NodeContext, subject: str) -> object | None:
    idx = subject[3:] if subject.lower().startswith("gpu") else ""
    if not idx.isdigit():
        return None
    return next((g for g in facts_of(ctx, "gpus") or () if g.index == int(idx)), None)


@lru_cache(maxsize=64)
def _profile_hbm_limit(name: str) -> float | None:
    """The profile's HBM fail temperature (gpu.temperature.memory_fail_c), loaded once."""
    from stetho import profiles
    from stetho.errors import ConfigError

    try:
        return profiles.load(name).gpu.memory_temp_fail_c
    except (ConfigError, OSError):
        return None


def _memory_over(ctx: NodeContext, r: Result) -> tuple[float | None, float | None] | None:
    """(HBM temperature, its limit) when the result's failure is the memory's: the GPU's
    record shows it at or over the limit the check judged it by (the lower of the GPU's max
    operating temperature and the profile's), or, without that record, the result fails
    while the die holds its own limit. None: the memory is not what failed."""
    g = _gpu(ctx, r.subject)
    mem = getattr(g, "memory_temp_c", None)
    name = ctx.summary.get("profile")
    tops = [t for t in (getattr(g, "memory_max_temp_c", None),
                        _profile_hbm_limit(str(name)) if name else None) if t is not None]
    top = min(tops) if tops else None
    if mem is not None and top is not None:
        return (mem, top) if mem >= top else None
    if r.status == "fail" and holds(r) is True:
        return mem, top
    return None


def hbm_hot(ctx: NodeContext) -> list[Evidence]:
    """A GPU's HBM over its limit (gpu_temperature failing on the memory reading): a memory
    stack losing thermal contact, whatever the die reads."""
    out = []
    for r in ctx.results_of("gpu_temperature", ("fail",)):
        got = _memory_over(ctx, r)
        if got is None:
            continue
        mem, top = got
        where = subject_where(ctx, r)
        flag = f" -i {dict(where)['gpu']}" if "gpu" in dict(where) else ""
        out.append(Evidence(
            "hbm_hot", f"the HBM of {r.subject} is over its limit while the die reads "
            f"{fmt(r.value, r.unit)}", 1.0, check=r.check, subject=r.subject,
            value=f"HBM {mem:g} C" if mem is not None else "HBM over its limit",
            expected=f"HBM < {top:g} C" if top is not None else "HBM under its limit",
            command=f"nvidia-smi -q -d TEMPERATURE{flag}", status="fail", where=where))
    return out


def die_hot(ctx: NodeContext, r: Result) -> bool:
    """gpu_temperature's result is about the die, not only the HBM (hbm_hot)."""
    return r.status != "fail" or holds(r) is not True or _memory_over(ctx, r) is None


def rx_power_low(ctx: NodeContext) -> list[Evidence]:
    """A transceiver lane receiving less light than its low threshold (ib_optics' value, the
    lowest lane's Rx power, past its limit). While the port still runs ACTIVE at its rate
    (ib_port_state passed) FEC hides the errors: the link works, replace the optic in a
    window (warn); a port off its state or rate with it is broken now (fail)."""
    rows = [r for r in ctx.results_of("ib_optics", ("fail",))
            if r.unit == "dBm" and r.limit_op in (">", ">=") and holds(r) is False]
    up = {r.subject for r in ctx.results if r.check == "ib_port_state" and r.status == "pass"}
    out = []
    for r, e in zip(rows, from_results(ctx, rows, "rx_power_low", commands=_mlxlink_m),
                    strict=True):
        out.append(Evidence(
            "rx_power_low", e.description, 1.0, check=r.check, subject=r.subject,
            value=f"{fmt(r.value, r.unit)} Rx (lowest lane)",
            expected=f"> {r.limit:g} {r.unit}", command=e.command,
            status="warn" if r.subject in up else "fail", where=e.where))
    return out


def _mlxlink_m(w: dict[str, str]) -> str:
    if "device" not in w:
        return "for d in $(ls /sys/class/infiniband); do mlxlink -d $d -p 1 -m; done"
    return f"mlxlink -d {w['device']} -p {w.get('port', '1')} -m"


SIGNALS = (hbm_hot, rx_power_low)

__all__ = ["SIGNALS", "die_hot", "holds"]
