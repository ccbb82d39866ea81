"""What `stetho override request|approve|revoke|list` do, as library calls: each signs with the
person's own key, checks the result exactly as the gate will (against the policy's allowed
signers file), and only then stores it. Nothing typed decides who someone is: `expect` (the
CLI's --requester/--approver/--by) is a check that the key signs as that principal, no more.

Signing happens once, before the store's transaction; the transaction then decides again on
the freshly pulled state (a revocation that landed meanwhile refuses the approval).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

from stetho.core import hostlist
from stetho.errors import ConfigError, StethoError
from stetho.gate import overrides, signatures
from stetho.gate.override_check import Check, Judge, judging
from stetho.gate.override_store import OverrideStore, Snapshot
from stetho.gate.overrides import Override, OverridePolicy
from stetho.gate.signatures import Signer


@dataclass(frozen=True)
class Done:
    """What was stored, and who OpenSSH says signed it."""

    override: Override
    principal: str
    check: Check


def load_policy(name: str) -> OverridePolicy:
    from stetho.gate.policy import load_override_policy

    return load_override_policy(name)


def _signer(key: Path) -> overrides.SignFn:
    return lambda message: signatures.sign(message, key)


def _expect(expect: str | None, option: str, who: Signer | str | None, key: Path) -> str:
    """The principal the key signed as; refused when `expect` names someone else."""
    if who is None or isinstance(who, str):
        raise ConfigError(f"your key {key} is not accepted by the policy's allowed signers "
                          f"file: {who or 'no principal'}")
    if expect is not None and expect.casefold() not in {p.casefold() for p in who.principals}:
        raise ConfigError(f"{option} {expect}: your key {key} signs as {who.verified_as}, not "
                          f"{expect} (the key decides who you are, not a name)")
    return who.verified_as


@contextmanager
def _judge(policy: OverridePolicy, snap: Snapshot) -> Iterator[Judge]:
    with judging(policy, snap.root, snap.revocations, snap.problem) as judge:
        if judge.problem:
            raise ConfigError(judge.problem)
        yield judge


def request_override(store: OverrideStore, policy_name: str, check: str, nodes: list[str],
                     reason: str, expires_s: float, key: Path, expect: str | None = None,
                     now: float | None = None) -> Done:
    """Sign and store a request; refused unless the policy's signers file accepts the key."""
    policy = load_policy(policy_name)
    _gated_check(policy_name, check)  # before anything is signed or stored
    snap = store.read()
    with _judge(policy, snap) as judge:
        o = overrides.request(policy, check, nodes, reason, expires_s, _signer(key), now)
        assert judge.verifier is not None
        who = _expect(expect, "--requester",
                      judge.verifier.check(overrides.request_bytes(o), o.signature), key)
        c = judge.verify(o, _at(now))
    store.save(o, f"override request {o.id}: {o.check} on {hostlist.compress(list(o.nodes))} "
                  f"(signed by {who})")
    return Done(o, who, c)


def _gated_check(policy_name: str, check: str) -> None:
    """A check the catalogue knows and the policy counts: an override for a misspelled check
    would be signed, approved and then let nothing pass."""
    import difflib

    from stetho.gate import catalogue
    from stetho.gate.policy import load

    if not isinstance(check, str) or not overrides.CHECK_RE.match(check):
        raise ConfigError(f"--check {check!r}: a single check name, letters, digits, '_', '.', "
                          "':' and '-' only (no wildcards)")
    why = catalogue.load().not_overridable(check)
    if why:
        raise ConfigError(f"--check: {why}")
    gate = load(policy_name)
    if not gate.counts(check):
        counted = sorted(set(gate.checks) - set(gate.exclude))
        near = difflib.get_close_matches(check, counted, n=3, cutoff=0.6)
        hint = (f"; did you mean {', '.join(near)}?" if near
                else f"; it gates on {', '.join(counted[:8])}{', ...' if len(counted) > 8 else ''}")
        raise ConfigError(f"--check: policy {gate.name!r} does not gate on {check!r}, so an "
                          f"override for it would let nothing pass{hint}")


def approve_override(store: OverrideStore, override_id: str, acknowledgement: str, key: Path,
                     expect: str | None = None, now: float | None = None) -> Done:
    """Sign and append an approval, if the gate would then honour the override."""
    snap = store.read()
    cur = snap.get(override_id)
    policy = load_policy(cur.policy)
    t = _at(now)
    with _judge(policy, snap) as judge:
        _approvable(judge, cur, t)  # a check not in the catalogue is refused here too
        a = overrides.approval(cur, policy, acknowledgement, _signer(key), t)
        signer, why = judge.approval(cur, a, "the approval", t)
        who = _expect(expect, "--approver", signer or why, key)
        if why:
            raise ConfigError(f"refused: {why}")

    def guard(now_stored: Override, now_snap: Snapshot) -> None:
        with _judge(policy, now_snap) as again:
            _approvable(again, now_stored, t)

    stored = store.add_approval(override_id, a, guard, f"override approve {override_id} "
                                                       f"(signed by {who})")
    with _judge(policy, snap) as judge:
        return Done(stored, who, judge.verify(stored, t))


def _approvable(judge: Judge, o: Override, now: float) -> None:
    c = judge.verify(o, now)
    if c.state == "active":
        raise ConfigError(f"{o.id} is already approved: {c.reason}")
    if c.state in ("revoked", "expired") or c.requester is None:
        raise ConfigError(f"{o.id} cannot be approved: {c.reason}")


def revoke_override(store: OverrideStore, override_id: str, reason: str, key: Path,
                    expect: str | None = None, now: float | None = None) -> Done:
    """Sign and store a revocation by the requester, an approver or a principal of the
    policy. Permanent: the gate reads revocations from the whole history."""
    snap = store.read()
    cur = snap.get(override_id)
    policy = load_policy(cur.policy)
    t = _at(now)
    with _judge(policy, snap) as judge:
        if snap.revoked(override_id):
            raise ConfigError(f"{override_id} is already revoked: {judge.verify(cur, t).reason}")
        r = overrides.revocation(override_id, reason, _signer(key), t)
        who = _expect(expect, "--by", judge.revoker(r), key)
        entitled = set(policy.principals) | _signers_of(judge, cur, t)
        if who.casefold() not in {p.casefold() for p in entitled}:
            raise ConfigError(f"{who} may not revoke {override_id}: only its requester, an "
                              f"approver or a principal of policy {policy.name!r} "
                              f"({', '.join(policy.principals)}) may")
    store.revoke(r, lambda _o, _s: None, f"override revoke {override_id} (signed by {who}): "
                                        f"{reason}")
    return Done(cur, who, Check("revoked", f"revoked by {who} at {r.revoked_at} ({reason})"))


def _signers_of(judge: Judge, o: Override, now: float) -> set[str]:
    """The verified principals of the request and of each approval whose signature verifies."""
    assert judge.verifier is not None
    found: set[str] = set()
    req = judge.verifier.check(overrides.request_bytes(o), o.signature)
    if not isinstance(req, str):
        found.update(req.principals)
    for a in o.approvals:
        signer, _ = judge.approval(o, a, "an approval", now)
        if signer is not None:
            found.add(signer.verified_as)
    return found


def list_overrides(store: OverrideStore, now: float | None = None) -> list[dict[str, object]]:
    """Every override file with its state under its own policy, as the gate sees it:
    pending, active, expired, revoked, or invalid with why."""
    t = _at(now)
    snap = store.read()
    rows: list[dict[str, object]] = []
    judges: dict[str, Judge | str] = {}
    with ExitStack() as stack:
        for path, item in snap.entries:
            rel = f"{store.DIR}/{path.name}"
            if not isinstance(item, Override):
                rows.append({"id": path.stem, "file": rel, "state": "invalid",
                             "reason": str(item)})
                continue
            if item.policy not in judges:
                try:
                    judges[item.policy] = stack.enter_context(judging(
                        load_policy(item.policy), snap.root, snap.revocations, snap.problem))
                except StethoError as exc:
                    judges[item.policy] = str(exc)
            judge = judges[item.policy]
            c = judge.verify(item, t) if isinstance(judge, Judge) else Check("invalid", judge)
            rows.append({**item.to_dict(), "file": rel, "state": c.state, "reason": c.reason,
                         "requester": c.requester, "approver": c.approver})
    return rows


def _at(now: float | None) -> float:
    import time

    return time.time() if now is None else now
