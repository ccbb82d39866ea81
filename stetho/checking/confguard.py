"""Only the checks folders' own conftest.py files load in a stetho check run.

pytest imports `conftest.py` from every parent folder of its arguments (the parent of a
checkout, the root of a shared venv, /tmp): any of them could turn a fail into a pass. A
single `--confcutdir` cannot fence several checks folders (shipped and a site's), so this
plugin, loaded with `-p` before conftests are collected (in xdist workers too, which re-read
the same arguments), lets a conftest load only from a checks folder or below it.
"""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config, parser: pytest.Parser,
                                  args: list[str]) -> None:
    """The positional arguments are the checks folders (stetho.checking.run passes only
    them): conftests load from those and below."""
    given = early_config.known_args_namespace.file_or_dir or []
    fence(early_config, [Path(a).parent if Path(a).is_file() else Path(a) for a in given])


def fence(config: pytest.Config, folders: list[Path]) -> None:
    """Let conftests load only from `folders` and below them; fail closed where this pytest
    has no such switch (a run with stray conftests is not a verdict)."""
    allowed = [f.resolve() for f in folders]
    pm = config.pluginmanager
    if not hasattr(pm, "_is_in_confcutdir"):
        raise pytest.UsageError("stetho cannot keep conftest.py files outside its checks "
                                f"folders out of this pytest ({pytest.__version__})")

    def inside(path: Path) -> bool:
        path = Path(path).resolve()
        return any(path == a or a in path.parents for a in allowed)

    pm._is_in_confcutdir = inside  # type: ignore[method-assign]
