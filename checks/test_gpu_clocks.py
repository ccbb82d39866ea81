"""Clock locking: each GPU's current SM and memory clocks hold the profile target.

Floating clocks make one GPU the slowest rank of every collective. Locking (`nvidia-smi
-lgc`/`-lmc` with min = max) holds the GPU at the target even when it idles; an unlocked GPU
idles far below it (P8, clock event reason `GPU idle` Active) and boosts above it under load.
So the current clocks are judged, always (stetho.facts.clocks). Application clocks are context
only: on H100 SXM their factory defaults already equal the usual target, so they would call a
GPU idling at 86 MHz locked; where someone set them (`-ac`, differing from the defaults) the
verdict says so. A clock held below target by a throttle reason fails naming that reason (the
throttle check owns that verdict). Every verdict says what it judged.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from stetho.facts.clocks import lock_state

if TYPE_CHECKING:
    from stetho.checking.verdict import Verdict
    from stetho.parsers.gpu_model import Gpu
    from stetho.profiles import ClockTarget, Profile


def test_gpu_clocks(gpu: Gpu, profile: Profile, verdict: Verdict) -> None:
    target = profile.gpu.clocks
    if target is None:
        import pytest

        pytest.skip(f"profile {profile.name} sets no clock targets")
    verdict.measure(f"SM {gpu.sm_mhz} / mem {gpu.mem_mhz}", "MHz",
                    expected=f"SM {target.sm_mhz} / mem {target.mem_mhz} MHz",
                    threshold=f"±{target.tolerance_mhz} MHz")
    source = f"current clocks ({_app_clocks(gpu)}; not judged)"
    idle = gpu.reasons.idle
    verdict.cite(f"{gpu.pci_bus_id}: current SM={_mhz(gpu.sm_mhz)} memory={_mhz(gpu.mem_mhz)}; "
                 f"applications clocks graphics={_show(gpu, 'app_graphics_mhz')} memory="
                 f"{_show(gpu, 'app_mem_mhz')}; default applications clocks graphics="
                 f"{_show(gpu, 'default_app_graphics_mhz')} memory="
                 f"{_show(gpu, 'default_app_mem_mhz')}; max SM={_mhz(gpu.max_sm_mhz)}; "
                 f"{gpu.performance_state or 'P-state unknown'}, GPU idle reason "
                 f"{ {True: 'Active', False: 'Not Active', None: 'unknown'}[idle]}; "
                 f"judged: current clocks", "nvidia-smi -q -x")
    state = lock_state(gpu, target)
    if state.locked is None:
        verdict.error(f"nvidia-smi reports no current SM or memory clock for gpu{gpu.index}: "
                      f"clock locking cannot be judged (judged from {source})")
    if not state.locked:
        head = "clocks below target" if state.throttled_by else "clocks not locked to target"
        verdict.fail(f"{head}, judged from {source}: {', '.join(state.off)}; {state.why}",
                     remediation=_remediation(gpu, target, state.throttled_by))
    verdict.ok(f"clocks locked to target: SM {gpu.sm_mhz} / mem {gpu.mem_mhz} MHz "
               f"(judged from {source})")


def _app_clocks(gpu: Gpu) -> str:
    """What the application clocks say, as context for the verdict."""
    if gpu.app_clocks_deprecated:
        return "application clocks deprecated by this driver"
    app, default = (gpu.app_graphics_mhz, gpu.app_mem_mhz), \
        (gpu.default_app_graphics_mhz, gpu.default_app_mem_mhz)
    if None in app:
        return "application clocks not reported"
    shown = f"{app[0]}/{app[1]} MHz"
    if None in default:
        return f"application clocks {shown}, defaults not reported"
    if app != default:
        return f"application clocks set to {shown} (-ac), not the defaults " \
               f"{default[0]}/{default[1]} MHz"
    return f"application clocks {shown}, the defaults"


def _mhz(value: int | None) -> str:
    return "N/A" if value is None else f"{value} MHz"


def _show(gpu: Gpu, name: str) -> str:
    value = getattr(gpu, name)
    if value is not None:
        return f"{value} MHz"
    return "deprecated" if name in gpu.deprecated else "N/A"


def _remediation(gpu: Gpu, target: ClockTarget, throttled_by: tuple[str, ...]) -> str:
    lock = (f"sudo nvidia-smi -i {gpu.index} -lgc {target.sm_mhz},{target.sm_mhz} && sudo "
            f"nvidia-smi -i {gpu.index} -lmc {target.mem_mhz},{target.mem_mhz}")
    if gpu.app_clocks_deprecated:
        lock += " (application clocks, -ac, are deprecated on this driver)"
    lock += "; make it persistent in the node's boot configuration"
    if throttled_by:
        return (f"clear the {', '.join(throttled_by)} first (see gpu_throttle on "
                f"gpu{gpu.index}); if the clocks stay off target once it clears, lock them: "
                + lock)
    return lock
