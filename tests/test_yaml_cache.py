"""The YAML parse cache (stetho.core.yamlcache): a node's hourly check reads its profile and
the Xid tables without importing PyYAML, yet never believes an entry it should not.

Each test has its own cache folder (STETHO_CACHE) and real files; `_parse` is made to fail
where a test must show that a value came from the cache, not from a parse."""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from stetho import config
from stetho.core import yamlcache, yamlconf
from stetho.errors import ConfigError

POLICY = "gate:\n  block: [gpu_clocks, ib_link]\n  threshold: 0.5\n"


@pytest.fixture
def cache(tmp_path: Path):  # type: ignore[no-untyped-def]
    with config.using(config.Config(cache=tmp_path / "cache")) as cfg:
        yield cfg.cache / "yaml"


def _no_parse(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(text: str, file: str) -> yamlconf.Doc:
        raise AssertionError(f"{file} was parsed, not read from the cache")

    monkeypatch.setattr(yamlconf, "_parse", refuse)


def _entry(cache: Path) -> Path:
    entries = list(cache.glob("*.json"))
    assert len(entries) == 1, entries
    return entries[0]


def _plant(entry: Path, data: object) -> None:
    """What someone who can write the entry would put there: another policy."""
    doc = json.loads(entry.read_text())
    doc["value"][0] = data
    entry.write_text(json.dumps(doc))


def test_a_configuration_file_read_again_comes_from_the_cache(cache, tmp_path, monkeypatch):
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    first = yamlconf.load(policy)
    assert first.data == {"gate": {"block": ["gpu_clocks", "ib_link"], "threshold": 0.5}}
    entry = _entry(cache)
    assert entry.stat().st_mode & 0o777 == 0o600 and cache.stat().st_mode & 0o777 == 0o700
    _no_parse(monkeypatch)
    again = yamlconf.load(policy)
    assert again.data == first.data and again.lines == first.lines
    assert again.where(("gate", "threshold")) == f"{policy}:3"  # an error still names it


def test_an_edited_file_is_parsed_again(cache, tmp_path):
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    yamlconf.load(policy)
    policy.write_text(POLICY.replace("0.5", "0.9"))
    assert yamlconf.load(policy).data["gate"]["threshold"] == 0.9
    assert len(list(cache.glob("*.json"))) == 2


@pytest.mark.parametrize("how", ["folder-writable", "entry-writable", "entry-link", "garbage"])
def test_an_entry_that_cannot_be_trusted_is_not_used(cache, tmp_path, how):
    """Planted values are believed only where no one else could have planted them: the
    folder and the entry this user's and writable by no one else, the entry no link."""
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    yamlconf.load(policy)
    entry = _entry(cache)
    _plant(entry, {"gate": {"block": []}})
    assert yamlconf.load(policy).data == {"gate": {"block": []}}  # this user's own entry
    if how == "folder-writable":
        cache.chmod(0o777)
    elif how == "entry-writable":
        entry.chmod(0o666)
    elif how == "entry-link":
        moved = entry.rename(tmp_path / "elsewhere.json")
        entry.symlink_to(moved)
    else:
        entry.write_text("{not json")
    assert yamlconf.load(policy).data["gate"]["block"] == ["gpu_clocks", "ib_link"]


def test_what_json_cannot_keep_is_parsed_every_time(cache, tmp_path, monkeypatch):
    """A date (and binary, NaN) would come back as something else: never kept."""
    doc = tmp_path / "dated.yaml"
    doc.write_text("since: 2026-12-07\nratio: .nan\n")
    data = yamlconf.load(doc).data
    assert data["since"] == datetime.date(2026, 12, 7) and data["ratio"] != data["ratio"]
    assert not list(cache.glob("*.json"))


def test_a_bad_file_is_an_error_every_time(cache, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("gate: [unclosed\n")
    for _ in range(2):
        with pytest.raises(ConfigError, match="bad.yaml:1: invalid YAML"):
            yamlconf.load(bad)
    assert not list(cache.glob("*.json"))


def test_a_cache_that_cannot_be_written_is_no_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    with config.using(config.Config(cache=blocker / "cache")):  # under a file: mkdir fails
        assert yamlconf.load(policy).data["gate"]["threshold"] == 0.5
        assert yamlcache.get("yamlconf", "v", POLICY) == (False, None)


def test_old_entries_go_past_the_limit(cache, tmp_path, monkeypatch):
    """An edited file leaves its old entry behind: past MAX_ENTRIES the least recently
    written go, the newest stay."""
    monkeypatch.setattr(yamlcache, "MAX_ENTRIES", 8)
    policy = tmp_path / "policy.yaml"
    for i in range(9):
        policy.write_text(POLICY.replace("0.5", f"0.{i + 1}"))
        yamlconf.load(policy)
        for n, entry in enumerate(sorted(cache.glob("*.json"), key=os.path.getmtime)):
            os.utime(entry, ns=(n * 10**9, n * 10**9))  # written in this order, a second apart
    assert len(list(cache.glob("*.json"))) == 6
    _no_parse(monkeypatch)
    assert yamlconf.load(policy).data["gate"]["threshold"] == 0.9  # the newest is kept


def test_the_xid_table_comes_from_the_cache(cache, monkeypatch):
    from stetho.facts import xid

    table = xid.load_table()
    assert len(list(cache.glob("*.json"))) == 1

    def refuse(*_a: object, **_k: object) -> None:
        raise AssertionError("parsed again")

    import yaml

    monkeypatch.setattr(yaml, "load", refuse)
    assert xid.load_table() == table


@pytest.fixture(scope="module")
def node(tmp_path_factory) -> Path:
    from stetho.sim.builder import build_node

    return build_node(tmp_path_factory.mktemp("yaml-cache") / "node01", "node01")


#: `stetho check` as a user runs it, reporting at exit whether PyYAML was imported.
_CHECK = """
import atexit, runpy, sys
atexit.register(lambda: print("pyyaml imported:", "yaml" in sys.modules, file=sys.stderr))
sys.argv = ["stetho", *sys.argv[1:]]
runpy.run_module("stetho", run_name="__main__")
"""


def test_a_nodes_second_check_does_not_import_pyyaml(node, tmp_path):
    env = {**os.environ, "STETHO_CACHE": str(tmp_path / "cache"),
           "STETHO_DB": str(tmp_path / "h.db")}
    said = []
    for _ in range(2):
        proc = subprocess.run([sys.executable, "-c", _CHECK, "check", "--local", "--sim",
                               str(node), "--profile", "h100-sxm-8gpu", "-q"],
                              capture_output=True, text=True, env=env, timeout=300)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        said.append(proc.stderr.strip().splitlines()[-1])
    assert said == ["pyyaml imported: True", "pyyaml imported: False"]
