"""Which overrides a policy honoured at a past moment: each judged by the gate's own check
(stetho.gate.override_check) at that time, not now.

An override is in force from its approval until it expires; a revocation takes it away from
the time it was signed (`revoked_at`). A revocation whose time cannot be read counts from the
beginning: it only takes power away, so the replay errs towards blocking, never towards GO.
Validity changes only at those instants, so the judge is asked once per span between them,
not once per decision point.
"""

from __future__ import annotations

import bisect
from contextlib import ExitStack

from stetho.gate.override_check import Honoured, Judge, RevocationVersion, effective, judging
from stetho.gate.overrides import CLOCK_SKEW_S, Override, parse_ts
from stetho.gate.policy import GatePolicy


class Timeline:
    """The overrides one policy honoured, as a function of time."""

    def __init__(self, judge: Judge | None, overrides: list[Override],
                 revocations: list[RevocationVersion]) -> None:
        self.judge = judge
        self.overrides = [o for o in overrides if judge and o.policy == judge.policy.name]
        self.revocations = revocations
        edges: set[int] = set()
        for o in self.overrides:
            edges.add(parse_ts(o.expires_at))
            edges.add(parse_ts(o.requested_at) - CLOCK_SKEW_S)
            for a in o.approvals:
                edges.update((parse_ts(a.approved_at) - CLOCK_SKEW_S, parse_ts(a.approved_at)))
        for r in revocations:
            if r.revocation is not None:
                edges.add(_revoked_at(r))
        self.edges = sorted(edges)
        self._memo: dict[int, list[Honoured]] = {}

    def at(self, t: float) -> list[Honoured]:
        """The overrides honoured at time t (a memo per span between validity changes)."""
        if not self.overrides or self.judge is None:
            return []
        span = bisect.bisect_right(self.edges, t)
        if span not in self._memo:
            revs = [r for r in self.revocations if _revoked_at(r) <= t]
            judge = Judge(self.judge.policy, self.judge.verifier, self.judge.problem, revs)
            self._memo[span] = effective(self.overrides, judge, t)[0]
        return self._memo[span]

    def frozen(self) -> Frozen:
        """Every span's honoured overrides, worked out now: what a worker process needs (a
        judge holds a verifier, which does not cross a process boundary)."""
        return Frozen(self.edges, [self.at(t) for t in [self.edges[0] - 1, *self.edges]]
                      if self.edges and self.overrides and self.judge else [])

    def first_honoured(self) -> dict[str, tuple[float, Override]]:
        """override id -> (the first span start it was honoured in, the override): when a
        person judged a block not worth keeping."""
        out: dict[str, tuple[float, Override]] = {}
        for t in [*self.edges]:
            for h in self.at(t):
                out.setdefault(h.id, (t, h.override))
        return out


class Frozen:
    """A Timeline's answers, precomputed per span (picklable)."""

    def __init__(self, edges: list[int], spans: list[list[Honoured]]) -> None:
        self.edges = edges
        self.spans = spans

    def at(self, t: float) -> list[Honoured]:
        if not self.spans:
            return []
        return self.spans[bisect.bisect_right(self.edges, t)]


def _revoked_at(r: RevocationVersion) -> int:
    if r.revocation is None:
        return 0
    try:
        return parse_ts(r.revocation.revoked_at)
    except Exception:  # noqa: BLE001 - an unreadable time: from the beginning (see above)
        return 0


def timelines(policies: list[GatePolicy], repo: str | None, stack: ExitStack
              ) -> tuple[list[Timeline], list[str]]:
    """A Timeline per policy, in their order, over the override repository (none without
    one), and the problems that leave a policy honouring nothing (said, never silently GO).
    By position, not name: a candidate may carry the name of the policy it would replace."""
    if not repo:
        return [Timeline(None, [], []) for _ in policies], []
    from stetho.gate.override_store import OverrideStore

    snap = OverrideStore(repo).read()
    out: list[Timeline] = []
    problems = [f"override file {p}: {why}" for p, why in snap.unreadable()]
    for p in policies:
        judge = stack.enter_context(judging(p.overrides, snap.root, snap.revocations,
                                            snap.problem))
        if judge.problem:
            problems.append(judge.problem)
        out.append(Timeline(judge, snap.overrides(), list(snap.revocations)))
    return out, problems
