"""NVMe controllers and their SMART logs: which controllers the node has (from the block
devices sysfs lists) and each one's health log (`nvme smart-log -o json`, or smartctl -j)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from stetho.facts.base import Unavailable

if TYPE_CHECKING:
    from stetho.facts.node import NodeFacts
    from stetho.parsers.nvme_smart import SmartLog

PROBE = "nvme_smart"
_NAMESPACE = re.compile(r"^(nvme\d+)(?:c\d+)?n\d+$")


def controllers(facts: NodeFacts) -> tuple[str, ...]:
    """nvme0, nvme1, ...: the controllers of the NVMe namespaces in /sys/block."""
    found = {m.group(1) for d in facts.block_devices() if (m := _NAMESPACE.match(d.name))}
    found |= {m.group(1) for name in facts.unreadable_block_devices()
              if (m := _NAMESPACE.match(name))}
    return tuple(sorted(found, key=lambda c: int(c[4:])))


def smart(facts: NodeFacts, controller: str) -> SmartLog:
    """One controller's SMART log. Not run on it: why (nvme-cli and smartctl both missing is
    an error, since the profile asks for NVMe health and the node has NVMe drives)."""
    from stetho.parsers import nvme_smart

    name = f"{PROBE}:{controller}"

    def load() -> SmartLog:
        if facts.bundle.probe(name) is None:
            try:
                facts.text(PROBE)  # raises: not collected at all, or the tools are missing
            except Unavailable as u:
                if u.status == "skip":
                    raise Unavailable("error", f"{u.reason} (install nvme-cli: the profile "
                                      "judges NVMe health, host.nvme_devices)", u.probe,
                                      remediation="install nvme-cli (or smartmontools)") from None
                raise
            raise Unavailable("error", f"{PROBE} was not run on {controller}", name)
        return nvme_smart.parse(facts.text(name))

    return facts.parsed(name, load)
