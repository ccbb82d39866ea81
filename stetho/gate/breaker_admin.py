"""`stetho breaker status|reset` as library calls: what the drain budget holds, and a person
closing an open breaker with a signature from their own key.

A reset lets stetho drain again after a mass event a person has looked at, so it needs the
same proof as an override approval: an SSH signature (OpenSSH `ssh-keygen -Y`, namespace
`stetho-breaker`, so an override signature cannot be replayed as a reset) that the policy's
allowed signers file accepts, made by one of the policy's approver principals. The key
decides who someone is; a typed name never does.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from stetho.errors import ConfigError
from stetho.gate import breaker, signatures
from stetho.gate.budget import DrainBudget, Status
from stetho.gate.policy import GatePolicy
from stetho.gate.slurm import Slurm, SlurmError

NAMESPACE = "stetho-breaker"


@dataclass(frozen=True)
class Reset:
    scope: str
    principal: str
    fingerprint: str
    forgiven: tuple[str, ...]


def slurm_view(now: float, window_s: float) -> tuple[str | None, list[str]]:
    """(cluster name, stetho's drains in the window) as Slurm sees them; (None, []) when
    Slurm cannot be read (the ledger alone then)."""
    sl = Slurm(act=False)
    try:
        return sl.cluster_name(), breaker.recent_drains(sl.show_all(), now, window_s)
    except SlurmError:
        return None, []


def statuses(budget: DrainBudget, scope: str | None, now: float) -> list[Status]:
    """The breaker of `scope`, else of Slurm's cluster, else of every scope in the ledger."""
    cluster, recent = slurm_view(now, budget.circuit.window_s)
    names = [scope] if scope else ([cluster] if cluster else budget.scopes())
    return [budget.status(s, now, recent if s == cluster else ()) for s in names]


def _when(ts: float) -> str:
    return datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def render(st: Status) -> list[str]:
    """A person's view: the count against the limit, then each row of the window."""
    limit = "?" if st.limit is None else str(st.limit)
    state = "OPEN" if st.open else "closed"
    head = (f"breaker {st.scope}: {state}, {len(st.counted)} drained of limit {limit} in the "
            f"last {st.window_s / 3600:g} h" + (f" ({st.size} nodes in scope)" if st.size else ""))
    lines = [head]
    if st.counted:
        lines.append(f"  counted: {', '.join(st.counted)}")
    waiting = sorted({e.node for e in st.entries if e.kind == "refused"})
    if waiting:
        lines.append(f"  waiting (refused, not drained): {', '.join(waiting)}")
    if st.alerted_at is not None:
        lines.append(f"  alerted at {_when(st.alerted_at)}")
    for e in st.entries:
        what = f"{e.node} " if e.node else ""
        lines.append(f"  {_when(e.at)} {e.kind:8} {what}by {e.who}: {e.reason}")
    return lines


def reset_bytes(policy: str, scope: str, ledger: Path, at: float) -> bytes:
    """What a reset signs: the policy, the scope, the ledger and the time, canonically."""
    doc = {"kind": "stetho-breaker-reset", "policy": policy, "scope": scope,
           "ledger": str(ledger), "at": _when(at)}
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


def reset(policy: GatePolicy, budget: DrainBudget, scope: str, key: Path, now: float,
          slurm_recent: Iterable[str] | None = None) -> Reset:
    """Sign a reset with `key`, verify it against the policy's allowed signers as one of its
    approvers, then close the breaker of `scope`. Refused (ConfigError, exit 2) otherwise."""
    o = policy.overrides
    if o.problem or o.signers is None or not o.principals:
        raise ConfigError(f"breaker reset refused: policy {policy.name!r} names no allowed "
                          "signers file and approver principals (overrides: approvers:), so "
                          "no reset can be verified")
    if not o.signers.is_file():
        raise ConfigError(f"breaker reset refused: the allowed signers file {o.signers} of "
                          f"policy {policy.name!r} does not exist")
    message = reset_bytes(policy.name, scope, budget.path, now)
    sig = signatures.sign(message, key, NAMESPACE)
    with signatures.Verifier(o.signers, NAMESPACE) as v:
        who = v.check(message, sig, o.principals)
    if isinstance(who, str):
        raise ConfigError(f"breaker reset refused: your key {key} is not accepted by the allowed "
                          f"signers file {o.signers}: {who}")
    if who.verified_as.casefold() not in {p.casefold() for p in o.principals}:
        raise ConfigError(f"breaker reset refused: your key {key} signs as {who.verified_as}, "
                          f"who is not an approver of policy {policy.name!r} "
                          f"({', '.join(o.principals)})")
    if slurm_recent is None:
        slurm_recent = slurm_view(now, budget.circuit.window_s)[1]
    forgiven = budget.reset(scope, who=who.verified_as, now=now,
                            proof=f"ssh signature {who.fingerprint} as {who.verified_as}",
                            slurm_recent=slurm_recent)
    return Reset(scope, who.verified_as, who.fingerprint, forgiven)
