"""The loop: pack the steps' requests into rounds of disjoint groups, run, judge, repeat.

A round runs every group it holds at once (the runner runs them concurrently), so wall time is
rounds x one group test. Members are reserved first and known-good buddies assigned after, so a
buddy never takes a node another step is waiting to test. A test the judge cannot decide yet
runs again, same nodes, next round. When no step is left and something was convicted, the rest
of the fleet is screened again: only a passing screen of everything not convicted ends a run
as finished (a verdict fails closed).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from stetho.localize.judge import Judge
from stetho.localize.model import FAIL, PASS, UNKNOWN, Finding, GroupTest, Request
from stetho.localize.runners import Runner
from stetho.localize.search import Search, Step
from stetho.localize.topology import Topology


@dataclass(frozen=True)
class RoundReport:
    """What the live view shows after each round."""

    round: int
    tests: int
    passing: int
    failing: int
    pending: int
    findings: int


@dataclass
class Localization:
    """A finished (or stopped) run: findings, every test, and whether the rest is verified."""

    nodes: tuple[str, ...]
    findings: list[Finding]
    tests: list[GroupTest]
    rounds: int
    unresolved: list[str]
    transients: list[int]
    verified: bool
    stopped: str | None = None  # why it stopped early (budget), None when it ran out of steps
    wall_s: float = 0.0

    @property
    def exit_code(self) -> int:
        """0 none found, 1 found (and the rest verified healthy), 3 could not finish."""
        if self.stopped or self.unresolved or not self.verified:
            return 3
        return 1 if self.findings else 0

    @property
    def runs(self) -> int:
        """Group benchmark runs, repeats included."""
        return sum(len(t.rounds) for t in self.tests)


@dataclass
class _Slot:
    request: Request
    test: GroupTest | None = None


@dataclass
class _Active:
    step: Step
    slots: list[_Slot] = field(default_factory=list)


class Engine:
    def __init__(self, topo: Topology, runner: Runner, judge: Judge | None = None, *,
                 arity: int = 4, max_rounds: int = 60, survey: bool = True,
                 on_round: Callable[[RoundReport], None] | None = None) -> None:
        self.topo = topo
        self.runner = runner
        self.judge = judge or Judge()
        self.arity = max(2, arity)
        self.max_rounds = max_rounds
        self.survey = survey  # first round: the fleet's parts (True) or the whole fleet
        self.on_round = on_round

    def run(self, nodes: Sequence[str] | None = None) -> Localization:
        started = time.monotonic()
        fleet = self.topo.order(nodes if nodes is not None else self.topo.nodes)
        # Under a heavy tail, a pair is convicted only when each end is clean with others on
        # as many runs as it takes to fail a test, and one more: a straggler rarely is.
        tail = bool(self.judge.tail)
        search = Search(self.topo, self.arity,
                        clean_runs=self.judge.confirm + 1 if tail else 1,
                        recheck_runs=self.judge.max_runs if tail else 1)
        self._tests: list[GroupTest] = []
        first = search.survey(fleet) if self.survey else search.screen(fleet)
        active = self._start(first)
        verify_ran: set[int] = set()  # findings counts a verification ran for
        verified = False
        rnd = 0
        stopped = None
        while True:
            if not active:
                out = search.excluded()
                rest = tuple(n for n in fleet if n not in out)
                # The last test of exactly the rest (a screen, a verification or a recheck).
                last = next((t for t in reversed(self._tests)
                             if tuple(self.topo.order(t.nodes)) == rest), None)
                verified = last is not None and last.verdict == PASS
                if verified or len(search.findings) in verify_ran:
                    break
                verify_ran.add(len(search.findings))
                if len(rest) < 2:
                    search.give_up(rest)
                    verified = True
                    break
                active = self._start(search.screen(rest, "verify"))
                continue
            if rnd >= self.max_rounds:
                stopped = f"round budget of {self.max_rounds} spent"
                for a in active:
                    search.give_up([n for s in a.slots for n in s.request.members])
                break
            rnd += 1
            ran = self._round(rnd, search, active)
            nxt: list[_Active] = []
            for a in active:
                if all(s.test is not None and s.test.verdict is not None for s in a.slots):
                    decided = [s.test for s in a.slots if s.test is not None]
                    search.learn(decided)
                    nxt.extend(self._advance(a.step, decided))
                else:
                    nxt.append(a)
            active = nxt
            if self.on_round:
                self.on_round(RoundReport(rnd, ran, sum(t.verdict == PASS for t in self._tests),
                                          sum(t.verdict == FAIL for t in self._tests),
                                          len(active), len(search.findings)))
        verdicts = {t.verdict for t in self._tests}
        if len(search.accused()) * 2 > len(fleet) or (FAIL in verdicts and PASS not in verdicts):
            # Slow everywhere is a wrong expectation or a fabric-wide fault, not half a fleet
            # of bad nodes: say so rather than drain them.
            stopped = ("more than half the fleet is slow: the healthy value (--expect) is "
                       "likely wrong, or the fault is fabric-wide")
        return Localization(tuple(fleet), search.findings, self._tests, rnd,
                            sorted(search.unresolved), search.transients,
                            verified and not stopped, stopped,
                            time.monotonic() - started)

    # -- steps ------------------------------------------------------------------------------
    def _start(self, step: Step) -> list[_Active]:
        """A step to its first batch (a step that asks nothing starts its children)."""
        try:
            batch = next(step)
        except StopIteration as stop:
            return [a for child in (stop.value or []) for a in self._start(child)]
        return [_Active(step, [_Slot(r) for r in batch])]

    def _advance(self, step: Step, decided: list[GroupTest]) -> list[_Active]:
        try:
            batch = step.send(decided)
        except StopIteration as stop:
            return [a for child in (stop.value or []) for a in self._start(child)]
        return [_Active(step, [_Slot(r) for r in batch])]

    # -- one round --------------------------------------------------------------------------
    def _round(self, rnd: int, search: Search, active: list[_Active]) -> int:
        used: set[str] = set()
        planned: list[_Slot] = []
        for a in active:  # members first (and repeats, padding and all)
            for s in a.slots:
                if s.test is not None and s.test.verdict is not None:
                    continue
                nodes = set(s.test.nodes + s.test.padding) if s.test else set(s.request.members)
                if nodes & used:
                    continue
                used |= nodes
                planned.append(s)
        excluded = search.excluded() | search.unresolved
        pool = [n for n in self.topo.nodes if n in search.cleared and n not in used
                and n not in excluded]
        scheduled: list[_Slot] = []
        for s in planned:
            if s.test is None and s.request.pad:
                pad = self._buddies(s.request, pool)
                if pad is None:
                    if self._buddies(s.request, [n for n in self.topo.nodes if n in
                                                 search.cleared and n not in excluded]) is None:
                        s.test = self._new(rnd, s.request, ())
                        s.test.verdict, s.test.error = UNKNOWN, "no known-good node to pair with"
                    continue
                for n in pad:
                    pool.remove(n)
                s.test = self._new(rnd, s.request, tuple(pad))
            elif s.test is None:
                s.test = self._new(rnd, s.request, ())
            scheduled.append(s)
        if not scheduled:
            scheduled = self._unblock(rnd, planned, search.cleared - excluded)
        if not scheduled:
            return 0
        groups = [tuple(self.topo.order((*s.test.nodes, *s.test.padding)))
                  for s in scheduled if s.test is not None]
        measured = self.runner.run(groups)
        for s, m in zip(scheduled, measured, strict=True):
            t = s.test
            assert t is not None
            t.rounds.append(rnd)
            score = m.score
            if score is None:
                t.verdict, t.error = UNKNOWN, m.error or "no measurement"
                continue
            t.scores.append(score)
            if m.value is not None:
                t.values.append(m.value)
            t.verdict = self.judge.verdict(t.scores, t.runs)
            if t.verdict == PASS and self.judge.transient(t.scores):
                search.transients.append(t.id)
        return len(scheduled)

    def _unblock(self, rnd: int, planned: list[_Slot], good: set[str]) -> list[_Slot]:
        """A round that would run nothing because every waiting request's only known-good
        buddies are members of another waiting request (two steps each holding what the
        other needs): the first of them borrows its buddies from the others' members,
        which wait one round, instead of the search idling until its round budget is spent."""
        for s in planned:
            if s.test is None and s.request.pad:
                pad = self._buddies(s.request, [n for n in self.topo.nodes if n in good])
                if pad is not None:
                    s.test = self._new(rnd, s.request, tuple(pad))
                    return [s]
        return []

    def _new(self, rnd: int, req: Request, pad: tuple[str, ...]) -> GroupTest:
        t = GroupTest(len(self._tests) + 1, rnd, req.members, req.purpose, pad, runs=req.runs)
        self._tests.append(t)
        return t

    def _buddies(self, req: Request, pool: list[str]) -> list[str] | None:
        """Known-good nodes for a request: its own leaf's first when it asks (`near`)."""
        def fits(n: str) -> bool:
            return n not in req.avoid and n not in req.members and (
                req.away is None or self.topo.leaf(n) != req.away)

        chosen: list[str] = []
        if req.near is not None:
            available = set(pool)
            chosen = [n for n in self.topo.leaf_members(req.near)
                      if n in available and fits(n)][:req.pad]
        for n in pool:
            if len(chosen) >= req.pad:
                break
            if n not in chosen and fits(n):
                chosen.append(n)
        return chosen if len(chosen) >= req.pad else None
