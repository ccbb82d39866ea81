"""One git store for everything stetho keeps in git (the knowledge base, the overrides).

A store is a repository given as a working clone's path, or as a URL / bare repository that
stetho uses through a private clone in its cache (`<cache>/<purpose>-repos/<hash>`). Either way
the work happens in a `Clone`, under a file lock, so stetho processes on one machine take turns.

Writes are optimistic transactions (`Clone.transact`): bring the clone up to date, let the
caller change files and stage them, commit, push; when another writer pushed first, drop the
commit, pull theirs and run the caller's change again on what is there now. A change is
therefore always decided on the current state (an approval never overwrites a revocation that
landed meanwhile; a report another publisher added is not added twice), and nothing is
hand-merged. `stetho.publish.githistory` reads every version a path ever had, across the whole
history: what is deleted, edited, reverted or renamed later is still seen.

Every git command is an argv list (never a shell), with prompts off, the C locale (messages are
matched) and the caller's GIT_DIR-like variables removed. A repository given by a user is
checked first (stetho.publish.repoarg): a leading `-` (an option in disguise) or a scheme
other than https, ssh, scp-like or file is refused, git itself is held to those transports,
and paths and URLs are passed after `--` where git allows it.
"""

from __future__ import annotations

import hashlib
import random
import re
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from stetho.core import locks
from stetho.errors import ConfigError, StethoError
from stetho.publish.repoarg import ALLOWED_SCHEMES as ALLOWED_SCHEMES
from stetho.publish.repoarg import PROTOCOLS
from stetho.publish.repoarg import check_repo as check_repo
from stetho.publish.repoarg import is_remote as is_remote

#: Seconds for one git command (a clone of a large repository over a slow link).
GIT_TIMEOUT_S = 600.0
#: Seconds to wait for another stetho process working in the same clone.
LOCK_TIMEOUT_S = 900.0
#: Pushes tried before giving up when other writers keep winning the race.
PUSH_ATTEMPTS = 20
#: Variables that point git at another repository (set, e.g., when stetho runs in a git hook).
_REPO_ENV = frozenset({"GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY",
                       "GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_COMMON_DIR", "GIT_NAMESPACE",
                       "GIT_PREFIX", "GIT_QUARANTINE_PATH", "GIT_CEILING_DIRECTORIES"})
#: git's words for "someone else pushed first": worth a pull and another try.
_RETRYABLE = re.compile(r"\[rejected\]|non-fast-forward|fetch first|failed to update ref|"
                        r"cannot lock ref|incorrect old value|reference already exists|"
                        r"stale info")
class GitError(StethoError):
    """A git command failed: exit 3, naming the command, where, and what git said."""


def git(args: list[str], cwd: Path | None = None, *, check: bool = True,
        timeout: float = GIT_TIMEOUT_S, env: dict[str, str] | None = None
        ) -> subprocess.CompletedProcess[str]:
    """Run git; on failure (with check) raise GitError naming the command and its stderr."""
    argv, child = _command(args, env)
    shown = "git " + " ".join(args)
    try:
        proc = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, encoding="utf-8",
                              errors="replace", timeout=timeout, env=child,
                              stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        raise GitError("git is not installed") from None
    except subprocess.TimeoutExpired:
        raise GitError(f"`{shown}` did not finish in {timeout:.0f}s"
                       + (f" in {cwd}" if cwd else "")) from None
    except OSError as exc:
        raise GitError(f"`{shown}`: {exc}") from None
    if check and proc.returncode != 0:
        raise GitError(f"`{shown}` failed" + (f" in {cwd}" if cwd else "")
                       + f" (exit {proc.returncode}): {_tail(proc.stderr or proc.stdout)}")
    return proc


def _command(args: list[str], env: dict[str, str] | None) -> tuple[list[str], dict[str, str]]:
    """The argv and environment of every git command stetho runs."""
    from stetho import config

    child = config.child_environment({"GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C", "LANGUAGE": "C",
                                      "GIT_EDITOR": "true", "GIT_MERGE_AUTOEDIT": "no",
                                      **(env or {})}, _REPO_ENV)
    return ["git", "-c", "core.quotepath=off", *PROTOCOLS, *args], child


def _tail(text: str, limit: int = 800) -> str:
    text = (text or "").strip()
    return text if len(text) <= limit else "..." + text[-limit:]


@dataclass
class Clone:
    """The clone stetho works in: its remote (None: a local-only repository), the local
    branch and the remote branch it pushes to, and whether it is stetho's own cached clone
    (which may be reset at will) or a person's working clone (which is only rebased)."""

    path: Path
    remote: str | None
    branch: str
    remote_branch: str
    cached: bool
    ident: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    #: Files every change regenerates (an index): a rebase conflict on them is resolved by
    #: taking the remote's side; any other conflict is someone's hand edit and stops.
    derived: tuple[str, ...] = ()

    @property
    def upstream(self) -> str:
        return f"refs/remotes/{self.remote}/{self.remote_branch}"

    def git(self, *args: str, check: bool = True,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        return git([*self.ident, *args], self.path, check=check, env={**self.env, **(env or {})})

    def out(self, *args: str) -> str:
        return self.git(*args).stdout.strip()

    def ok(self, *args: str) -> bool:
        return self.git(*args, check=False).returncode == 0

    def rev(self, ref: str) -> str | None:
        proc = self.git("rev-parse", "-q", "--verify", ref + "^{commit}", check=False)
        return proc.stdout.strip() if proc.returncode == 0 else None

    # -- reading -----------------------------------------------------------------------------

    def sync(self) -> None:
        """Up to date with the remote: a cached clone is reset to the remote tip (nothing of
        its own is worth keeping); a working clone's own commits are rebased onto it."""
        if self.remote is None:
            return
        self.git("fetch", "--quiet", "--prune", "--", self.remote)
        if self.rev(self.upstream) is None:
            return  # nothing pushed to that branch yet
        if self.cached or self.rev("HEAD") is None:
            self.git("checkout", "--quiet", "-f", "-B", self.branch, self.upstream)
            if self.cached:
                self.git("clean", "-q", "-f", "-d", "-x")
            return
        proc = self.git("rebase", "--quiet", "--autostash", self.upstream, check=False)
        for _step in range(10_000):
            if not self._rebasing():
                return
            unmerged = self.out("diff", "--name-only", "--diff-filter=U").split()
            foreign = [f for f in unmerged if f not in self.derived]
            if foreign or not unmerged:
                self.git("rebase", "--abort", check=False)
                raise GitError(f"`git rebase {self.upstream}` in {self.path} stopped"
                               + (f" on {', '.join(foreign)}" if foreign else "") + ": "
                               f"{_tail(proc.stderr or proc.stdout)}; resolve it by hand")
            for f in unmerged:  # during a rebase "ours" is the side being rebased onto
                self.git("checkout", "--ours", "--", f)
                self.git("add", "--", f)
            step = "--skip" if self.ok("diff", "--cached", "--quiet", "HEAD") else "--continue"
            proc = self.git("rebase", step, check=False)
        self.git("rebase", "--abort", check=False)
        raise GitError(f"`git rebase {self.upstream}` in {self.path} made no progress; aborted")

    def _rebasing(self) -> bool:
        gitdir = Path(self.out("rev-parse", "--absolute-git-dir"))
        return (gitdir / "rebase-merge").exists() or (gitdir / "rebase-apply").exists()

    # -- writing -----------------------------------------------------------------------------

    def transact(self, change: Callable[[Clone], str | None], *,
                 attempts: int = PUSH_ATTEMPTS, what: str = "change") -> str | None:
        """Commit what `change` stages and push it; on a lost race drop the commit, pull and
        run `change` again on the new state. `change` returns the commit message, or None
        when there is nothing to commit. Returns the pushed commit (None: nothing to do)."""
        last = ""
        for attempt in range(max(1, attempts)):
            self.sync()
            before = self.rev("HEAD")
            message = change(self)
            if message is None or (before is not None and self.ok("diff", "--cached",
                                                                   "--quiet", "HEAD")):
                self.git("reset", "-q", check=False)
                return None
            self.git("commit", "-q", "-m", message)
            if self.remote is None:
                return self.rev("HEAD")
            push = self.git("push", "--quiet", "--", self.remote,
                            f"HEAD:refs/heads/{self.remote_branch}", check=False)
            if push.returncode == 0:
                return self.rev("HEAD")
            last = _tail(push.stderr + push.stdout)
            self._drop(before)
            if not _RETRYABLE.search(last):
                raise GitError(f"nothing stored: `git push {self.remote} "
                               f"HEAD:refs/heads/{self.remote_branch}`"
                               f" failed in {self.path} (exit {push.returncode}): {last}")
            # Full jitter, widening with each lost round, so many writers spread out.
            time.sleep(random.uniform(0.0, 0.15 * min(attempt + 1, 6)))
        raise GitError(f"the push of the {what} to {self.remote} was still rejected after "
                       f"{attempts} attempts (other writers kept pushing first): {last}")

    def _drop(self, before: str | None) -> None:
        """Undo our unpushed commit, so the next attempt starts from the remote's state."""
        if before is None:
            self.git("update-ref", "-d", "HEAD")
            self.git("rm", "-q", "-r", "--cached", "--ignore-unmatch", "--", ".")
            self.git("clean", "-q", "-f", "-d")
        else:
            self.git("reset", "-q", "--hard" if self.cached else "--keep", before)


def same_history(path: Path, repo: Path) -> bool:
    """Whether `path` lies in a git working tree whose history shares a root commit with the
    repository checked out at `repo`: another clone of it (say, a signers file kept where an
    override could be pushed)."""
    here = path.resolve()
    if not any((d / ".git").exists() for d in (here, *here.parents)):
        return False  # in no repository at all: no git to ask
    top = git(["rev-parse", "--show-toplevel"], path, check=False)
    if top.returncode != 0:
        return False
    return bool(_roots(Path(top.stdout.strip())) & _roots(repo))


def _roots(path: Path) -> set[str]:
    proc = git(["rev-list", "--max-parents=0", "HEAD"], path, check=False)
    return set(proc.stdout.split()) if proc.returncode == 0 else set()


# -- opening a store -------------------------------------------------------------------------------

def kind(repo: str) -> tuple[str, Path | None]:
    """('work', toplevel) for a working clone, ('plain', dir) for a folder that is not a
    repository, ('remote', None) for a URL or a bare repository (used through a cached
    clone). A path that does not exist counts as remote: `git ls-remote` then says why."""
    if is_remote(repo):
        return "remote", None
    p = Path(repo).expanduser()
    if not p.is_dir():
        return "remote", None
    bare = git(["rev-parse", "--is-bare-repository"], p, check=False)
    if bare.returncode == 0 and bare.stdout.strip() == "true":
        return "remote", None
    top = git(["rev-parse", "--show-toplevel"], p, check=False)
    if top.returncode == 0 and Path(top.stdout.strip()).resolve() == p.resolve():
        return "work", p.resolve()
    return "plain", p.resolve()


@contextmanager
def open_clone(repo: str, *, purpose: str, branch: str | None = None,
               require_clean: bool = False, env: dict[str, str] | None = None,
               derived: tuple[str, ...] = ()) -> Iterator[Clone]:
    """The clone to work in for `repo`, locked for the caller's block and up to date.
    `purpose` names the cache folder and the lock ("kb", "overrides"); `env` is passed to
    every git command (a commit identity); `derived` names regenerated files (Clone)."""
    from stetho import config

    repo = check_repo(repo)
    k, path = kind(repo)
    if k == "plain":
        raise ConfigError(f"{repo}: not a git working clone, bare repository or URL")
    if k == "work":
        assert path is not None
        gitdir = Path(git(["rev-parse", "--absolute-git-dir"], path).stdout.strip())
        common = Path(git(["rev-parse", "--git-common-dir"], path).stdout.strip())
        lock = (common if common.is_absolute() else (path / common)) / f"stetho-{purpose}.lock"
        with locks.hold(lock.resolve(), f"the clone {path}", LOCK_TIMEOUT_S):
            clone = _work(path, gitdir, branch, require_clean, env or {})
            clone.derived = derived
            clone.sync()
            yield clone
        return
    url = _url(repo)
    digest = hashlib.sha256(f"{url}\0{branch or ''}".encode()).hexdigest()[:16]
    root = config.active().cache / f"{purpose}-repos"
    dest = root / digest
    with locks.hold(root / f"{digest}.lock", f"the cached clone of {url}", LOCK_TIMEOUT_S):
        clone = _cached(url, dest, branch, env or {})
        clone.derived = derived
        clone.sync()
        yield clone


def _url(repo: str) -> str:
    """A URL as given; a local path made absolute (git runs inside the cache)."""
    if is_remote(repo):
        return repo
    return str(Path(repo).expanduser().resolve())


def _identity(path: Path) -> list[str]:
    """Commits need a name and email; a freshly imaged node often has none configured. Fall
    back to stetho@<host> rather than fail (who a change is from is not decided by it)."""
    if (git(["var", "GIT_COMMITTER_IDENT"], path, check=False).returncode == 0
            and git(["var", "GIT_AUTHOR_IDENT"], path, check=False).returncode == 0):
        return []
    return ["-c", "user.name=stetho", "-c", f"user.email=stetho@{socket.gethostname()}"]


def _work(path: Path, gitdir: Path, branch: str | None, require_clean: bool,
          env: dict[str, str]) -> Clone:
    """A person's own working clone: refuse the states we would damage, never reset it."""
    head = git(["symbolic-ref", "--short", "-q", "HEAD"], path, check=False)
    if head.returncode != 0:
        raise ConfigError(f"{path}: HEAD is detached; check out the repository's branch first")
    current = head.stdout.strip()
    if branch is not None and current != branch:
        raise ConfigError(f"{path} is on branch {current!r}, not {branch!r}: switch it by hand")
    if (gitdir / "rebase-merge").exists() or (gitdir / "rebase-apply").exists():
        raise ConfigError(f"{path}: a rebase is in progress; finish or abort it first")
    if require_clean:
        dirty = git(["status", "--porcelain", "--untracked-files=no"], path).stdout.strip()
        if dirty:
            raise ConfigError(f"{path}: the working clone has uncommitted changes; commit or "
                              f"stash them first:\n{dirty}")
    remotes = git(["remote"], path).stdout.split()
    remote = git(["config", f"branch.{current}.remote"], path, check=False).stdout.strip()
    if remote not in remotes:
        if "origin" in remotes:
            remote = "origin"
        elif len(remotes) == 1:
            remote = remotes[0]
        elif remotes:
            raise ConfigError(f"{path} has several remotes ({', '.join(remotes)}) and none is "
                              "'origin' or the branch's upstream")
        else:
            remote = ""
    merge = git(["config", f"branch.{current}.merge"], path, check=False).stdout.strip()
    return Clone(path, remote or None, current, merge.removeprefix("refs/heads/") or current,
                 cached=False, ident=_identity(path), env=env)


def _remote_head(url: str) -> str | None:
    """The remote's default branch; None for an empty repository. Also the reachability
    check: an unreachable remote fails here, before any local state changes."""
    out = git(["ls-remote", "--symref", "--", url, "HEAD"]).stdout
    m = re.search(r"^ref: refs/heads/(\S+)\s+HEAD$", out, re.M)
    heads = [line.split("refs/heads/", 1)[1] for line in
             git(["ls-remote", "--heads", "--", url]).stdout.splitlines()
             if "refs/heads/" in line]
    if m and m.group(1) in heads:
        return m.group(1)
    for name in ("main", "master"):
        if name in heads:
            return name
    return heads[0] if heads else None


def _cached(url: str, dest: Path, branch: str | None, env: dict[str, str]) -> Clone:
    """stetho's private clone of a remote. A damaged one is simply cloned again."""
    head = _remote_head(url)
    want = branch or head
    if head is None and dest.exists():  # empty remote: no failed attempt's commit lingers
        shutil.rmtree(dest, ignore_errors=True)
    for fresh in (False, True):
        try:
            if fresh or not (dest / ".git").is_dir():
                shutil.rmtree(dest, ignore_errors=True)
                dest.parent.mkdir(parents=True, exist_ok=True)
                tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
                try:
                    git(["clone", "--quiet", "--no-checkout", "--", url, str(tmp / "repo")])
                    (tmp / "repo").rename(dest)
                finally:
                    shutil.rmtree(tmp, ignore_errors=True)
            git(["remote", "set-url", "origin", "--", url], dest)
            local = want or git(["symbolic-ref", "--short", "HEAD"], dest).stdout.strip()
            git(["rebase", "--abort"], dest, check=False)
            clone = Clone(dest, "origin", local, local, cached=True, ident=_identity(dest),
                          env=env)
            if clone.rev(f"refs/remotes/origin/{local}") is None:
                git(["symbolic-ref", "HEAD", f"refs/heads/{local}"], dest)
            return clone
        except GitError:
            if fresh:
                raise
    raise AssertionError("unreachable")
