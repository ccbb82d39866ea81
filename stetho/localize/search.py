"""The adaptive search: each step is a generator that asks for group tests and reads verdicts.

A step yields a batch of Requests, receives the decided GroupTests back (same order), and
returns the steps that follow it. Steps on disjoint nodes run in the same round; the engine
packs them. The steps, from the top:

- screen(group): one test of the whole group; a pass clears it, a fail locates in it.
- locate(group): split along the fabric into `arity` parts (whole switches first), test every
  part (a lone node with a known-good buddy from its own leaf). Failing parts are located
  further; a failing lone node is confirmed against a second buddy. If every part of a leaf
  fails, the switch itself is probed. If every part passes, the fault lies across them: cross.
- cross(group, parts): parts that are whole switches are first probed pairwise across their
  uplinks in a ring (two failing probes sharing a switch convict its uplink); otherwise, or if
  the ring finds nothing, unions of two parts are tested (round-robin matchings) and a failing
  union is bisected on both sides down to the one pair of nodes that is slow together.
- Nothing is convicted on one test: a node needs its part, its own test and a confirmation
  with a different buddy; a pair needs its failing unions and each end passing with others; an
  uplink needs two ring probes and a confirmation; a switch needs every sampled node failing.
  A parent failure that no part or union reproduces is retested: a pass is a transient and
  clears, a second failure leaves the group unresolved (fail closed). Under a heavy tail the
  retest must be clean on `recheck_runs` runs: a straggler that failed twice and hid from the
  parts rarely is, so it stays unresolved (intermittent) rather than being cleared.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import dataclass, field

from stetho.localize.model import FAIL, INTERMITTENT, PASS, Finding, GroupTest, Request
from stetho.localize.topology import Topology

Step = Generator[list[Request], list[GroupTest], list["Step"]]


@dataclass
class Search:
    """What the steps share: the fabric, what has been cleared, found and left unresolved."""

    topo: Topology
    arity: int = 4
    clean_runs: int = 1  # clean runs each end of a pair needs before the pair is convicted
    recheck_runs: int = 1  # clean runs a recheck needs to call a failure transient
    cleared: set[str] = field(default_factory=set)
    findings: list[Finding] = field(default_factory=list)
    unresolved: set[str] = field(default_factory=set)
    transients: list[int] = field(default_factory=list)
    passing: dict[str, list[int]] = field(default_factory=dict)  # node -> passing tests

    # -- bookkeeping ------------------------------------------------------------------------
    def learn(self, tests: Sequence[GroupTest]) -> None:
        for t in tests:
            if t.verdict == INTERMITTENT:  # whatever step asked: never cleared, never passed
                self.give_up([*t.nodes, *t.padding])
            if t.verdict == PASS:
                for n in (*t.nodes, *t.padding):
                    self.cleared.add(n)
                    self.passing.setdefault(n, []).append(t.id)

    def accused(self) -> set[str]:
        out: set[str] = set()
        for f in self.findings:
            out.update(f.nodes if f.kind in ("node", "switch") else ())
        return out

    def excluded(self) -> set[str]:
        """Nodes a verification of the rest leaves out: convicted nodes, a convicted switch's
        or uplink's nodes, the second end of a convicted pair."""
        out: set[str] = set()
        for f in self.findings:
            out.update(f.nodes if f.kind != "pair" else f.nodes[1:])
        return out

    def clearing(self, nodes: Sequence[str], limit: int = 6) -> list[int]:
        seen: list[int] = []
        for n in nodes:
            for tid in self.passing.get(n, []):
                if tid not in seen:
                    seen.append(tid)
        return seen[-limit:]

    def convict(self, kind: str, subject: str, nodes: Sequence[str], tests: Sequence[GroupTest],
                neighbours: Sequence[str], detail: str = "") -> None:
        ids = sorted({t.id for t in tests})
        self.findings.append(Finding(kind, subject, tuple(nodes), ids,
                                     self.clearing([n for n in neighbours if n not in nodes]),
                                     detail))

    def give_up(self, nodes: Sequence[str]) -> None:
        self.unresolved.update(nodes)

    def lone(self, node: str, purpose: str, avoid: Sequence[str] = (),
             away: str | None = None, runs: int = 1) -> Request:
        """One node with a known-good buddy (from its own leaf unless `away` says otherwise)."""
        return Request((node,), purpose, pad=1, near=None if away else self.topo.leaf(node),
                       away=away, avoid=frozenset(avoid), runs=runs)

    def request(self, part: Sequence[str], purpose: str) -> Request:
        return self.lone(part[0], purpose) if len(part) == 1 else Request(tuple(part), purpose)

    # -- steps ------------------------------------------------------------------------------
    def screen(self, group: Sequence[str], purpose: str = "screen") -> Step:
        """One test of the whole group."""
        (t,) = yield [Request(tuple(self.topo.order(group)), purpose)]
        if t.verdict == PASS:
            return []
        if t.verdict == FAIL:
            return [self.locate(t.nodes, t)]
        self.give_up(t.nodes)
        return []

    def survey(self, group: Sequence[str]) -> Step:
        """The first round when faults are expected: the group's parts at once (one round
        saved when one fails); only when all pass is the whole group tested, for faults
        across them."""
        return (yield from self.locate(group, None, whole_after=True))

    def locate(self, group: Sequence[str], parent: GroupTest | None, *,
               whole_after: bool = False) -> Step:
        parts = self.topo.split(group, self.arity)
        if len(parts) == 1 and len(parts[0]) > 1:  # a switch of one kind of unit: halve it
            parts = [parts[0][: len(parts[0]) // 2], parts[0][len(parts[0]) // 2:]]
        tests = yield [self.request(p, "locate") for p in parts]
        failing = [(p, t) for p, t in zip(parts, tests, strict=True) if t.verdict == FAIL]
        for p, t in zip(parts, tests, strict=True):
            if t.verdict not in (PASS, FAIL):
                self.give_up(p)
        if not failing:
            if not all(t.verdict == PASS for t in tests):
                return []
            if whole_after or parent is None:
                (parent,) = yield [Request(tuple(self.topo.order(group)), "screen")]
                if parent.verdict != FAIL:
                    if parent.verdict != PASS:
                        self.give_up(group)
                    return []
            return [self.cross(group, parts, parent)]
        leaf = self.topo.switch_of(list(group))
        whole_leaf = leaf is not None and len(self.topo.leaves(group)) == 1
        evidence = [t for t in (parent, *tests) if t is not None]
        if whole_leaf and len(parts) >= 2 and len(failing) == len(parts):
            return [self.switch_probe(leaf or "", list(group), parts, evidence)]
        return [self.confirm_node(p[0], t, evidence[0]) if len(p) == 1 else self.locate(p, t)
                for p, t in failing]

    def confirm_node(self, node: str, first: GroupTest, parent: GroupTest) -> Step:
        (t,) = yield [self.lone(node, "confirm", avoid=first.padding)]
        if t.verdict == FAIL:
            self.convict("node", node, [node], [parent, first, t],
                         [n for n in parent.nodes if n != node],
                         f"slow with buddies {', '.join((*first.padding, *t.padding))}")
            return []
        if t.verdict != PASS:
            self.give_up([node])
            return []
        # Slow with one buddy, fine with another: the pair, or a transient. Run it again.
        (again,) = yield [Request((node, *first.padding), "recheck",
                                  runs=self.recheck_runs)]
        if again.verdict == FAIL and first.padding:
            return [self.confirm_pair(node, first.padding[0], [parent, first, again])]
        if again.verdict == PASS:
            self.transients.append(first.id)
            return []
        self.give_up([node])
        return []

    def switch_probe(self, leaf: str, group: list[str], parts: list[list[str]],
                     evidence: list[GroupTest]) -> Step:
        sample = [n for p in parts for n in p[:2]]
        tests = yield [self.lone(n, "switch probe", away=leaf) for n in sample]
        if all(t.verdict == FAIL for t in tests):
            outside = [n for n in self.topo.nodes if self.topo.leaf(n) != leaf]
            self.convict("switch", leaf, group, [*evidence, *tests], outside,
                         f"all {len(parts)} parts and {len(sample)} sampled nodes slow")
            return []
        part_tests = evidence[-len(parts):]
        return [self.locate(p, t) for p, t in zip(parts, part_tests, strict=True)
                if t.verdict == FAIL]

    def cross(self, group: Sequence[str], parts: list[list[str]], parent: GroupTest) -> Step:
        switches = [self.topo.switch_of(p) for p in parts]
        if len(parts) >= 2 and all(switches):
            found = yield from self._uplink_ring(parts, [s or "" for s in switches], parent)
            if found:
                return []
        matchings = _round_robin(len(parts))
        for matching in matchings:
            unions = [parts[i] + parts[j] for i, j in matching]
            tests = yield [Request(tuple(self.topo.order(u)), "cross") for u in unions]
            failing = [(i, j, t) for (i, j), t in zip(matching, tests, strict=True)
                       if t.verdict == FAIL]
            if failing:
                return [self.bisect_pair(parts[i], parts[j], t) for i, j, t in failing]
        (again,) = yield [Request(tuple(self.topo.order(group)), "recheck",
                                  runs=self.recheck_runs)]
        if again.verdict == PASS:
            self.transients.append(parent.id)
            return []
        self.give_up(group)
        return []

    def _uplink_ring(self, parts: list[list[str]], switches: list[str], parent: GroupTest,
                     ) -> Generator[list[Request], list[GroupTest], bool]:
        m = len(parts)
        pairs = [(i, (i + 1) % m) for i in range(m)] if m > 2 else [(0, 1), (1, 0)]
        probes = [Request((parts[i][0], parts[j][-1]), "uplink probe") for i, j in pairs]
        tests = yield probes
        bad = [k for k, t in enumerate(tests) if t.verdict == FAIL]
        counts = {i: sum(1 for k in bad if i in pairs[k]) for i in range(m)}
        suspects = [i for i, c in counts.items() if c >= 2]
        if not suspects:
            return False
        ring = [tests[k] for k in bad]
        group = [n for p in parts for n in p]
        if m == 2:
            return (yield from self._uplink_of_two(parts, switches, [parent, *ring], group))
        found = False
        for i in suspects:
            others = [j for j in range(m) if j != i and counts[j] < 2] or \
                [j for j in range(m) if j != i]
            node = parts[i][1] if len(parts[i]) > 1 else parts[i][0]
            peer = parts[others[-1]][len(parts[others[-1]]) // 2]
            (t,) = yield [Request((node, peer), "uplink confirm")]
            if t.verdict == FAIL:
                evidence = [parent, *(tests[k] for k in bad if i in pairs[k]), t]
                self.convict("uplink", switches[i], parts[i], evidence, group,
                             "slow across it, fine within")
                found = True
        return found

    def _uplink_of_two(self, parts: list[list[str]], switches: list[str],
                       evidence: list[GroupTest], group: list[str],
                       ) -> Generator[list[Request], list[GroupTest], bool]:
        """Two switches slow together: each side against a node beyond both tells whose
        uplink it is; with no node beyond them, it is the link between the two."""
        sides: list[GroupTest] = []
        if len(self.topo.nodes) > len(group):
            sides = yield [Request((p[1] if len(p) > 1 else p[0],), "uplink confirm", pad=1,
                                   away=self.topo.leaf(p[0]), avoid=frozenset(group))
                           for p in parts]
        if sides and all(t.verdict in (PASS, FAIL) for t in sides):
            bad = [i for i, t in enumerate(sides) if t.verdict == FAIL]
            for i in bad:
                self.convict("uplink", switches[i], parts[i], [*evidence, sides[i]], group,
                             "slow across it, fine within")
            return bool(bad)
        self.convict("uplink", f"{switches[0]}<->{switches[1]}", group, evidence, group,
                     "the two switches are slow to each other, each fine within")
        return True

    def bisect_pair(self, a: list[str], b: list[str], failed: GroupTest) -> Step:
        while len(a) > 1 or len(b) > 1:
            a1, a2 = _halves(a)
            b1, b2 = _halves(b)
            combos = [c for c in ((a1, b1), (a2, b2), (a1, b2), (a2, b1)) if c[0] and c[1]]
            found = None
            for batch in (combos[:2], combos[2:]):
                if not batch:
                    continue
                tests = yield [Request(tuple(self.topo.order(x + y)), "pair search")
                               for x, y in batch]
                failing = [(c, t) for c, t in zip(batch, tests, strict=True)
                           if t.verdict == FAIL]
                if failing:
                    found = failing
                    break
            if not found:
                (again,) = yield [Request(tuple(self.topo.order(a + b)), "recheck",
                                          runs=self.recheck_runs)]
                if again.verdict == PASS:
                    self.transients.append(failed.id)
                else:
                    self.give_up(a + b)
                return []
            (a, b), failed = found[0]
            rest = [self.bisect_pair(x, y, t) for (x, y), t in found[1:]]
            if rest:
                return [*rest, self.bisect_pair(a, b, failed)]
        return [self.confirm_pair(a[0], b[0], [failed])]

    def confirm_pair(self, a: str, b: str, evidence: list[GroupTest]) -> Step:
        asks = [self.lone(a, "pair confirm", avoid=[b], runs=self.clean_runs),
                self.lone(b, "pair confirm", avoid=[a], runs=self.clean_runs)]
        if self.clean_runs > 1:  # under a tail: the two alone, slow again, not one bad test
            asks.append(Request(tuple(self.topo.order([a, b])), "pair recheck",
                                runs=self.recheck_runs))
        ta, tb, *again = yield asks
        if ta.verdict == PASS and tb.verdict == PASS and all(t.verdict == FAIL for t in again):
            self.convict("pair", f"{a}<->{b}", [a, b], [*evidence, *again], [a, b],
                         "slow together, each healthy with other nodes")
            return []
        if ta.verdict == PASS and tb.verdict == PASS:  # the pair's failure did not repeat
            if again and again[0].verdict == PASS:
                self.transients.append(evidence[-1].id)
            else:
                self.give_up([a, b])
            return []
        steps: list[Step] = []
        for node, t in ((a, ta), (b, tb)):
            if t.verdict == FAIL:
                steps.append(self.confirm_node(node, t, evidence[-1]))
            elif t.verdict != PASS:
                self.give_up([node])
        return steps


def _halves(nodes: list[str]) -> tuple[list[str], list[str]]:
    if len(nodes) <= 1:
        return nodes, []
    k = len(nodes) // 2
    return nodes[:k], nodes[k:]


def _round_robin(m: int) -> list[list[tuple[int, int]]]:
    """Every pair of m parts, as rounds of disjoint pairs (the circle method)."""
    ids: list[int | None] = list(range(m)) + ([None] if m % 2 else [])
    n = len(ids)
    rounds = []
    for _ in range(n - 1):
        pairs = [(ids[k], ids[n - 1 - k]) for k in range(n // 2)]
        rounds.append([(min(i, j), max(i, j)) for i, j in pairs if i is not None and j is not None])
        ids = [ids[0], ids[-1], *ids[1:-1]]
    return rounds
