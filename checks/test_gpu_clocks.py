"""Clock locking: each GPU's locked/application SM and memory clocks equal the profile target.

Floating clocks make one GPU the slowest rank of every collective. nvidia-smi reports the
application clocks (what `-ac`/`-lgc`/`-lmc` set); they must equal the target within tolerance.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from stetho.checking.verdict import Verdict
    from stetho.parsers.gpu_model import Gpu
    from stetho.profiles import Profile


def test_gpu_clocks(gpu: Gpu, profile: Profile, verdict: Verdict) -> None:
    target = profile.gpu.clocks
    if target is None:
        import pytest

        pytest.skip(f"profile {profile.name} sets no clock targets")
    sm, mem = gpu.app_graphics_mhz, gpu.app_mem_mhz
    verdict.measure(f"SM {sm} / mem {mem}", "MHz",
                    expected=f"SM {target.sm_mhz} / mem {target.mem_mhz} MHz",
                    threshold=f"±{target.tolerance_mhz} MHz")
    verdict.cite(f"{gpu.pci_bus_id}: applications clocks graphics={sm} MHz memory={mem} MHz; "
                 f"current SM={gpu.sm_mhz} MHz; max SM={gpu.max_sm_mhz} MHz",
                 "nvidia-smi -q -x")
    if sm is None or mem is None:
        verdict.error("nvidia-smi reports no application clocks for this GPU")
    off = []
    if abs(sm - target.sm_mhz) > target.tolerance_mhz:
        off.append(f"SM {sm} MHz (target {target.sm_mhz})")
    if abs(mem - target.mem_mhz) > target.tolerance_mhz:
        off.append(f"memory {mem} MHz (target {target.mem_mhz})")
    if off:
        verdict.fail("clocks not locked to target: " + ", ".join(off),
                     remediation=f"sudo nvidia-smi -i {gpu.index} -lgc {target.sm_mhz},"
                     f"{target.sm_mhz} && sudo nvidia-smi -i {gpu.index} -lmc {target.mem_mhz},"
                     f"{target.mem_mhz} (or -ac {target.mem_mhz},{target.sm_mhz}); make it "
                     "persistent in the node's boot configuration")
    verdict.ok("clocks locked to target")
