"""Where overrides live: a git repository (stetho.publish.gitstore), so CI runners and people
see the same set and git keeps the audit trail.

`overrides/<id>.json` holds a signed request and the approvals appended to it; the request
never changes and approvals are never removed or replaced. `revocations/<id>.json` is written
once, and read from **every version in the history** (stetho.publish.githistory), however it
arrived (a rename, a merge); a valid revocation at any other path counts too. Deleting the
file, editing it or `git revert` of its commit does not bring the override back, and what was
seen once is kept in stetho's own record, so neither does a rewritten history. Every write is
decided on the freshly pulled state and made again if another writer pushed first, so an
approval never lands on top of a revocation it did not see.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path

from stetho.core import atomic
from stetho.errors import ConfigError
from stetho.gate import revocation_record
from stetho.gate.override_check import RevocationVersion
from stetho.gate.overrides import (
    ID_RE,
    MAX_FILE_BYTES,
    REVOCATION_SCHEMA,
    Approval,
    Override,
    OverrideFileError,
    Revocation,
    with_approval,
)
from stetho.publish import githistory, gitstore
from stetho.publish.gitstore import GitError

__all__ = ["GitError", "OverrideStore", "Snapshot"]


@dataclass
class Snapshot:
    """The repository as read: its clone (`root`, for the trust-root check), every override
    file (or why it cannot be read), every revocation ever committed, history files under
    revocations/ that are not named for an override, and why none may be honoured at all."""

    root: Path
    entries: list[tuple[Path, Override | OverrideFileError]] = field(default_factory=list)
    revocations: list[RevocationVersion] = field(default_factory=list)
    stray: list[tuple[Path, str]] = field(default_factory=list)
    #: Why the history cannot be trusted to hold every revocation (a shallow clone).
    problem: str | None = None

    def overrides(self) -> list[Override]:
        return [o for _, o in self.entries if isinstance(o, Override)]

    def unreadable(self) -> list[tuple[Path, str]]:
        return [(p, str(e)) for p, e in self.entries if isinstance(e, OverrideFileError)] \
            + self.stray

    def get(self, override_id: str) -> Override:
        """One override by id, as read; refused when it is missing or unreadable."""
        for path, item in self.entries:
            if path.name == _file_name(override_id):
                if isinstance(item, OverrideFileError):
                    raise item
                return item
        raise ConfigError(f"no override {override_id} in the override repository")

    def revoked(self, override_id: str) -> list[RevocationVersion]:
        return [r for r in self.revocations if r.override == override_id]


#: A last look at the pulled state before a write, inside the transaction: raises to refuse.
Guard = Callable[[Override, Snapshot], None]


def _refused_transition(cur: Override | None, new: Override) -> str | None:
    """Why `cur` may not become `new` (None when it may): the signed request never changes
    and approvals are only appended."""
    if cur is None:
        return None
    core = ("id", "policy", "check", "nodes", "reason", "requested_at", "expires_at",
            "signature")
    if any(getattr(cur, f) != getattr(new, f) for f in core):
        return (f"{cur.id} would change the request itself (scope, reason, expiry or its "
                "signature): make a new request instead")
    if new.approvals[:len(cur.approvals)] != cur.approvals:
        return f"{cur.id} would lose or change an approval it holds: approvals are only added"
    return None


class OverrideStore:
    """Overrides in a git repository: a local working clone, or a URL (or bare repository
    path) used through stetho's cached clone. Reads pull first; writes commit and push,
    deciding again on the pulled state when another writer got there first."""

    DIR = "overrides"
    REVOCATIONS = "revocations"

    def __init__(self, repo: str, *, branch: str | None = None) -> None:
        if not repo or not repo.strip():
            raise ConfigError("no override repository given (--repo or STETHO_OVERRIDE_REPO)")
        self.repo = gitstore.check_repo(repo.strip(), "override repository")
        self.branch = branch
        kind, _ = gitstore.kind(self.repo)
        if kind == "plain" or (not gitstore.is_remote(self.repo)
                               and not Path(self.repo).expanduser().exists()):
            raise ConfigError(f"override repository {self.repo!r} is neither a git working "
                              "clone nor a URL")

    def _open(self) -> AbstractContextManager[gitstore.Clone]:
        return gitstore.open_clone(self.repo, purpose="override", branch=self.branch)

    # -- reading ---------------------------------------------------------------------------

    def read(self) -> Snapshot:
        """Every override file and every revocation in the history, pulled fresh."""
        with self._open() as clone:
            return self._snapshot(clone, with_entries=True)

    def get(self, override_id: str) -> Override:
        """One override by id, pulled fresh."""
        with self._open() as clone:
            return self._current(clone, override_id)

    # -- writing ---------------------------------------------------------------------------

    def save(self, o: Override, message: str) -> Override:
        """Write, commit and push `o` (a new request, or one with approvals appended).
        Refused if it would change a stored request or drop an approval."""
        return self._commit(o.id, lambda cur, _: o, message)

    def add_approval(self, override_id: str, a: Approval, guard: Guard,
                     message: str) -> Override:
        """Append `a` to the pulled override once `guard` (run again after every lost push
        race) is content with what is there now."""
        def produce(cur: Override | None, snap: Snapshot) -> Override:
            if cur is None:
                raise ConfigError(f"no override {override_id} in {self.repo}")
            guard(cur, snap)
            return with_approval(cur, a)
        return self._commit(override_id, produce, message)

    def revoke(self, r: Revocation, guard: Guard, message: str) -> Revocation:
        """Write `revocations/<id>.json`, once: refused when the history already revokes it."""
        rel = f"{self.REVOCATIONS}/{_file_name(r.override)}"

        def change(clone: gitstore.Clone) -> str | None:
            snap = self._snapshot(clone, with_entries=False)
            cur = self._current(clone, r.override)
            earlier = snap.revoked(r.override)
            if earlier:
                raise ConfigError(f"{r.override} is already revoked (commit "
                                  f"{earlier[0].commit[:12]}); a revocation is permanent")
            guard(cur, snap)
            _write(clone, rel, r.to_json())
            return message

        with self._open() as clone:
            clone.transact(change, what=f"revocation of {r.override}")
        return r

    # -- internals -------------------------------------------------------------------------

    def _snapshot(self, clone: gitstore.Clone, *, with_entries: bool) -> Snapshot:
        snap = Snapshot(clone.path)
        if clone.out("rev-parse", "--is-shallow-repository") == "true":
            snap.problem = (f"the override repository {clone.path} is a shallow clone: a "
                            "revocation older than its history would be missed, so none is "
                            "honoured (clone it in full, or give stetho its URL)")
        folder = clone.path / self.DIR
        if with_entries and folder.is_dir():
            snap.entries = [(p, _read_file(p)) for p in sorted(folder.glob("*.json"))]
        # Every version of every file on the branch, however it arrived (a rename, a merge):
        # a revocation counts by its content wherever it sits.
        for commit, rel, data in githistory.every_version(clone, None, MAX_FILE_BYTES):
            self._version(snap, clone.path, commit, rel, data)
        try:
            snap.revocations += revocation_record.merge(
                revocation_record.default_path(), snap.revocations, self.repo)
        except ConfigError as exc:
            snap.problem = snap.problem or f"{exc}: no override is honoured"
        return snap

    def _version(self, snap: Snapshot, root: Path, commit: str, rel: str,
                 data: bytes | None) -> None:
        """One file version: `revocations/<id>.json` revokes `<id>` whatever it holds; a
        valid revocation anywhere else revokes what it names; other files under
        revocations/ are named as strays."""
        oid = Path(rel).name.removesuffix(".json")
        canonical = Path(rel) == Path(self.REVOCATIONS, f"{oid}.json") and ID_RE.match(oid)
        if not canonical:
            got = _revocation(data, rel)
            if got is not None:
                snap.revocations.append(RevocationVersion(got.override, commit, got))
            elif Path(rel).parts[0] == self.REVOCATIONS:
                snap.stray.append((root / rel, f"{rel} (commit {commit[:12]}): not "
                                   f"{self.REVOCATIONS}/<override id>.json: not read"))
            return
        try:
            if data is None:
                raise OverrideFileError(f"{rel}: larger than {MAX_FILE_BYTES} bytes")
            got = Revocation.from_json(data, rel)
            if got.override != oid:
                raise OverrideFileError(f"{rel}: it revokes {got.override}, not {oid}")
            snap.revocations.append(RevocationVersion(oid, commit, got))
        except OverrideFileError as exc:
            snap.revocations.append(RevocationVersion(oid, commit, None, str(exc)))

    def _current(self, clone: gitstore.Clone, override_id: str) -> Override:
        path = clone.path / self.DIR / _file_name(override_id)
        if not path.exists() and not path.is_symlink():
            raise ConfigError(f"no override {override_id} in {self.repo}")
        got = _read_file(path)
        if isinstance(got, OverrideFileError):
            raise got
        return got

    def _commit(self, override_id: str,
                produce: Callable[[Override | None, Snapshot], Override],
                message: str) -> Override:
        rel = f"{self.DIR}/{_file_name(override_id)}"
        stored: list[Override] = []

        def change(clone: gitstore.Clone) -> str | None:
            path = clone.path / rel
            cur: Override | None = None
            if path.exists() or path.is_symlink():
                got = _read_file(path)
                if isinstance(got, OverrideFileError):
                    raise ConfigError(f"cannot update {got}; fix or remove the file by hand")
                cur = got
            new = produce(cur, self._snapshot(clone, with_entries=False))
            if new.id != override_id:
                raise ConfigError(f"override {new.id} cannot be stored as {override_id}")
            why = _refused_transition(cur, new)
            if why:
                raise ConfigError(why)
            stored[:] = [new]
            if cur == new:
                return None
            _write(clone, rel, new.to_json())
            return message

        with self._open() as clone:
            clone.transact(change, what=f"override {override_id}")
        return stored[0]


def _write(clone: gitstore.Clone, rel: str, text: str) -> None:
    path = clone.path / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic.write(path, text)
    clone.git("add", "--", rel)


def _revocation(data: bytes | None, rel: str) -> Revocation | None:
    """A valid revocation record in a file that is not `revocations/<id>.json`, or None."""
    if data is None or REVOCATION_SCHEMA.encode() not in data:
        return None
    try:
        return Revocation.from_json(data, rel)
    except OverrideFileError:
        return None


def _file_name(override_id: str) -> str:
    if not isinstance(override_id, str) or not ID_RE.match(override_id):
        raise ConfigError(f"{override_id!r} is not an override id (ovr-YYYYMMDDTHHMMSSZ-xxxxxx)")
    return f"{override_id}.json"


def _read_file(path: Path) -> Override | OverrideFileError:
    rel = f"{OverrideStore.DIR}/{path.name}"
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
