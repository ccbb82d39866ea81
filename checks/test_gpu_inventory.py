"""GPU inventory: the node has the GPUs its profile says, of the right model.

A GPU that fell off the bus simply vanishes from nvidia-smi; counting is how it is noticed. The
model is judged first: a node on the wrong profile is told so, not that it lost GPUs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from stetho.checking.verdict import Verdict
    from stetho.facts.node import NodeFacts
    from stetho.profiles import Profile


def test_gpu_count(node: NodeFacts, facts: NodeFacts, profile: Profile, verdict: Verdict) -> None:
    expected = profile.gpu.count
    report = facts.smi()
    found = len(report.gpus) + len(report.unreadable)  # an unreadable GPU is still there
    verdict.measure(found, "GPUs", expected=expected)
    verdict.cite(f"nvidia-smi: attached_gpus={report.attached_gpus}, "
                 f"listed {found}: {', '.join(g.pci_bus_id for g in report.gpus)}"
                 + "".join(f", GPU {b.index} unreadable ({b.reason})" for b in report.unreadable),
                 "nvidia-smi -q -x")
    model = profile.gpu.model
    wrong = [g for g in report.gpus if model and g.product_name != model]
    if wrong:  # before the count: a node on the wrong profile has lost no GPU
        models = sorted({g.product_name or "unknown model" for g in wrong})
        verdict.fail(f"GPU model {', '.join(models)} is not profile {profile.name}'s {model} "
                     f"({len(wrong)} of {found} GPUs: "
                     + ", ".join(f"gpu{g.index}" for g in wrong) + ")",
                     remediation=f"this node does not match profile {profile.name}; "
                     "fix the inventory's profile assignment (or the profile's gpu.model)")
    if expected is None:
        verdict.ok(f"{found} GPUs (profile {profile.name} sets no count)")
        return
    if found != expected:
        verdict.fail(f"{found} GPUs visible, profile {profile.name} expects {expected}",
                     remediation="check `nvidia-smi -L` and the kernel log for Xid 79 / 'fallen "
                     "off the bus'; reseat or replace the missing GPU, then reboot")
    verdict.ok(f"{found} x {model or 'GPU'}")
