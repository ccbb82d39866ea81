"""The knowledge base: diagnosis reports committed to a git repository, and searched there.

A failing node gets a `diagnosis-report.md` (Markdown under a YAML front matter, see
`ReportMeta`). Reports outlive the node's repair only if they land somewhere shared and
searchable, and a plain git repository is what every site already has: history, review,
permissions and a web view for free. This module puts reports there and finds them again.

Why it is built the way it is:

* **Spool first.** `spool()` copies each report (and the assets its links point at) into a
  local spool directory before anything touches the network, and a report leaves the spool
  only once the commit holding it has been pushed. A node that cannot reach the git server
  keeps its reports and the next `publish` takes them.
* **Nothing hand-merged.** Each report goes to its own path,
  `reports/YYYY/MM/DD/<node>-<cause>-<id>.md`, so two publishers never touch the same file.
  The only shared file is the index `README.md`, and it is *derived*: regenerated from every
  report's front matter after each write and after each rebase. A conflict on it is resolved
  by taking either side and regenerating, so concurrent publishers always converge.
* **Push, and on rejection rebase and retry** with jittered backoff: the usual optimistic
  concurrency of git, bounded by `attempts`.
* **Idempotent.** A report whose id is already in the repository is not added again; it is
  reported as `already` and leaves the spool.

Every git command runs as an argv list (never a shell) with prompts disabled and the C locale
(its messages are parsed); failures raise `KBError` naming the command and its stderr.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import random
import re
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import date as _date
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import yaml

from stetho.errors import ConfigError, StethoError

#: Where reports live inside the repository, and the generated index at its root.
REPORTS_DIR = "reports"
INDEX = "README.md"

#: Pushes tried before giving up when other publishers keep winning the race.
PUSH_ATTEMPTS = 20
#: Seconds for one git command (a clone of a large knowledge base over a slow link).
GIT_TIMEOUT = 600.0
#: Seconds to wait for another stetho process holding the same spool or clone.
LOCK_TIMEOUT = 900.0

#: id, node and cause become path components: no separators, no dot-files.
_SAFE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_FRONT_MATTER = re.compile(r"\A\ufeff?---[ \t]*\r?\n(.*?)^(?:---|\.\.\.)[ \t]*(?:\r?\n|\Z)",
                           re.S | re.M)
#: Relative link targets in the body: Markdown links/images and HTML src/href attributes.
_LINKS = (re.compile(r"\]\(\s*<?([^)\s>]+)>?(?:\s+[\"'][^\"']*[\"'])?\s*\)"),
          re.compile(r"(?:src|href)\s*=\s*[\"']([^\"']+)[\"']", re.I))
#: git's words for "someone else pushed first": retry after a rebase. Anything else is fatal.
_RETRYABLE = re.compile(r"\[rejected\]|non-fast-forward|fetch first|failed to update ref|"
                        r"cannot lock ref|incorrect old value|reference already exists")
_WORD = re.compile(r"[a-z0-9]+")
#: similar(): a shared cause dominates; then the same node (the last repair did not hold),
#: then how much of the evidence signature is shared.
W_CAUSE, W_NODE, W_SIGNATURE = 0.6, 0.25, 0.15
_TRAILER = "Stetho-Publish"

log = logging.getLogger(__name__)


class KBError(StethoError):
    """A git operation on the knowledge base failed (unreachable remote, rejected push): exit 3.
    Spooled reports stay in the spool."""


@dataclass(frozen=True)
class ReportMeta:
    """The front matter of one diagnosis report, plus where it was read and its body text.

    `path` and `body` are not part of equality: the same report read from the spool and from
    the repository compares equal."""

    id: str
    date: datetime
    node: str
    cause: str
    cause_title: str = ""
    status: str = "open"
    run: str = ""
    signature: tuple[str, ...] = ()
    checks: tuple[str, ...] = ()
    assets: tuple[str, ...] = ()
    path: Path | None = field(default=None, compare=False)
    body: str = field(default="", repr=False, compare=False)

    @property
    def repo_path(self) -> str:
        """Where the report lives in the knowledge base: dated by its (UTC) front-matter date,
        named so a directory listing reads as node, cause, id."""
        d = self.date.astimezone(timezone.utc)
        return (f"{REPORTS_DIR}/{d:%Y}/{d:%m}/{d:%d}/"
                f"{self.node}-{self.cause}-{self.id}.md")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (for `--json`): the front matter, and the file it was read from."""
        return {"id": self.id, "date": _iso(self.date), "node": self.node,
                "cause": self.cause, "cause_title": self.cause_title, "status": self.status,
                "run": self.run, "signature": list(self.signature), "checks": list(self.checks),
                "assets": list(self.assets),
                "path": str(self.path) if self.path is not None else None}


@dataclass(frozen=True)
class PublishResult:
    """What one `publish` did. `published` and `already` are report ids; `paths` maps each of
    them to its path in the repository; `commit` is the pushed commit (None when nothing new
    was committed)."""

    published: list[str]
    already: list[str]
    repo: str
    commit: str | None = None
    paths: dict[str, str] = field(default_factory=dict)


# -- reading reports ------------------------------------------------------------------------

def _iso(value: datetime) -> str:
    return value.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _front_matter(text: str) -> tuple[str, str] | None:
    """(YAML text, body) when the text starts with a `---` fenced block, else None."""
    m = _FRONT_MATTER.match(text)
    if m is None:
        return None
    return m.group(1), text[m.end():]


def _as_date(value: Any, path: Path) -> datetime:
    if isinstance(value, datetime):
        dt = value
    elif isinstance(value, _date):
        dt = datetime(value.year, value.month, value.day)
    elif isinstance(value, str):
        try:
            dt = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            raise ConfigError(f"{path}: front matter 'date' is not an ISO 8601 time: "
                              f"{value!r}") from None
    else:
        raise ConfigError(f"{path}: front matter 'date' is missing or not a time: {value!r}")
    # A report without a zone was written by stetho, which writes UTC.
    return dt.replace(tzinfo=timezone.utc) if dt.tzinfo is None else dt


def _as_words(value: Any, key: str, path: Path) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, (str, int, float)):
        return (str(value),)
    if isinstance(value, list) and all(isinstance(v, (str, int, float)) for v in value):
        return tuple(str(v) for v in value)
    raise ConfigError(f"{path}: front matter '{key}' must be a list of words, not {value!r}")


def _parse(text: str, path: Path) -> ReportMeta:
    parts = _front_matter(text)
    if parts is None:
        raise ConfigError(f"{path}: not a diagnosis report: it has no YAML front matter "
                          "(the file must start with a '---' line and close it with another)")
    head, body = parts
    try:
        data = yaml.safe_load(head)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: the front matter is not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the front matter must be a YAML mapping of fields")
    missing = [k for k in ("id", "date", "node", "cause") if data.get(k) in (None, "")]
    if missing:
        raise ConfigError(f"{path}: the front matter lacks {', '.join(missing)} "
                          "(id, date, node and cause are required)")
    for key in ("id", "node", "cause"):
        if not _SAFE.match(str(data[key])):
            raise ConfigError(f"{path}: front matter '{key}' {str(data[key])!r} must be letters, "
                              "digits, '.', '_' and '-' (it becomes part of a file name)")
    assets = _as_words(data.get("assets"), "assets", path)
    for name in assets:
        if not _plain_name(name):
            raise ConfigError(f"{path}: asset {name!r} must be a file name beside the report, "
                              "not a path")
    return ReportMeta(
        id=str(data["id"]), date=_as_date(data["date"], path), node=str(data["node"]),
        cause=str(data["cause"]), cause_title=str(data.get("cause_title") or ""),
        status=str(data.get("status") or "open"), run=str(data.get("run") or ""),
        signature=_as_words(data.get("signature"), "signature", path),
        checks=_as_words(data.get("checks"), "checks", path), assets=assets,
        path=path, body=body)


def read_report(path: str | Path) -> ReportMeta:
    """Parse a report's front matter. A file that is not a report (no front matter, invalid
    YAML, a required field missing) raises ConfigError naming it: publishing it would put an
    unsearchable, unindexable file in the knowledge base."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{p}: not a diagnosis report: it is not UTF-8 text") from None
    except OSError as exc:
        raise ConfigError(f"{p}: cannot read the report: {exc.strerror or exc}") from None
    return _parse(text, p)


def _looks_like_report(path: Path) -> bool:
    """A Markdown file whose front matter carries an `id`: what stetho writes. Other Markdown
    (a README, a page with a title block) found while walking a directory is not a report."""
    try:
        with path.open(encoding="utf-8") as f:
            text = f.read(64 * 1024)
    except (OSError, UnicodeDecodeError):
        return False
    parts = _front_matter(text)
    if parts is None:
        return False
    try:
        data = yaml.safe_load(parts[0])
    except yaml.YAMLError:
        return False
    return isinstance(data, dict) and "id" in data


def find_reports(paths: Iterable[str | Path]) -> list[Path]:
    """The reports named on a command line: a file is taken as a report (and refused if it is
    not one); a directory means every `*.md` with report front matter under it, recursively.
    A directory holding none is an error: the user meant to publish something."""
    found: list[Path] = []
    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            inside = [f for f in sorted(p.rglob("*.md"))
                      if f.is_file() and ".git" not in f.relative_to(p).parts
                      and _looks_like_report(f)]
            if not inside:
                raise ConfigError(f"{p}: no diagnosis reports (Markdown with front matter) "
                                  "under it")
            found.extend(inside)
        elif p.is_file():
            read_report(p)
            found.append(p)
        else:
            raise ConfigError(f"{p}: no such report file or directory")
    unique: dict[Path, Path] = {}
    for f in found:
        unique.setdefault(f.resolve(), f)
    return list(unique.values())


def _plain_name(name: str) -> bool:
    return bool(name) and name not in (".", "..") and "/" not in name and "\\" not in name


def _asset_files(meta: ReportMeta) -> list[Path]:
    """The files the report brings along: those its front matter lists (which must exist) and
    any sibling file a relative link in its body points at, so the links keep working."""
    assert meta.path is not None
    here = meta.path.parent
    files: dict[str, Path] = {}
    for name in meta.assets:
        f = here / name
        if not f.is_file():
            raise ConfigError(f"{meta.path}: asset {name!r} listed in the front matter is "
                              f"missing (looked for {f})")
        files[name] = f
    for pattern in _LINKS:
        for target in pattern.findall(meta.body):
            name = target.split("#", 1)[0].split("?", 1)[0]
            name = name[2:] if name.startswith("./") else name
            if (_plain_name(name) and ":" not in name and name != meta.path.name
                    and name not in files and (here / name).is_file()):
                files[name] = here / name
    return list(files.values())


# -- the spool --------------------------------------------------------------------------------

def spool_dir() -> Path:
    """$STETHO_SPOOL, else the user's data directory: reports must survive reboots and
    temp-dir cleaners until they are published."""
    from stetho import config

    return config.active().spool


def spool(report_paths: Iterable[str | Path], spool: Path | None = None) -> list[Path]:
    """Copy reports and their assets into the spool, one directory per report id
    (`<spool>/<id>/report.md`, `<spool>/<id>/assets/...`). Each entry is assembled in a
    hidden temporary directory and renamed into place, so a publisher never sees half of one.
    Spooling the same id again replaces the entry. Returns the spooled report files."""
    root = spool or spool_dir()
    root.mkdir(parents=True, exist_ok=True)
    out: list[Path] = []
    for raw in report_paths:
        meta = read_report(raw)
        assets = _asset_files(meta)
        tmp = Path(tempfile.mkdtemp(prefix=f".{meta.id}.", dir=root))
        try:
            shutil.copyfile(Path(raw), tmp / "report.md")
            if assets:
                (tmp / "assets").mkdir()
                for f in assets:
                    shutil.copyfile(f, tmp / "assets" / f.name)
            entry = root / meta.id
            if entry.exists():
                shutil.rmtree(entry)
            os.rename(tmp, entry)
        except OSError as exc:
            shutil.rmtree(tmp, ignore_errors=True)
            raise StethoError(f"cannot spool {raw} into {root}: {exc}") from None
        out.append(entry / "report.md")
    return out


@dataclass(frozen=True)
class _Entry:
    dir: Path
    meta: ReportMeta
    text: str
    assets: tuple[Path, ...]


def _spooled(root: Path) -> list[_Entry]:
    if not root.is_dir():
        return []
    entries = []
    for d in sorted(root.iterdir()):
        if d.name.startswith(".") or not (d / "report.md").is_file():
            continue
        meta = read_report(d / "report.md")
        assets = tuple(sorted(f for f in (d / "assets").glob("*") if f.is_file()))
        entries.append(_Entry(d, meta, (d / "report.md").read_text(encoding="utf-8"), assets))
    return sorted(entries, key=lambda e: (e.meta.date, e.meta.id))


def _sweep(root: Path, age: float = 3600.0) -> None:
    """Remove what a spool() killed mid-copy left behind (hidden temporary entries); an hour
    old, so a spool() running right now is not disturbed."""
    for d in root.glob(".*.*"):
        try:
            if d.is_dir() and time.time() - d.stat().st_mtime > age:
                shutil.rmtree(d, ignore_errors=True)
        except OSError:
            continue


@contextmanager
def _locked(path: Path, what: str) -> Iterator[None]:
    """An exclusive advisory lock: two stetho processes on one machine sharing a spool or a
    cached clone take turns instead of racing on the same files."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        deadline = time.monotonic() + LOCK_TIMEOUT
        while True:
            try:
                fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise StethoError(f"another stetho process has held {what} for "
                                      f"{LOCK_TIMEOUT:.0f}s (lock {path})") from None
                time.sleep(0.05 + random.random() * 0.1)
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


# -- git --------------------------------------------------------------------------------------

def _git(args: Sequence[str], cwd: Path | None = None, *, check: bool = True,
         timeout: float = GIT_TIMEOUT) -> subprocess.CompletedProcess[str]:
    """Run git with an argv list. Never prompts (a node has nobody to type a password), speaks
    English (stderr is matched), and turns failure into KBError naming the command."""
    argv = ["git", "-c", "core.quotepath=off", *args]
    from stetho import config

    env = config.child_environment({"GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C", "LANGUAGE": "C",
                                    "GIT_EDITOR": "true", "GIT_MERGE_AUTOEDIT": "no"})
    shown = "git " + " ".join(args)
    try:
        proc = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, encoding="utf-8",
                              errors="replace", timeout=timeout, env=env,
                              stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        raise KBError("git is not installed (needed for the knowledge base)") from None
    except subprocess.TimeoutExpired:
        raise KBError(f"`{shown}` did not finish in {timeout:.0f}s"
                      + (f" in {cwd}" if cwd else "")) from None
    log.debug("%s (exit %d)", shown, proc.returncode)
    if check and proc.returncode != 0:
        raise KBError(f"`{shown}` failed" + (f" in {cwd}" if cwd else "")
                      + f" (exit {proc.returncode}): {proc.stderr.strip() or proc.stdout.strip()}")
    return proc


def _out(args: Sequence[str], cwd: Path | None = None) -> str:
    return _git(args, cwd).stdout.strip()


def _ok(args: Sequence[str], cwd: Path | None = None) -> bool:
    return _git(args, cwd, check=False).returncode == 0


def cache_root() -> Path:
    """The configured cache folder (STETHO_CACHE)."""
    from stetho import config

    return config.active().cache


def _url(repo: str) -> str:
    """A URL as given; a local path made absolute, since the cached clone's git commands run
    from inside the cache and a relative path would point somewhere else there."""
    if "://" in repo or _scp_like(repo):
        return repo
    return str(Path(repo).expanduser().resolve())


@contextmanager
def _cached(repo: str) -> Iterator[_Clone]:
    """The cached clone of a remote, up to date, held under a lock for the caller's work."""
    url = _url(repo)
    dest = cache_root() / "kb-repos" / hashlib.sha256(url.encode()).hexdigest()[:16]
    with _locked(dest.with_name(dest.name + ".lock"), f"the cached clone of {url}"):
        yield _sync_cache(url, dest)


def _scp_like(url: str) -> bool:
    return bool(re.match(r"^[^/:]+@[^/:]+:", url)) or bool(re.match(r"^[^/:]{2,}:[^/]", url))


def _kind(repo: str) -> tuple[str, Path | None]:
    """('work', toplevel) for a working clone, ('plain', dir) for a directory that is not a
    repository (searchable, not publishable), else ('remote', None): a URL or bare repository,
    used through a cached clone."""
    if "://" in repo or _scp_like(repo):
        return "remote", None
    p = Path(repo).expanduser()
    if not p.is_dir():
        return "remote", None  # let `git ls-remote` say what is wrong with it
    bare = _git(["rev-parse", "--is-bare-repository"], p, check=False)
    if bare.returncode == 0 and bare.stdout.strip() == "true":
        return "remote", None
    top = _git(["rev-parse", "--show-toplevel"], p, check=False)
    if top.returncode == 0 and Path(top.stdout.strip()).resolve() == p.resolve():
        return "work", p.resolve()
    return "plain", p.resolve()


@dataclass
class _Clone:
    """The clone a publish writes in: its remote (None: a local-only knowledge base), the
    local branch and the remote branch it pushes to."""

    path: Path
    remote: str | None
    branch: str
    remote_branch: str
    ident: list[str]

    @property
    def upstream(self) -> str:
        return f"refs/remotes/{self.remote}/{self.remote_branch}"

    def git(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return _git([*self.ident, *args], self.path, check=check)

    def rev(self, ref: str) -> str | None:
        proc = self.git("rev-parse", "-q", "--verify", ref + "^{commit}", check=False)
        return proc.stdout.strip() if proc.returncode == 0 else None


def _identity(path: Path) -> list[str]:
    """Commits need a name and email; a freshly imaged node often has none configured. Fall back
    to stetho@<host> rather than fail the publish."""
    if _ok(["var", "GIT_COMMITTER_IDENT"], path) and _ok(["var", "GIT_AUTHOR_IDENT"], path):
        return []
    return ["-c", "user.name=stetho", "-c", f"user.email=stetho@{socket.gethostname()}"]


def _remote_head(url: str) -> str | None:
    """The remote's default branch; None for an empty repository. Also the reachability check:
    an unreachable remote fails here, before any local state changes."""
    out = _out(["ls-remote", "--symref", url, "HEAD"])
    m = re.search(r"^ref: refs/heads/(\S+)\s+HEAD$", out, re.M)
    heads = [line.split("refs/heads/", 1)[1] for line in
             _out(["ls-remote", "--heads", url]).splitlines() if "refs/heads/" in line]
    if m and m.group(1) in heads:
        return m.group(1)
    for name in ("main", "master"):
        if name in heads:
            return name
    return heads[0] if heads else None


def _sync_cache(url: str, dest: Path) -> _Clone:
    """A private clone of the remote, reset to its tip. Reports that did not get pushed last
    time are still in the spool, so nothing local is worth keeping; a damaged clone is simply
    cloned again."""
    branch = _remote_head(url)
    if branch is None:  # empty remote: start over so no failed attempt's root commit lingers
        shutil.rmtree(dest, ignore_errors=True)
    for fresh in (False, True):
        try:
            if fresh or not (dest / ".git").is_dir():
                shutil.rmtree(dest, ignore_errors=True)
                dest.parent.mkdir(parents=True, exist_ok=True)
                _git(["clone", "--quiet", url, str(dest)])
            _git(["remote", "set-url", "origin", url], dest)
            if branch is None:
                local = _out(["symbolic-ref", "--short", "HEAD"], dest)
                return _Clone(dest, "origin", local, local, _identity(dest))
            _abort_rebase(dest)
            _git(["fetch", "--quiet", "--prune", "origin"], dest)
            _git(["checkout", "--quiet", "-f", "-B", branch, f"refs/remotes/origin/{branch}"],
                 dest)
            _git(["clean", "-q", "-f", "-d", "-x"], dest)
            return _Clone(dest, "origin", branch, branch, _identity(dest))
        except KBError:
            if fresh or not _ok(["ls-remote", "--heads", url]):
                raise
    raise AssertionError("unreachable")


def _abort_rebase(path: Path) -> None:
    if _rebasing(path):
        _git(["rebase", "--abort"], path, check=False)


def _rebasing(path: Path) -> bool:
    gitdir = Path(_out(["rev-parse", "--absolute-git-dir"], path))
    return (gitdir / "rebase-merge").exists() or (gitdir / "rebase-apply").exists()


def _prepare_work(path: Path) -> _Clone:
    """The user's own working clone: refuse states we would damage (detached HEAD, rebase in
    progress, uncommitted changes), then bring it up to date with its remote."""
    head = _git(["symbolic-ref", "--short", "-q", "HEAD"], path, check=False)
    if head.returncode != 0:
        raise ConfigError(f"{path}: HEAD is detached; check out the knowledge base's branch "
                          "before publishing")
    branch = head.stdout.strip()
    if _rebasing(path):
        raise ConfigError(f"{path}: a rebase is in progress; finish or abort it first")
    dirty = _out(["status", "--porcelain", "--untracked-files=no"], path)
    if dirty:
        raise ConfigError(f"{path}: the working clone has uncommitted changes; commit or stash "
                          f"them first:\n{dirty}")
    remotes = _out(["remote"], path).split()
    remote = _git(["config", f"branch.{branch}.remote"], path, check=False).stdout.strip()
    if not remote or remote == ".":
        remote = "origin" if "origin" in remotes else (remotes[0] if len(remotes) == 1 else "")
    merge = _git(["config", f"branch.{branch}.merge"], path, check=False).stdout.strip()
    clone = _Clone(path, remote or None, branch,
                   merge.removeprefix("refs/heads/") or branch, _identity(path))
    if clone.remote:
        _git(["fetch", "--quiet", clone.remote], path)
        if clone.rev(clone.upstream):
            _rebase(clone)
    return clone


@contextmanager
def _open_clone(repo: str) -> Iterator[_Clone]:
    kind, path = _kind(repo)
    if kind == "plain":
        raise ConfigError(f"{repo}: not a git working clone, bare repository or URL")
    if kind == "work":
        assert path is not None
        lock = Path(path) / _out(["rev-parse", "--git-path", "stetho-kb.lock"], path)
        with _locked(lock, f"the clone {path}"):
            yield _prepare_work(path)
        return
    with _cached(repo) as clone:
        yield clone


# -- writing, the index, rebasing ---------------------------------------------------------------

def _scan(root: Path) -> list[ReportMeta]:
    """Every readable report under root/reports. A broken file someone committed by hand is
    left out rather than blocking every later publish."""
    out = []
    base = root / REPORTS_DIR
    if base.is_dir():
        for f in sorted(base.rglob("*.md")):
            try:
                out.append(read_report(f))
            except ConfigError:
                continue
    return out


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ").strip()


def render_index(root: Path) -> str:
    """The index: one table row per report, newest first, from the front matter alone. It is
    a pure function of the reports, so two publishers that saw the same reports write the same
    bytes, and one that lost a rebase just writes it again."""
    reports = sorted(_scan(root), key=lambda r: (r.date, r.id), reverse=True)
    lines = ["# Diagnosis reports", "",
             "Generated by `stetho kb publish` from the reports' front matter; edits to this "
             "file are overwritten.",
             "Search it with `stetho kb search QUERY --repo <this repository>`.", "",
             f"{len(reports)} report{'s' if len(reports) != 1 else ''}.", "",
             "| Date | Node | Cause | Status | Report |", "|---|---|---|---|---|"]
    for r in reports:
        assert r.path is not None
        link = r.path.relative_to(root).as_posix()
        cause = f"{_cell(r.cause_title)} (`{r.cause}`)" if r.cause_title else f"`{r.cause}`"
        lines.append(f"| {r.date.astimezone(timezone.utc):%Y-%m-%d %H:%M} | {_cell(r.node)} | "
                     f"{cause} | {_cell(r.status)} | [{r.id}]({link}) |")
    return "\n".join(lines) + "\n"


def _write_index(root: Path) -> None:
    (root / INDEX).write_text(render_index(root), encoding="utf-8")


def _rename_links(text: str, old: str, new: str) -> str:
    pattern = r"(?:(?<=\./)|(?<![\w./-]))" + re.escape(old) + r"(?![\w.-])"
    return re.sub(pattern, lambda _m: new, text)


def _place(clone: _Clone, entry: _Entry) -> list[str]:
    """Write one report and its assets beside it; returns the repo paths written. An asset
    whose name is taken by different bytes (another report's 'trend.svg') is renamed with the
    report id in front and the report's links to it rewritten."""
    rel = entry.meta.repo_path
    target = clone.path / rel
    target.parent.mkdir(parents=True, exist_ok=True)
    text = entry.text
    written = [rel]
    for f in entry.assets:
        data = f.read_bytes()
        name, n = f.name, 1
        while (target.parent / name).exists() and (target.parent / name).read_bytes() != data:
            name = f"{entry.meta.id}-{f.name}" if n == 1 else f"{entry.meta.id}-{n}-{f.name}"
            n += 1
        if name != f.name:
            text = _rename_links(text, f.name, name)
        (target.parent / name).write_bytes(data)
        written.append(str(Path(rel).parent / name))
    target.write_text(text, encoding="utf-8")
    return written


def _message(added: list[ReportMeta], subject: str | None, token: str) -> str:
    n = len(added)
    shown = ", ".join(f"{r.node} {r.cause}" for r in added[:5])
    more = f", +{n - 5} more" if n > 5 else ""
    head = subject or f"kb: publish {n} report{'s' if n != 1 else ''} ({shown}{more})"
    body = "\n".join(f"- {r.repo_path}" for r in added)
    return f"{head}\n\n{body}\n\n{_TRAILER}: {token}\n"


def _added_ids(clone: _Clone, base: str | None, entries: list[_Entry]) -> list[ReportMeta]:
    """Our reports that the index (what will be pushed) adds relative to the remote's tip."""
    if base is None:
        names = set(clone.git("ls-files").stdout.splitlines())
    else:
        names = set(clone.git("diff", "--cached", "--name-only", "--diff-filter=A",
                              base).stdout.splitlines())
    return [e.meta for e in entries if e.meta.repo_path in names]


def _dedupe(clone: _Clone, base: str | None, entries: list[_Entry]) -> None:
    """After a rebase, one of our reports may also have landed upstream under another path (its
    date was rendered differently): keep theirs, drop ours, so an id is in the tree once."""
    if base is None:
        return
    ours = {e.meta.id: e.meta.repo_path for e in entries}
    by_id: dict[str, list[str]] = {}
    for r in _scan(clone.path):
        if r.id in ours and r.path is not None:
            by_id.setdefault(r.id, []).append(r.path.relative_to(clone.path).as_posix())
    for rid, paths in by_id.items():
        if len(paths) > 1 and ours[rid] in paths:
            if not _ok(["cat-file", "-e", f"{base}:{ours[rid]}"], clone.path):
                clone.git("rm", "-q", "-f", "--", ours[rid])


def _index_merge_args() -> list[str]:
    """git options under which the index never conflicts: a merge driver that keeps the side
    being rebased onto (`true` leaves that version in place), declared for /README.md through
    an attributes file of stetho's own (the user's clone and its .git are not touched). The
    index is regenerated right after the rebase anyway, and a conflict-free rebase runs as
    one git command instead of a stop-resolve-continue round per commit: with many publishers
    racing, the shorter each round, the sooner all are through."""
    attrs = cache_root() / "kb-index.gitattributes"
    text = f"/{INDEX} merge=stetho-kb-index\n"
    try:
        if not attrs.is_file() or attrs.read_text() != text:
            attrs.parent.mkdir(parents=True, exist_ok=True)
            tmp = attrs.with_name(f".{attrs.name}.{os.getpid()}")
            tmp.write_text(text)
            os.replace(tmp, attrs)
    except OSError:
        return []  # conflicts on the index are then resolved by hand below: slower, same result
    return ["-c", f"core.attributesFile={attrs}",
            "-c", "merge.stetho-kb-index.name=stetho kb index (regenerated after the merge)",
            "-c", "merge.stetho-kb-index.driver=true"]


def _rebase(clone: _Clone) -> None:
    """`git pull --rebase`, done as fetch (by the caller) + rebase onto the remote tip. The
    index may conflict whenever two publishers wrote it: take either side (the merge driver of
    _index_merge_args does, else it is done here) and regenerate it from the reports. A report
    both sides added differently: upstream's copy was published first, keep it. Any other
    conflict is someone's hand edit; abort and say which files."""
    merge = _index_merge_args()
    clone.git(*merge, "rebase", "--quiet", clone.upstream, check=False)
    for _step in range(10_000):
        if not _rebasing(clone.path):
            return
        unmerged = clone.git("diff", "--name-only", "--diff-filter=U").stdout.split()
        foreign = [f for f in unmerged if f != INDEX and not f.startswith(REPORTS_DIR + "/")]
        if foreign:
            clone.git("rebase", "--abort", check=False)
            raise KBError(f"`git rebase {clone.upstream}` in {clone.path} conflicts on "
                          f"{', '.join(foreign)}: resolve by hand (the reports stay spooled)")
        for f in unmerged:
            if f == INDEX:
                continue
            if clone.git("checkout", "--ours", "--", f, check=False).returncode == 0:
                clone.git("add", "--", f)
            else:
                clone.git("rm", "-q", "-f", "--", f)
        if unmerged:
            _write_index(clone.path)
            clone.git("add", "--", INDEX)
        elif clone.git("diff", "--cached", "--quiet", check=False).returncode == 0:
            status = clone.git("status", "--porcelain").stdout.strip()
            if status:
                clone.git("rebase", "--abort", check=False)
                raise KBError(f"`git rebase {clone.upstream}` stopped in {clone.path}: {status}")
        step = ("--skip" if clone.git("diff", "--cached", "--quiet", "HEAD",
                                      check=False).returncode == 0 else "--continue")
        proc = clone.git(*merge, "rebase", step, check=False)
        if proc.returncode != 0 and not _rebasing(clone.path):
            raise KBError(f"`git rebase {step}` failed in {clone.path}: {proc.stderr.strip()}")
    clone.git("rebase", "--abort", check=False)
    raise KBError(f"`git rebase {clone.upstream}` in {clone.path} made no progress; aborted")


def _settle(clone: _Clone, base: str | None, entries: list[_Entry], token: str,
            subject: str | None) -> None:
    """Make HEAD right after a rebase: every id once, the index regenerated from what is now in
    the tree, and our commit's message naming what it really adds (or the commit gone when the
    others already published everything in it)."""
    _dedupe(clone, base, entries)
    _write_index(clone.path)
    clone.git("add", "--", INDEX)
    head = clone.rev("HEAD")
    ours = (head is not None and head != base
            and f"{_TRAILER}: {token}" in clone.git("log", "-1", "--format=%B").stdout)
    if ours:
        if clone.git("diff", "--cached", "--quiet", "HEAD~1", check=False).returncode == 0:
            clone.git("reset", "-q", "--soft", "HEAD~1")
        else:
            added = _added_ids(clone, base, entries)
            clone.git("commit", "-q", "--amend", "-m", _message(added, subject, token))
    elif clone.git("diff", "--cached", "--quiet", check=False).returncode != 0:
        clone.git("commit", "-q", "-m", "kb: regenerate the index")


def publish(repo: str, *, spool: Path | None = None, message: str | None = None,
            attempts: int = PUSH_ATTEMPTS) -> PublishResult:
    """Publish everything in the spool to `repo` (a working clone's path, or a URL / bare
    repository used through a clone cached under cache_root()/kb-repos/<hash>).

    One commit for the lot, then push; when another publisher pushed first, rebase onto theirs
    (regenerating the index) and push again, up to `attempts` times with jittered backoff.
    Reports leave the spool only after the push that carries them succeeded. An empty spool is
    a no-op that does not touch the repository. `message` replaces the commit's subject line.
    """
    root = spool or spool_dir()
    if not _spooled(root):
        return PublishResult([], [], repo)
    root.mkdir(parents=True, exist_ok=True)
    with _locked(root / ".lock", f"the spool {root}"):
        _sweep(root)
        entries = _spooled(root)  # again, under the lock: another publisher may have emptied it
        if not entries:
            return PublishResult([], [], repo)
        try:
            with _open_clone(repo) as clone:
                return _publish(repo, clone, entries, message, max(1, attempts))
        except KBError as exc:
            n = len(entries)
            raise KBError(f"{exc}\n{n} report{'s' if n != 1 else ''} stay in the spool {root} "
                          "and go out with the next `stetho kb publish`") from None


def _publish(repo: str, clone: _Clone, entries: list[_Entry], subject: str | None,
             attempts: int) -> PublishResult:
    token = uuid.uuid4().hex[:12]
    known = {r.id for r in _scan(clone.path)}
    fresh = [e for e in entries if e.meta.id not in known]
    # What "added" is measured against: the remote's tip, or for a local-only knowledge base
    # the commit before ours.
    base = clone.rev(clone.upstream) if clone.remote else clone.rev("HEAD")
    paths = [p for e in fresh for p in _place(clone, e)]
    # Regenerated even when nothing is new: a rebase of earlier local commits, or a hand edit,
    # may have left it out of date.
    _write_index(clone.path)
    clone.git("add", "--", *paths, INDEX)
    if clone.git("diff", "--cached", "--quiet", check=False).returncode != 0:
        clone.git("commit", "-q", "-m",
                  _message([e.meta for e in fresh], subject, token) if fresh
                  else "kb: regenerate the index")
    for attempt in range(attempts):
        head = clone.rev("HEAD")
        if clone.remote is None or head is None or head == base:
            break
        push = clone.git("push", clone.remote,
                         f"HEAD:refs/heads/{clone.remote_branch}", check=False)
        if push.returncode == 0:
            log.debug("push %d to %s accepted", attempt + 1, repo)
            break
        detail = (push.stderr + push.stdout).strip()
        log.debug("push %d to %s rejected: %s", attempt + 1, repo, detail)
        if not _RETRYABLE.search(detail):
            raise KBError(f"`git push {clone.remote} HEAD:refs/heads/{clone.remote_branch}` "
                          f"failed in {clone.path} (exit {push.returncode}): {detail}")
        if attempt == attempts - 1:
            raise KBError(f"`git push` to {repo} was still rejected after {attempts} attempts "
                          f"(other publishers kept winning): {detail}")
        # Spread the losers out: the more rounds lost, the wider the window, so with many
        # publishers each round lets several through instead of one.
        time.sleep(random.uniform(0.0, 0.15 * min(attempt + 1, 6)))
        clone.git("fetch", "--quiet", clone.remote)
        base = clone.rev(clone.upstream)
        if base is not None:
            _rebase(clone)
        _settle(clone, base, entries, token, subject)
    added = _added_ids(clone, base, entries) if clone.rev("HEAD") else []
    in_tree = {r.id: r for r in _scan(clone.path)}
    published = [m.id for m in added]
    already = [e.meta.id for e in entries if e.meta.id in in_tree and e.meta.id not in published]
    for e in entries:
        if e.meta.id in in_tree:  # pushed (or already there): safe to forget
            shutil.rmtree(e.dir, ignore_errors=True)
    where = {rid: str(in_tree[rid].path).removeprefix(f"{clone.path}/")
             for rid in published + already}
    return PublishResult(published, already, repo, clone.rev("HEAD") if published else None,
                         where)


# -- searching --------------------------------------------------------------------------------

def reports(repo: str) -> list[ReportMeta]:
    """Every report in the knowledge base, newest first. A URL or bare repository is read
    through the cached clone, brought up to date first; a working clone is read as it is (its
    owner decides when to pull); a plain directory is searched for report files."""
    kind, path = _kind(repo)
    if kind == "work":
        assert path is not None
        found = _scan(path)
    elif kind == "plain":
        assert path is not None
        found = [read_report(f) for f in sorted(path.rglob("*.md"))
                 if f.is_file() and _looks_like_report(f)]
    else:
        with _cached(repo) as clone:
            found = _scan(clone.path)
    return sorted(found, key=lambda r: (r.date, r.id), reverse=True)


def _words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def _haystack(r: ReportMeta) -> set[str]:
    parts = [r.id, r.node, r.cause, r.cause_title, *r.signature, *r.checks, r.body]
    return {w for part in parts for w in _words(part)}


def _matches(word: str, hay: set[str]) -> bool:
    """A number must be a whole word ('79' finds 'xid-79' and 'Xid 79', not 'sm_790' or
    '2079': Xid codes and counts are not prefixes of one another). Any other word matches a
    report word it starts ('riser' finds 'riser-pcie-slot', 'node0' finds 'node07'), and a
    word of three or more letters also matches inside one ('ecc' in 'hbm_ecc', 'link' in
    'nvlink')."""
    if word in hay:
        return True
    if word.isdigit():
        return False
    inside = word.isalpha() and len(word) >= 3
    return any(h.startswith(word) or (inside and word in h) for h in hay)


def search(repo: str, query: str) -> list[ReportMeta]:
    """Reports matching every word of the query (case-insensitive) in their id, node, cause,
    cause title, signature, checks or body; newest first. Words split at punctuation, so
    "xid 79" finds a signature 'xid-79' and a body saying 'Xid 79'. An empty query lists all."""
    words = _words(query)
    return [r for r in reports(repo) if all(_matches(w, _haystack(r)) for w in words)]


def similarity(a: ReportMeta, b: ReportMeta) -> float:
    """0..1: the same cause dominates (any same-cause incident outranks any other), then the
    same node (a repeat on one node says the last repair did not hold), then the Jaccard
    overlap of the evidence signatures."""
    sa = {s.lower() for s in a.signature}
    sb = {s.lower() for s in b.signature}
    jaccard = len(sa & sb) / len(sa | sb) if sa | sb else 0.0
    return (W_CAUSE * (a.cause == b.cause) + W_SIGNATURE * jaccard
            + W_NODE * (a.node == b.node))


def similar(repo: str, report_path: str | Path, limit: int = 5) -> list[tuple[ReportMeta, float]]:
    """Earlier incidents like this report (not newer ones, not itself), best first: what the
    on-call engineer should read before touching the node. Incidents with nothing in common
    are left out."""
    me = read_report(report_path)
    mine = Path(report_path).resolve()
    scored = []
    for r in reports(repo):
        if r.id == me.id or (r.path is not None and r.path.resolve() == mine) or r.date > me.date:
            continue
        score = similarity(me, r)
        if score > 0:
            scored.append((r, score))
    scored.sort(key=lambda rs: (-rs[1], -rs[0].date.timestamp(), rs[0].id))
    return scored[:max(0, limit)]
