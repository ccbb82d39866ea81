"""The wheelhouse: one dependency list, and only tracked source files in the build."""

from __future__ import annotations

import subprocess
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement

from stetho.fleet import wheels


def test_nodes_get_pyprojects_runtime_dependencies_and_no_extra() -> None:
    declared = [Requirement(t) for t in metadata.requires("stetho") or []]
    runtime = {r.name for r in declared if r.marker is None
               or r.marker.evaluate({"extra": ""})}
    controller = {r.name for r in declared if r.marker is not None
                  and r.marker.evaluate({"extra": "controller"})
                  and not r.marker.evaluate({"extra": ""})}
    assert set(wheels.node_requires()) == runtime
    assert {"ansible-core", "ansible-runner"} <= controller
    assert not controller & set(wheels.node_requires())
    assert {"sqlite-utils", "jinja2"} <= runtime  # gate --local records history, writes reports


def _git(root: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True,
                   timeout=60)


def test_untracked_files_neither_change_the_version_nor_travel(tmp_path: Path) -> None:
    root = tmp_path / "src"
    (root / "stetho").mkdir(parents=True)
    (root / "playbooks").mkdir()
    (root / "pyproject.toml").write_text("[project]\nname='x'\n")
    (root / "stetho" / "a.py").write_text("A = 1\n")
    (root / "playbooks" / "p.yml").write_text("- hosts: all\n")
    _git(root, "init", "-q")
    _git(root, "add", "-A")
    _git(root, "-c", "user.name=t", "-c", "user.email=t@e", "commit", "-qm", "x")
    before = wheels._tree_hash(root)
    (root / "playbooks" / "fetched").mkdir()
    (root / "playbooks" / "fetched" / "evidence.json").write_text("{}")
    assert wheels._tree_hash(root) == before
    assert Path("playbooks/fetched/evidence.json") not in wheels._source_files(root)
    (root / "stetho" / "a.py").write_text("A = 2\n")  # a tracked edit is a new version
    assert wheels._tree_hash(root) != before
