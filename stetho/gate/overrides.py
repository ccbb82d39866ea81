"""Two-person overrides: a failing gate check passes for named nodes, for a while, when two agree.

One person requests (check, nodes, reason, expiry); a second person, listed as an approver in the
gate policy, approves by typing the policy's acknowledgement sentence, which signs the override
with HMAC-SHA256 over its canonical form (every field but the signature). Any later edit of any
field, or a key other than the gate's, invalidates it: the gate ignores it and says why.

Overrides are files `overrides/<id>.json` in a git repository (a working clone, or a URL cloned
into the stetho cache), so CI runners and people see the same set and git keeps the audit trail.
Stored overrides only ever move forward: pending -> approved, and anything -> revoked.
"""

from __future__ import annotations

import calendar
import dataclasses
import hashlib
import hmac
import json
import re
import secrets
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from stetho.core import hostlist
from stetho.errors import ConfigError

SCHEMA = "stetho.override/1"
KEY_ENV = "STETHO_OVERRIDE_KEY"
AUTHOR_ENV = "STETHO_GIT_AUTHOR"
MIN_KEY_BYTES = 32
MAX_FILE_BYTES = 256 * 1024
#: How far the requester's and approver's clocks may disagree.
CLOCK_SKEW_S = 300

ID_RE = re.compile(r"^ovr-\d{8}T\d{6}Z-[0-9a-f]{6}$")
CHECK_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.:-]{0,127}$")
POLICY_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
USER_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@+-]{0,127}$")
TS_RE = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$")
SIG_RE = re.compile(r"^[0-9a-f]{64}$")
_HEX_RE = re.compile(r"^[0-9a-fA-F]+$")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
_TS_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


class OverrideFileError(ConfigError):
    """An override file that is not a well-formed override: reported and ignored, never fatal."""


@dataclass(frozen=True)
class OverridePolicy:
    """What a gate policy says about overrides: who may approve, the sentence, the longest life."""

    name: str
    approvers: tuple[str, ...]
    acknowledgement: str
    max_lifetime_s: float


@dataclass(frozen=True)
class Check:
    """Whether an override may be honoured, and in words why (not)."""

    valid: bool
    reason: str


@dataclass(frozen=True)
class Override:
    """One override. Constructing one validates it, so a malformed one never exists in memory."""

    id: str
    policy: str
    check: str
    nodes: tuple[str, ...]
    reason: str
    requester: str
    requested_at: str
    expires_at: str
    approver: str | None = None
    approved_at: str | None = None
    acknowledgement: str | None = None
    signature: str | None = None
    revoked_by: str | None = None
    revoked_at: str | None = None

    def __post_init__(self) -> None:
        _need(ID_RE.match(self.id),
              f"id {self.id!r} is not of the form ovr-YYYYMMDDTHHMMSSZ-xxxxxx")
        _need(POLICY_RE.match(self.policy), f"policy name {self.policy!r} is not valid")
        _need(CHECK_RE.match(self.check), f"check {self.check!r}: a single check name, letters, "
              "digits, '_', '.', ':' and '-' only (no wildcards)")
        if isinstance(self.nodes, str) or not self.nodes:
            raise ConfigError("an override names at least one node (a list of exact names)")
        for n in self.nodes:
            if not isinstance(n, str):
                raise ConfigError(f"node name {n!r} is not a string")
            hostlist.validate(n)
        object.__setattr__(self, "nodes", tuple(sorted(set(self.nodes))))
        _check_text("reason", self.reason)
        check_person("requester", self.requester)
        req = parse_ts(self.requested_at, "requested_at")
        exp = parse_ts(self.expires_at, "expires_at")
        _need(exp > req, f"expires_at {self.expires_at} is not after requested_at "
              f"{self.requested_at}")
        approval = (self.approver, self.approved_at, self.acknowledgement, self.signature)
        if any(v is not None for v in approval) and any(v is None for v in approval):
            raise ConfigError("approver, approved_at, acknowledgement and signature are set "
                              "together or not at all")
        if self.approver is not None:
            check_person("approver", self.approver)
            parse_ts(self.approved_at or "", "approved_at")
            _need(isinstance(self.acknowledgement, str), "acknowledgement is not a string")
            _need(SIG_RE.match(self.signature or ""), "signature is not 64 lowercase hex digits")
        if (self.revoked_by is None) != (self.revoked_at is None):
            raise ConfigError("revoked_by and revoked_at are set together or not at all")
        if self.revoked_by is not None:
            check_person("revoked_by", self.revoked_by)
            parse_ts(self.revoked_at or "", "revoked_at")

    @property
    def approved(self) -> bool:
        return self.signature is not None

    @property
    def revoked(self) -> bool:
        return self.revoked_by is not None

    def to_dict(self) -> dict[str, object]:
        d = dataclasses.asdict(self)
        d["nodes"] = sorted(self.nodes)
        return {"schema": SCHEMA, **d}

    def to_json(self) -> str:
        """Pretty, sorted JSON: files a person can read and git diffs that show what changed."""
        return json.dumps(self.to_dict(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"

    @classmethod
    def from_json(cls, text: str | bytes, source: str = "override") -> Override:
        """Parse and validate; anything wrong (garbage, unknown schema, missing or unknown
        fields, bad values) is an OverrideFileError naming `source`, never another exception."""
        try:
            if isinstance(text, bytes):
                text = text.decode("utf-8")
            data = json.loads(text, object_pairs_hook=_no_duplicates)
        except (ValueError, RecursionError) as exc:
            raise OverrideFileError(f"{source}: not valid JSON: {exc}") from None
        if not isinstance(data, dict):
            raise OverrideFileError(f"{source}: expected a JSON object, got "
                                    f"{type(data).__name__}")
        schema = data.pop("schema", None)
        if schema != SCHEMA:
            raise OverrideFileError(f"{source}: unknown schema {schema!r} (this stetho reads "
                                    f"{SCHEMA!r})")
        fields = {f.name: f for f in dataclasses.fields(cls)}
        required = [n for n, f in fields.items() if f.default is dataclasses.MISSING]
        missing = [n for n in fields if n not in data and n in required]
        if missing:
            raise OverrideFileError(f"{source}: missing field(s): {', '.join(missing)}")
        unknown = sorted(set(data) - set(fields))
        if unknown:
            raise OverrideFileError(f"{source}: unknown field(s): {', '.join(unknown)}")
        for name, value in data.items():
            if name == "nodes":
                if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                    raise OverrideFileError(f"{source}: nodes must be a list of strings")
            elif not isinstance(value, str) and not (value is None and name not in required):
                raise OverrideFileError(f"{source}: field {name!r} must be a string, got "
                                        f"{type(value).__name__}")
        data["nodes"] = tuple(data["nodes"])
        try:
            return cls(**data)
        except ConfigError as exc:
            raise OverrideFileError(f"{source}: {exc}") from None


def _no_duplicates(pairs: list[tuple[str, object]]) -> dict[str, object]:
    out: dict[str, object] = {}
    for k, v in pairs:
        if k in out:
            raise ValueError(f"duplicate key {k!r}")
        out[k] = v
    return out


def _need(ok: object, message: str) -> None:
    if not ok:
        raise ConfigError(message)


def _check_text(what: str, text: str) -> None:
    if not isinstance(text, str) or not text.strip():
        raise ConfigError(f"{what} must not be empty")
    if len(text) > 4000:
        raise ConfigError(f"{what} is longer than 4000 characters")
    if _CONTROL.search(text):
        raise ConfigError(f"{what} contains control characters")


def check_person(what: str, name: str) -> str:
    """People's names are plain identifiers, so 'alice ' cannot pass for someone else."""
    if not isinstance(name, str) or not USER_RE.match(name):
        raise ConfigError(f"{what} {name!r} is not a valid name: letters, digits, '.', '_', "
                          "'@', '+' and '-' only, no spaces")
    return name


def format_ts(ts: float) -> str:
    return time.strftime(_TS_FORMAT, time.gmtime(int(ts)))


def parse_ts(text: str, what: str = "timestamp") -> int:
    """'2026-12-02T10:15:00Z' -> epoch seconds; nothing else is accepted."""
    if not isinstance(text, str) or not TS_RE.match(text):
        raise ConfigError(f"{what} {text!r} is not an ISO-8601 UTC time like "
                          "2026-12-02T10:15:00Z")
    try:
        return calendar.timegm(time.strptime(text, _TS_FORMAT))
    except ValueError:
        raise ConfigError(f"{what} {text!r} is not a valid date and time") from None


def _now(now: float | None) -> float:
    return time.time() if now is None else now


def canonical(o: Override) -> bytes:
    """The signed bytes: every field except `signature` (schema included), sorted keys, no
    spaces, UTF-8, nodes sorted. Any edit of any other field changes these bytes."""
    d = o.to_dict()
    del d["signature"]
    return json.dumps(d, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def sign(o: Override, key: bytes) -> str:
    return hmac.new(key, canonical(o), hashlib.sha256).hexdigest()


def key_from_env() -> bytes | None:
    """The shared signing key, or None when unset (then nothing can be approved or verified).
    Hex of >= 32 bytes is decoded; any other string of >= 32 characters is used as UTF-8."""
    from stetho import config

    raw = config.active().override_key
    if raw is None or not raw.strip():
        return None
    s = raw.strip()
    if len(s) >= 2 * MIN_KEY_BYTES and len(s) % 2 == 0 and _HEX_RE.match(s):
        return bytes.fromhex(s)
    if len(s) >= MIN_KEY_BYTES:
        return s.encode("utf-8")
    raise ConfigError(f"{KEY_ENV} is too short ({len(s)} characters): use at least "
                      f"{MIN_KEY_BYTES} random bytes, e.g. `openssl rand -hex 32`")


def new_id(now: float) -> str:
    return f"ovr-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime(int(now)))}-{secrets.token_hex(3)}"


def request(policy: OverridePolicy, check: str, nodes: Iterable[str], reason: str,
            requester: str, expires_s: float, now: float | None = None) -> Override:
    """A pending (unsigned) request. Expiry is mandatory and within the policy's cap."""
    t = int(_now(now))
    if not isinstance(expires_s, (int, float)) or expires_s != expires_s or expires_s <= 0:
        raise ConfigError(f"an override must expire: expiry {expires_s!r}s is not > 0")
    if expires_s > policy.max_lifetime_s:
        raise ConfigError(f"expiry {_duration(expires_s)} is over the cap of policy "
                          f"{policy.name!r} ({_duration(policy.max_lifetime_s)})")
    if int(expires_s) < 1:
        raise ConfigError("an override must last at least 1 second")
    names = list(nodes) if not isinstance(nodes, str) else [nodes]
    if not names:
        raise ConfigError("an override names at least one node")
    for n in names:
        hostlist.validate(n)
    _check_text("reason", reason)
    return Override(id=new_id(t), policy=policy.name, check=check, nodes=tuple(names),
                    reason=reason, requester=check_person("requester", requester),
                    requested_at=format_ts(t), expires_at=format_ts(t + int(expires_s)))


def _same(a: str, b: str) -> bool:
    return a.casefold() == b.casefold()


def _is_approver(name: str, policy: OverridePolicy) -> bool:
    return any(_same(name, a) for a in policy.approvers)


def _disabled(policy: OverridePolicy) -> str | None:
    """A policy without approvers or without a sentence allows no overrides (an empty
    sentence would otherwise be matched by an empty --acknowledge)."""
    if not policy.approvers:
        return f"policy {policy.name!r} names no override approvers: overrides are disabled"
    if not policy.acknowledgement.strip():
        return (f"policy {policy.name!r} has no acknowledgement sentence: overrides are "
                "disabled")
    return None


def approve(o: Override, policy: OverridePolicy, approver: str, acknowledgement: str,
            key: bytes | None, now: float | None = None) -> Override:
    """The second person's signature. Refuses, saying why, anything `verify` would reject."""
    t = int(_now(now))
    if key is None:
        raise ConfigError(f"{KEY_ENV} is not set: cannot sign an approval")
    check_person("approver", approver)
    if o.policy != policy.name:
        raise ConfigError(f"{o.id} is for policy {o.policy!r}, not {policy.name!r}")
    disabled = _disabled(policy)
    if disabled:
        raise ConfigError(disabled)
    if o.revoked:
        raise ConfigError(f"{o.id} was revoked by {o.revoked_by} at {o.revoked_at}")
    if o.approved:
        raise ConfigError(f"{o.id} is already approved by {o.approver} at {o.approved_at}")
    if _same(approver, o.requester):
        raise ConfigError(f"{approver} cannot approve their own request {o.id}: a second "
                          "person must approve")
    if not _is_approver(approver, policy):
        raise ConfigError(f"{approver} is not an approver for policy {policy.name!r} "
                          f"(approvers: {', '.join(policy.approvers) or 'none'})")
    if acknowledgement != policy.acknowledgement:
        raise ConfigError(f"the acknowledgement must be exactly {policy.acknowledgement!r}, "
                          f"got {acknowledgement!r}")
    if t >= parse_ts(o.expires_at):
        raise ConfigError(f"{o.id} expired at {o.expires_at}: request a new override")
    if parse_ts(o.requested_at) > t + CLOCK_SKEW_S:
        # Post-dated: it would be in force from now, longer than its stated lifetime.
        raise ConfigError(f"{o.id} is dated {o.requested_at}, in the future: request it again")
    life = parse_ts(o.expires_at) - parse_ts(o.requested_at)
    if life > policy.max_lifetime_s:
        raise ConfigError(f"{o.id} lasts {_duration(life)}, over the cap of policy "
                          f"{policy.name!r} ({_duration(policy.max_lifetime_s)})")
    unsigned = dataclasses.replace(o, approver=approver, approved_at=format_ts(t),
                                   acknowledgement=acknowledgement, signature="0" * 64)
    return dataclasses.replace(unsigned, signature=sign(unsigned, key))


def revoke(o: Override, who: str, now: float | None = None) -> Override:
    """Anyone may revoke (it only takes power away); revoked is final."""
    check_person("revoked_by", who)
    if o.revoked:
        raise ConfigError(f"{o.id} was already revoked by {o.revoked_by} at {o.revoked_at}")
    return dataclasses.replace(o, revoked_by=who, revoked_at=format_ts(_now(now)))


def verify(o: Override, policy: OverridePolicy, key: bytes | None,
           now: float | None = None) -> Check:
    """Whether the gate may honour `o` under `policy`, checked from scratch (files are
    untrusted: the signature proves nothing changed since the approver signed it)."""
    t = _now(now)
    if o.policy != policy.name:
        return Check(False, f"for policy {o.policy!r}, not {policy.name!r}")
    if o.revoked:
        return Check(False, f"revoked by {o.revoked_by} at {o.revoked_at}")
    if not o.approved or o.signature is None or o.approver is None:
        return Check(False, "pending: not approved")
    disabled = _disabled(policy)
    if disabled:
        return Check(False, disabled)
    if key is None:
        return Check(False, f"cannot verify the signature: {KEY_ENV} is not set")
    if not hmac.compare_digest(sign(o, key), o.signature):
        return Check(False, "signature does not match: edited after signing or signed with "
                            "another key")
    if t >= parse_ts(o.expires_at):
        return Check(False, f"expired at {o.expires_at}")
    if _same(o.approver, o.requester):
        return Check(False, f"self-approved by {o.approver}")
    if not _is_approver(o.approver, policy):
        return Check(False, f"approver {o.approver} is not an approver for policy "
                            f"{policy.name!r}")
    if o.acknowledgement != policy.acknowledgement:
        return Check(False, f"acknowledgement {o.acknowledgement!r} is not the policy's "
                            f"{policy.acknowledgement!r}")
    # In force from approval (or the request, if earlier) until expiry; a post-dated request
    # would otherwise outlive the cap. A few minutes of clock skew are forgiven.
    start = min(parse_ts(o.requested_at), parse_ts(o.approved_at or o.requested_at))
    life = parse_ts(o.expires_at) - start
    if life > policy.max_lifetime_s + CLOCK_SKEW_S:
        return Check(False, f"lifetime {_duration(life)} is over the cap of policy "
                            f"{policy.name!r} ({_duration(policy.max_lifetime_s)})")
    return Check(True, f"approved by {o.approver}, expires at {o.expires_at}")


def covers(o: Override, policy_name: str, check: str, node: str) -> bool:
    """Exact scope: same policy, same check name, and the node named in the override."""
    return o.policy == policy_name and o.check == check and node in o.nodes


def find_cover(overrides: Iterable[Override], policy_name: str, check: str,
               node: str) -> Override | None:
    """The first (valid, as returned by `effective`) override covering this check on node."""
    return next((o for o in overrides if covers(o, policy_name, check, node)), None)


def effective(overrides: Iterable[Override], policy: OverridePolicy, key: bytes | None,
              now: float | None = None) -> tuple[list[Override], list[tuple[Override, str]]]:
    """The overrides the gate honours, and those for this policy it ignores, with why.
    Overrides for other policies are not candidates and appear in neither list."""
    t = _now(now)
    valid: list[Override] = []
    ignored: list[tuple[Override, str]] = []
    for o in sorted(overrides, key=lambda x: x.id):
        if o.policy != policy.name:
            continue
        c = verify(o, policy, key, t)
        if c.valid:
            valid.append(o)
        else:
            ignored.append((o, c.reason))
    return valid, ignored


def effective_entries(entries: Iterable[tuple[Path, Override | OverrideFileError]],
                      policy: OverridePolicy, key: bytes | None, now: float | None = None
                      ) -> tuple[list[Override], list[tuple[str, str]]]:
    """`effective` over `OverrideStore.load_all()`: unreadable files are ignored too, as
    (file, why); ignored overrides as (id, why)."""
    loaded: list[Override] = []
    bad: list[tuple[str, str]] = []
    for path, item in entries:
        if isinstance(item, OverrideFileError):
            bad.append((str(path), str(item)))
        else:
            loaded.append(item)
    valid, ignored = effective(loaded, policy, key, now)
    return valid, bad + [(o.id, why) for o, why in ignored]


def state(o: Override, policy: OverridePolicy | None, key: bytes | None,
          now: float | None = None) -> str:
    """A one-word-ish state for listings: pending / active / expired / revoked / invalid: why."""
    t = _now(now)
    if o.revoked:
        return "revoked"
    if t >= parse_ts(o.expires_at):
        return "expired"
    if not o.approved:
        return "pending"
    if policy is None:
        return "invalid: policy not loaded"
    if key is None:
        return f"approved (unverified: {KEY_ENV} is not set)"
    c = verify(o, policy, key, t)
    return "active" if c.valid else f"invalid: {c.reason}"


def _duration(seconds: float) -> str:
    """604800 -> '1w', 90000 -> '1d1h', 18719 * 60 -> '12d23h59m'."""
    s = int(seconds)
    if s > 0 and s % 604800 == 0:
        return f"{s // 604800}w"
    out = ""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if s >= size:
            out += f"{s // size}{unit}"
            s %= size
    return out or "0s"


def request_message(o: Override) -> str:
    return (f"override request {o.id}: {o.check} on {hostlist.compress(list(o.nodes))} "
            f"by {o.requester}")


def approve_message(o: Override) -> str:
    return f"override approve {o.id} by {o.approver}"


def revoke_message(o: Override) -> str:
    return f"override revoke {o.id} by {o.revoked_by}"
