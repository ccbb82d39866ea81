"""Whether the gate may honour an override: every signature verified with OpenSSH against the
**policy's** allowed signers file, from scratch, on every run (files are untrusted).

An override counts only if the request's signature verifies, one approval's signature verifies
as a principal the policy lists as an approver, the two signers are different people (not the
same key, not two keys of one principal), the acknowledgement is the policy's sentence exactly,
the lifetime is within the cap, the check is a real one of the catalogue (never the `gate` or
`sweep` pseudo-check: no override makes a node without results GO), and no revocation of it
exists anywhere in the repository's history or in stetho's own record of revocations
(stetho.gate.revocation_record). The trust root must not be writable through the override
store: a signers file inside the override repository (or in a clone of it) is refused, and
then nothing is honoured.

A revocation counts whether or not its signature verifies, and whoever signed it: it only
takes power away, and anyone who can push could as well delete the override file. Its
signature says who revoked, and the CLI makes only signed ones by the requester, an approver or
a principal of the policy.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from stetho.errors import ConfigError
from stetho.gate.catalogue import Catalogue
from stetho.gate.overrides import (
    CLOCK_SKEW_S,
    Approval,
    Override,
    OverridePolicy,
    Revocation,
    approval_bytes,
    duration,
    parse_ts,
    request_bytes,
    revocation_bytes,
)
from stetho.gate.signatures import Signer, Verifier


@dataclass(frozen=True)
class Honoured:
    """An override the gate applies, with who signed it as OpenSSH says."""

    override: Override
    requester: str
    approver: str
    approved_at: str

    @property
    def id(self) -> str:
        return self.override.id


@dataclass(frozen=True)
class Check:
    """An override's state (active, pending, expired, revoked, invalid) and in words why;
    the verified principals where they are known."""

    state: str
    reason: str
    requester: str | None = None
    approver: str | None = None
    honoured: Honoured | None = None

    @property
    def valid(self) -> bool:
        return self.honoured is not None


@dataclass(frozen=True)
class RevocationVersion:
    """One version of a revocation somewhere in the history: `revocations/<id>.json` (the
    path names the override it stops; `revocation` is None, with `problem`, when the file held
    no valid one), or a valid revocation anywhere else. `recorded`: the history no longer
    holds it, stetho's own record does (stetho.gate.revocation_record), saying so."""

    override: str
    commit: str
    revocation: Revocation | None
    problem: str | None = None
    recorded: str | None = None


def signers_problem(policy: OverridePolicy, repo_root: Path | None) -> str | None:
    """Why the policy's signers file cannot be the trust root: missing, or where anyone who
    can push an override could add a key to it."""
    from stetho.publish import gitstore

    disabled = policy.disabled()
    if disabled or policy.signers is None:
        return disabled
    signers = policy.signers
    if not signers.is_file():
        return (f"policy {policy.name!r}: its allowed signers file {signers} does not exist: "
                "overrides are disabled")
    if repo_root is None:
        return None
    real, root = signers.resolve(), repo_root.resolve()
    if real == root or root in real.parents:
        return (f"policy {policy.name!r}: its allowed signers file {signers} is inside the "
                f"override repository {repo_root}, where anyone who can push an override could "
                "add a key: refused (keep it with the policy, outside that repository)")
    if gitstore.same_history(real.parent, root):
        return (f"policy {policy.name!r}: its allowed signers file {signers} is in a clone of "
                f"the override repository {repo_root}, where anyone who can push an override "
                "could add a key: refused (keep it with the policy, outside that repository)")
    return None


class Judge:
    """Decides on overrides under one policy: its verifier, the revocations in the history,
    and why (if so) nothing can be honoured at all."""

    def __init__(self, policy: OverridePolicy, verifier: Verifier | None, problem: str | None,
                 revocations: Iterable[RevocationVersion]) -> None:
        self.policy = policy
        self.verifier = verifier
        self.problem = problem
        self._catalogue: Catalogue | None = None
        self.revoked: dict[str, list[RevocationVersion]] = {}
        for r in revocations:
            self.revoked.setdefault(r.override, []).append(r)

    def verify(self, o: Override, now: float) -> Check:
        """`o`'s state under this policy at `now`, checked from scratch."""
        p = self.policy
        if o.policy != p.name:
            return Check("invalid", f"for policy {o.policy!r}, not {p.name!r}")
        if self.problem or self.verifier is None:
            return Check("invalid", self.problem or "no allowed signers file")
        why = self._not_overridable(o.check)
        if why:
            return Check("invalid", f"override of {why}: never honoured")
        if o.id in self.revoked:
            return Check("revoked", self._revoked(o))
        if now >= parse_ts(o.expires_at):
            return Check("expired", f"expired at {o.expires_at}")
        req = self.verifier.check(request_bytes(o), o.signature)
        if isinstance(req, str):
            return Check("invalid", f"the request's signature does not verify against "
                                    f"{p.signers}: {req}")
        if not o.approvals:
            return Check("pending", f"requested by {req.verified_as}, not approved",
                         req.verified_as)
        reasons = []
        for i, a in enumerate(o.approvals, 1):
            label = f"approval {i}" if len(o.approvals) > 1 else "the approval"
            signer, why = self.approval(o, a, label, now)
            if why is None and signer is not None:
                h = Honoured(o, req.verified_as, signer.verified_as, a.approved_at)
                return Check("active", f"requested by {req.verified_as}, approved by "
                                       f"{signer.verified_as}, expires at {o.expires_at}",
                             req.verified_as, signer.verified_as, h)
            reasons.append(why or label)
        return Check("invalid", "; ".join(reasons), req.verified_as)

    def prefetch(self, overrides: Iterable[Override], now: float) -> None:
        """Verify, in parallel, every signature `verify` will ask about: a revoked override's
        revocations, a live one's request and approvals (an expired one needs none)."""
        if self.verifier is None or self.problem:
            return
        mine = [o for o in overrides if o.policy == self.policy.name]
        live = [o for o in mine if o.id not in self.revoked and now < parse_ts(o.expires_at)]
        asks: list[tuple[bytes, str, tuple[str, ...]]] = [
            (revocation_bytes(r.revocation), r.revocation.signature, ())
            for o in mine for r in self.revoked.get(o.id, []) if r.revocation is not None]
        for o in live:
            asks.append((request_bytes(o), o.signature, ()))
            asks += [(approval_bytes(o, a.acknowledgement, a.approved_at), a.signature,
                      self.policy.principals) for a in o.approvals]
        self.verifier.prefetch(asks)
        cross: list[tuple[bytes, str, str]] = []  # what _same_person asks
        for o in live:
            req = self.verifier.check(request_bytes(o), o.signature)
            for a in o.approvals if isinstance(req, Signer) else ():
                message = approval_bytes(o, a.acknowledgement, a.approved_at)
                got = self.verifier.check(message, a.signature, self.policy.principals)
                if isinstance(got, Signer) and isinstance(req, Signer):
                    cross += [(message, a.signature, p) for p in req.principals]
                    cross.append((request_bytes(o), o.signature, got.verified_as))
        self.verifier.prefetch_as(cross)

    def revoker(self, r: Revocation) -> Signer | str:
        """Who signed a revocation, or why its signature does not verify."""
        assert self.verifier is not None
        return self.verifier.check(revocation_bytes(r), r.signature)

    def approval(self, o: Override, a: Approval, label: str,
                 now: float) -> tuple[Signer | None, str | None]:
        """Who signed approval `a` of `o` (None if no one verifiably did), and why the gate
        would not honour it (None when it would)."""
        p = self.policy
        assert self.verifier is not None
        req = self.verifier.check(request_bytes(o), o.signature)
        if isinstance(req, str):
            return None, f"the request's signature does not verify against {p.signers}: {req}"
        got = self.verifier.check(approval_bytes(o, a.acknowledgement, a.approved_at),
                                  a.signature, p.principals)
        if isinstance(got, str):
            return None, f"{label}'s signature does not verify against {p.signers}: {got}"
        if got.fingerprint and got.fingerprint == req.fingerprint:
            return got, (f"self-approved: {req.verified_as} signed both the request and "
                         f"{label} with one key")
        same = self._same_person(o, a, req, got)
        if same:
            return got, f"self-approved: {label} is signed by {got.verified_as}, {same}"
        if got.verified_as.casefold() not in {x.casefold() for x in p.principals}:
            return got, (f"{label} is signed by {got.verified_as}, who is not an approver for "
                         f"policy {p.name!r} (approvers: {', '.join(p.principals)})")
        if a.acknowledgement != p.acknowledgement:
            return got, (f"{label}'s acknowledgement {a.acknowledgement!r} is not the policy's "
                         f"{p.acknowledgement!r}")
        requested, approved = parse_ts(o.requested_at), parse_ts(a.approved_at)
        expires = parse_ts(o.expires_at)
        if approved > now + CLOCK_SKEW_S:
            return got, f"{label} is dated {a.approved_at}, in the future"
        if approved >= expires or approved < requested - CLOCK_SKEW_S:
            return got, (f"{label} is dated {a.approved_at}, outside the request's life "
                         f"({o.requested_at} to {o.expires_at})")
        # In force from approval (or the request, if earlier) until expiry; a post-dated
        # request would otherwise outlive the cap. A few minutes of clock skew are forgiven.
        life = expires - min(requested, approved)
        if life > p.max_lifetime_s + CLOCK_SKEW_S:
            return got, (f"lifetime {duration(life)} is over the cap of policy {p.name!r} "
                         f"({duration(p.max_lifetime_s)})")
        return got, None

    # -- internals -------------------------------------------------------------------------

    def _not_overridable(self, check: str) -> str | None:
        """Why no override of `check` counts: a pseudo-check or a name not in the catalogue
        of this machine's check folders (loaded once per judge)."""
        from stetho.gate import catalogue

        if self._catalogue is None:
            self._catalogue = catalogue.load()
        return self._catalogue.not_overridable(check)

    def _same_person(self, o: Override, a: Approval, req: Signer, got: Signer) -> str | None:
        """How the approver is the requester (None: two people). Two keys of one principal
        are one person; one key listed under two principals is both of them."""
        assert self.verifier is not None
        if got.shares_principal(req):
            return (f"with a key also listed for {req.verified_as}, who requested it (two keys "
                    "of one principal are one person)")
        message = approval_bytes(o, a.acknowledgement, a.approved_at)
        also = next((p for p in req.principals
                     if self.verifier.signed_as(message, a.signature, p)), None)
        if also is None and self.verifier.signed_as(request_bytes(o), o.signature,
                                                    got.verified_as):
            also = got.verified_as
        if also is None:
            return None
        return (f"and one key is listed for both {req.verified_as}, who requested it, and "
                f"{got.verified_as} (one key under two principals is both)")

    def _revoked(self, o: Override) -> str:
        """Who revoked it and when, from the best of its revocations."""
        lines = []
        for v in self.revoked[o.id]:
            kept = f" ({v.recorded})" if v.recorded else ""
            if v.revocation is None:
                lines.append(f"revoked: revocations/{o.id}.json in commit {v.commit[:12]} is "
                             f"not a valid revocation ({v.problem}), and counts anyway{kept}")
                continue
            r = v.revocation
            signer = self.revoker(r)
            if isinstance(signer, str):
                lines.append(f"revoked at {r.revoked_at} ({r.reason}); its signature does not "
                             f"verify ({signer}), and it counts anyway{kept}")
                continue
            return f"revoked by {signer.verified_as} at {r.revoked_at} ({r.reason}){kept}"
        return lines[0]


def effective(overrides: Iterable[Override], judge: Judge, now: float
              ) -> tuple[list[Honoured], list[tuple[Override, str]]]:
    """The overrides the gate honours, and those for this policy it ignores, with why.
    Overrides for other policies are not candidates and appear in neither list."""
    mine = sorted((o for o in overrides if o.policy == judge.policy.name), key=lambda x: x.id)
    judge.prefetch(mine, now)
    valid: list[Honoured] = []
    ignored: list[tuple[Override, str]] = []
    for o in mine:
        c = judge.verify(o, now)
        if c.honoured is not None:
            valid.append(c.honoured)
        else:
            ignored.append((o, c.reason))
    return valid, ignored


@contextmanager
def judging(policy: OverridePolicy, repo_root: Path | None,
            revocations: Iterable[RevocationVersion],
            problem: str | None = None) -> Iterator[Judge]:
    """A Judge for `policy` over a repository checked out at `repo_root` (`problem`: why
    that repository cannot be trusted), its verifier's answers cached in stetho's cache."""
    from stetho import config

    problem = problem or signers_problem(policy, repo_root)
    if problem or policy.signers is None:
        yield Judge(policy, None, problem, revocations)
        return
    cache_dir = config.active().cache
    cache = cache_dir / "override-signatures.json"
    # Never a cache that the override repository's content could be: its clone, or the
    # folder of stetho's cached clones.
    refuse = (cache_dir / "override-repos", *((repo_root,) if repo_root else ()))
    try:
        verifier = Verifier(policy.signers, cache_file=cache, refuse_under=refuse)
    except OSError as exc:
        yield Judge(policy, None, f"policy {policy.name!r}: cannot read its allowed signers "
                                  f"file {policy.signers}: {exc.strerror or exc}", revocations)
        return
    except ConfigError as exc:
        yield Judge(policy, None, f"policy {policy.name!r}: {exc}: overrides are disabled",
                    revocations)
        return
    with verifier:
        yield Judge(policy, verifier, None, revocations)
