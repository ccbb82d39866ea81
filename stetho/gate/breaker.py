"""The circuit breaker on scheduler actions: one run, and all runs in a sliding window, drain
at most max(min_nodes, max_pct of the nodes in scope).

A mass failure is far more often a broken check, a driver push or a fabric event than many
broken nodes at once, and draining half a cluster on a bad check costs more than any bad node.
So past the limit stetho drains nothing more, says how many it would have drained, alerts, and
exits 3 (could not evaluate): a person decides.

The window's drains are read from Slurm itself (nodes whose reason stetho wrote, stamped
within the window), not from a local file: every gate run, on the controller or a node's own
health check, sees the same count, and a node a person resumed no longer counts.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import field
from pathlib import Path

from stetho.core.record import record
from stetho.gate.slurm import NodeInfo


@record
class Circuit:
    """The limit, from a policy's `scheduler: {circuit: {max_pct, min_nodes, window, ledger}}`.
    `ledger`: the drain budget's file (stetho.gate.budget); None: STETHO_DRAIN_LEDGER or the
    default beside the history database."""

    max_pct: float = 10.0
    min_nodes: int = 2
    window_s: float = 3600.0
    ledger: Path | None = field(default=None, compare=False)

    def limit(self, scope: int) -> int:
        return max(self.min_nodes, math.floor(scope * self.max_pct / 100 + 1e-9))


@record
class Trip:
    """The breaker is open: `would` drained nodes (recent plus planned) exceed `limit`."""

    would: int
    scope: int
    limit: int
    recent: tuple[str, ...]  # drained by stetho within the window, already
    planned: tuple[str, ...]  # this run's new drains, not carried out
    window_s: float

    def message(self) -> str:
        text = (f"circuit open: {self.would} of {self.scope} nodes would be drained "
                f"(limit {self.limit})")
        if self.recent:
            text += (f", {len(self.recent)} of them drained by stetho in the last "
                     f"{self.window_s / 3600:g} h")
        return (text + "; nothing more drained: check for a broken check, driver push or "
                "fabric event before draining by hand")

    def to_json(self) -> dict[str, object]:
        return {"would": self.would, "scope": self.scope, "limit": self.limit,
                "recent": list(self.recent), "planned": list(self.planned),
                "window_s": self.window_s, "message": self.message()}


def recent_drains(state: Mapping[str, NodeInfo], now: float, window_s: float) -> list[str]:
    """Nodes drained by stetho whose reason was stamped within the window. A stamp Slurm did
    not print counts as recent: an unknown time must not let the breaker stay shut."""
    return sorted(n for n, info in state.items() if info.drained_by_stetho
                  and (info.reason_time is None or now - info.reason_time <= window_s))


def check(circuit: Circuit, scope: Iterable[str], planned: Iterable[str],
          state: Mapping[str, NodeInfo], now: float) -> Trip | None:
    """None when the planned drains fit under the limit, else the Trip to report.

    `state` is Slurm's view of the scope (empty when unreadable: then only this run counts)."""
    names = list(dict.fromkeys(scope))
    inside = set(names)
    recent = [n for n in recent_drains(state, now, circuit.window_s) if n in inside]
    new = [n for n in dict.fromkeys(planned) if n not in recent]
    limit = circuit.limit(len(names))
    would = len(recent) + len(new)
    if not new or would <= limit:
        return None
    return Trip(would, len(names), limit, tuple(recent), tuple(new), circuit.window_s)
