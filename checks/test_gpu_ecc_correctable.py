"""Correctable (single-bit) GPU memory errors: how fast they arrive now.

ECC corrects them, and a few a year are normal; a burst of them is a row going bad, the
warning before uncorrectable errors and remaps (NVIDIA's Xid 92, "high single-bit ECC error
rate"). The aggregate count is the GPU's lifetime, so it says nothing of now: where the node's
history holds an earlier reading, the growth within the counter window is judged
(`counters.ecc_correctable_max`); without one, the lifetime count is, and the message says so.
Never worse than a warn: correctable errors were corrected.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from stetho.checking.verdict import Verdict
    from stetho.facts.node import NodeFacts
    from stetho.parsers.gpu_model import Gpu
    from stetho.profiles import Profile


def test_gpu_ecc_correctable(gpu: Gpu, facts: NodeFacts, profile: Profile,
                             verdict: Verdict) -> None:
    agg, vol = gpu.ecc_aggregate, gpu.ecc_volatile
    known = [v for v in (agg.dram_correctable, agg.sram_correctable) if v is not None]
    if not known:
        pytest.skip(f"nvidia-smi reports no correctable ECC count for gpu{gpu.index} (N/A): "
                    "gpu_ecc judges what is known of its memory")
    lifetime = sum(known)
    limit = profile.counters.ecc_correctable_max
    w = facts.windows()
    counted = w.count(("gpu", f"gpu{gpu.index}", "ecc_correctable"), lifetime)
    verdict.measure(counted.amount, "correctable ECC errors",
                    expected=f"<= {limit} within {profile.counters.window_h:g} h")
    verdict.cite(f"{gpu.pci_bus_id}: aggregate DRAM corr={agg.dram_correctable} SRAM corr="
                 f"{agg.sram_correctable}; volatile DRAM corr={vol.dram_correctable}; "
                 f"{w.basis()}", "nvidia-smi -q -x")
    if counted.amount > limit:
        verdict.warn(f"{counted.describe('correctable ECC errors')} (max {limit}): a row may be "
                     f"going bad; {w.basis()}",
                     remediation=f"watch gpu{gpu.index}'s uncorrectable count and remapped rows "
                     f"(`nvidia-smi -q -d ECC,ROW_REMAPPER -i {gpu.index}`); run `dcgmi diag "
                     "-r 3` when the node is idle; RMA if the rate keeps rising")
        return
    verdict.ok(f"{counted.describe('correctable ECC errors')} ({w.basis()})")
