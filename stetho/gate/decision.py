"""`stetho gate`: go or no-go for a job or a release, by policy.

Results come from the history database when they are fresh enough (the policy says how
fresh), else from a live check (on this node with --local, or through the sweep with an
inventory). The policy keeps the checks it counts, tightens thresholds, and says which
statuses block; a valid override (stetho.gate.overrides) lets one check pass on named nodes, shown
as passed-with-override. Exit: 0 go, 1 blocked, 3 could not evaluate where errors do not block.
"""

from __future__ import annotations

import time
from dataclasses import field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from stetho.core.record import record
from stetho.gate.policy import GatePolicy, Tighten
from stetho.results import Result

if TYPE_CHECKING:
    from stetho.gate.override_check import Honoured
    from stetho.gate.overrides import Override

#: An override the gate did not apply (or a file it could not read), and why.
Ignored = tuple["Override | Path", str]


@record(frozen=False)
class Decision:
    policy: GatePolicy
    results: list[Result]  # what the policy counts, after tightening and overrides
    blocking: list[Result]
    sources: dict[str, str]  # node -> "history <run> (<age>)" | "live" | "missing"
    ignored_overrides: list[Ignored] = field(default_factory=list)

    history_unavailable: str | None = None  # why the history could not be read or written
    #: node -> the profile it was judged against (its pin: stetho.gate.pinning)
    profiles: dict[str, str] = field(default_factory=dict)

    @property
    def exit_code(self) -> int:
        """1 blocked, 3 could not evaluate (or the history failed: nothing it said, or would
        have kept, can be trusted), 0 go."""
        if self.history_unavailable:
            return 3
        if self.blocking:
            return 1
        if self.unevaluated:
            return 3
        return 0

    @property
    def blocked_nodes(self) -> list[str]:
        return sorted({r.node for r in self.blocking})

    @property
    def unevaluated(self) -> dict[str, str]:
        """Nodes not blocked that could not be evaluated (a check errored, was not run, or
        its result was stale or partial), each with the first reason. Never GO: exit 3, and
        `--act` leaves them as they are. Worked out once for these results: a gate asks five
        times, each a pass over its 8,000 results; asked again after `results` or `blocking`
        is replaced or changes length, it is worked out again (a copy, never the cache)."""
        memo = self.__dict__.get("_unevaluated_memo")
        if (memo is not None and memo[0] is self.results and memo[1] is self.blocking
                and memo[2] == (len(self.results), len(self.blocking))):
            return dict(memo[3])
        out = self._find_unevaluated()
        # the lists themselves are held: a new list can never take an old one's identity
        self.__dict__["_unevaluated_memo"] = (self.results, self.blocking,
                                         (len(self.results), len(self.blocking)), out)
        return dict(out)

    def _find_unevaluated(self) -> dict[str, str]:
        blocked = set(self.blocked_nodes)
        out: dict[str, str] = {}
        # the errors alone are sorted: sorting a 64-node gate's 8,000 results, several times a
        # gate, cost more than reading them from history
        errors = [r for r in self.results if r.status == "error"]
        for r in sorted(errors, key=lambda r: (r.node, r.check != "gate", r.check)):
            if r.node not in blocked and r.node != "*":
                out.setdefault(r.node, r.message if r.check == "gate"
                               else f"{r.check} error: {r.message}")
        return out

    @property
    def go_nodes(self) -> set[str]:
        return {r.node for r in self.results} - set(self.blocked_nodes) - set(self.unevaluated)


def decide(policy: GatePolicy, results: list[Result],
           overrides: list[Honoured] | None = None, sources: dict[str, str] | None = None,
           ignored: list[Ignored] | None = None) -> Decision:
    """Apply a policy (and verified overrides) to results. Pure: no I/O."""
    from stetho.gate.catalogue import PSEUDO_CHECKS

    rules: dict[str, list[Tighten]] = {}  # per check, looked up once per result
    for t in policy.tighten:
        rules.setdefault(t.check, []).append(t)
    counted: dict[str, bool] = {}  # per check: a 64-node gate judges 8,000 results of 26
    kept = []
    for r in results:
        c = counted.get(r.check)
        if c is None:
            c = counted[r.check] = policy.counts(r.check)
        if not c:
            continue
        if r.status == "skip":
            r = _uncompared(policy, r)
        kept.append(_tighten(policy, r, rules[r.check]) if r.check in rules else r)
    final = []
    if overrides:  # the override records' module only where there are overrides to apply
        from stetho.gate.overrides import covers
    for r in kept:
        # A node the gate or sweep could not check at all is never made GO by an override.
        if overrides and r.status in policy.block_on and r.check not in PSEUDO_CHECKS:
            h = next((h for h in overrides
                      if covers(h.override, policy.name, r.check, r.node)), None)
            if h is not None:
                r = replace(r, status="pass", override={
                    "id": h.id, "approver": h.approver, "reason": h.override.reason,
                    "expires_at": h.override.expires_at, "requester": h.requester,
                    "was": r.status})
        final.append(r)
    blocking = [r for r in final if r.status in policy.block_on]
    return Decision(policy, final, blocking, sources or {}, ignored or [])


def _uncompared(policy: GatePolicy, r: Result) -> Result:
    """A fleet or drift check the policy lists that skipped (too few peers in the run, too
    little history) did not evaluate the node: an error, so it is never GO on that check.
    These are opt-in comparisons; a policy that names one wants it made."""
    if (r.status != "skip" or not r.check.startswith(("fleet_", "drift_"))
            or r.check not in policy.checks):
        return r
    return replace(r, status="error", message=f"not compared: {r.message}")


def _tighten(policy: GatePolicy, r: Result, rules: list[Tighten] | None) -> Result:
    """`r` failed where one of its check's `rules` (the policy's, in its order) says so."""
    if not rules or r.status not in ("pass", "warn") or not isinstance(r.value, (int, float)):
        return r
    for t in rules:
        why = _violates(t, float(r.value), r.reference)
        if why:
            limit, op = _limit(t, r.reference)
            return replace(r, status="fail",
                           message=f"{policy.name} policy: {why} (check said: {r.message})",
                           threshold=_describe(t), limit=limit, limit_op=op)
    return r


def _limit(t: Tighten, reference: float | None) -> tuple[float | None, str | None]:
    """The policy's own limit as a number, in the result's unit, when it is one number."""
    if t.max is not None and t.min is None:
        return t.max, "<="
    if t.min is not None and t.max is None:
        return t.min, ">="
    if t.max_drop_pct is not None and reference and t.max is None and t.min is None:
        return round(reference * (1 - t.max_drop_pct / 100), 6), ">="
    return None, None


def _violates(t: Tighten, value: float, reference: float | None) -> str | None:
    if t.max is not None and value > t.max:
        return f"{value:g} over the policy's maximum {t.max:g}"
    if t.min is not None and value < t.min:
        return f"{value:g} under the policy's minimum {t.min:g}"
    if t.max_drop_pct is not None and reference:
        drop = (reference - value) / reference * 100
        if drop > t.max_drop_pct:
            return f"{drop:.1f}% under the baseline {reference:g} (policy allows " \
                   f"{t.max_drop_pct:g}%)"
    return None


def _describe(t: Tighten) -> str:
    parts = []
    if t.max is not None:
        parts.append(f"<= {t.max:g}")
    if t.min is not None:
        parts.append(f">= {t.min:g}")
    if t.max_drop_pct is not None:
        parts.append(f"drop <= {t.max_drop_pct:g}%")
    return "policy: " + ", ".join(parts)


@record(frozen=False)
class FromHistory:
    """What history holds for the nodes: fresh results per node, where they came from, and per
    node the policy's checks with no fresh result (those must run live, or the node cannot be
    evaluated)."""

    results: dict[str, list[Result]] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)
    lacking: dict[str, list[str]] = field(default_factory=dict)
    unavailable: str | None = None  # why history could not be read at all
    #: node -> why a history row of it failed its integrity check: never GO, not re-checked
    distrusted: dict[str, str] = field(default_factory=dict)
    #: node -> check -> the profile its result was judged against ("" none recorded)
    profiles: dict[str, dict[str, str]] = field(default_factory=dict)
    #: id(result) -> (result, its JSON as history stored it): results.json copies the text
    stored: dict[int, tuple[Result, bytes]] = field(default_factory=dict)


def required_checks(policy: GatePolicy) -> frozenset[str]:
    """The checks a node's verdict needs a result of: the listed ones, else every node check
    in the catalogue (fleet and drift ones only when listed: they are not run per node)."""
    from stetho.gate.catalogue import PSEUDO_CHECKS

    if policy.checks:
        wanted = set(policy.checks)
    else:
        from stetho.gate import catalogue

        wanted = set(catalogue.load().node)
    return frozenset(wanted - set(PSEUDO_CHECKS) - set(policy.exclude))


def _shadow_needs(policy: GatePolicy) -> frozenset[str]:
    """The checks the policy's shadows count: read with the gate's own, so a shadow is judged
    on what it needs. A shadow that cannot be loaded adds none (stetho.gate.shadow says why)."""
    from stetho.errors import StethoError
    from stetho.gate import policy as policies

    need: set[str] = set()
    for name in policy.shadow:
        try:
            sp = policies.load(name)
        except StethoError:
            continue
        need |= required_checks(sp) | set(sp.local_checks)
    return frozenset(need)


def from_history(db: Path, nodes: list[str], policy: GatePolicy, now: float | None = None
                 ) -> FromHistory:
    """Per node and check the newest fresh result (stetho.history.store.latest_per_check).
    A database that cannot be read is no results at all, with the reason kept."""
    import sqlite3

    from stetho.history.backend import open_history
    from stetho.history.store import HistoryError, describe

    now = now if now is not None else time.time()
    out = FromHistory()
    if policy.freshness_s <= 0 or not db.exists():
        return out
    wanted = required_checks(policy)
    try:
        with open_history(db) as h:
            latest = h.latest_per_check(nodes, policy.freshness_s, now=now, checks=wanted,
                                        keep=wanted | _shadow_needs(policy))
    except HistoryError as exc:
        out.unavailable = str(exc)
        return out
    except (sqlite3.Error, OSError) as exc:
        out.unavailable = f"{db}: {describe(exc)}"
        return out
    for node, found in latest.items():
        if found.distrusted:
            out.distrusted[node] = found.distrusted
            continue
        out.results[node] = found.results
        out.stored.update(found.stored)
        out.profiles[node] = dict(found.profiles)
        runs = found.runs()
        age = _age(now - found.oldest)
        out.sources[node] = (f"history {runs[0]} ({age} old)" if len(runs) == 1 else
                             f"history {', '.join(runs)} (oldest {age} old)")
        lacking = sorted(wanted - found.checks.keys())
        if lacking:
            out.lacking[node] = lacking
    return out


def _age(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"


def missing(nodes: list[str], why: str) -> list[Result]:
    """A `gate` error per node: what stopped the gate evaluating it (never GO)."""
    return [Result(n, "gate", "", "error", why, probe="gate",
                   remediation="run the checks on it (stetho sweep --limit NODE, or give the "
                               "gate an inventory with -i) or fix what stopped them")
            for n in nodes]


def load_overrides(policy: GatePolicy, repo: str | None, now: float
                   ) -> tuple[list[Honoured], list[Ignored]]:
    """The overrides this policy honours (every signature verified against its allowed
    signers file, no revocation anywhere in the history), and the ignored ones with why."""
    if not repo:
        return [], []
    from stetho.gate.override_check import effective, judging
    from stetho.gate.override_store import OverrideStore

    snap = OverrideStore(repo).read()
    bad: list[Ignored] = [(p, why) for p, why in snap.unreadable()]
    with judging(policy.overrides, snap.root, snap.revocations, snap.problem) as judge:
        valid, ignored = effective(snap.overrides(), judge, now)
    return valid, bad + list(ignored)


def lines(decision: Decision) -> list[str]:
    """One line per blocking result (node, check, value against expected, remediation)."""
    from stetho.results import format_value

    out = []
    for r in sorted(decision.blocking, key=lambda r: (r.node, r.check, r.subject)):
        value = format_value(r.value, r.unit)
        vs = f"{value} (expected {r.expected})" if r.expected is not None else value
        subject = f"/{r.subject}" if r.subject else ""
        profile = decision.profiles.get(r.node)
        out.append(f"BLOCK {r.node}{subject} {r.check}: {r.message}"
                   + (f" [{vs}]" if vs else "")
                   + (f" -> {r.remediation}" if r.remediation else "")
                   + (f" (profile {profile})" if profile else ""))
    for r in decision.results:
        if r.override:
            o = r.override
            out.append(f"OVERRIDE {r.node}/{r.subject or '-'} {r.check}: passed with override "
                       f"{o['id']} approved by {o['approver']}, expires {o['expires_at']} "
                       f"(reason: {o['reason']})")
    for what, why in decision.ignored_overrides:
        oid = what if isinstance(what, Path) else what.id
        out.append(f"IGNORED override {oid}: {why}")
    return out


def summary(decision: Decision, nodes: list[str]) -> str:
    """The verdict line: what a prolog log or CI step shows, with why per node that is not GO."""
    from stetho.core.hostlist import compress

    blocked = decision.blocked_nodes
    unevaluated = decision.unevaluated
    verdict = "BLOCKED" if blocked else ("COULD NOT EVALUATE" if unevaluated else "GO")
    go = len([n for n in nodes if n not in unevaluated and n not in blocked])
    text = (f"gate {decision.policy.name}: {verdict}: {len(nodes)} nodes, "
            f"{go} go, {len(blocked)} blocked")
    if blocked:
        text += f" ({compress(blocked)})"
    if unevaluated:
        shown = [f"{n}: {_one_line(why, 160)}" for n, why in list(unevaluated.items())[:5]]
        more = f"; +{len(unevaluated) - 5} more" if len(unevaluated) > 5 else ""
        text += (f"; could not evaluate {len(unevaluated)} ({compress(list(unevaluated))}; "
                 + "; ".join(shown) + more + ")")
    if decision.history_unavailable:
        text += f"; history unavailable: {_one_line(decision.history_unavailable, 300)}"
    by_profile: dict[str, list[str]] = {}
    for n in nodes:
        if n in decision.profiles:
            by_profile.setdefault(decision.profiles[n], []).append(n)
    if by_profile:
        text += "; profile " + ", ".join(f"{p} ({compress(ns)})"
                                         for p, ns in sorted(by_profile.items()))
    return text


def _one_line(text: str, limit: int) -> str:
    """Control characters (a newline in a message) never start a forged output line."""
    import unicodedata

    flat = " ".join("".join(" " if unicodedata.category(ch).startswith("C") else ch
                            for ch in text).split())
    return flat if len(flat) <= limit else flat[: limit - 3].rstrip() + "..."


def node_verdict(decision: Decision, node: str) -> tuple[str, tuple[str, ...]]:
    """A node's verdict in words the history and replay keep: ("block", the blocking checks),
    ("unevaluated", the checks that errored or were missing) or ("go", ()). Never "go" for a
    node the decision has no result of."""
    blocking = sorted({r.check for r in decision.blocking if r.node == node})
    if blocking:
        return "block", tuple(blocking)
    if node in decision.unevaluated or node not in decision.go_nodes:
        return "unevaluated", tuple(sorted({r.check for r in decision.results
                                            if r.node == node and r.status == "error"}))
    return "go", ()


def lacking(results: list[Result], names: list[str], need: frozenset[str]
            ) -> dict[str, list[str]]:
    """node -> the needed checks it has no result for (a check not run is never a pass);
    nodes that could not be checked at all (a `gate` or `sweep` error) already say why."""
    have: dict[str, set[str]] = {n: set() for n in names}
    for r in results:
        if r.node in have:
            have[r.node].add(r.check)
    return {n: sorted(need - have[n]) for n in names
            if need - have[n] and not {"gate", "sweep"} & have[n]}
