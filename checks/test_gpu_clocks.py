"""Clock locking: each GPU's locked/application SM and memory clocks equal the profile target.

Floating clocks make one GPU the slowest rank of every collective. Where the driver reports
application clocks (what `-ac` sets; `-lgc`/`-lmc` show there too) they must equal the target
within tolerance. Drivers that deprecate application clocks (NVML marks the application clock
target deprecated; nvidia-smi prints "Requested functionality has been deprecated") report no
setting at all: there the current clocks are judged, since locked clocks (`-lgc`/`-lmc` with
min = max) hold the GPU at the target even when it idles, and an unlocked GPU drops to its idle
clocks (clock event reason `GPU idle`, P8). Every verdict says which source it judged.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from stetho.checking.verdict import Verdict
    from stetho.parsers.gpu_model import Gpu
    from stetho.profiles import ClockTarget, Profile


def test_gpu_clocks(gpu: Gpu, profile: Profile, verdict: Verdict) -> None:
    target = profile.gpu.clocks
    if target is None:
        import pytest

        pytest.skip(f"profile {profile.name} sets no clock targets")
    sm: int | None
    mem: int | None
    if gpu.app_graphics_mhz is not None and gpu.app_mem_mhz is not None:
        sm, mem, source = gpu.app_graphics_mhz, gpu.app_mem_mhz, "application clocks"
    else:
        sm, mem = gpu.sm_mhz, gpu.mem_mhz
        why = "deprecated by this driver" if gpu.app_clocks_deprecated else "not reported"
        source = f"current clocks (application clocks {why}; locked clocks hold at idle)"
    verdict.measure(f"SM {sm} / mem {mem}", "MHz",
                    expected=f"SM {target.sm_mhz} / mem {target.mem_mhz} MHz",
                    threshold=f"±{target.tolerance_mhz} MHz")
    idle = gpu.reasons.idle
    verdict.cite(f"{gpu.pci_bus_id}: applications clocks graphics="
                 f"{_show(gpu.app_graphics_mhz, gpu, 'app_graphics_mhz')} memory="
                 f"{_show(gpu.app_mem_mhz, gpu, 'app_mem_mhz')}; current SM={gpu.sm_mhz} MHz "
                 f"memory={gpu.mem_mhz} MHz; max SM={gpu.max_sm_mhz} MHz; "
                 f"{gpu.performance_state or 'P-state unknown'}, GPU idle reason "
                 f"{ {True: 'Active', False: 'Not Active', None: 'unknown'}[idle]}; "
                 f"judged: {source}", "nvidia-smi -q -x")
    if sm is None or mem is None:
        verdict.error(f"nvidia-smi reports no application clocks and no current clocks for "
                      f"gpu{gpu.index}: clock locking cannot be judged")
    off = []
    if abs(sm - target.sm_mhz) > target.tolerance_mhz:
        off.append(f"SM {sm} MHz (target {target.sm_mhz})")
    if abs(mem - target.mem_mhz) > target.tolerance_mhz:
        off.append(f"memory {mem} MHz (target {target.mem_mhz})")
    if off:
        note = " (the GPU idles down: clocks are not locked)" if idle and \
            source.startswith("current") else ""
        verdict.fail(f"clocks not locked to target, judged from {source}: " + ", ".join(off)
                     + note, remediation=_remediation(gpu, target))
    verdict.ok(f"clocks locked to target (judged from {source})")


def _show(value: int | None, gpu: Gpu, name: str) -> str:
    if value is not None:
        return f"{value} MHz"
    return "deprecated" if name in gpu.deprecated else "N/A"


def _remediation(gpu: Gpu, target: ClockTarget) -> str:
    lock = (f"sudo nvidia-smi -i {gpu.index} -lgc {target.sm_mhz},{target.sm_mhz} && sudo "
            f"nvidia-smi -i {gpu.index} -lmc {target.mem_mhz},{target.mem_mhz}")
    if gpu.app_clocks_deprecated:
        return lock + " (application clocks, -ac, are deprecated on this driver); make it " \
            "persistent in the node's boot configuration"
    return lock + f" (or -ac {target.mem_mhz},{target.sm_mhz}); make it persistent in the " \
        "node's boot configuration"
