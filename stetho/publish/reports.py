"""Diagnosis reports as the knowledge base sees them: Markdown under a YAML front matter
(`ReportMeta`), read and validated, found in folders, with the sibling files they link to.

Publishing copies files into a shared repository, so what is copied is only ever a regular
file in the report's own folder: a report or asset that is a symbolic link (to a key, to
another user's file) is refused by name, and files are opened with O_NOFOLLOW, so a link
swapped in after the check is refused too. In a folder of reports, a bad one is refused and
the others go on (`collect_reports`)."""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import date as _date
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from stetho.core import yamlconf
from stetho.errors import ConfigError

#: Where reports live inside the repository.
REPORTS_DIR = "reports"
#: id, node and cause become path components: no separators, no dot-files.
_SAFE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_FRONT_MATTER = re.compile(r"\A\ufeff?---[ \t]*\r?\n(.*?)^(?:---|\.\.\.)[ \t]*(?:\r?\n|\Z)",
                           re.S | re.M)
#: Relative link targets in the body: Markdown links/images and HTML src/href attributes.
_LINKS = (re.compile(r"\]\(\s*<?([^)\s>]+)>?(?:\s+[\"'][^\"']*[\"'])?\s*\)"),
          re.compile(r"(?:src|href)\s*=\s*[\"']([^\"']+)[\"']", re.I))


@dataclass(frozen=True)
class Resolution:
    """What the technician found, recorded after the repair (`stetho kb resolve`): the cause
    (a rule's cause id, or `no-fault-found`), the parts replaced, a note, when, by whom (a
    signing principal, or the git identity that ran the command), and the signed commit it
    came from, if any. The report's own `cause` stays what was diagnosed."""

    found: str
    date: datetime
    by: str = ""
    parts: tuple[str, ...] = ()
    note: str = ""
    commit: str = ""

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"found": self.found, "date": _iso(self.date), "by": self.by,
                               "parts": list(self.parts), "note": self.note}
        if self.commit:
            out["commit"] = self.commit
        return out


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
    event: str = ""  # the incident's evidence hash: equal in re-reports of an unchanged state
    implicated: tuple[str, ...] = ()  # the parts its leading evidence names (a GPU's serial)
    path: Path | None = field(default=None, compare=False)
    body: str = field(default="", repr=False, compare=False)
    #: Not part of equality either: resolving a report does not make it another report.
    resolution: Resolution | None = field(default=None, compare=False)

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
                "resolution": self.resolution.to_dict() if self.resolution else None,
                "path": str(self.path) if self.path is not None else None}



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
        data = yamlconf.safe_load(head, "front matter")
    except ConfigError as exc:
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
        event=str(data.get("event") or ""),
        implicated=_as_words(data.get("implicated"), "implicated", path), path=path, body=body,
        resolution=_as_resolution(data.get("resolution"), path))


def _as_resolution(value: Any, path: Path) -> Resolution | None:
    """The `resolution:` mapping, validated like the rest: a found cause that could not be a
    cause id, or a missing date, is an error naming the file, never a guess."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ConfigError(f"{path}: front matter 'resolution' must be a mapping, not {value!r}")
    found = str(value.get("found") or "")
    if not _SAFE.match(found):
        raise ConfigError(f"{path}: front matter 'resolution.found' {found!r} must be a cause "
                          "id (letters, digits, '.', '_' and '-')")
    note = value.get("note") or ""
    return Resolution(found=found, date=_as_date(value.get("date"), path),
                      by=str(value.get("by") or ""),
                      parts=_as_words(value.get("parts"), "resolution.parts", path),
                      note=str(note), commit=str(value.get("commit") or ""))


def read_report(path: str | Path) -> ReportMeta:
    """Parse a report's front matter. A file that is not a report (no front matter, invalid
    YAML, a required field missing) raises ConfigError naming it: publishing it would put an
    unsearchable, unindexable file in the knowledge base."""
    p = Path(path)
    try:
        text = read_regular(p).decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{p}: not a diagnosis report: it is not UTF-8 text") from None
    return _parse(text, p)


def read_regular(path: Path) -> bytes:
    """The bytes of a regular file, never through a symbolic link (O_NOFOLLOW: a link swapped
    in after any check is refused too); else ConfigError naming the file."""
    if path.is_symlink():
        raise ConfigError(f"{path}: is a symbolic link: refused (publishing never follows a "
                          "link; copy the file itself beside the report)")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read it: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                raise ConfigError(f"{path}: not a regular file: refused")
            return f.read()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read it: {exc.strerror or exc}") from None


def looks_like_report(path: Path) -> bool:
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
        data = yamlconf.safe_load(parts[0], str(path))
    except ConfigError:
        return False
    return isinstance(data, dict) and "id" in data


def collect_reports(paths: Iterable[str | Path]) -> tuple[list[Path], list[tuple[Path, str]]]:
    """The reports named on a command line, and those refused with why. A file is taken as a
    report; a directory means every `*.md` with report front matter under it, recursively
    (other Markdown is not a report and is skipped; a linked `*.md` is refused unread). A
    report that does not read, is a symbolic link, or brings an asset that is one, is refused
    by name; the others are kept.
    A directory holding no report at all is refused: the user meant to publish something."""
    found: list[Path] = []
    refused: list[tuple[Path, str]] = []
    for raw in paths:
        p = Path(raw)
        if p.is_dir():  # a folder named on the command line is the user's own path
            inside = [f for f in sorted(p.rglob("*.md"))
                      if ".git" not in f.relative_to(p).parts
                      and (f.is_symlink() or (f.is_file() and looks_like_report(f)))]
            if not inside:
                refused.append((p, f"{p}: no diagnosis reports (Markdown with front matter) "
                                   "under it"))
            found.extend(inside)
        elif p.is_symlink() or p.is_file():
            found.append(p)
        else:
            refused.append((p, f"{p}: no such report file or directory"))
    unique: dict[Path, Path] = {}
    for f in found:
        unique.setdefault(f.absolute(), f)
    kept = []
    for f in unique.values():
        try:
            asset_files(read_report(f))
        except ConfigError as exc:
            refused.append((f, str(exc)))
            continue
        kept.append(f)
    return kept, refused


def find_reports(paths: Iterable[str | Path]) -> list[Path]:
    """`collect_reports`, strictly: the first refusal is a ConfigError."""
    kept, refused = collect_reports(paths)
    if refused:
        raise ConfigError(refused[0][1])
    return kept


def _plain_name(name: str) -> bool:
    return bool(name) and name not in (".", "..") and "/" not in name and "\\" not in name


def asset_files(meta: ReportMeta) -> list[Path]:
    """The files the report brings along: those its front matter lists (which must exist) and
    any sibling file a relative link in its body points at, so the links keep working."""
    assert meta.path is not None
    here = meta.path.parent
    files: dict[str, Path] = {}
    for name in meta.assets:
        f = here / name
        if not f.is_symlink() and not f.is_file():
            raise ConfigError(f"{meta.path}: asset {name!r} listed in the front matter is "
                              f"missing (looked for {f})")
        files[name] = f
    for pattern in _LINKS:
        for target in pattern.findall(meta.body):
            name = target.split("#", 1)[0].split("?", 1)[0]
            name = name[2:] if name.startswith("./") else name
            if (_plain_name(name) and ":" not in name and name != meta.path.name
                    and name not in files and ((here / name).is_symlink()
                                               or (here / name).is_file())):
                files[name] = here / name
    for name, f in files.items():
        if f.is_symlink():
            raise ConfigError(f"{meta.path}: asset {name!r} is a symbolic link (to "
                              f"{os.readlink(f)}): refused, publishing never follows a link "
                              "or copies a file from outside the report's folder")
    return list(files.values())
