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


def test_the_memo_skips_rereading_an_unchanged_tree_and_sees_every_edit(tmp_path: Path
                                                                         ) -> None:
    """The memo keyed by each file's size, mtime and ctime gives the content hash without
    reading the files; any edit, even one that keeps size and mtime, is a new version."""
    import os

    root = tmp_path / "src"
    (root / "stetho").mkdir(parents=True)
    (root / "pyproject.toml").write_text("[project]\nname='x'\n")
    (root / "stetho" / "a.py").write_text("A = 1\n")
    _git(root, "init", "-q")
    _git(root, "add", "-A")
    memo = tmp_path / "memo"
    plain = wheels._tree_hash(root)
    assert wheels._tree_hash(root, memo) == plain  # computed, then kept
    assert len(list(memo.iterdir())) == 1
    assert wheels._tree_hash(root, memo) == plain  # from the memo
    st = (root / "stetho" / "a.py").stat()
    (root / "stetho" / "a.py").write_text("A = 2\n")  # same size, mtime put back
    os.utime(root / "stetho" / "a.py", ns=(st.st_atime_ns, st.st_mtime_ns))
    assert wheels._tree_hash(root, memo) == wheels._tree_hash(root) != plain


def test_the_dependency_pins_from_the_memo_equal_the_metadata(tmp_path: Path) -> None:
    pins = [f"{d.metadata['Name']}=={d.version}" for d in wheels._closure(wheels.node_requires())]
    assert wheels._closure_pins(tmp_path) == pins  # computed, then kept
    assert wheels._closure_pins(tmp_path) == pins == wheels._closure_pins()
