"""GPU temperature against the profile's limits (and the GPU's own slowdown threshold)."""

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
    verdict.measure(temp, "C", expected=f"< {warn_c:g} C",
                    threshold=Limit(fail_c, "<", "C", note=f"warns from {warn_c:g} C"))
    verdict.cite(f"{gpu.pci_bus_id}: gpu_temp={temp} C memory_temp={gpu.memory_temp_c} C "
                 f"slowdown={gpu.slowdown_temp_c} C T.Limit margin={gpu.tlimit_temp_c} C",
                 "nvidia-smi -q -x")
    if temp is None:
        verdict.error("nvidia-smi reports no GPU temperature")
    remediation = ("check inlet air temperature, fan speed and airflow blockers; compare with the "
                   "neighbouring GPUs; reseat the heatsink if one GPU runs much hotter")
    if temp >= fail_c:
        verdict.fail(f"GPU at {temp:g} C, limit {fail_c:g} C", remediation=remediation)
    if temp >= warn_c:
        verdict.warn(f"GPU at {temp:g} C, above the {warn_c:g} C warning level", remediation)
        return
    verdict.ok(f"{temp:g} C")
