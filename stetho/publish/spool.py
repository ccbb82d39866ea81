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

from stetho.errors import StethoError
from stetho.publish.reports import ReportMeta, asset_files, read_report


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
        assets = asset_files(meta)
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
class Entry:
    dir: Path
    meta: ReportMeta
    text: str
    assets: tuple[Path, ...]


def spooled(root: Path) -> list[Entry]:
    if not root.is_dir():
        return []
    entries = []
    for d in sorted(root.iterdir()):
        if d.name.startswith(".") or not (d / "report.md").is_file():
            continue
        meta = read_report(d / "report.md")
        assets = tuple(sorted(f for f in (d / "assets").glob("*") if f.is_file()))
        entries.append(Entry(d, meta, (d / "report.md").read_text(encoding="utf-8"), assets))
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
