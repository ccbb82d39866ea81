"""systemd units the profile lists are active.

A node whose slurmd or munge is down takes no jobs (or fails them at launch); one without
nvidia-persistenced re-initialises its GPUs at every job start, and an HGX node without
nvidia-fabricmanager has no NVSwitch fabric: CUDA reports no device until it runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from stetho.facts import hygiene

if TYPE_CHECKING:
    from stetho.checking.verdict import Verdict
    from stetho.facts.node import NodeFacts


def test_host_services(service: str, facts: NodeFacts, verdict: Verdict) -> None:
    states = hygiene.services(facts)
    state = states.get(service)
    if state is None:
        verdict.error(f"{service} was not asked about when the evidence was collected "
                      f"(systemctl is-active {' '.join(states)}): the profile changed since",
                      remediation="collect again with this profile")
    verdict.measure(state, expected="active")
    verdict.cite(f"systemctl is-active {service}: {state}", "services")
    if state in ("reloading", "refreshing"):  # running, re-reading its configuration
        verdict.warn(f"{service} is {state}", remediation=f"`systemctl status {service}`: "
                     "collect again once it is active")
        return
    if state != "active":
        verdict.fail(f"{service} is {state}",
                     remediation=f"sudo systemctl start {service}; `systemctl status {service}"
                     f"` and `journalctl -u {service} -b` say why it "
                     + ("failed" if state == "failed" else "is not running")
                     + f"; `sudo systemctl enable {service}` to start it at boot")
    verdict.ok(f"{service} is active")
