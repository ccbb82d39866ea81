"""The pytest plugin on its own: plain `pytest checks/` over evidence, and a site's own checks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from stetho.core.resources import shipped

pytestmark = pytest.mark.xdist_group("faultsim")


def _pytest(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
                          capture_output=True, text=True, timeout=300, cwd=cwd,
                          env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})


def test_plain_pytest_over_evidence(fault_bundles, tmp_path):
    results = tmp_path / "r.json"
    junit = tmp_path / "pytest-junit.xml"
    proc = _pytest(str(shipped("checks")), "--stetho-evidence",
                   str(fault_bundles / "rotational.json"), "--stetho-results", str(results),
                   f"--junitxml={junit}", "-q", cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout[-2000:]
    assert "test_disk_rotational[rotational/nvme3n1] FAILED" in proc.stdout or \
        "test_disk_rotational[rotational/nvme3n1]" in proc.stdout
    rows = json.loads(results.read_text())["results"]
    bad = [r for r in rows if r["status"] == "fail"]
    assert [(r["check"], r["subject"]) for r in bad] == [("disk_rotational", "nvme3n1")]
    ids = [c.get("name") for c in ET.parse(junit).getroot().iter("testcase")]
    assert "test_gpu_clocks[rotational/gpu0]" in ids


def test_site_checks_folder_runs_like_any_pytest_suite(fault_bundles, tmp_path):
    site = tmp_path / "site-checks"
    site.mkdir()
    (site / "conftest.py").write_text("stetho_checks = True\n")
    (site / "test_site_power.py").write_text(
        "def test_power_limit(gpu, verdict):\n"
        "    verdict.measure(gpu.power_limit_w, 'W', expected=700)\n"
        "    assert gpu.power_limit_w == 700, f'power limit {gpu.power_limit_w} W'\n"
        "\n"
        "def test_site_assert_fails(node, facts):\n"
        "    assert len(facts.gpus()) == 9, 'site expects 9 GPUs'\n")
    results = tmp_path / "r.json"
    proc = _pytest(str(site), "--stetho-evidence", str(fault_bundles / "healthy.json"),
                   "--stetho-results", str(results), "-q")
    assert proc.returncode == 1
    rows = json.loads(results.read_text())["results"]
    power = [r for r in rows if r["check"] == "power_limit"]
    assert len(power) == 8 and {r["status"] for r in power} == {"pass"}
    assert power[0]["value"] == 700.0 and power[0]["unit"] == "W"
    site_fail = [r for r in rows if r["check"] == "site_assert_fails"]
    assert site_fail[0]["status"] == "fail" and site_fail[0]["message"] == "site expects 9 GPUs"


def test_site_check_with_a_bug_is_an_error_not_a_pass(fault_bundles, tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    (site / "conftest.py").write_text("stetho_checks = True\n")
    (site / "test_buggy.py").write_text("def test_buggy(gpu, verdict):\n    return 1 / 0\n")
    (site / "test_broken.py").write_text("def test_x(gpu:\n")
    out = tmp_path / "r.json"
    proc = subprocess.run([sys.executable, "-m", "stetho", "check", "--evidence",
                           str(fault_bundles / "healthy.json"), "--checks", str(site),
                           "--json", str(out), "-q"], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 3, proc.stderr
    rows = json.loads(out.read_text())["results"]
    buggy = [r for r in rows if r["check"] == "buggy"]
    assert buggy and all(r["status"] == "error" for r in buggy)
    assert "ZeroDivisionError" in buggy[0]["message"]
    broken = [r for r in rows if r["check"] == "test_broken.py"]
    assert broken and broken[0]["status"] == "error"
    assert "could not be loaded" in broken[0]["message"]


def test_other_suites_are_left_alone(tmp_path):
    """A project's own test taking a `node` argument is not hijacked by the plugin."""
    (tmp_path / "test_mine.py").write_text(
        "import pytest\n@pytest.mark.parametrize('node', ['a', 'b'])\n"
        "def test_mine(node):\n    assert node in 'ab'\n")
    proc = _pytest(str(tmp_path), "-q")
    assert proc.returncode == 0 and "2 passed" in proc.stdout


def test_a_batched_run_keeps_no_results_on_its_items_or_reports(fault_bundles, tmp_path):
    """pytest keeps every item and (in its terminal reporter) every report to the end of the
    session: results left on them grew a replay's memory with every node. Once read, they go."""
    (tmp_path / "probe_held.py").write_text(
        "import json, pathlib\n"
        "from stetho.checking.plugin import _BATCH_RESULTS\n"
        "from stetho.checking.session import RESULT_KEY, SUMMARY_KEY\n"
        "def pytest_sessionfinish(session):\n"
        "    tr = session.config.pluginmanager.get_plugin('terminalreporter')\n"
        "    reports = [r for v in tr.stats.values() for r in v\n"
        "               if hasattr(r, 'user_properties')]\n"
        "    pathlib.Path('held.json').write_text(json.dumps({\n"
        "        'items': len(session.items), 'reports': len(reports),\n"
        "        'stashed': sum(_BATCH_RESULTS in i.stash for i in session.items),\n"
        "        'attached': sum(k in (RESULT_KEY, SUMMARY_KEY)\n"
        "                        for r in reports for k, _ in r.user_properties)}))\n")
    results = tmp_path / "r.json"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "probe_held",
         str(shipped("checks")), "--stetho-evidence", str(fault_bundles), "--stetho-batch",
         "--stetho-results", str(results), "-q"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": str(tmp_path)})
    assert proc.returncode == 1, proc.stdout[-2000:]
    held = json.loads((tmp_path / "held.json").read_text())
    assert held["items"] > 0 and held["reports"] >= held["items"]
    assert held["stashed"] == 0 and held["attached"] == 0
    assert len(json.loads(results.read_text())["results"]) > held["items"]
