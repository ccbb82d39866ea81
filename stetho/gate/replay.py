"""`stetho gate replay`: every recorded decision point re-decided under each policy, with the
results as they were then and the overrides valid then, compared and scored.

A decision point is one node's row of one recorded run (sweep, gate, check) at its time. At
each, a policy sees what its live gate would have read then: per check the newest result no
older than its freshness (a policy with freshness 0 checks live, so it sees that run's results
only), the `gate`/`sweep` pseudo-checks of that run only, and the overrides it honoured at that
moment (stetho.gate.replay_overrides). The verdict comes from the gate's own `decide`
(stetho.gate.decision), so a replay cannot drift from the live gate: it is asked once per
distinct (check, status) (with value and reference for a check the policy tightens), the only
fields it reads, and again for a result an override covers. A node lacking a check the policy
needs is unevaluated, never GO.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

from stetho.gate.decision import decide, required_checks
from stetho.gate.override_check import Honoured
from stetho.gate.overrides import covers
from stetho.gate.policy import GatePolicy
from stetho.gate.replay_overrides import Frozen, Timeline, timelines
from stetho.gate.replay_rows import Excluded, Row, node_rows
from stetho.results import Result

PSEUDO = ("gate", "sweep")
_PSEUDO = frozenset(PSEUDO)


@dataclass
class Verdicts:
    """One policy's verdict at every decision point: points[i] -> (verdict, checks)."""

    policy: GatePolicy
    verdicts: list[tuple[str, tuple[str, ...]]] = field(default_factory=list)


@dataclass
class Replay:
    """What a replay found: the decision points (node, time, run), each policy's verdicts
    aligned with them, what was left out, and the overrides each policy honoured."""

    since: int
    until: int
    points: list[tuple[str, int, str]] = field(default_factory=list)
    policies: list[Verdicts] = field(default_factory=list)
    excluded: Excluded = field(default_factory=Excluded)
    problems: list[str] = field(default_factory=list)
    timelines: list[Timeline] = field(default_factory=list)


class _Judge:
    """One policy's per-result verdict, through `decide`, memoised on the fields it reads."""

    def __init__(self, policy: GatePolicy) -> None:
        self.policy = policy
        self.need = required_checks(policy)
        self.block_on = frozenset(policy.block_on)
        self.memo: dict[tuple[object, ...], str] = {}
        self.counts: dict[object, bool] = {}
        #: checks whose value and reference matter (decide tightens only these)
        self.tightened = frozenset(t.check for t in policy.tighten)

    def status(self, node: str, d: dict[str, object], honoured: list[Honoured]) -> str:
        """The status `decide` gives this stored result (after tightening and overrides)."""
        if honoured and any(covers(h.override, self.policy.name, str(d["check"]), node)
                            for h in honoured):
            return self._decide(node, d, honoured)
        try:
            key = self._key(d)
            out = self.memo.get(key)
        except TypeError:  # an unhashable value (a list): decided every time
            return self._decide(node, d, [])
        if out is None:
            self.memo[key] = out = self._decide(node, d, [])
        return out

    def _key(self, d: dict[str, object]) -> tuple[object, ...]:
        c = d["check"]
        if c in self.tightened:
            return (c, d["status"], d.get("value"), d.get("reference"))
        return (c, d["status"])

    def _decide(self, node: str, d: dict[str, object], honoured: list[Honoured]) -> str:
        r = Result.from_json({**d, "node": node})
        return decide(self.policy, [r], honoured).results[0].status

    def verdict(self, node: str, results: list[dict[str, object]], checks: set[object],
                honoured: list[Honoured]) -> tuple[str, tuple[str, ...]]:
        """The node's verdict on `results` (`checks`: every check among them): the rules
        of stetho.gate.decision.Decision and of the live gate's completeness check."""
        counts, memo, tightened = self.counts, self.memo, self.tightened
        blocking: set[object] | None = None
        errors: set[object] | None = None
        for d in results:  # the hot loop: one memo lookup per result, no Result built
            c = d["check"]
            k = counts.get(c)
            if k is None:
                k = counts[c] = self.policy.counts(str(c))
            if not k:
                continue
            s = None
            if not honoured:
                try:
                    s = memo.get((c, d["status"], d.get("value"), d.get("reference"))
                                 if c in tightened else (c, d["status"]))
                except TypeError:  # an unhashable value: decided below
                    pass
            if s is None:
                s = self.status(node, d, honoured)
            if s in self.block_on:
                blocking = blocking or set()
                blocking.add(c)
            elif s == "error":
                errors = errors or set()
                errors.add(c)
        if blocking:
            return "block", tuple(sorted(map(str, blocking)))
        lacking = self.need - checks
        if errors or (lacking and not checks & _PSEUDO):
            return "unevaluated", tuple(sorted(map(str, (errors or set()) | lacking)))
        return "go", ()


#: below this many rows in the window a replay runs in one process (starting workers costs
#: more than it saves)
PARALLEL_ROWS = 20000


def run(db: Path, policies: list[GatePolicy], since: int, until: int,
        override_repo: str | None = None, workers: int = 1,
        parallel_rows: int = PARALLEL_ROWS) -> Replay:
    """Replay these policies over the history in [since, until]; with `workers` > 1 and
    at least `parallel_rows` rows, in that many processes, each a contiguous range of nodes
    (nodes are independent: the result is the same, in the same order)."""
    from stetho.gate.replay_rows import extent

    out = Replay(since, until)
    out.policies = [Verdicts(p) for p in policies]
    with ExitStack() as stack:
        out.timelines, out.problems = timelines(policies, override_repo, stack)
        lo, hi, rows = extent(db, since, until) if workers > 1 else (0, 0, 0)
        if workers > 1 and rows >= parallel_rows and hi > lo:
            frozen = [t.frozen() for t in out.timelines]
            step = (hi - lo) // workers + 1
            jobs = [(db, policies, since, until, frozen, (lo + i * step, lo + (i + 1) * step - 1))
                    for i in range(workers)]
            import multiprocessing

            from stetho.core.forked import worker_signals

            with multiprocessing.get_context("fork").Pool(workers,
                                                          initializer=worker_signals) as pool:
                parts = pool.map(_part, jobs)
        else:
            parts = [_part((db, policies, since, until, out.timelines, None))]
        for line in out.timelines:  # every span judged while the verifiers are open: the
            line.first_honoured()  # scoring asks for spans no decision point fell in
    for part in parts:
        out.points += part.points
        for mine, theirs in zip(out.policies, part.policies, strict=True):
            mine.verdicts += theirs.verdicts
        ex, more = out.excluded, part.excluded  # the ranges share no node: plain unions
        ex.distrusted.update(more.distrusted)
        ex.unsigned.update(more.unsigned)
        ex.unreadable.update(more.unreadable)
        ex.pruned.update(more.pruned)
        ex.why.update(more.why)
    return out


_Job = tuple[Path, list[GatePolicy], int, int, Sequence["Timeline | Frozen"],
             "tuple[int, int] | None"]


def _part(job: _Job) -> Replay:
    """One range of nodes replayed (in this process or a worker)."""
    db, policies, since, until, lines, ids = job
    out = Replay(since, until)
    judges = [_Judge(p) for p in policies]
    out.policies = [Verdicts(p) for p in policies]
    for node, rows in node_rows(db, since, until, _wanted(policies), out.excluded, ids):
        _node(node, rows, judges, lines, out)
    return out


def _wanted(policies: list[GatePolicy]) -> Callable[[str], bool]:
    def wanted(check: str) -> bool:
        return check in PSEUDO or any(p.counts(check) for p in policies)
    return wanted


def _node(node: str, rows: list[Row], judges: list[_Judge],
          lines: Sequence[Timeline | Frozen],
          out: Replay) -> None:
    """Walk one node's rows oldest first, keeping per check its newest results and time."""
    newest: dict[object, tuple[int, list[dict[str, object]]]] = {}
    for t, run, _kind, results in rows:
        ran: dict[object, list[dict[str, object]]] = {}
        for d in results:
            ran.setdefault(d["check"], []).append(d)
        for check, rs in ran.items():
            if check not in PSEUDO:
                newest[check] = (t, rs)
        out.points.append((node, t, run))
        views: dict[float, tuple[list[dict[str, object]], set[object]]] = {}  # by freshness
        for judge, line, verdicts in zip(judges, lines, out.policies, strict=True):
            fresh = judge.policy.freshness_s
            view = views.get(fresh)
            if view is None:
                view = views[fresh] = ((results, set(ran)) if fresh <= 0
                                       else _fresh(newest, ran, t - fresh))
            verdicts.verdicts.append(judge.verdict(node, view[0], view[1], line.at(t)))


def _fresh(newest: dict[object, tuple[int, list[dict[str, object]]]],
           ran: dict[object, list[dict[str, object]]], oldest: float
           ) -> tuple[list[dict[str, object]], set[object]]:
    """Per check the newest results no older than `oldest`, and this run's pseudo-checks;
    and the checks among them."""
    seen = [d for tc, rs in newest.values() if tc >= oldest for d in rs]
    checks = {c for c, (tc, _) in newest.items() if tc >= oldest}
    for c in PSEUDO:
        if c in ran:
            seen += ran[c]
            checks.add(c)
    return seen, checks
