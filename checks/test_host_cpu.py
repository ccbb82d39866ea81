"""CPU frequency governor: every CPU on the profile's governor.

`powersave` or `ondemand` on a GPU node adds latency to every kernel launch and NCCL proxy
thread; data loaders slow down with it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from stetho.checking.verdict import Verdict
    from stetho.facts.node import NodeFacts
    from stetho.profiles import Profile


def test_cpu_governor(node: NodeFacts,
                      facts: NodeFacts,
                      profile: Profile,
                      verdict: Verdict) -> None:
    want = profile.host.governor
    if want is None:
        pytest.skip(f"profile {profile.name} sets no CPU governor")
    governors = facts.governors()
    wrong = [g for g in governors if g.governor != want]
    found = sorted({g.governor for g in governors})
    verdict.measure(", ".join(found), expected=want)
    verdict.cite("\n".join(f"/sys/devices/system/cpu/cpu{g.cpu}/cpufreq/scaling_governor: "
                           f"{g.governor}" for g in (wrong or governors)[:8]), "cpu_governor")
    if wrong:
        cpus = _ranges([g.cpu for g in wrong])
        verdict.fail(f"{len(wrong)} of {len(governors)} CPUs not on {want}: cpu {cpus} "
                     f"({', '.join(sorted({g.governor for g in wrong}))})",
                     remediation=f"sudo cpupower frequency-set -g {want} (or write {want} to "
                     "/sys/devices/system/cpu/cpu*/cpufreq/scaling_governor); make it persistent "
                     "with a tuned profile or the kernel command line")
    verdict.ok(f"all {len(governors)} CPUs on {want}")


def _ranges(nums: list[int]) -> str:
    """[0, 1, 2, 5, 7, 8] -> '0-2,5,7-8'."""
    runs: list[list[int]] = []
    for n in sorted(nums):
        if runs and n == runs[-1][-1] + 1:
            runs[-1].append(n)
        else:
            runs.append([n])
    return ",".join(f"{r[0]}-{r[-1]}" if len(r) > 1 else str(r[0]) for r in runs)
