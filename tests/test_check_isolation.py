"""A check run takes its pytest configuration only from stetho (issue 28): a conftest.py
above a checks folder, PYTEST_ADDOPTS and PYTEST_PLUGINS never change what runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.xdist_group("faultsim")

#: A parent folder's conftest that would turn the site's failing check into nothing at all,
#: and leaves a mark when imported.
_FLIP = ("import pathlib\n"
         "pathlib.Path(__file__).with_name('LOADED').write_text('parent conftest ran')\n"
         "def pytest_collection_modifyitems(items):\n"
         "    items[:] = [i for i in items if 'site_says_no' not in i.name]\n")


def _site(root: Path) -> Path:
    """checkout/conftest.py (the parent's, not allowed) and checkout/site (the site's checks
    with their own conftest.py, allowed)."""
    (root / "conftest.py").write_text(_FLIP)
    (root / "plugin_from_env.py").write_text(_FLIP.replace("LOADED", "ENVLOADED"))
    site = root / "site"
    site.mkdir()
    (site / "conftest.py").write_text("stetho_checks = True\n"
                                      "import pathlib\n"
                                      "pathlib.Path(__file__).with_name('OWN').write_text('')\n")
    (site / "test_site.py").write_text(
        "def test_site_says_no(node, facts):\n    assert False, 'site says no'\n")
    return site


@pytest.mark.parametrize("workers", [None, "2"], ids=["serial", "xdist"])
def test_parent_conftest_and_pytest_environment_change_nothing(fault_bundles, tmp_path,
                                                                 workers):
    site = _site(tmp_path)
    out = tmp_path / "r.json"
    env = {**os.environ, "PYTHONPATH": str(tmp_path),
           "PYTEST_ADDOPTS": "-k 'not site_says_no' -p plugin_from_env",
           "PYTEST_PLUGINS": "plugin_from_env"}
    proc = subprocess.run([sys.executable, "-m", "stetho", "check", "--evidence",
                           str(fault_bundles / "healthy.json"), "--checks", str(site),
                           "--json", str(out), "-q", *(["-n", workers] if workers else [])],
                          capture_output=True, text=True, timeout=300, env=env,
                          cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    rows = json.loads(out.read_text())["results"]
    mine = [r for r in rows if r["check"] == "site_says_no"]
    assert [r["status"] for r in mine] == ["fail"]
    assert "site says no" in mine[0]["message"]
    assert (site / "OWN").exists()  # the site's own conftest is theirs: it loads
    assert not (tmp_path / "LOADED").exists()
    assert not (tmp_path / "ENVLOADED").exists()


def test_the_environment_is_restored_after_a_run(fault_bundles, monkeypatch):
    from stetho.checking import run as checkrun

    monkeypatch.setenv("PYTEST_ADDOPTS", "-x")
    monkeypatch.delenv("PYTEST_PLUGINS", raising=False)
    monkeypatch.delenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", raising=False)
    run = checkrun.run(evidence=[str(fault_bundles / "healthy.json")], select="gpu_clocks",
                       fleet=False)
    assert run.items > 0
    assert os.environ["PYTEST_ADDOPTS"] == "-x"
    assert "PYTEST_PLUGINS" not in os.environ
    assert "PYTEST_DISABLE_PLUGIN_AUTOLOAD" not in os.environ


def test_listing_the_checks_for_an_unmatched_k_loads_no_parent_conftest(fault_bundles,
                                                                          tmp_path):
    """`-k` matching nothing lists the checks by collecting them: that pass is isolated as a
    run is, so a parent's conftest.py runs no code there either."""
    site = _site(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "PYTEST_PLUGINS": "plugin_from_env"}
    proc = subprocess.run([sys.executable, "-m", "stetho", "check", "--evidence",
                           str(fault_bundles / "healthy.json"), "--checks", str(site),
                           "-k", "no_check_is_called_this", "-q"],
                          capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "site_says_no" in proc.stderr and "fleet_busbw" in proc.stderr
    assert not (tmp_path / "LOADED").exists()
    assert not (tmp_path / "ENVLOADED").exists()
