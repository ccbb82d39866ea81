"""The drain budget as the remedies see it: a reboot takes a node out of service, so it asks
the same budget every drain asks (stetho.gate.budget.DrainBudget, what `stetho remedy`
passes), and a dry run previews its answer.

`Budget` is the two calls used; `NoBudget` is for a caller that has no budget to give: it
refuses every request, since a reboot nobody counted could be the one that empties a
partition (fail closed).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from stetho.gate.breaker import Trip


class Ruling(Protocol):
    @property
    def allowed(self) -> tuple[str, ...]: ...
    @property
    def refused(self) -> tuple[str, ...]: ...
    @property
    def trip(self) -> Trip | None: ...
    @property
    def already(self) -> tuple[str, ...]: ...


class Budget(Protocol):
    def request(self, nodes: Sequence[str], *, scope: str, scope_size: int, who: str,
                reasons: Mapping[str, str], now: float, slurm_recent: Iterable[str] = ()
                ) -> Ruling: ...

    def preview(self, nodes: Sequence[str], *, scope: str, scope_size: int, now: float,
                slurm_recent: Iterable[str] = ()) -> Ruling: ...


@dataclass(frozen=True)
class Refusal:
    allowed: tuple[str, ...]
    refused: tuple[str, ...]
    trip: Trip | None
    already: tuple[str, ...]


NO_BUDGET = ("no drain budget configured: a reboot takes the node out of service, and "
             "stetho takes nothing out of service uncounted")


class NoBudget:
    """No budget configured: every request is refused."""

    def request(self, nodes: Sequence[str], *, scope: str, scope_size: int, who: str,
                reasons: Mapping[str, str], now: float, slurm_recent: Iterable[str] = ()
                ) -> Ruling:
        return Refusal((), tuple(nodes), None, ())

    def preview(self, nodes: Sequence[str], *, scope: str, scope_size: int, now: float,
                slurm_recent: Iterable[str] = ()) -> Ruling:
        return Refusal((), tuple(nodes), None, ())


def refusal_text(ruling: Ruling) -> str:
    """Why a node was refused, in words: the open breaker, or no budget at all."""
    return ruling.trip.message() if ruling.trip is not None else NO_BUDGET
