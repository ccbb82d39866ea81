"""Shared test helpers: where the real recorded tool outputs live."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
REAL = REPO / "fixtures" / "real"


def real_files(folder: str, pattern: str = "*") -> list[Path]:
    """Every real recorded output in fixtures/real/<folder> matching pattern, sorted."""
    return sorted(p for p in (REAL / folder).glob(pattern) if p.is_file())


def real_ids(paths: list[Path]) -> list[str]:
    return [p.name for p in paths]


@pytest.fixture(scope="session")
def real_dir() -> Path:
    return REAL
