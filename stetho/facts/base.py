"""What the facts modules share without importing each other: `Expected`, `Unavailable`, and
the part of NodeFacts that the per-source loaders (stetho.facts.ib, stetho.facts.host) use."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol, TypeVar

from stetho.core.record import record

if TYPE_CHECKING:
    from stetho.evidence.bundle import Bundle, ProbeRecord
    from stetho.parsers.ib_common import IbDevice
    from stetho.parsers.ibstat import IbstatReport
    from stetho.parsers.perfquery import PerfqueryPort


@record
class Expected:
    """What a node is supposed to carry, as far as its facts need to know to tell a `skip` (not
    on this node) from an `error` (should be here, is not). Built from the node's profile by the
    checking stage; facts know nothing else of profiles."""

    profile: str = "generic"
    gpus: int | None = None
    ib_ports: int | None = None
    ib_link_layer: str = "InfiniBand"
    ib_devices: tuple[str, ...] = ()  # globs of the HCAs the profile expects on ib_link_layer
    nccl: bool = False
    nccl_collective: str | None = None  # the collective the profile says its nccl-tests ran


T = TypeVar("T")


class Unavailable(Exception):
    """The facts a check needs are not there. `status` is "skip" or "error"."""

    def __init__(self, status: str, reason: str, probe: str | None = None,
                 remediation: str | None = None) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason
        self.probe = probe
        self.remediation = remediation  # what a person does about an error, when known

    def fresh(self) -> Unavailable:
        """A new copy to raise: a cached exception that is re-raised would collect the frames of
        every raise in its traceback, and keep the facts they point at alive."""
        return Unavailable(self.status, self.reason, self.probe, self.remediation)


class Facts(Protocol):
    """The NodeFacts accessors a loader may call."""

    bundle: Bundle
    expected: Expected

    def record(self, name: str) -> ProbeRecord: ...
    def text(self, name: str) -> str: ...
    def parsed(self, key: str, load: Callable[[], T]) -> T: ...
    def files(self, name: str) -> dict[str, str]: ...
    def ibstat(self) -> IbstatReport: ...
    def ib_devices(self) -> tuple[IbDevice, ...]: ...
    def perfquery(self, device: str) -> PerfqueryPort: ...
    def rcv_error_details(self, device: str) -> PerfqueryPort: ...
    def ib_source(self) -> str: ...
