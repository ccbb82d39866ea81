"""What a localization run holds: the group tests asked for, the tests run, and the findings.

A test's verdict is "pass", "fail", "intermittent" (slow again after a clean run: a straggler,
never cleared) or "unknown" (the judge could not decide within its repeats, or the runner could
not run it). Unknown is never pass: its members stay unresolved, and a run
with anything unresolved cannot say the fleet is healthy.
"""

from __future__ import annotations

from dataclasses import dataclass, field

PASS, FAIL, UNKNOWN = "pass", "fail", "unknown"
INTERMITTENT = "intermittent"  # slow on some runs, fine on others, more often than a transient
KINDS = ("node", "pair", "uplink", "switch")


@dataclass(frozen=True)
class Request:
    """A group test a search step wants: its members, and how many known-good nodes to add
    (`pad`), chosen at scheduling time near one leaf (`near`) or away from one (`away`)."""

    members: tuple[str, ...]
    purpose: str
    pad: int = 0
    near: str | None = None
    away: str | None = None
    avoid: frozenset[str] = frozenset()
    runs: int = 1  # clean runs a pass needs (a clearing that a straggler must not slip through)


@dataclass
class Measurement:
    """One run of the benchmark over a group. `value` in `unit`; `expected` the healthy value
    for that group; `failed` the benchmark ran and reported a failure (a slow group, at worst);
    `error` the runner could not run it at all (no verdict)."""

    value: float | None
    expected: float
    unit: str = "GB/s"
    failed: bool = False
    error: str | None = None
    raw: str = ""

    @property
    def score(self) -> float | None:
        """The value as a fraction of healthy; 0 for a failed benchmark, None for an error."""
        if self.error is not None:
            return None
        if self.failed or self.value is None:
            return 0.0
        return self.value / self.expected if self.expected > 0 else None


@dataclass
class GroupTest:
    """One group test as run (and re-run, until the judge decides)."""

    id: int
    round: int
    nodes: tuple[str, ...]
    purpose: str
    padding: tuple[str, ...] = ()
    scores: list[float] = field(default_factory=list)
    values: list[float] = field(default_factory=list)
    verdict: str | None = None
    error: str | None = None
    rounds: list[int] = field(default_factory=list)
    runs: int = 1

    def as_dict(self) -> dict[str, object]:
        return {"id": self.id, "rounds": self.rounds, "nodes": list(self.nodes),
                "padding": list(self.padding), "purpose": self.purpose,
                "verdict": self.verdict, "scores": [round(s, 4) for s in self.scores],
                "values": [round(v, 3) for v in self.values], "error": self.error}


@dataclass
class Finding:
    """A convicted fault: a node, a pair (link between two nodes), a switch's uplink or a whole
    switch, with the tests that convict it and the tests that clear its neighbours."""

    kind: str
    subject: str
    nodes: tuple[str, ...]
    convicting: list[int]
    clearing: list[int]
    detail: str = ""

    @property
    def action(self) -> str:
        """What to do first about it."""
        if self.kind == "node":
            return (f"drain {self.subject} and check its NICs and cables (ibstat, mlxlink) and "
                    f"GPUs (stetho check); every group with it ran slow")
        if self.kind == "pair":
            a, b = self.nodes
            return (f"check the path between {a} and {b} (both ports, the cables, the switch "
                    f"ports they use): each is healthy with other nodes, slow together")
        if self.kind == "uplink":
            return (f"check the uplinks of switch {self.subject} (port counters, cable, "
                    f"speed): its nodes are healthy among themselves, slow across it")
        return (f"take switch {self.subject} out of service and check it: every node under it "
                f"is slow, with healthy nodes elsewhere")

    def as_dict(self) -> dict[str, object]:
        return {"kind": self.kind, "subject": self.subject, "nodes": list(self.nodes),
                "convicting_tests": self.convicting, "clearing_tests": self.clearing,
                "detail": self.detail, "action": self.action}
