"""Where overrides live: `overrides/<id>.json` in a git repository (stetho.publish.gitstore),
so CI runners and people see the same set and git keeps the audit trail.

Stored overrides only ever move forward: pending -> approved, and anything -> revoked. Every
write is decided on the freshly pulled file and made again if another writer pushed first, so
a concurrent approval never overwrites a revocation.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

from stetho.errors import ConfigError
from stetho.gate.overrides import ID_RE, MAX_FILE_BYTES, Override, OverrideFileError
from stetho.publish import gitstore
from stetho.publish.gitstore import GitError

__all__ = ["GitError", "OverrideStore"]

AUTHOR_ENV = "STETHO_GIT_AUTHOR"
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
    repository path) used through stetho's cached clone. Reads pull first; writes commit and
    push, deciding again on the pulled state when another writer got there first."""

    DIR = "overrides"

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

    def _open(self, env: dict[str, str] | None = None
              ) -> AbstractContextManager[gitstore.Clone]:
        return gitstore.open_clone(self.repo, purpose="override", branch=self.branch, env=env)

    # -- public ----------------------------------------------------------------------------

    def load_all(self) -> list[tuple[Path, Override | OverrideFileError]]:
        """Every file in overrides/, pulled fresh; an unreadable one comes back as its error."""
        with self._open() as clone:
            folder = clone.path / self.DIR
            if not folder.is_dir():
                return []
            return [(p, _read_file(p)) for p in sorted(folder.glob("*.json"))]

    def get(self, override_id: str) -> Override:
        """One override by id, pulled fresh."""
        name = _file_name(override_id)
        with self._open() as clone:
            path = clone.path / self.DIR / name
            if not path.exists() and not path.is_symlink():
                raise ConfigError(f"no override {override_id} in {self.repo}")
            got = _read_file(path)
        if isinstance(got, OverrideFileError):
            raise got
        return got

    def save(self, o: Override, message: str) -> Override:
        """Write, commit and push `o`. Refused if it would change a stored request, replace an
        approval or undo a revocation (checked against the freshly pulled file)."""
        return self._commit(o.id, lambda cur: o, lambda _: message)

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

    def _commit(self, override_id: str, produce: Callable[[Override | None], Override],
                message: Callable[[Override], str]) -> Override:
        name = _file_name(override_id)
        rel = f"{self.DIR}/{name}"
        stored: list[Override] = []

        def change(clone: gitstore.Clone) -> str | None:
            path = clone.path / rel
            cur: Override | None = None
            if path.exists() or path.is_symlink():
                got = _read_file(path)
                if isinstance(got, OverrideFileError):
                    raise ConfigError(f"cannot update {got}; fix or remove the file by hand")
                cur = got
            new = produce(cur)
            if new.id != override_id:
                raise ConfigError(f"override {new.id} cannot be stored as {override_id}")
            why = _refused_transition(cur, new)
            if why:
                raise ConfigError(why)
            stored[:] = [new]
            if cur == new:
                return None
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
            tmp.write_text(new.to_json(), encoding="utf-8")
            os.replace(tmp, path)
            clone.git("add", "--", rel)
            return message(new)

        with self._open(_author_env()) as clone:
            clone.transact(change, what=f"override {override_id}")
        return stored[0]


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


def _author_env() -> dict[str, str]:
    """STETHO_GIT_AUTHOR 'Name <email>' wins; else git's own configured identity (or stetho's
    fallback). Who committed is the audit trail's, not the override's identity."""
    from stetho import config

    raw = config.active().git_author
    if not raw:
        return {}
    m = _AUTHOR_RE.match(raw)
    if not m:
        raise ConfigError(f"{AUTHOR_ENV}={raw!r}: expected 'Name <email>'")
    name, email = m.groups()
    return {"GIT_COMMITTER_NAME": name, "GIT_COMMITTER_EMAIL": email,
            "GIT_AUTHOR_NAME": name, "GIT_AUTHOR_EMAIL": email}
