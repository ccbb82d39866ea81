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
import fcntl
import hashlib
import hmac
import json
import os
import random
import re
import secrets
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from stetho.core import hostlist
from stetho.errors import ConfigError, StethoError

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


class GitError(StethoError):
    """A git command of the override store failed; the message names the command and stderr."""


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


# -- the git store -------------------------------------------------------------------------------

PUSH_TRIES = 20
MAX_BACKOFF_S = 2.0
GIT_TIMEOUT_S = 120.0
LOCK_TIMEOUT_S = 300.0
_URL_RE = re.compile(r"^(?:[A-Za-z][A-Za-z0-9+.-]*://|[A-Za-z0-9._-]+@[A-Za-z0-9._-]+:)")
#: Variables that point git at another repository (set, e.g., when stetho runs in a git hook).
_REPO_ENV = frozenset({"GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY",
                       "GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_COMMON_DIR", "GIT_NAMESPACE",
                       "GIT_PREFIX", "GIT_QUARANTINE_PATH", "GIT_CEILING_DIRECTORIES"})
#: What git (LC_ALL=C) says when another push got there first.
_PUSH_RACE = ("[rejected]", "fetch first", "non-fast-forward", "cannot lock ref",
              "failed to update ref", "incorrect old value", "stale info")
_AUTHOR_RE = re.compile(r"^\s*([^<>]+?)\s*<([^<>\s]+)>\s*$")


def _refused_transition(cur: Override | None, new: Override) -> str | None:
    """Why `cur` may not become `new` (None when it may): the request itself never changes,
    an approval is never replaced and a revocation is never undone."""
    if cur is None:
        return None
    core = ("policy", "check", "nodes", "reason", "requester", "requested_at", "expires_at")
    if any(getattr(cur, f) != getattr(new, f) for f in core) or cur.id != new.id:
        return (f"{cur.id} would change the request itself (scope, reason or expiry): make a "
                "new request instead")
    approval = ("approver", "approved_at", "acknowledgement", "signature")
    if cur.approved and any(getattr(cur, f) != getattr(new, f) for f in approval):
        return f"{cur.id} is already approved by {cur.approver} at {cur.approved_at}"
    if cur.revoked and (cur.revoked_by, cur.revoked_at) != (new.revoked_by, new.revoked_at):
        return f"{cur.id} was revoked by {cur.revoked_by} at {cur.revoked_at}"
    return None


class OverrideStore:
    """`overrides/<id>.json` in a git repository: a local working clone, or a URL (or bare
    repository path) cloned into `$STETHO_CACHE/override-repos/<hash>`. Reads pull first;
    writes commit and push, rebasing and retrying when another writer got there first.
    A file lock serialises stetho processes sharing one clone."""

    DIR = "overrides"

    def __init__(self, repo: str, *, branch: str | None = None) -> None:
        if not repo or not repo.strip():
            raise ConfigError("no override repository given (--repo or STETHO_OVERRIDE_REPO)")
        self.repo = repo.strip()
        self.branch = branch
        local = Path(self.repo).expanduser()
        if not _URL_RE.match(self.repo) and (local / ".git").exists():
            self.url: str | None = None
            self.path = local.resolve()
            git_dir = self.path / ".git"
            if not git_dir.is_dir():  # a linked worktree: .git is a file naming the real one
                git_dir = Path(self._git("rev-parse", "--git-common-dir").strip())
                git_dir = git_dir if git_dir.is_absolute() else (self.path / git_dir).resolve()
            self._lock_path = git_dir / "stetho-overrides.lock"
        elif _URL_RE.match(self.repo) or local.is_dir():
            self.url = self.repo if _URL_RE.match(self.repo) else str(local.resolve())
            digest = hashlib.sha256(f"{self.url}\0{branch or ''}".encode()).hexdigest()[:16]
            from stetho import config

            root = config.active().cache / "override-repos"
            self.path = root / digest
            self._lock_path = root / f"{digest}.lock"
        else:
            raise ConfigError(f"override repository {self.repo!r} is neither a git working "
                              "clone nor a URL")
        self._ready = False
        self._where_cache: tuple[str | None, str] | None = None

    # -- public ----------------------------------------------------------------------------

    def load_all(self) -> list[tuple[Path, Override | OverrideFileError]]:
        """Every file in overrides/, pulled fresh; an unreadable one comes back as its error."""
        with self._locked():
            self._sync()
            folder = self.path / self.DIR
            if not folder.is_dir():
                return []
            return [(p, self._read_file(p)) for p in sorted(folder.glob("*.json"))]

    def get(self, override_id: str) -> Override:
        """One override by id, pulled fresh."""
        path = self._file(override_id)
        with self._locked():
            self._sync()
            if not path.exists() and not path.is_symlink():
                raise ConfigError(f"no override {override_id} in {self.repo}")
            got = self._read_file(path)
        if isinstance(got, OverrideFileError):
            raise got
        return got

    def save(self, o: Override, message: str) -> Override:
        """Write, commit and push `o`. Refused if it would change a stored request, replace an
        approval or undo a revocation (checked against the freshly pulled file)."""
        def produce(cur: Override | None) -> Override:
            return o
        return self._commit(o.id, produce, lambda _: message)

    def update(self, override_id: str, change: Callable[[Override], Override],
               message: Callable[[Override], str]) -> Override:
        """Read-modify-write: `change` is applied to the freshly pulled override, again after
        every rejected push, so a concurrent approval or revocation is never overwritten."""
        def produce(cur: Override | None) -> Override:
            if cur is None:
                raise ConfigError(f"no override {override_id} in {self.repo}")
            return change(cur)
        return self._commit(override_id, produce, message)

    # -- internals -------------------------------------------------------------------------

    def _file(self, override_id: str) -> Path:
        if not isinstance(override_id, str) or not ID_RE.match(override_id):
            raise ConfigError(f"{override_id!r} is not an override id "
                              "(ovr-YYYYMMDDTHHMMSSZ-xxxxxx)")
        return self.path / self.DIR / f"{override_id}.json"

    def _read_file(self, path: Path) -> Override | OverrideFileError:
        rel = f"{self.DIR}/{path.name}"
        try:
            if path.is_symlink() or not path.is_file():
                return OverrideFileError(f"{rel}: not a regular file")
            if path.stat().st_size > MAX_FILE_BYTES:
                return OverrideFileError(f"{rel}: larger than {MAX_FILE_BYTES} bytes")
            data = path.read_bytes()
        except OSError as exc:
            return OverrideFileError(f"{rel}: cannot read: {exc.strerror or exc}")
        try:
            o = Override.from_json(data, rel)
        except OverrideFileError as exc:
            return exc
        if path.name != f"{o.id}.json":
            return OverrideFileError(f"{rel}: holds override {o.id}, not the one its name says")
        return o

    def _commit(self, override_id: str, produce: Callable[[Override | None], Override],
                message: Callable[[Override], str]) -> Override:
        path = self._file(override_id)
        rel = f"{self.DIR}/{path.name}"
        last_error = ""
        with self._locked():
            self._ensure_clone()
            author = self._author_env()  # no identity: refuse before touching anything
            remote, _ = self._where()
            for attempt in range(PUSH_TRIES):
                self._sync()
                cur: Override | None = None
                if path.exists() or path.is_symlink():
                    got = self._read_file(path)
                    if isinstance(got, OverrideFileError):
                        raise ConfigError(f"cannot update {got}; fix or remove the file by hand")
                    cur = got
                new = produce(cur)
                if new.id != override_id:
                    raise ConfigError(f"override {new.id} cannot be stored as {override_id}")
                why = _refused_transition(cur, new)
                if why:
                    raise ConfigError(why)
                if cur == new and self._committed(rel):
                    return new
                before = self._head()
                in_head = before is not None and self._committed(rel, exists=True)
                try:
                    path.parent.mkdir(parents=True, exist_ok=True)
                    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
                    tmp.write_text(new.to_json(), encoding="utf-8")
                    os.replace(tmp, path)
                    self._git("add", "--", rel)
                    self._git("commit", "-q", "-m", message(new), "--", rel, env=author)
                except BaseException:
                    self._undo_write(rel, path, in_head)
                    raise
                if remote is None:
                    return new
                pushed, retry, last_error = self._push()
                if pushed:
                    return new
                # Drop our commit: nothing half-stored; on a rejection pull theirs and decide
                # again on what is there now.
                if before is None:
                    self._git("update-ref", "-d", "HEAD")
                    self._git("rm", "-q", "--cached", "--", rel)
                    path.unlink(missing_ok=True)
                else:
                    self._git("reset", "-q", "--keep", before)
                if not retry:
                    raise GitError(f"nothing stored: {last_error}")
                # Full-jitter exponential backoff, so a slow writer is not starved by fast ones.
                time.sleep(random.uniform(0, min(MAX_BACKOFF_S, 0.1 * 2 ** attempt)))
        raise GitError(f"nothing stored: the push of {override_id} to {self.repo} was rejected "
                       f"{PUSH_TRIES} times (others kept pushing first); last error: "
                       f"{last_error}")

    def _committed(self, rel: str, exists: bool = False) -> bool:
        """Whether `rel` is in HEAD (exists=True), or unchanged from HEAD in index and tree."""
        if exists:
            return self._run(["cat-file", "-e", f"HEAD:{rel}"]).returncode == 0
        return not self._git("status", "--porcelain", "--", rel).strip()

    def _undo_write(self, rel: str, path: Path, in_head: bool) -> None:
        """A failed commit leaves nothing behind that a later save would mistake for stored."""
        if in_head:
            self._run(["checkout", "-q", "HEAD", "--", rel])
        else:
            self._run(["rm", "-q", "--cached", "--ignore-unmatch", "--", rel])
            path.unlink(missing_ok=True)

    def _push(self) -> tuple[bool, bool, str]:
        """(pushed, worth retrying after a pull, the error). Someone else having pushed first
        is worth retrying; no access or no network is not."""
        remote, branch = self._where()
        assert remote is not None
        argv = ["push", "-q", remote, f"HEAD:refs/heads/{branch}"]
        proc = self._run(argv)
        out = proc.stderr or proc.stdout
        retry = any(m in out for m in _PUSH_RACE)
        return proc.returncode == 0, retry, f"`git {' '.join(argv)}` failed: {_tail(out)}"

    def _sync(self) -> None:
        """`git pull --rebase`, done as fetch + rebase so an empty remote or a not yet pushed
        branch is not an error."""
        self._ensure_clone()
        remote, branch = self._where()
        if remote is None:
            return
        self._git("fetch", "-q", remote, timeout=GIT_TIMEOUT_S)
        upstream = f"refs/remotes/{remote}/{branch}"
        if self._run(["rev-parse", "--verify", "-q", upstream]).returncode != 0:
            return  # nothing pushed to that branch yet
        if self._head() is None:
            self._git("checkout", "-q", "-B", branch, upstream)
            return
        proc = self._run(["rebase", "-q", "--autostash", upstream],
                         env=self._author_env(committer_only=True))
        if proc.returncode != 0:
            self._run(["rebase", "--abort"])
            raise GitError(f"git pull --rebase of {self.repo} ({self.path}) failed: "
                           f"git rebase {upstream}: {_tail(proc.stderr or proc.stdout)}; "
                           "resolve it by hand in that clone")

    def _ensure_clone(self) -> None:
        if self._ready:
            return
        if self.url is None:
            cur = self._current_branch()
            if self.branch is not None and cur != self.branch:
                raise ConfigError(f"override repository {self.path} is on branch {cur!r}, "
                                  f"not {self.branch!r}: switch it by hand")
            self._ready = True
            return
        if self.path.exists():
            probe = self._run(["rev-parse", "--show-toplevel"])
            top = Path(probe.stdout.strip()).resolve()
            if probe.returncode == 0 and top == self.path.resolve():
                self._ready = True
                return
            shutil.rmtree(self.path)  # a broken cache clone of ours: start over
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{self.path.name}.", dir=self.path.parent))
        argv = ["clone", "-q"]
        if self.branch:
            # --branch fails on an empty remote; checkout -B after clone handles both.
            argv += ["--no-checkout"]
        argv += ["--", self.url, str(tmp / "repo")]
        try:
            self._git(*argv, cwd=tmp, timeout=GIT_TIMEOUT_S)
            os.replace(tmp / "repo", self.path)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        if self.branch:
            upstream = f"refs/remotes/origin/{self.branch}"
            if self._run(["rev-parse", "--verify", "-q", upstream]).returncode == 0:
                self._git("checkout", "-q", "-f", "-B", self.branch, upstream)
            else:
                self._git("symbolic-ref", "HEAD", f"refs/heads/{self.branch}")
        self._ready = True

    def _current_branch(self) -> str:
        proc = self._run(["symbolic-ref", "-q", "--short", "HEAD"])
        if proc.returncode != 0:
            raise ConfigError(f"override repository {self.path} is not on a branch "
                              "(detached HEAD): check out its branch")
        return proc.stdout.strip()

    def _branch(self) -> str:
        return self.branch or self._current_branch()

    def _where(self) -> tuple[str | None, str]:
        """(remote or None, branch), looked up once per store: they do not change under us."""
        if self._where_cache is None:
            self._where_cache = (self._remote(), self._branch())
        return self._where_cache

    def _remote(self) -> str | None:
        remotes = self._git("remote").split()
        if not remotes:
            return None
        configured = self._run(["config", f"branch.{self._branch()}.remote"]).stdout.strip()
        if configured in remotes:
            return configured
        if "origin" in remotes:
            return "origin"
        if len(remotes) == 1:
            return remotes[0]
        raise ConfigError(f"override repository {self.path} has several remotes "
                          f"({', '.join(remotes)}) and none is 'origin' or the branch's upstream")

    def _head(self) -> str | None:
        proc = self._run(["rev-parse", "--verify", "-q", "HEAD"])
        return proc.stdout.strip() if proc.returncode == 0 else None

    def _author_env(self, committer_only: bool = False) -> dict[str, str]:
        """STETHO_GIT_AUTHOR 'Name <email>' wins; else git's own configured identity. A rebase
        only needs a committer (the commits it replays keep their authors)."""
        from stetho import config

        raw = config.active().git_author
        if raw:
            m = _AUTHOR_RE.match(raw)
            if not m:
                raise ConfigError(f"{AUTHOR_ENV}={raw!r}: expected 'Name <email>'")
            name, email = m.groups()
            env = {"GIT_COMMITTER_NAME": name, "GIT_COMMITTER_EMAIL": email}
            if not committer_only:
                env.update({"GIT_AUTHOR_NAME": name, "GIT_AUTHOR_EMAIL": email})
            return env
        if committer_only:
            return {}
        for var in ("GIT_AUTHOR_IDENT", "GIT_COMMITTER_IDENT"):
            if self._run(["var", var]).returncode != 0:
                raise ConfigError("git has no identity to commit overrides with: set "
                                  "`git config user.name` and `git config user.email`, or "
                                  f"{AUTHOR_ENV}='Name <email>'")
        return {}

    @contextmanager
    def _locked(self) -> Iterator[None]:
        self._lock_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self._lock_path, "a+") as fh:
            deadline = time.monotonic() + LOCK_TIMEOUT_S
            while True:
                try:
                    fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise StethoError(f"timed out waiting for {self._lock_path}: another "
                                          "stetho is using this override repository") from None
                    time.sleep(0.05)
            try:
                yield
            finally:
                fcntl.flock(fh.fileno(), fcntl.LOCK_UN)

    def _run(self, argv: list[str], *, cwd: Path | None = None, env: dict[str, str] | None = None,
             timeout: float = GIT_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
        full = ["git", *argv]
        from stetho import config

        child_env = config.child_environment({"GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C",
                                              "GIT_EDITOR": "true", **(env or {})}, _REPO_ENV)
        try:
            return subprocess.run(full, cwd=cwd or self.path, env=child_env, text=True,
                                  capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL)
        except FileNotFoundError:
            raise GitError("git is not installed (needed for the override repository)") from None
        except subprocess.TimeoutExpired:
            raise GitError(f"`{' '.join(full)}` in {cwd or self.path} took longer than "
                           f"{timeout:.0f}s") from None
        except OSError as exc:
            raise GitError(f"`{' '.join(full)}` in {cwd or self.path}: {exc}") from None

    def _git(self, *argv: str, cwd: Path | None = None, env: dict[str, str] | None = None,
             timeout: float = GIT_TIMEOUT_S) -> str:
        proc = self._run(list(argv), cwd=cwd, env=env, timeout=timeout)
        if proc.returncode != 0:
            raise GitError(f"`git {' '.join(argv)}` in {cwd or self.path} failed "
                           f"(exit {proc.returncode}): {_tail(proc.stderr or proc.stdout)}")
        return proc.stdout


def _tail(text: str, limit: int = 800) -> str:
    text = (text or "").strip()
    return text if len(text) <= limit else "..." + text[-limit:]


def request_message(o: Override) -> str:
    return (f"override request {o.id}: {o.check} on {hostlist.compress(list(o.nodes))} "
            f"by {o.requester}")


def approve_message(o: Override) -> str:
    return f"override approve {o.id} by {o.approver}"


def revoke_message(o: Override) -> str:
    return f"override revoke {o.id} by {o.revoked_by}"
