"""Two-person overrides: a failing gate check passes for named nodes, for a while, when two
people have signed for it with their own SSH keys.

A request (policy, check, nodes, reason, expiry, request time, its id) is signed by whoever asks;
an approval signs the same bytes plus the requester's signature, the policy's acknowledgement
sentence and the approval time. A revocation signs the override's id, a reason and a time.
Signatures are `ssh-keygen -Y sign` in the namespace `stetho-override` (stetho.gate.signatures);
who signed is whatever principal the policy's allowed signers file lists the key under, never a
name typed anywhere. This module holds the records and the exact bytes each signature covers;
stetho.gate.override_check decides whether the gate may honour one.

Records are files in a git repository (stetho.gate.override_store): `overrides/<id>.json` (the
request and its approvals, which are only ever appended) and `revocations/<id>.json`, read from
every commit in the history so that deleting, editing or reverting one does not undo it.
"""

from __future__ import annotations

import calendar
import dataclasses
import datetime
import functools
import hashlib
import json
import re
import secrets
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from stetho.core import hostlist
from stetho.errors import ConfigError
from stetho.gate.override_policy import OverridePolicy as OverridePolicy
from stetho.gate.signatures import valid_signature_text

SCHEMA = "stetho.override/2"
#: The HMAC-signed records of earlier versions: never trusted, reported as such.
OLD_SCHEMA = "stetho.override/1"
REVOCATION_SCHEMA = "stetho.revocation/1"
MAX_FILE_BYTES = 256 * 1024
MAX_APPROVALS = 8
#: How far the requester's, the approver's and the gate's clocks may disagree.
CLOCK_SKEW_S = 300

ID_RE = re.compile(r"^ovr-\d{8}T\d{6}Z-[0-9a-f]{6}$")
CHECK_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.:-]{0,127}$")
POLICY_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
TS_RE = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
_TS_FORMAT = "%Y-%m-%dT%H:%M:%SZ"

#: Makes a signature over some bytes (stetho.gate.signatures.sign with a key bound).
SignFn = Callable[[bytes], str]
#: Stands in for a signature while a record is checked, before anyone is asked to sign it.
_UNSIGNED = "-----BEGIN SSH SIGNATURE-----\nAA==\n-----END SSH SIGNATURE-----\n"


class OverrideFileError(ConfigError):
    """A file that is not a well-formed override or revocation: reported and ignored."""


@dataclass(frozen=True)
class Approval:
    """One approver's signature over the request, their acknowledgement and the time."""

    acknowledgement: str
    approved_at: str
    signature: str


@dataclass(frozen=True)
class Override:
    """A signed request and the approvals appended to it. Constructing one validates its
    form (not its signatures), so a malformed one never exists in memory."""

    id: str
    policy: str
    check: str
    nodes: tuple[str, ...]
    reason: str
    requested_at: str
    expires_at: str
    signature: str
    approvals: tuple[Approval, ...] = ()

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
        req = parse_ts(self.requested_at, "requested_at")
        _need(parse_ts(self.expires_at, "expires_at") > req,
              f"expires_at {self.expires_at} is not after requested_at {self.requested_at}")
        _need(valid_signature_text(self.signature), "signature is not an SSH signature")
        _need(len(self.approvals) <= MAX_APPROVALS, f"more than {MAX_APPROVALS} approvals")
        for a in self.approvals:
            parse_ts(a.approved_at, "approved_at")
            _need(isinstance(a.acknowledgement, str), "acknowledgement is not a string")
            _need(valid_signature_text(a.signature), "an approval's signature is not an SSH "
                                                     "signature")

    def to_dict(self) -> dict[str, object]:
        return {"schema": SCHEMA, "id": self.id, "policy": self.policy, "check": self.check,
                "nodes": list(self.nodes), "reason": self.reason,
                "requested_at": self.requested_at, "expires_at": self.expires_at,
                "signature": self.signature,
                "approvals": [{"acknowledgement": a.acknowledgement,
                               "approved_at": a.approved_at, "signature": a.signature}
                              for a in self.approvals]}

    def to_json(self) -> str:
        """Pretty, sorted JSON: files a person can read and git diffs that show what changed."""
        return json.dumps(self.to_dict(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"

    @classmethod
    def from_json(cls, text: str | bytes, source: str = "override") -> Override:
        """Parse and validate; anything wrong (garbage, the old HMAC format, missing or
        unknown fields, bad values) is an OverrideFileError naming `source`."""
        data = _object(text, source, SCHEMA)
        fields = ("id", "policy", "check", "nodes", "reason", "requested_at", "expires_at",
                  "signature", "approvals")
        t = _fields(data, fields, source)
        if not isinstance(data["nodes"], list) or not all(isinstance(v, str)
                                                         for v in data["nodes"]):
            raise OverrideFileError(f"{source}: nodes must be a list of strings")
        approvals = data["approvals"]
        if not isinstance(approvals, list):
            raise OverrideFileError(f"{source}: approvals must be a list")
        parsed = []
        for i, a in enumerate(approvals, 1):
            if not isinstance(a, dict):
                raise OverrideFileError(f"{source}: approval {i} is not an object")
            at = _fields(a, ("acknowledgement", "approved_at", "signature"),
                         f"{source}: approval {i}")
            parsed.append(Approval(at["acknowledgement"], at["approved_at"], at["signature"]))
        try:
            return cls(id=t["id"], policy=t["policy"], check=t["check"],
                       nodes=tuple(data["nodes"]), reason=t["reason"],
                       requested_at=t["requested_at"], expires_at=t["expires_at"],
                       signature=t["signature"], approvals=tuple(parsed))
        except ConfigError as exc:
            raise OverrideFileError(f"{source}: {exc}") from None


@dataclass(frozen=True)
class Revocation:
    """A signed 'stop honouring override <id>'. Permanent: once in the history, it counts."""

    override: str
    reason: str
    revoked_at: str
    signature: str

    def __post_init__(self) -> None:
        _need(ID_RE.match(self.override), f"override {self.override!r} is not an override id")
        _check_text("reason", self.reason)
        parse_ts(self.revoked_at, "revoked_at")
        _need(valid_signature_text(self.signature), "signature is not an SSH signature")

    def to_json(self) -> str:
        d = {"schema": REVOCATION_SCHEMA, "override": self.override, "reason": self.reason,
             "revoked_at": self.revoked_at, "signature": self.signature}
        return json.dumps(d, indent=2, sort_keys=True, ensure_ascii=False) + "\n"

    @classmethod
    def from_json(cls, text: str | bytes, source: str = "revocation") -> Revocation:
        data = _object(text, source, REVOCATION_SCHEMA)
        t = _fields(data, ("override", "reason", "revoked_at", "signature"), source)
        try:
            return cls(t["override"], t["reason"], t["revoked_at"], t["signature"])
        except ConfigError as exc:
            raise OverrideFileError(f"{source}: {exc}") from None


def _object(text: str | bytes, source: str, schema: str) -> dict[str, object]:
    try:
        if isinstance(text, bytes):
            text = text.decode("utf-8")
        data = json.loads(text, object_pairs_hook=_no_duplicates)
    except (ValueError, RecursionError) as exc:
        raise OverrideFileError(f"{source}: not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise OverrideFileError(f"{source}: expected a JSON object, got {type(data).__name__}")
    found = data.pop("schema", None)
    if found == OLD_SCHEMA:
        raise OverrideFileError(f"{source}: an override in the old shared-key (HMAC) format "
                                f"({OLD_SCHEMA}), which proves nothing about who approved it: "
                                "ignored; request it again, signed with your own SSH key")
    if found != schema:
        raise OverrideFileError(f"{source}: unknown schema {found!r} (this stetho reads "
                                f"{schema!r})")
    return data


def _fields(data: dict[str, object], names: tuple[str, ...], source: str) -> dict[str, str]:
    """Exactly these fields, each a string except the lists `nodes` and `approvals`; returns
    the strings."""
    missing = [n for n in names if n not in data]
    if missing:
        raise OverrideFileError(f"{source}: missing field(s): {', '.join(missing)}")
    unknown = sorted(set(data) - set(names))
    if unknown:
        raise OverrideFileError(f"{source}: unknown field(s): {', '.join(unknown)}")
    for name in names:
        if name not in ("nodes", "approvals") and not isinstance(data[name], str):
            raise OverrideFileError(f"{source}: field {name!r} must be a string, got "
                                    f"{type(data[name]).__name__}")
    return {k: v for k, v in data.items() if isinstance(v, str)}


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


def format_ts(ts: float) -> str:
    return time.strftime(_TS_FORMAT, time.gmtime(int(ts)))


@functools.lru_cache(maxsize=4096)
def parse_ts(text: str, what: str = "timestamp") -> int:
    """'2026-12-02T10:15:00Z' -> epoch seconds; nothing else is accepted. (Cached, and not
    through strptime: a gate reads every timestamp of every override.)"""
    if not isinstance(text, str) or not TS_RE.match(text):
        raise ConfigError(f"{what} {text!r} is not an ISO-8601 UTC time like "
                          "2026-12-02T10:15:00Z")
    try:
        when = datetime.datetime(int(text[0:4]), int(text[5:7]), int(text[8:10]),
                                 int(text[11:13]), int(text[14:16]), int(text[17:19]))
    except ValueError:
        raise ConfigError(f"{what} {text!r} is not a valid date and time") from None
    return calendar.timegm(when.timetuple())


def _now(now: float | None) -> float:
    return time.time() if now is None else now


# -- the signed bytes --------------------------------------------------------------------------

def _canonical(d: dict[str, object]) -> bytes:
    return json.dumps(d, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def _scope(o: Override) -> dict[str, object]:
    return {"schema": SCHEMA, "id": o.id, "policy": o.policy, "check": o.check,
            "nodes": sorted(o.nodes), "reason": o.reason, "requested_at": o.requested_at,
            "expires_at": o.expires_at}


def request_bytes(o: Override) -> bytes:
    """What the requester signs: the id (so a revocation of it cannot be dodged by filing the
    same signatures again under a new id), the scope, the reason and both times."""
    return _canonical({"kind": "request", **_scope(o)})


def approval_bytes(o: Override, acknowledgement: str, approved_at: str) -> bytes:
    """What an approver signs: the request's bytes, the requester's very signature, the
    acknowledgement and the approval time."""
    return _canonical({"kind": "approval", **_scope(o),
                       "request_signature": hashlib.sha256(o.signature.encode()).hexdigest(),
                       "acknowledgement": acknowledgement, "approved_at": approved_at})


def revocation_bytes(r: Revocation) -> bytes:
    return _canonical({"kind": "revocation", "schema": REVOCATION_SCHEMA,
                       "override": r.override, "reason": r.reason, "revoked_at": r.revoked_at})


# -- making records ----------------------------------------------------------------------------

def new_id(now: float) -> str:
    return f"ovr-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime(int(now)))}-{secrets.token_hex(3)}"


def request(policy: OverridePolicy, check: str, nodes: Iterable[str], reason: str,
            expires_s: float, sign: SignFn, now: float | None = None) -> Override:
    """A signed request. Expiry is mandatory and within the policy's cap."""
    t = int(_now(now))
    disabled = policy.disabled()
    if disabled:
        raise ConfigError(disabled)
    if not isinstance(expires_s, (int, float)) or expires_s != expires_s or expires_s <= 0:
        raise ConfigError(f"an override must expire: expiry {expires_s!r}s is not > 0")
    if expires_s > policy.max_lifetime_s:
        raise ConfigError(f"expiry {duration(expires_s)} is over the cap of policy "
                          f"{policy.name!r} ({duration(policy.max_lifetime_s)})")
    if int(expires_s) < 1:
        raise ConfigError("an override must last at least 1 second")
    names = list(nodes) if not isinstance(nodes, str) else [nodes]
    if not names:
        raise ConfigError("an override names at least one node")
    for n in names:
        hostlist.validate(n)
    _check_text("reason", reason)
    unsigned = Override(id=new_id(t), policy=policy.name, check=check, nodes=tuple(names),
                        reason=reason, requested_at=format_ts(t),
                        expires_at=format_ts(t + int(expires_s)), signature=_UNSIGNED)
    return dataclasses.replace(unsigned, signature=sign(request_bytes(unsigned)))


def approval(o: Override, policy: OverridePolicy, acknowledgement: str, sign: SignFn,
             now: float | None = None) -> Approval:
    """A signed approval of `o`, refused (saying why) where the record alone shows the gate
    would not honour it; who signed is checked by stetho.gate.override_check."""
    t = int(_now(now))
    if o.policy != policy.name:
        raise ConfigError(f"{o.id} is for policy {o.policy!r}, not {policy.name!r}")
    disabled = policy.disabled()
    if disabled:
        raise ConfigError(disabled)
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
        raise ConfigError(f"{o.id} lasts {duration(life)}, over the cap of policy "
                          f"{policy.name!r} ({duration(policy.max_lifetime_s)})")
    if len(o.approvals) >= MAX_APPROVALS:
        raise ConfigError(f"{o.id} already holds {MAX_APPROVALS} approvals")
    at = format_ts(t)
    return Approval(acknowledgement, at, sign(approval_bytes(o, acknowledgement, at)))


def with_approval(o: Override, a: Approval) -> Override:
    return dataclasses.replace(o, approvals=(*o.approvals, a))


def revocation(override_id: str, reason: str, sign: SignFn,
               now: float | None = None) -> Revocation:
    unsigned = Revocation(override_id, reason, format_ts(_now(now)), _UNSIGNED)
    return dataclasses.replace(unsigned, signature=sign(revocation_bytes(unsigned)))


def covers(o: Override, policy_name: str, check: str, node: str) -> bool:
    """Exact scope: same policy, same check name, and the node named in the override."""
    return o.policy == policy_name and o.check == check and node in o.nodes


def duration(seconds: float) -> str:
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
