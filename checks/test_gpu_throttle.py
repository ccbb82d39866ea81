"""Throttle (clock event) reasons: hardware slowdown, thermal slowdown and power brake.

These cap clocks whatever the locked target, and point at cooling, power delivery or the
baseboard's power-brake signal. Software power capping is reported as a warning. A GPU that
reports none of the reasons (all N/A) is not judged unthrottled: skip, or error where the
profile declares GPUs.

The reasons say what holds the clocks back at this instant, and an idle GPU is rarely
throttled at the instant of a check. The clock event counters (550+ drivers: microseconds held
back per reason since the driver loaded) say what happened while nobody looked: their growth
within the counter window, from the node's own history, is judged too (HW thermal or power
brake time over `counters.hw_throttle_max_s` fails, SW thermal time warns). Without an
earlier reading, time since the driver loaded only warns: it cannot say when.
"""

from __future__ import annotations

from dataclasses import fields
from typing import TYPE_CHECKING

import pytest

from stetho.facts.metrics import THROTTLE_COUNTERS

if TYPE_CHECKING:
    from stetho.checking.verdict import Verdict
    from stetho.facts.node import NodeFacts
    from stetho.parsers.gpu_model import Gpu
    from stetho.profiles import Profile


_FAIL = {
    "hw_slowdown": "HW slowdown",
    "hw_thermal_slowdown": "HW thermal slowdown",
    "hw_power_brake_slowdown": "HW power brake slowdown",
}
_WARN = {"sw_thermal_slowdown": "SW thermal slowdown", "sw_power_cap": "SW power cap"}


#: metric (history) -> what it is, and whether its growth fails (HW) or warns (SW)
_COUNTED = {"throttle_hw_thermal_us": ("HW thermal slowdown", True),
            "throttle_hw_power_brake_us": ("HW power brake slowdown", True),
            "throttle_sw_thermal_us": ("SW thermal slowdown", False)}


def test_gpu_throttle(gpu: Gpu, facts: NodeFacts, profile: Profile, verdict: Verdict) -> None:
    if all(getattr(gpu.reasons, f.name) is None for f in fields(gpu.reasons)):
        why = f"nvidia-smi reports no clock event reasons for gpu{gpu.index} (all N/A)"
        if profile.gpu.count:
            verdict.error(f"{why}: throttling cannot be ruled out on a profile {profile.name} "
                          "node")
        pytest.skip(f"{why}: nothing to judge throttling by")
    active = gpu.reasons.active()
    verdict.measure(", ".join(active) or "none", expected="no HW slowdown, thermal or power brake")
    verdict.cite(f"{gpu.pci_bus_id}: clocks event reasons active: {', '.join(active) or 'none'}; "
                 f"temp {gpu.gpu_temp_c} C, power {gpu.power_draw_w} W of {gpu.power_limit_w} W",
                 "nvidia-smi -q -x")
    hard = [_FAIL[r] for r in active if r in _FAIL]
    if hard:
        cause = ("power brake asserted by the baseboard/PSU: check PSUs and the power-brake "
                 "signal with the vendor" if gpu.reasons.hw_power_brake_slowdown else
                 "check inlet temperature, fans and heatsink contact")
        verdict.fail("clocks throttled by " + ", ".join(hard),
                     remediation=f"{cause}; `nvidia-smi -q -d PERFORMANCE -i {gpu.index}` to "
                     "confirm; drain the node until it clears")
    w = facts.windows()
    held_fail, held_warn = [], []
    max_s = profile.counters.hw_throttle_max_s
    for metric, (label, hard_reason) in _COUNTED.items():
        us = getattr(gpu.clock_event_counters, THROTTLE_COUNTERS[metric])
        if us is None:
            continue
        counted = w.count(("gpu", f"gpu{gpu.index}", metric), us)
        seconds = counted.amount / 1e6
        if seconds <= max_s:
            continue
        if counted.growth is None:
            held_warn.append(f"{label} held the clocks back for {seconds:.3g} s since the "
                             "driver loaded (no earlier reading in history to say when)")
        elif hard_reason:
            held_fail.append(f"{label} held the clocks back for {seconds:.3g} s "
                             f"{counted.growth.span()}")
        else:
            held_warn.append(f"{label} held the clocks back for {seconds:.3g} s "
                             f"{counted.growth.span()}")
    fix = (f"check inlet temperature, fans and the power-brake signal; `nvidia-smi -q -d "
           f"PERFORMANCE -i {gpu.index}` shows the clock event reasons and their counters")
    if held_fail:
        verdict.fail("; ".join(held_fail) + f" (max {max_s:g} s; {w.basis()})",
                     remediation=fix + "; drain the node until the cause is fixed")
    soft = [_WARN[r] for r in active if r in _WARN]
    if held_warn:
        verdict.warn("; ".join(held_warn + (["clocks limited by " + ", ".join(soft)] if soft
                                             else [])) + f" ({w.basis()})", remediation=fix)
        return
    if soft:
        verdict.warn("clocks limited by " + ", ".join(soft),
                     remediation="check the power limit (`nvidia-smi -q -d POWER`) and cooling")
        return
    verdict.ok("no hardware throttling")
