"""GPU temperature against the profile's limits (and the GPU's own slowdown threshold), and
the memory's (HBM) where the GPU reports it.

HBM runs hotter than the die on an idle GPU and throttles on its own limit (the memory's max
operating temperature, 95 C on the recorded A100's HBM2e): a memory that idles near it will
throttle under load, whatever the die reads. Its limits are the profile's `gpu.temperature.
memory_warn_c` / `memory_fail_c`, and the GPU's own `Memory Max Operating Temp` where lower.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from stetho.results import Limit

if TYPE_CHECKING:
    from stetho.checking.verdict import Verdict
    from stetho.parsers.gpu_model import Gpu
    from stetho.profiles import Profile


def test_gpu_temperature(gpu: Gpu, profile: Profile, verdict: Verdict) -> None:
    temp = gpu.gpu_temp_c
    warn_c, fail_c = profile.gpu.temp_warn_c, profile.gpu.temp_fail_c
    if gpu.slowdown_temp_c is not None:
        fail_c = min(fail_c, gpu.slowdown_temp_c)
    mem = gpu.memory_temp_c
    mem_warn, mem_fail = profile.gpu.memory_temp_warn_c, profile.gpu.memory_temp_fail_c
    if gpu.memory_max_temp_c is not None:
        mem_fail = min(mem_fail, gpu.memory_max_temp_c)
    verdict.measure(temp, "C", expected=f"< {warn_c:g} C",
                    threshold=Limit(fail_c, "<", "C", note=f"warns from {warn_c:g} C"))
    verdict.cite(f"{gpu.pci_bus_id}: gpu_temp={temp} C memory_temp={mem} C "
                 f"memory max operating={gpu.memory_max_temp_c} C "
                 f"slowdown={gpu.slowdown_temp_c} C T.Limit margin={gpu.tlimit_temp_c} C",
                 "nvidia-smi -q -x")
    if temp is None:
        verdict.error("nvidia-smi reports no GPU temperature")
    remediation = ("check inlet air temperature, fan speed and airflow blockers; compare with the "
                   "neighbouring GPUs; reseat the heatsink if one GPU runs much hotter")
    hot, warm = [], []
    if temp >= fail_c:
        hot.append(f"GPU at {temp:g} C, limit {fail_c:g} C")
    elif temp >= warn_c:
        warm.append(f"GPU at {temp:g} C, above the {warn_c:g} C warning level")
    if mem is not None and mem >= mem_fail:
        hot.append(f"memory (HBM) at {mem:g} C, limit {mem_fail:g} C")
    elif mem is not None and mem >= mem_warn:
        warm.append(f"memory (HBM) at {mem:g} C, above the {mem_warn:g} C warning level")
    if hot:
        verdict.fail("; ".join(hot + warm), remediation=remediation)
    if warm:
        verdict.warn("; ".join(warm), remediation)
        return
    verdict.ok(f"{temp:g} C" + (f", memory {mem:g} C" if mem is not None else
                                ", memory temperature not reported"))
