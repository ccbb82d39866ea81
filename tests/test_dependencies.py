"""Every runtime dependency in pyproject.toml is imported by stetho: the sweep installs this
list's closure on every node, so a dependency nothing imports is a download, a wheel in the
wheelhouse and a supply-chain surface on each node for nothing."""

from __future__ import annotations

import re
import sys
from importlib.metadata import packages_distributions

from packaging.requirements import Requirement

from tests.conftest import REPO

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


def _imported() -> set[str]:
    """Top-level module names imported anywhere in the installed code (stetho and checks)."""
    pattern = re.compile(r"^\s*(?:from|import)\s+([A-Za-z_]\w*)", re.M)
    names: set[str] = set()
    for folder in ("stetho", "checks"):
        for path in (REPO / folder).rglob("*.py"):
            names.update(pattern.findall(path.read_text(encoding="utf-8")))
    return names


def test_every_runtime_dependency_is_imported() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    modules: dict[str, set[str]] = {}
    for module, dists in packages_distributions().items():
        for dist in dists:
            modules.setdefault(dist.lower().replace("_", "-"), set()).add(module)
    imported = _imported()
    unused = []
    for line in project["dependencies"]:
        req = Requirement(line)
        if req.marker is not None and not req.marker.evaluate():
            continue  # not installed here (tomli on 3.11+)
        provides = modules.get(req.name.lower().replace("_", "-"), set())
        assert provides, f"{req.name} is a dependency but not installed: pip install -e ."
        if not provides & imported:
            unused.append(req.name)
    assert not unused, f"dependencies nothing imports (drop them from pyproject.toml): {unused}"

