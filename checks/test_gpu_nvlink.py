"""NVLink: every link of every GPU up, and its replay/recovery/CRC counters under thresholds.

A down NVLink silently reroutes all-reduce traffic; rising recovery counts precede link loss.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from stetho.checking.verdict import Verdict
    from stetho.facts.node import NodeFacts
    from stetho.parsers.gpu_model import Gpu
    from stetho.profiles import Profile


def test_gpu_nvlink(gpu: Gpu, facts: NodeFacts, profile: Profile, verdict: Verdict) -> None:
    status = {g.index: g for g in facts.nvlink_status()}.get(gpu.index)
    if status is None:
        verdict.error(f"nvidia-smi nvlink -s lists no GPU {gpu.index}")
    if not status.links:
        if profile.gpu.nvlink_links:
            verdict.fail(f"no NVLink on gpu{gpu.index}, profile expects {profile.gpu.nvlink_links}",
                         remediation="check the NVSwitch/fabric manager (`systemctl status "
                         "nvidia-fabricmanager`) and `nvidia-smi nvlink -s`")
        pytest.skip("this GPU has no NVLink")
    active = [link for link in status.links if link.active]
    down = [link.link for link in status.links if not link.active]
    want = profile.gpu.nvlink_links or len(status.links)
    verdict.measure(len(active), "links up", expected=want)
    errors = {g.index: g for g in facts.nvlink_errors()}.get(gpu.index)
    over = []
    if errors is not None:
        for link in errors.links:
            for name, value in link.counters.items():
                limit = profile.gpu.nvlink_error_max.get(name)
                if limit is not None and value > limit:
                    over.append(f"link {link.link} {name}={value} (max {limit})")
    verdict.cite(f"gpu{gpu.index} {status.name}: {len(active)}/{len(status.links)} links up"
                 + (f", down: {down}" if down else "")
                 + (f"; counters over threshold: {'; '.join(over)}" if over else ""),
                 "nvidia-smi nvlink -s/-e")
    fix = ("drain the node; check `nvidia-smi nvlink -s -i %d` and `-e`, the fabric manager log, "
           "then reset the GPU; persistent link loss is a baseboard/NVSwitch RMA" % gpu.index)
    if down or len(active) < want:
        verdict.fail(f"{len(active)} of {want} NVLinks up" + (f" (down: {down})" if down else ""),
                     remediation=fix)
    if over:
        verdict.fail("NVLink error counters over threshold: " + "; ".join(over), remediation=fix)
    verdict.ok(f"{len(active)} links up, counters under thresholds")
