"""The package keeps its shape: stages import only the stages before them, no module imports
itself round a cycle, the library reads no environment variable (stetho.config does, once),
and modules stay small enough to read in one sitting."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import grimp
import pytest

from tests.conftest import REPO

PACKAGE = REPO / "stetho"
#: A module longer than this says why in its docstring ("Long because ...").
MAX_LINES = 450
#: Modules being rewritten right now, with what replaces them; empty once they have landed.
PENDING: dict[str, str] = {}


def _modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "_bundled" not in p.parts)


def test_import_contracts_hold() -> None:
    """The layers contract in pyproject.toml (import-linter), checked on the real graph."""
    from importlinter.cli import lint_imports

    code = lint_imports(config_filename=str(REPO / "pyproject.toml"), no_cache=True,
                        no_logo=True)
    assert code == 0, "an import breaks the stage layers: the output above names it"


def test_every_stage_is_in_the_layers_contract() -> None:
    import tomllib

    layers = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"][
        "contracts"][0]["layers"]
    named = {part.strip() for layer in layers for part in re.split(r"[|:]", layer)}
    packages = {p.name for p in PACKAGE.iterdir()
                if p.is_dir() and (p / "__init__.py").exists() and not p.name.startswith("_")}
    assert packages <= named, f"packages outside the layers contract: {packages - named}"


def test_no_import_cycles() -> None:
    graph = grimp.build_graph("stetho")
    cycles = []
    for module in sorted(graph.modules):
        for other in graph.find_modules_directly_imported_by(module):
            if module != other and graph.chain_exists(importer=other, imported=module):
                cycles.append((module, other))
    assert not cycles, f"modules that import each other (directly or round a loop): {cycles}"


def test_the_library_reads_no_environment_variable() -> None:
    """Configuration is built at the edge (stetho.config); deep reads of os.environ made the
    same setting mean different things in different places."""
    offenders = []
    for path in _modules():
        if path in (PACKAGE / "config.py", PACKAGE / "configsource.py"):
            continue  # configsource: whether building the configuration could fail
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv") and \
                    isinstance(node.value, ast.Name) and node.value.id == "os":
                offenders.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert not offenders, f"os.environ/os.getenv outside stetho/config.py: {offenders}"


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_module_size(path: Path) -> None:
    lines = path.read_text().count("\n")
    if lines <= MAX_LINES or str(path.relative_to(PACKAGE)) in PENDING:
        return
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    assert "Long because" in doc, (f"{path.relative_to(REPO)} has {lines} lines: split it, "
                                   "or say in its docstring why one concern needs them "
                                   "('Long because ...')")
