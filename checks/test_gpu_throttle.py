"""Throttle (clock event) reasons: hardware slowdown, thermal slowdown and power brake.

These cap clocks whatever the locked target, and point at cooling, power delivery or the
baseboard's power-brake signal. Software power capping is reported as a warning. A GPU that
reports none of the reasons (all N/A) is not judged unthrottled: skip, or error where the
profile declares GPUs.
"""

from __future__ import annotations

from dataclasses import fields
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from stetho.checking.verdict import Verdict
    from stetho.parsers.gpu_model import Gpu
    from stetho.profiles import Profile


_FAIL = {
    "hw_slowdown": "HW slowdown",
    "hw_thermal_slowdown": "HW thermal slowdown",
    "hw_power_brake_slowdown": "HW power brake slowdown",
}
_WARN = {"sw_thermal_slowdown": "SW thermal slowdown", "sw_power_cap": "SW power cap"}


def test_gpu_throttle(gpu: Gpu, profile: Profile, verdict: Verdict) -> None:
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
    soft = [_WARN[r] for r in active if r in _WARN]
    if soft:
        verdict.warn("clocks limited by " + ", ".join(soft),
                     remediation="check the power limit (`nvidia-smi -q -d POWER`) and cooling")
        return
    verdict.ok("no hardware throttling")
