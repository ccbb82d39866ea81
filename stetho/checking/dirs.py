"""Where the checks live: the shipped folder, the configured ones, then --checks folders.

Apart from stetho.checking.run so that reading the check catalogue (a gate validating its
policy's check names) does not import pytest: that import alone was most of a history-only
gate's start-up.
"""

from __future__ import annotations

from pathlib import Path

from stetho.core.resources import shipped
from stetho.errors import ConfigError


def check_dirs(extra: tuple[str, ...] = ()) -> list[Path]:
    """Shipped checks, then the configured ones (STETHO_CHECKS), then --checks folders."""
    from stetho import config

    dirs = [shipped("checks")]
    wanted: list[Path | str] = [*config.active().checks, *extra]
    for d in wanted:
        path = Path(d)
        if not path.exists():
            raise ConfigError(f"checks folder {d} does not exist")
        dirs.append(path)
    return dirs
