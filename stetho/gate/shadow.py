"""Shadow policies: candidates the gate evaluates beside the enforcing policy, on the same
results, and records (history, Prometheus) without acting on them, so a policy change is
watched for weeks before it enforces.

An enforcing policy names its shadows (`shadow: [candidate]`) rather than every `mode: shadow`
file on the search path taking part: a candidate for the pre-job gate would otherwise be
judged on the nightly sweep's results too, and the file a reviewer reads for a gate says what
runs beside it. A shadow never drains, never changes the exit code, and a shadow that cannot be
loaded or recorded is a warning, never the gate's failure.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

from stetho.errors import StethoError
from stetho.gate.decision import (
    decide,
    lacking,
    load_overrides,
    missing,
    node_verdict,
    required_checks,
)
from stetho.gate.policy import GatePolicy
from stetho.history.decisions import NodeDecision
from stetho.results import Result


@dataclass
class ShadowOutcome:
    """Each shadow policy's verdict per node, and what stopped one being evaluated or kept."""

    verdicts: list[NodeDecision] = field(default_factory=list)
    policies: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def blocked(self, policy: str) -> list[str]:
        return sorted(d.node for d in self.verdicts if d.policy == policy
                      and d.verdict == "block")

    def lines(self) -> list[str]:
        """One line per shadow policy: the nodes it would have blocked."""
        from stetho.core.hostlist import compress

        out = []
        for name in self.policies:
            nodes = self.blocked(name)
            unevaluated = [d.node for d in self.verdicts
                           if d.policy == name and d.verdict == "unevaluated"]
            line = (f"shadow policy {name} would have blocked: "
                    + (compress(nodes) if nodes else "no node"))
            if unevaluated:
                line += f" (could not evaluate {compress(sorted(unevaluated))})"
            out.append(line + " [not acted on]")
        return out

    def to_json(self) -> dict[str, object]:
        return {"policies": self.policies, "problems": self.problems,
                "verdicts": [{"policy": d.policy, "node": d.node, "verdict": d.verdict,
                              "checks": list(d.checks)} for d in self.verdicts]}


def evaluate(policy: GatePolicy, results: list[Result], names: list[str], *,
             override_repo: str | None, now: float, local: bool = False) -> ShadowOutcome:
    """Every shadow `policy` names, decided on the gate's results by the gate's own `decide`
    (a check the shadow needs and the gate did not run leaves the node unevaluated)."""
    from stetho.gate import policy as policies

    out = ShadowOutcome()
    for name in policy.shadow:
        try:
            sp = policies.load(name)
            if sp.mode != "shadow":
                raise StethoError(f"policy {sp.name!r} ({sp.source}) is not `mode: shadow`: "
                                  "not evaluated beside the gate (it would enforce)")
            valid, _ = load_overrides(sp, override_repo, now)
        except StethoError as exc:
            out.problems.append(f"shadow policy {name}: {exc}")
            continue
        need = (frozenset(sp.local_checks) if local and sp.local_checks
                else required_checks(sp))
        extra = _incomplete(results, names, need)
        decision = decide(sp, results + extra, valid)
        out.policies.append(sp.name)
        for n in names:
            verdict, checks = node_verdict(decision, n)
            out.verdicts.append(NodeDecision(sp.name, "shadow", n, verdict, checks))
    return out


def _incomplete(results: list[Result], names: list[str], need: frozenset[str]
                ) -> list[Result]:
    """A `gate` error per node lacking a check the shadow needs: never GO on what was not
    run (the rule stetho.gate.evaluate applies to the enforcing policy)."""
    out = []
    for n, lacks in lacking(results, names, need).items():
        out += missing([n], "no result for " + ", ".join(lacks[:8])
                       + " (the shadow policy needs it; the gate did not run it)")
    return out


def record(db: Path, gate_id: str, shadow: ShadowOutcome, now: float, command: str
           ) -> str | None:
    """Keep the verdicts in history (a `gate-shadow` run); why not, as a warning, or None."""
    import sqlite3

    from stetho.history import decisions
    from stetho.history.store import History, HistoryError, describe

    if not shadow.verdicts:
        return None
    try:
        with History(db) as h:
            decisions.record(h, f"{gate_id}-shadow", shadow.verdicts, when=now,
                             command=command)
    except HistoryError as exc:
        return f"shadow decisions not recorded: {exc}"
    except (sqlite3.Error, OSError) as exc:
        return f"shadow decisions not recorded in {db}: {describe(exc)}"
    return None


def attach(policy: GatePolicy, results: list[Result], names: list[str], gate_id: str,
           override_repo: str | None, local: bool, db: Path, now: float
           ) -> tuple[ShadowOutcome | None, list[str]]:
    """The shadows' verdicts on the gate's own results, kept in history, and the problems to
    warn of; a failure of any kind is such a warning: a shadow never changes the verdict."""
    try:
        outcome = evaluate(policy, results, names, now=now, override_repo=override_repo,
                           local=local)
    except Exception as exc:  # noqa: BLE001 - said as a warning, the verdict stands
        return None, [f"shadow policies not evaluated: {type(exc).__name__}: {exc}"]
    kept = record(db, gate_id, outcome, now, f"gate --policy {policy.name}")
    return outcome, outcome.problems + ([kept] if kept else [])


def refuse_as_gate(policy: GatePolicy, asked: str) -> NoReturn:
    """A `mode: shadow` policy never decides a gate: named, with what to do instead."""
    from stetho.errors import ConfigError

    raise ConfigError(f"policy {policy.name!r} ({policy.source}) is `mode: shadow`: it never "
                      "decides a gate. Name it under `shadow:` in the enforcing policy to "
                      "record what it would do, or replay it over history: stetho gate "
                      f"replay --policy {asked}")
