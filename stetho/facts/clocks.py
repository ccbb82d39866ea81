"""Is a GPU locked to the profile's clock target right now, and if not, why not.

One answer for the clocks check and for the benchmarks' "noisy" mark. Locking (`nvidia-smi
-lgc`/`-lmc` with min = max) pins the *current* SM and memory clocks at the target, idle or
busy; that is what it changes, so that is what is judged. Application clocks are not: on H100
SXM the factory default application clocks already equal the usual target (1980/2619 MHz), so
they read "locked" on a GPU idling at 86 MHz. They, the defaults and the P-state are context.

A current clock below target is read by what the driver says holds it back: a hardware or
thermal slowdown, power brake or power cap is throttling (the throttle check owns it, but the
GPU is not at its target either); "GPU idle" Active is an unlocked GPU idling down. Above the
target (plus tolerance) is boost floating: not locked either.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from stetho.core.record import record

if TYPE_CHECKING:
    from stetho.parsers.gpu_model import Gpu
    from stetho.profiles import ClockTarget

#: Clock event reasons that hold clocks below a locked target: throttling, not unlocking.
THROTTLE_REASONS = {
    "hw_slowdown": "HW slowdown",
    "hw_thermal_slowdown": "HW thermal slowdown",
    "hw_power_brake_slowdown": "HW power brake slowdown",
    "sw_thermal_slowdown": "SW thermal slowdown",
    "sw_power_cap": "SW power cap",
}


@record
class ClockLock:
    """The verdict's inputs: `locked` is None when a current clock is unknown."""

    locked: bool | None
    off: tuple[str, ...]  # "SM 86 MHz (target 1980)", one per clock off target
    why: str  # why not locked ('' when locked)
    throttled_by: tuple[str, ...]  # throttle reasons active, when a clock is below target


def lock_state(gpu: Gpu, target: ClockTarget) -> ClockLock:
    """Judge the current SM and memory clocks against the target (within its tolerance)."""
    sm, mem = gpu.sm_mhz, gpu.mem_mhz
    if sm is None or mem is None:
        return ClockLock(None, (), "current SM or memory clock not reported", ())
    off, below, above = [], False, False
    for name, value, want in (("SM", sm, target.sm_mhz), ("memory", mem, target.mem_mhz)):
        if abs(value - want) > target.tolerance_mhz:
            off.append(f"{name} {value} MHz (target {want})")
            below, above = below or value < want, above or value > want
    if not off:
        return ClockLock(True, (), "", ())
    throttled = tuple(label for name, label in THROTTLE_REASONS.items()
                      if getattr(gpu.reasons, name) is True) if below else ()
    if throttled:
        why = (f"throttled by {', '.join(throttled)}, not unlocked: the clocks are held below "
               "the target (gpu_throttle judges the throttling)")
    elif below and gpu.reasons.idle:
        why = (f"the GPU idles down ({gpu.performance_state or 'P-state unknown'}, GPU idle "
               "Active): clocks are not locked")
    elif above and not below:
        why = "clocks float above the target (boost): clocks are not locked"
    else:
        why = "clocks are not locked"
    return ClockLock(False, tuple(off), why, throttled)
