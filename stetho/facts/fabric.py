"""Facts of a node's NVSwitch fabric, read beside NodeFacts (whose module is full): the
fabric manager's service state. Each function takes the NodeFacts and caches through
`facts.parsed`, so a probe that is missing, failed or unparsable is a skip or an error by the
same rules as every other fact."""

from __future__ import annotations

from typing import TYPE_CHECKING

from stetho.parsers import service_state

if TYPE_CHECKING:
    from stetho.facts.base import Facts
    from stetho.parsers.service_state import ServiceState

FABRIC_MANAGER = "fabric_manager"


def fabric_manager(facts: Facts) -> ServiceState:
    """Whether nvidia-fabricmanager runs (systemctl, or pgrep without systemd)."""
    return facts.parsed(FABRIC_MANAGER,
                        lambda: service_state.parse(facts.text(FABRIC_MANAGER)))
