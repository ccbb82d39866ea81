"""The run folder's diagnosis through `stetho ingest` (a real spool, a real SQLite history):
a healthy fleet has nothing to diagnose, so no report is written and the diagnosis rules and
engine are never imported (checked in the subprocess itself, with -X importtime); a node
that failed is still diagnosed, and only it."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from stetho import spool as spool_mod
from tests.conftest import REPO
from tests.test_ingest import _write, outcome_for, template  # noqa: F401  (a fixture)

HEAVY = ("stetho.diagnosis.rules", "stetho.diagnosis.engine", "stetho.diagnosis.signals")


def _ingest_importtime(spool: Path, tmp: Path) -> tuple[subprocess.CompletedProcess[str],
                                                         set[str]]:
    r = subprocess.run([sys.executable, "-X", "importtime", "-m", "stetho", "ingest",
                        str(spool), "--db", str(tmp / "h.db"), "--out", str(tmp / "runs"),
                        "-q"], capture_output=True, text=True, timeout=300, cwd=REPO,
                       env=dict(os.environ))
    imported = {line.rsplit("|", 1)[-1].strip() for line in r.stderr.splitlines()
                if line.startswith("import time:")}
    return r, imported


def test_a_healthy_fleet_writes_no_diagnosis_and_loads_no_rules(
        template: dict[str, Any], tmp_path: Path) -> None:  # noqa: F811
    spool = tmp_path / "spool"
    _write(spool, template, ["n01", "n02", "n03"], run="ok")
    r, imported = _ingest_importtime(spool, tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "stetho.fleet.finish" in imported  # the run folder was written in this process
    assert not set(HEAVY) & imported, sorted(set(HEAVY) & imported)
    (run_dir,) = (tmp_path / "runs").iterdir()
    assert (run_dir / "junit.xml").is_file() and (run_dir / "index.html").is_file()
    assert not list(run_dir.glob("reports/*.md"))


def test_a_failing_node_is_still_diagnosed_and_only_it(
        template: dict[str, Any], tmp_path: Path) -> None:  # noqa: F811
    spool = tmp_path / "spool"
    _write(spool, template, ["n01", "n03"], run="bad")
    bad = outcome_for(template, "n02")
    rows = [r.to_json() for r in bad.results]
    gpu = next(i for i, r in enumerate(rows) if r["check"] == "gpu_count")
    rows[gpu] = {**rows[gpu], "status": "fail", "message": "7 of 8 GPUs visible",
                 "value": 7}
    from stetho.fleet import outcome as outcome_mod
    from stetho.results import Result

    failing = outcome_mod.Outcome(bad.node, 1, [Result.from_json(x) for x in rows],
                                  bad.junit, bad.evidence, bad.summary)
    spool_mod.write(spool, failing, run_id="20260101T000000Z-bad", kind="health-check",
                    when=time.time())
    r, imported = _ingest_importtime(spool, tmp_path)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "stetho.diagnosis.engine" in imported
    (run_dir,) = (tmp_path / "runs").iterdir()
    reports = [p.name for p in run_dir.glob("reports/*.md")]
    assert reports and all(name.startswith("n02-") for name in reports), reports
