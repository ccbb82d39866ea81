"""NVLink: every link of every GPU up, and its replay/recovery/CRC counters under thresholds.

A down NVLink silently reroutes all-reduce traffic; rising recovery counts precede link loss.
The counters count since the driver loaded (or the GPU's last reset): where the node's history
holds an earlier reading, a GPU's growth of each counter (over all its links) within the
counter window is judged against the per-link limit, which is stricter than any one link's
share; without one, each link's count is judged and the message says so.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from stetho.facts.metrics import NVLINK_METRICS

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
    w = facts.windows()
    if errors is not None:
        totals: dict[str, int] = {}
        for link in errors.links:
            for name, value in link.counters.items():
                totals[name] = totals.get(name, 0) + value
        for name, total in totals.items():
            limit = profile.gpu.nvlink_error_max.get(name)
            if limit is None:
                continue
            metric = NVLINK_METRICS.get(name)
            counted = w.count(("gpu_nvlink", f"gpu{gpu.index}", metric), total) if metric \
                else None
            if counted is not None and counted.growth is not None:
                if counted.amount > limit:
                    over.append(f"{counted.describe(name)} over its links (max {limit} a link)")
                continue
            over += [f"link {link.link} {name}={link.counters[name]} since the driver loaded "
                     f"(max {limit})" for link in errors.links
                     if link.counters.get(name, 0) > limit]
    verdict.cite(f"gpu{gpu.index} {status.name}: {len(active)}/{len(status.links)} links up"
                 + (f", down: {down}" if down else "")
                 + (f"; counters over threshold: {'; '.join(over)}" if over else "")
                 + f"; counters {w.basis()}",
                 "nvidia-smi nvlink -s/-e")
    fix = ("drain the node; check `nvidia-smi nvlink -s -i %d` and `-e`, the fabric manager log, "
           "then reset the GPU; persistent link loss is a baseboard/NVSwitch RMA" % gpu.index)
    if down or len(active) < want:
        verdict.fail(f"{len(active)} of {want} NVLinks up" + (f" (down: {down})" if down else ""),
                     remediation=fix)
    if over:
        verdict.fail("NVLink error counters over threshold: " + "; ".join(over)
                     + f" ({w.basis()})", remediation=fix)
    verdict.ok(f"{len(active)} links up, counters under thresholds ({w.basis()})")
