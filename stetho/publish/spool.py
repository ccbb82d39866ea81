"""The local spool: reports wait here until the commit holding them has been pushed, so a
node that cannot reach the git server loses nothing and the next publish takes them along."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from stetho.errors import ConfigError, StethoError
from stetho.publish.reports import ReportMeta, asset_files, read_regular, read_report


def spool_dir() -> Path:
    """$STETHO_SPOOL, else the user's data directory: reports must survive reboots and
    temp-dir cleaners until they are published."""
    from stetho import config

    return config.active().spool


def spool(report_paths: Iterable[str | Path], spool: Path | None = None) -> list[Path]:
    """`spool_each`, strictly: the first report refused is a ConfigError."""
    out, refused = spool_each(report_paths, spool)
    if refused:
        raise ConfigError(refused[0][1])
    return out


def spool_each(report_paths: Iterable[str | Path], spool: Path | None = None
               ) -> tuple[list[Path], list[tuple[Path, str]]]:
    """Copy reports and their assets into the spool, one directory per report id
    (`<spool>/<id>/report.md`, `<spool>/<id>/assets/...`). Each entry is assembled in a
    hidden temporary directory and renamed into place, so a publisher never sees half of one.
    Spooling the same id again replaces the entry. Only regular files in the report's own
    folder are copied, never through a link (reports.read_regular); a report that cannot be
    spooled is refused by name and the others still are. Returns the spooled report files and
    the refused reports with why."""
    root = spool or spool_dir()
    root.mkdir(parents=True, exist_ok=True)
    out: list[Path] = []
    refused: list[tuple[Path, str]] = []
    for raw in report_paths:
        try:
            meta = read_report(raw)
            files = [("report.md", read_regular(Path(raw)))]
            files += [(f"assets/{f.name}", read_regular(f)) for f in asset_files(meta)]
        except ConfigError as exc:
            refused.append((Path(raw), str(exc)))
            continue
        tmp = Path(tempfile.mkdtemp(prefix=f".{meta.id}.", dir=root))
        try:
            for name, data in files:
                (tmp / name).parent.mkdir(exist_ok=True)
                (tmp / name).write_bytes(data)
            entry = root / meta.id
            if entry.exists():
                shutil.rmtree(entry)
            os.rename(tmp, entry)
        except OSError as exc:
            shutil.rmtree(tmp, ignore_errors=True)
            raise StethoError(f"cannot spool {raw} into {root}: {exc}") from None
        out.append(entry / "report.md")
    return out, refused


@dataclass(frozen=True)
class Entry:
    dir: Path
    meta: ReportMeta
    text: str
    assets: tuple[Path, ...]


def spooled(root: Path, refused: list[tuple[Path, str]] | None = None) -> list[Entry]:
    """The spool's entries, oldest first. An entry that no longer reads (edited by hand, a
    link put in it) is left where it is and named in `refused`, so the others still go."""
    if not root.is_dir():
        return []
    entries = []
    for d in sorted(root.iterdir()):
        if d.name.startswith(".") or d.is_symlink() or not (d / "report.md").exists():
            continue
        try:
            meta = read_report(d / "report.md")
            text = read_regular(d / "report.md").decode("utf-8")
            assets = tuple(sorted(f for f in (d / "assets").glob("*")
                                  if f.is_symlink() or f.is_file()))
            for f in assets:
                read_regular(f)  # refuses a link
        except (ConfigError, UnicodeDecodeError) as exc:
            if refused is not None:
                refused.append((d / "report.md", str(exc)))
            continue
        entries.append(Entry(d, meta, text, assets))
    return sorted(entries, key=lambda e: (e.meta.date, e.meta.id))


def sweep(root: Path, age: float = 3600.0) -> None:
    """Remove what a spool() killed mid-copy left behind (hidden temporary entries); an hour
    old, so a spool() running right now is not disturbed."""
    for d in root.glob(".*.*"):
        try:
            if d.is_dir() and time.time() - d.stat().st_mtime > age:
                shutil.rmtree(d, ignore_errors=True)
        except OSError:
            continue
